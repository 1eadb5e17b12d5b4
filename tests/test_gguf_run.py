"""The run writes model.gguf beside the checkpoint: byte copies, an exact check, refusals in one line.

The inputs are tiny GGUFs written in the test (``tests/tiny_gguf.py``); the GGUF
cache lives under the test's temporary directory.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
import torch
from tiny_gguf import write_tiny_gguf
from tiny_models import save_tiny

import swapprune.pipeline.stages as stages
from swapprune.cli import main
from swapprune.gguf.writer import read_gguf
from swapprune.plan import PrunePlan

FAST = ["--prompts", "4", "--tokens", "32", "--no-eval", "--no-progress"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SWAPPRUNE_CACHE", str(root))
        yield root


@pytest.fixture(scope="module")
def llama(tmp_path_factory, cache) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("src") / "llama.gguf", "llama", 4)


@pytest.fixture(scope="module")
def pruned(llama, tmp_path_factory):
    """One CLI run on the tiny Llama GGUF: (output directory, its stdout)."""
    out = tmp_path_factory.mktemp("runs") / "pruned"
    buf = io.StringIO()  # a module-scoped fixture cannot use capsys
    with contextlib.redirect_stdout(buf):
        assert main(["--model", str(llama), "--budget", "1", "--output", str(out), *FAST]) == 0
    return out, buf.getvalue()


def _block_map(plan: dict) -> dict[int, int]:
    return dict(enumerate(plan["kept"]))


def test_run_writes_model_gguf_with_the_kept_tensors_byte_for_byte(llama, pruned):
    out, stdout = pruned
    plan = json.loads((out / "plan.json").read_text())
    old = {t.name: t for t in read_gguf(llama).tensors}
    new = read_gguf(out / "model.gguf")
    names = []
    for t in new.tensors:
        m = re.fullmatch(r"blk\.(\d+)\.(.+)", t.name)
        name = f"blk.{_block_map(plan)[int(m.group(1))]}.{m.group(2)}" if m else t.name
        names.append(name)
        assert t.tensor_type == old[name].tensor_type, t.name
        assert t.data.tobytes() == old[name].data.tobytes(), t.name
    gone = {n for n in old if n.startswith(f"blk.{plan['removed'][0]}.")}
    assert gone and sorted(names) == sorted(set(old) - gone)
    assert new.fields["llama.block_count"].contents() == 3

    prov = json.loads((out / "provenance.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    rec = prov["gguf"]
    assert rec == metrics["gguf"]
    assert rec["path"] == str(out / "model.gguf") and rec["removed"] == plan["removed"]
    assert rec["bytes_after"] == (out / "model.gguf").stat().st_size < rec["bytes_before"]
    check = rec["selfcheck"]
    assert check["logits_exact"] and check["logits_max_abs_diff"] == 0.0
    assert check["generate_cache_equal"] and "save gguf" in metrics["wall_s"]
    assert "gguf: " in stdout and "logits equal the in-memory pruned model's exactly" in stdout
    card = (out / "README.md").read_text()
    kb = f"{rec['bytes_before'] / 1e3:.1f} kB -> {rec['bytes_after'] / 1e3:.1f} kB"
    assert f"- **GGUF**: `model.gguf`, {kb} (4 -> 3 blocks" in card
    assert "| transformers-gguf | llama.cpp |" in card  # the GGUF's serving table
    assert set(metrics["serving"]) == {"safetensors", "gguf", "warnings"}
    assert metrics["serving"]["warnings"] == []


def test_the_two_artifacts_are_the_same_model(pruned):
    """The GGUF, reloaded by transformers, gives the safetensors checkpoint's logits exactly."""
    from transformers import AutoModelForCausalLM

    out, _ = pruned
    st = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    gg = AutoModelForCausalLM.from_pretrained(out, gguf_file="model.gguf", dtype=torch.float32)
    ids = torch.randint(
        3, st.config.vocab_size, (2, 20), generator=torch.Generator().manual_seed(5)
    )
    with torch.no_grad():
        assert torch.equal(st(input_ids=ids).logits, gg.eval()(input_ids=ids).logits)


def test_apply_writes_the_same_gguf(llama, pruned, tmp_path):
    out, _ = pruned
    again = tmp_path / "again"
    plan = str(out / "plan.json")
    args = ["apply", "--plan", plan, "--model", str(llama), "--output", str(again)]
    assert main([*args, "--no-eval", "--no-progress"]) == 0
    assert (again / "model.gguf").read_bytes() == (out / "model.gguf").read_bytes()
    assert json.loads((again / "provenance.json").read_text())["gguf"]["selfcheck"]["logits_exact"]


