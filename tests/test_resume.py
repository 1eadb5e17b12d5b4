"""Resuming ``score(..., out=PATH)``: what is refused, what is kept, and that a resumed
run gives bit for bit what an uninterrupted one gives."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny_models import tiny_ids, tiny_model

from swapprune.engine import probing as scoring
from swapprune.engine.probing import score
from swapprune.errors import SwappruneError

# 6 windows in batches of 2 under a tiny cache budget: 3 window chunks.
KW = dict(
    pairs="0-1,2-4,4-5",
    protocols="replacement,interchange,deletion",
    batch_size=2,
    cache_gb=1e-12,
    n_boot=40,
    progress=False,
)
UNITS = 3 + 6  # pairs + deletion layers


@pytest.fixture(autouse=True)
def one_thread():
    """Bitwise comparisons need a fixed reduction order (see test_probe_chunks.py)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def ids():
    return tiny_ids(6, 12)


@pytest.fixture(scope="module")
def reference(model, ids, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "scores.json"
    res = score(model, calibration=ids, out=out, **KW)
    assert res.meta["timing"]["window_chunks"] == 3
    return res, json.loads(out.read_text())


class _Killed(Exception):
    pass


def _stop_after(monkeypatch, steps: int, out, snapshot: list):
    """Make the progress bar raise after ``steps`` (unit, chunk) steps, first saving the
    file as it is on disk at that moment: what a SIGKILL there would leave."""

    class Bar:
        n = 0

        def update(self, k):
            self.n += k
            if self.n >= steps:
                snapshot.append(out.read_bytes() if out.exists() else None)
                raise _Killed

        def close(self):
            pass

    monkeypatch.setattr(scoring, "_progress", lambda total, desc, enabled: Bar())


def _strip(data: dict) -> dict:
    data = dict(data)
    data.pop("timing", None)
    return data


@pytest.mark.parametrize("flush_s", [0.0, 1e9])
@pytest.mark.parametrize("steps", [1, 4, 10, 14, 22])
def test_killed_run_resumes_bitwise(model, ids, reference, tmp_path, monkeypatch, steps, flush_s):
    ref, ref_data = reference
    out = tmp_path / "scores.json"
    monkeypatch.setattr(scoring, "FLUSH_S", flush_s)
    snapshot: list = []
    _stop_after(monkeypatch, steps, out, snapshot)
    with pytest.raises(_Killed):
        score(model, calibration=ids, out=out, **KW)
    monkeypatch.undo()
    # Whatever the exception path flushed, resume from the state a SIGKILL would have left.
    (killed,) = snapshot
    lost_at_most = 1 if flush_s == 0 else UNITS  # one (unit, chunk) step, or one chunk
    if killed is None:
        assert steps <= lost_at_most
        out.unlink(missing_ok=True)
    else:
        out.write_bytes(killed)
        meta = json.loads(killed)
        record = meta["incomplete"]
        assert record["batch_size"] == 2
        measured = sum(b - a for u in record["partial_units"] for a, b in u["done"]) // 2
        finished = len(meta["pairs"]) + len(meta["deletion"])
        assert 3 * finished + measured >= steps - lost_at_most  # batches of 2 = chunks here
    res = score(model, calibration=ids, out=out, **KW)
    data = json.loads(out.read_text())
    assert "incomplete" not in data and "incomplete" not in res.meta
    assert _strip(data) == _strip(ref_data)
    for k, v in ref.pairs.items():
        for key in v:
            np.testing.assert_array_equal(res.pairs[k][key], v[key])
    for k, v in ref.deletion.items():
        np.testing.assert_array_equal(res.deletion[k], v)


def test_interrupted_run_keeps_partial_chunks(model, ids, reference, tmp_path, monkeypatch):
    """The exception path flushes too: a resumed run redoes no finished (unit, chunk) step."""
    out = tmp_path / "scores.json"
    _stop_after(monkeypatch, 11, out, [])
    with pytest.raises(_Killed):
        score(model, calibration=ids, out=out, **KW)
    monkeypatch.undo()
    record = json.loads(out.read_text())["incomplete"]
    assert record["units_left"] == UNITS
    done = [u["done"] for u in record["partial_units"]]
    assert len(done) == UNITS and done.count([[0, 4]]) == 2 and done.count([[0, 2]]) == 7
    res = score(model, calibration=ids, out=out, **KW)
    assert res.meta["timing"]["units_probed"] == UNITS
    assert res.meta["timing"]["block_evals"] < reference[0].meta["timing"]["block_evals"]
    assert _strip(json.loads(out.read_text())) == _strip(reference[1])


def _refused(path, match, **kw):
    before = path.read_bytes()
    with pytest.raises(SwappruneError, match=match) as err:
        score(**kw)
    assert "\n" not in str(err.value)
    assert path.read_bytes() == before  # never overwritten
    return str(err.value)


def test_resume_refuses_other_settings(model, ids, reference, tmp_path):
    out = tmp_path / "scores.json"
    out.write_text(json.dumps(reference[1]))
    base = dict(KW, model=model, calibration=ids, out=out)
    other = tiny_model("llama", seed=1)  # same architecture and depth, other weights
    msg = _refused(out, r"different settings \(model: weights", **dict(base, model=other))
    assert str(out) in msg
    _refused(out, r"model: config", **dict(base, model=tiny_model("mistral")))
    _refused(
        out, r"model: dtype float32 vs float64", **dict(base, model=tiny_model("llama").double())
    )
    _refused(out, r"positions 'all' vs 'last'", **dict(base, positions="last"))
    _refused(out, r"calibration tokens 12 vs 10", **dict(base, calibration=ids[:, :10]))
    _refused(out, r"calibration prompts 6 vs 4", **dict(base, calibration=ids[:4]))
    _refused(out, r"calibration sha256", **dict(base, calibration=tiny_ids(6, 12, seed=5)))
    from swapprune.calibration.windows import Calibration

    _refused(
        out, r"calibration seed 0 vs 3", **dict(base, calibration=Calibration(ids, "tensor", 3))
    )
    _refused(
        out,
        r"calibration source 'tensor' vs 'other'",
        **dict(base, calibration=Calibration(ids, "other", 0)),
    )


def test_resume_refuses_a_corrupt_file(model, ids, reference, tmp_path):
    out = tmp_path / "scores.json"
    base = dict(KW, model=model, calibration=ids, out=out)
    text = json.dumps(reference[1])
    for bad, match in [
        (text[: len(text) // 2], "cannot read scores file"),
        ("", "cannot read scores file"),
        ('{"schema": "something else"}', "not a swapprune scores file"),
        (
            json.dumps({k: v for k, v in reference[1].items() if k != "bootstrap"}),
            "malformed scores file: missing .bootstrap.",
        ),
        ("[1, 2]", "cannot resume"),
    ]:
        out.write_text(bad)
        _refused(out, match, **base)
    short = json.loads(text)
    short["pairs"][0]["interchange"]["per_window"] = [0.1]
    out.write_text(json.dumps(short))
    _refused(out, r"malformed scores file: per-window values of different lengths \[1, 6\]", **base)
    wrong = json.loads(text)
    wrong["pairs"][0]["j"] = 9
    out.write_text(json.dumps(wrong))
    _refused(out, "malformed scores file: pair j 9 is out of range", **base)


def test_added_protocol_is_probed_for_every_pair(model, ids, reference, tmp_path):
    out = tmp_path / "scores.json"
    kw = dict(KW, model=model, calibration=ids, out=out)
    score(**dict(kw, pairs="0-1,2-4", protocols="replacement"))
    data = json.loads(out.read_text())
    assert data["protocols"] == ["replacement"]
    assert all("interchange" not in r for r in data["pairs"])
    # A narrower pair set with another protocol: the file's pairs get it too, and the
    # file claims the union of the protocols, all of them with values.
    res = score(**dict(kw, pairs="4-5", protocols="interchange,deletion"))
    data = json.loads(out.read_text())
    assert data["protocols"] == ["replacement", "interchange", "deletion"]
    assert res.meta["timing"]["units_probed"] == 3 + 6
    assert [(r["i"], r["j"]) for r in data["pairs"]] == [(0, 1), (2, 4), (4, 5)]
    assert all("replacement" in r and "interchange" in r for r in data["pairs"])
    assert len(data["deletion"]) == 6
    assert _strip(data) == _strip(reference[1])  # same values as scoring it all at once
    again = score(**dict(kw, pairs="0-1", protocols="replacement"))
    assert again.meta["timing"]["units_probed"] == 0
    assert again.meta["protocols"] == ["replacement", "interchange", "deletion"]


def test_file_without_fingerprint_is_matched_by_model_name(model, ids, reference, tmp_path):
    out = tmp_path / "scores.json"
    old = dict(reference[1])
    del old["fingerprint"]
    out.write_text(json.dumps(old))
    res = score(model, calibration=ids, out=out, **KW)
    assert res.meta["timing"]["units_probed"] == 0
    old["model"] = "another/model"
    out.write_text(json.dumps(old))
    _refused(
        out,
        "model 'another/model' vs 'LlamaForCausalLM'",
        **dict(KW, model=model, calibration=ids, out=out),
    )


def test_same_model_under_another_name_resumes(model, ids, reference, tmp_path):
    out = tmp_path / "scores.json"
    out.write_text(json.dumps(reference[1]))
    res = score(model, calibration=ids, out=out, model_id="/abs/path/model", **KW)
    assert res.meta["timing"]["units_probed"] == 0 and res.meta["model"] == "/abs/path/model"


def test_partial_units_restart_when_the_batch_size_changes(
    model, ids, reference, tmp_path, monkeypatch
):
    out = tmp_path / "scores.json"
    _stop_after(monkeypatch, 5, out, [])
    with pytest.raises(_Killed):
        score(model, calibration=ids, out=out, **KW)
    monkeypatch.undo()
    assert json.loads(out.read_text())["incomplete"]["partial_units"]
    res = score(model, calibration=ids, out=out, **dict(KW, batch_size=3))
    for k, v in reference[0].pairs.items():
        for key in v:  # not bitwise: other batches, other fp32 summation order
            np.testing.assert_allclose(res.pairs[k][key], v[key], rtol=1e-5, atol=1e-9)
    assert "incomplete" not in json.loads(out.read_text())


def _sharded_worker(rank: int, port: int, out: str, flags: str) -> None:
    import os
    from pathlib import Path

    from swapprune.engine.sharding import score_sharded

    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    try:
        score_sharded(
            tiny_model("llama"), out=out, calibration=tiny_ids(4, 8), pairs="0-1", progress=False
        )
        Path(flags, f"rank{rank}").write_text("ran")
    except SwappruneError as e:
        Path(flags, f"rank{rank}").write_text(str(e))


@pytest.mark.slow  # two processes: ~25 s on a shared 2-core machine
def test_sharded_run_refuses_an_existing_file_on_every_rank(tmp_path):
    import socket

    import torch.multiprocessing as mp

    out = tmp_path / "scores.json"
    out.write_text("{}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_sharded_worker, args=(port, str(out), str(tmp_path)), nprocs=2, join=True)
    for rank in (0, 1):
        assert "a sharded run does not resume" in (tmp_path / f"rank{rank}").read_text()
    assert out.read_text() == "{}"


# A child process that runs the CLI and is SIGKILLed (no exception handler, no flush) the
# moment its scores file holds ``k`` finished pairs.
_KILLED_CHILD = """
import os, signal, sys
from swapprune.engine.scores import ScoreResult
save = ScoreResult.save
def save_then_die(self, path, *args, **kwargs):
    save(self, path, *args, **kwargs)
    if len(self.pairs) >= {k}:
        os.kill(os.getpid(), signal.SIGKILL)
ScoreResult.save = save_then_die
from swapprune.cli import main
sys.exit(main({argv!r}))
"""


def test_a_score_killed_after_k_pairs_resumes_with_them(tmp_path, capsys):
    """``swapprune score`` killed after 2 of 5 pairs: the rerun probes only the other 3 and
    writes what one uninterrupted run writes, bit for bit."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from tiny_models import save_tiny

    from swapprune.cli import main

    model = str(save_tiny("llama", tmp_path / "m"))
    out, ref = tmp_path / "killed.json", tmp_path / "ref.json"
    argv = ["score", "--model", model, "--prompts", "6", "--tokens", "16", "--no-progress"]
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, OMP_NUM_THREADS="1")  # one reduction order in both processes
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    code = _KILLED_CHILD.format(k=2, argv=[*argv, "--output", str(out)])
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = json.loads(out.read_text())
    assert [(r["i"], r["j"]) for r in left["pairs"]] == [(0, 1), (1, 2)]
    assert left["incomplete"]["units_left"] == 3

    assert main([*argv, "--output", str(out)]) == 0
    said = capsys.readouterr()
    assert f"(resumed from {out})" in said.out
    assert "(2 pairs already in" in said.err  # the estimate counts only what is left
    resumed = json.loads(out.read_text())
    assert resumed["timing"]["units_probed"] == 3
    assert main([*argv, "--output", str(ref)]) == 0
    assert _strip(resumed) == _strip(json.loads(ref.read_text()))
