"""eval/gpu_bench.py: its ``--tiny`` run (the GPU code path on the CPU) and what it measures.

The tiny run executes in a subprocess where gguf, lm-eval, optimum,
optimum-quanto and llm-compressor cannot be imported, as on the bare CUDA
machine the benchmark is written for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT / "eval"
SCRIPT = EVAL / "gpu_bench.py"
BLOCKED = ("gguf", "lm_eval", "optimum", "optimum.quanto", "llmcompressor")

# Runs the bench with the optional packages absent: a None entry in sys.modules
# makes `import name` raise ImportError and importlib.util.find_spec(name) return
# None, which is how a package that is not installed looks. An audit hook records
# every attempt to import one of them, with the first non-importlib caller.
BOOT = """
import runpy, sys
blocked = {blocked!r}
for name in blocked:
    sys.modules[name] = None
for name in blocked:
    try:
        __import__(name)
    except ImportError:
        pass
    else:
        raise SystemExit(f"{{name}} is still importable")
tops = {{b.split(".")[0] for b in blocked}}
attempts = []
def audit(event, args):
    if event == "import" and args[0].split(".")[0] in tops:
        f = sys._getframe(1)
        while f is not None and "importlib" in f.f_code.co_filename:
            f = f.f_back
        attempts.append(f"{{args[0]}} from {{f.f_code.co_filename if f else '?'}}")
sys.addaudithook(audit)
sys.argv = [{script!r}] + sys.argv[1:]
try:
    runpy.run_path({script!r}, run_name="__main__")
finally:
    with open({attempts_file!r}, "w") as fh:
        fh.write("\\n".join(attempts))