def test_auto_writes_no_gguf_for_a_merge_and_says_why(llama, tmp_path, capsys):
    out = tmp_path / "merged"
    assert (
        main(["--model", str(llama), "--budget", "1", "--op", "merge", "--output", str(out), *FAST])
        == 0
    )
    assert not (out / "model.gguf").exists()
    said = capsys.readouterr().out
    assert "gguf: not written: a merge changes the kept blocks' weights" in said
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["gguf"]["written"] is False and "merge" in metrics["gguf"]["reason"]
    assert "GGUF**: not written: a merge" in (out / "README.md").read_text()


def test_gguf_off_and_a_safetensors_input_write_none(llama, tmp_path, capsys):
    off = tmp_path / "off"
    assert (
        main(["--model", str(llama), "--budget", "1", "--gguf", "off", "--output", str(off), *FAST])
        == 0
    )
    assert not (off / "model.gguf").exists()
    assert "gguf: not written: --gguf off" in capsys.readouterr().out
    hf = save_tiny("llama", tmp_path / "hf")
    plain = tmp_path / "plain"
    assert main(["--model", str(hf), "--budget", "1", "--output", str(plain), *FAST]) == 0
    assert not (plain / "model.gguf").exists()
    assert "gguf" not in json.loads((plain / "metrics.json").read_text())
    assert "gguf:" not in capsys.readouterr().out


@pytest.fixture
def no_load(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the model was loaded before the request was checked")

    monkeypatch.setattr(stages, "load", refuse)


def _truncated(llama: Path, tmp_path: Path) -> str:
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(llama.read_bytes()[: llama.stat().st_size // 2])
    return str(bad)


REFUSED = {
    "merge": (["--op", "merge"], "--gguf on cannot be met: a merge changes"),
    "patch": (["--patch", "linear"], "--gguf on cannot be met: a linear patch changes"),
    "safetensors input": (None, "--gguf on cannot be met: the input .* is not a .gguf file"),
    "truncated": (None, "truncated.gguf is not a readable GGUF file \\(truncated or corrupt"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_gguf_on_refusals_are_one_line_before_the_model_loads(
    case, llama, tmp_path, capsys, no_load
):
    extra, message = REFUSED[case]
    model = str(llama)
    if case == "safetensors input":
        model = str(save_tiny("llama", tmp_path / "hf"))
    elif case == "truncated":
        model = _truncated(llama, tmp_path)
    out = tmp_path / "out"
    args = ["--model", model, "--budget", "1", "--gguf", "on", "--output", str(out), *FAST]
    assert main([*args, *(extra or [])]) == 2
    err = capsys.readouterr().err.strip()
    assert re.search(message, err) and "\n" not in err, err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if ".partial" in p.name]


def test_a_plan_that_merges_is_refused_for_gguf_on(llama, tmp_path, capsys, no_load):
    plan = tmp_path / "plan.json"
    PrunePlan.from_merges(4, {1: [1, 2]}, merge="average").to_json(plan)
    out = tmp_path / "out"
    args = ["apply", "--plan", str(plan), "--model", str(llama), "--gguf", "on"]
    assert main([*args, "--output", str(out), "--no-progress"]) == 2
    assert "a merge changes" in capsys.readouterr().err and not out.exists()


def test_the_source_check_is_remembered_on_disk_per_file_version(tmp_path, monkeypatch):
    """A warm pre-load check reads no GGUF; a file written anew is parsed again."""
    import swapprune.gguf.source as gs
    import swapprune.gguf.writer as gw

    monkeypatch.setenv("SWAPPRUNE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "gguf").mkdir(parents=True)
    path = write_tiny_gguf(tmp_path / "src.gguf", "llama", 4)
    parsed = []
    real = gw.read_gguf
    monkeypatch.setattr(gw, "read_gguf", lambda p: parsed.append(p) or real(p))
    first = gs.inspect_source(path)
    gs._SEEN.clear()  # a new process
    again = gs.inspect_source(path)
    assert len(parsed) == 1
    assert (again.arch, again.block_count) == (first.arch, first.block_count) == ("llama", 4)
    assert again.metadata == first.metadata
    write_tiny_gguf(path, "llama", 3)  # same path, new bytes: a new stat signature
    gs._SEEN.clear()
    assert gs.inspect_source(path).block_count == 3
    assert len(parsed) == 2
