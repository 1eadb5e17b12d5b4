"""Faults at the worst moment: SIGTERM at chosen points, a file-size limit, two racing runs.

Each case runs the CLI in a child process on a tiny model. A small wrapper
patches one library function to announce the point reached (a marker file)
and wait there, so the test can send the signal exactly then.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tiny_models import save_tiny

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

WRAPPER = """
import os, sys, time
sys.path[:0] = [{root!r}, {tests!r}]
marker, point = sys.argv[1], sys.argv[2]

def pause(*a, **k):
    # Announce the point, then wait for the test's go (or its signal).
    open(marker, "w").write(str(os.getpid()))
    end = time.monotonic() + 120
    while not os.path.exists(marker + ".go") and time.monotonic() < end:
        time.sleep(0.05)

if point == "before-save":
    import swapprune.pipeline.stages as stages
    real = stages.stability
    def stability(*a, **k):
        out = real(*a, **k)
        pause()
        return out
    stages.stability = stability
elif point == "weights":
    import swapprune.output.checkpoint as ck
    real = ck._save_model
    def save(model, directory, dtype):
        real(model, directory, dtype)
        (directory / "model.safetensors").write_bytes(b"half")  # mid-file, as a kill would see it
        pause()
    ck._save_model = save
elif point == "rename":
    import swapprune.output.placement as pl
    real = pl.move_into_place
    def move(*a, **k):
        pause()
        return real(*a, **k)
    pl.move_into_place = move
from swapprune.cli import main
sys.exit(main(sys.argv[3:]))
"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny("llama", tmp_path_factory.mktemp("m") / "tiny"))


def _argv(model_dir, out):
    return ["--model", model_dir, "--budget", "1", "--prompts", "4", "--tokens", "16",
            "--no-progress", "--no-eval", "--output", str(out)]  # fmt: skip


def _start(tmp_path, point, argv, env=None):
    script = tmp_path / "wrap.py"
    script.write_text(WRAPPER.format(root=str(ROOT), tests=str(TESTS)))
    marker = tmp_path / f"reached-{point}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(marker), point, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    return proc, marker


def _wait_for(marker, proc, timeout=240):
    end = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"exited early: {proc.communicate()[1][-2000:]}")
        if time.monotonic() > end:
            proc.kill()
            raise AssertionError("the point was not reached")
        time.sleep(0.1)


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("point", ["before-save", "weights", "rename"])
def test_sigterm_leaves_nothing_that_looks_finished(model_dir, tmp_path, point):
    parent = tmp_path / "work"
    parent.mkdir()
    out = parent / "cut"
    proc, marker = _start(tmp_path, point, _argv(model_dir, out))
    _wait_for(marker, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=240)  # a loaded machine: cleanup and exit can be slow
    assert proc.returncode == 143, err
    lines = [line for line in err.strip().splitlines() if line.startswith("swapprune")]
    assert lines[-1].startswith("swapprune: terminated (SIGTERM)")
    assert not out.exists()
    assert _leftovers(parent) == []  # no staging directory, temp file or lock