"""


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One ``--tiny`` run with the optional packages blocked: ``(process, report, attempts)``."""
    tmp = tmp_path_factory.mktemp("gpu_bench")
    out, attempts = tmp / "tiny.json", tmp / "attempts.txt"
    boot = tmp / "boot.py"
    boot.write_text(BOOT.format(blocked=BLOCKED, script=str(SCRIPT), attempts_file=str(attempts)))
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OUT=str(tmp / "unused"))
    proc = subprocess.run(
        [sys.executable, str(boot), "--tiny", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(out.read_text()) if out.exists() else None
    tried = [x for x in attempts.read_text().splitlines() if x] if attempts.exists() else None
    return proc, report, tried


def _rows(report) -> dict:
    return {r["task"]: r for r in report["rows"]}


def test_tiny_run_needs_none_of_the_optional_packages(tiny_run):
    proc, report, tried = tiny_run
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert report is not None and tried is not None
    # Nothing in swapprune or the bench even tries (a third-party probe that fails over is fine).
    ours = [t for t in tried if str(ROOT / "swapprune") in t or str(EVAL) in t]
    assert ours == []
    assert "skipped" in report and report["skipped"] == [] and report["failed"] == []


def test_tiny_run_has_every_section_for_both_families(tiny_run):
    _, report, _ = tiny_run
    rows = _rows(report)
    for family in ("llama3.1-8b", "qwen3-8b"):
        want = [f"{family}:bf16:{s}" for s in ("scan", "naive_scan", "sleb", "naive_sleb", "auto")]
        want += [f"{family}:fp32:{s}" for s in ("scan", "naive_scan")]
        want += [f"{family}:bf16-vs-fp32:spearman"]
        for task in want:
            assert rows[task]["status"] == "done", rows.get(task)
        assert report["families"][family]["same_weights_every_build"] is True
    env = report["environment"]
    assert env["torch"] == torch.__version__ and env["transformers"]
    assert report["mode"] == "tiny" and report["targets"] == []


def test_tiny_naive_and_fast_agree(tiny_run):
    _, report, _ = tiny_run
    for r in report["rows"]:
        if r["section"] == "naive_scan":
            tol = 1e-6 if r["dtype"] == "fp32" else 1e-3
            assert r["max_rel_diff_per_window"] <= tol, r["task"]
            assert r["max_rel_diff_distance"] <= tol, r["task"]
            assert r["scaled"] and len(r["pairs_measured"]) == 2 and r["pairs_total"] == 5
        if r["section"] == "naive_sleb":  # the whole literal SLEB: its own choices
            assert r["scaled"] is False and r["calls_measured"] == r["calls_total"] == 11
            assert r["same_selection"] is True, r["task"]
            assert r["max_rel_diff_first_step"] <= 1e-5, r["task"]
        if r["section"] == "spearman":
            for p in ("replacement", "interchange"):
                assert -1 <= r[p]["spearman"] <= 1


def test_tiny_counts_are_positive_and_consistent(tiny_run):
    _, report, _ = tiny_run
    rows = _rows(report)
    for r in report["rows"]:
        if r["status"] != "done" or r["section"] in ("build", "spearman"):
            continue
        assert r["peak_gib"] > 0 and r["param_gib"] > 0, r["task"]
        if r["section"] == "scan":
            assert 0 < r["block_evals"] == r["floor_block_evals"] < r["naive_block_evals"]
            assert r["wall_s"] > 0 and r["block_tflops"] > 0 and r["head_rows"] > 0
            assert len(r["distances"]["interchange"]) == r["pairs"] == 5
        if r["section"] == "naive_scan":
            assert r["naive_s"] > r["measured_s"] - r["base_s"] > 0 and r["speedup"] > 0
        if r["section"] == "sleb":
            assert r["oracle_calls"] == r["expected_calls"] == 11
            assert len(r["removed"]) == 2 and sorted(r["order"]) == r["removed"]
            assert r["block_evals"] > 0 and r["block_tflops"] > 0
        if r["section"] == "auto":
            assert len(r["removed"]) == 2 and r["regime"] in ("both-high", "divergent", "tie-like")
            assert r["wall_s"] == pytest.approx(r["scan_s"] + r["selection_s"])
            assert (
                r["certificate"]["kept"] == r["removed"]
                and r["compute"]["total"]["block_evals"] > 0
            )
            if r["regime"] == "both-high":  # the tiny init is chosen so the beam runs
                assert r["oracle_calls"] > 0
    assert rows["llama3.1-8b:bf16:auto"]["regime"] == "both-high"


# ----------------------------------------------------------------------------- in-process
@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(EVAL))
    import gpu_bench

    yield gpu_bench
    sys.path.remove(str(EVAL))


def test_flops_formula_matches_the_modules_at_8b(bench):
    """The config formula = 2 x the block's linear weights + the T x T attention products;
    the shapes are the published models' (parameter counts of Llama-3.1-8B and Qwen3-8B)."""
    import gpu_bench_models as gm
    from transformers import AutoModelForCausalLM

    for name, params in (("llama3.1-8b", 8_030_261_248), ("qwen3-8b", 8_190_735_360)):
        cfg = gm.config_of(name)
        depth = cfg.num_hidden_layers
        cfg.num_hidden_layers = 1  # one block on the meta device: the rest are copies of it
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        block = model.model.layers[0]
        per_block = sum(p.numel() for p in block.parameters())
        assert sum(p.numel() for p in model.parameters()) + (depth - 1) * per_block == params
        linear = sum(m.weight.numel() for m in block.modules() if isinstance(m, torch.nn.Linear))
        heads, d = cfg.num_attention_heads, cfg.head_dim
        assert gm.block_flops_per_token(cfg, 128) == 2 * linear + 4 * heads * d * 128
        assert gm.head_flops_per_row(cfg) == 2 * model.lm_head.weight.numel()
    llama = gm.config_of("llama3.1-8b")
    assert gm.block_flops_per_token(llama, 128) == pytest.approx(438.3e6, rel=1e-3)


def test_sleb_block_count_is_what_the_oracle_runs(bench, monkeypatch):
    """The SLEB FLOP count (sleb_block_evals) equals the block calls the library makes."""
    import gpu_bench_models as gm

    from swapprune.engine.runner import PlanRunner

    model, _ = gm.build_model("llama3.1-8b", torch.float32, "cpu", tiny=True)
    ids = gm.random_windows(model.config.vocab_size, 4, 8, 0)
    calls = {"blocks": 0, "captures": 0}
    run_block, capture = PlanRunner.run_block, PlanRunner.capture

    def counted_block(self, *a, **k):
        calls["blocks"] += 1
        return run_block(self, *a, **k)

    def counted_capture(self, *a, **k):
        calls["captures"] += 1
        return capture(self, *a, **k)

    monkeypatch.setattr(PlanRunner, "run_block", counted_block)
    monkeypatch.setattr(PlanRunner, "capture", counted_capture)
    sel = bench.select_blocks(model, ids, "sleb", 3, batch_size=2)
    L, batches = 6, 2
    assert sel.oracle_calls == bench.sleb_calls(L, 3) == 15
    assert calls["captures"] == batches
    assert calls["blocks"] + L * batches == bench.sleb_block_evals(L, sel.order) * batches


def test_spearman_matches_scipy(bench):
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.integers(0, 6, 12).astype(float)  # with ties
        b = a + rng.normal(0, 2, 12)
        assert bench.spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)


def test_budget_guard_skips_and_says_so(bench, tmp_path, capsys):
    out = tmp_path / "g.json"
    rc = bench.main(["--tiny", "--budget-s", "0", "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    tasks = bench.default_tasks(list(bench.SHAPES))
    assert len(report["skipped"]) == len(tasks) + 2  # + the two rankings
    assert all(s["reason"] for s in report["skipped"])
    assert "skipped:" in capsys.readouterr().out


def test_gpu_mode_needs_cuda(bench):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit):
        bench.parse_args([])


def test_targets_and_table_of_a_gpu_report(bench, tiny_run, tmp_path):
    """The GPU-only parts of the report (targets, the table's target lines) on the tiny rows."""
    _, report, _ = tiny_run
    args = bench.parse_args(["--tiny"])
    b = bench.Bench(args, "cuda", tmp_path / "g.json", rows=report["rows"])
    b.report = dict(report)
    b.report["targets"] = got = bench.targets(b)
    names = sorted({t["target"] for t in got})
    assert len(names) == 5 and len(got) == 10  # 5 targets x 2 families
    assert all(isinstance(t["met"], bool) and t["task"] for t in got)
    text = bench.table(b)
    assert text.count("\ntarget ") == 10 and "max_memory_allocated" in text