def test_a_file_size_limit_is_one_line_and_leaves_nothing(model_dir, tmp_path):
    parent = tmp_path / "work"
    parent.mkdir()
    out = parent / "cut"
    code = textwrap.dedent(
        f"""
        import resource, sys
        sys.path[:0] = [{str(ROOT)!r}]
        resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, 60_000))  # bytes: the weights do not fit
        from swapprune.cli import main
        sys.exit(main({_argv(model_dir, out)!r}))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "file-size limit" in last and str(out) in last and "needs about" in last, last
    assert "Traceback" not in proc.stderr
    assert not out.exists() and _leftovers(parent) == []


def test_two_runs_with_one_output_never_both_succeed(model_dir, tmp_path):
    """Both pass the start check and wait before their final rename; released together, the
    second to take the lock finds the first's output and keeps its own result beside it."""
    parent = tmp_path / "work"
    parent.mkdir()
    out = parent / "cut"
    runs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        runs.append(_start(tmp_path / name, "rename", _argv(model_dir, out)))
    for proc, marker in runs:
        _wait_for(marker, proc)
    for _, marker in runs:
        Path(str(marker) + ".go").write_text("")
    errs = [proc.communicate(timeout=240)[1] for proc, _ in runs]
    codes = sorted(proc.returncode for proc, _ in runs)
    assert codes == [0, 2], errs
    loser = errs[[proc.returncode for proc, _ in runs].index(2)].strip().splitlines()[-1]
    assert "changed while this run worked" in loser and "this run's result is" in loser
    kept = Path(loser.rsplit(" ", 1)[-1])
    assert kept.parent == parent and (kept / "plan.json").is_file()
    # the output is one run's, whole: its provenance names the plan its own files hold
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["selfcheck"]["passed"] and (out / "model.safetensors").is_file()
    assert _leftovers(parent) == []


def test_an_output_that_appears_during_the_run_is_not_replaced(model_dir, tmp_path, monkeypatch):
    import swapprune.output.artifacts as artifacts
    from swapprune.cli import main
    from swapprune.output.placement import move_into_place

    parent = tmp_path / "work"
    parent.mkdir()
    out = parent / "cut"

    def someone_writes_first(tmp, dst, **kw):
        dst.mkdir()
        (dst / "mine.txt").write_text("a user's file")
        return move_into_place(tmp, dst, **kw)

    # patched where the writer looks it up (artifacts binds it at import)
    monkeypatch.setattr(artifacts, "move_into_place", someone_writes_first)
    assert main(_argv(model_dir, out)) == 2
    assert (out / "mine.txt").read_text() == "a user's file" and len(list(out.iterdir())) == 1
    kept = [p for p in parent.iterdir() if p.name.startswith("cut.run-")]
    assert len(kept) == 1 and (kept[0] / "plan.json").is_file()
    assert json.loads((kept[0] / "provenance.json").read_text())["selfcheck"]["passed"]


def test_two_score_runs_on_one_file_do_not_interleave(model_dir, tmp_path):
    """The second run on a scores file another run is writing stops at once, in one line."""
    from swapprune.cli import main
    from swapprune.output.placement import sole_writer

    out = tmp_path / "s.json"
    with sole_writer(out):  # as a running score would hold it
        argv = ["score", "--model", model_dir, "--output", str(out), "--prompts", "4"]
        assert main([*argv, "--tokens", "16", "--no-progress"]) == 2
    assert not out.exists()
    # the lock went with its holder; a run now proceeds and leaves no lock behind
    assert main([*argv, "--tokens", "16", "--no-progress"]) == 0
    assert out.is_file() and not (tmp_path / ".s.json.lock").exists()


@pytest.mark.slow  # minutes on a shared 2-core machine; CI runs it in the slow step
def test_a_killed_gguf_conversion_leaves_the_cache_usable(tmp_path):
    """A conversion killed while it holds the cache lock: the kernel drops the lock, the next
    load converts again, and no partial entry is ever used."""
    from test_gguf_cache import write_tiny_gguf

    gguf_path = write_tiny_gguf(tmp_path / "tiny.gguf")
    cache = tmp_path / "cache"
    marker = tmp_path / "converting"
    code = textwrap.dedent(
        f"""
        import sys, time
        sys.path[:0] = [{str(ROOT)!r}]
        import swapprune.model.load as load
        real = load.convert_gguf
        def slow(src, out, progress=True):
            real(src, out, progress)
            open({str(marker)!r}, "w").write("x")
            time.sleep(120)  # killed here: the entry is written but not renamed into place
        load.convert_gguf = slow
        load.load_model({str(gguf_path)!r}, progress=False)
        """
    )
    env = {**os.environ, "SWAPPRUNE_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE)
    _wait_for(marker, proc)
    proc.kill()
    proc.wait()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path[:0] = [{str(ROOT)!r}]\n"
            f"from swapprune.model.load import load_model\n"
            f"m, t, s = load_model({str(gguf_path)!r}, progress=False)\nprint(s.converted)",
        ],  # fmt: skip
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    entry = Path(done.stdout.strip().splitlines()[-1])
    from swapprune.gguf import convert as gguf_cache

    assert entry.is_dir() and gguf_cache.entry_ok(entry)
    assert not [p for p in (cache / "gguf").iterdir() if ".partial-" in p.name]
