"""The estimate before any scoring: printed on every path that scores, counted exactly for the
probes, bounded for the held-out evaluations, and the quick path named when a run is long."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import save_tiny, tiny_model

from swapprune.cli import main
from swapprune.config import CalibrationConfig, CostConfig, RunConfig, SelectConfig
from swapprune.engine.estimate import Rates, Work, pass_work, probe_work, set_work
from swapprune.engine.probing import score
from swapprune.model.facts import ModelFacts
from swapprune.pipeline import forecast as fc
from swapprune.pipeline.checks import check_model

FAST = ["--prompts", "4", "--tokens", "32", "--no-progress"]
# A small cost check: 2 windows of the contract (the default of 8 spends most of a test here).
COST = ["--cost-windows", "2"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny("llama", tmp_path_factory.mktemp("m") / "tiny"))


def _estimates(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("[estimate]")]


def _said(capsys) -> list[str]:
    lines = _estimates(capsys.readouterr().err)
    assert lines, "no estimate was printed"
    assert any("block evaluations" in line for line in lines)
    return lines


# -- every path that scores prints it first --------------------------------------------


def test_prune_with_tranches(model_dir, tmp_path, capsys):
    assert (
        main(["--model", model_dir, "--budget", "1", "--output", str(tmp_path / "p"), *FAST, *COST])
        == 0
    )
    lines = _said(capsys)
    assert "in tranches of 4 windows" in lines[0] and "certified on 8 held-out windows" in lines[0]
    # the chosen set and the typical carried sets, then the screen's others at most
    assert any(", certificate " in line and "screen at most" in line for line in lines)
    assert any("the screen's further sets" in line and "at most" in line for line in lines)
    metrics = json.loads((tmp_path / "p" / "metrics.json").read_text())
    assert metrics["estimate"]["prune"]["block_evals"] > 0


def test_prune_on_fixed_windows(model_dir, tmp_path, capsys):
    out = tmp_path / "p"
    argv = ["--model", model_dir, "--budget", "1", "--adaptive", "off", "--output", str(out)]
    assert main([*argv, *FAST, *COST]) == 0
    lines = _said(capsys)
    assert "probes of 5 adjacent pairs on 4 windows" in lines[0]


def test_prune_with_scores_given(model_dir, tmp_path, capsys):
    scores = tmp_path / "s.json"
    assert main(["score", "--model", model_dir, "--output", str(scores), *FAST]) == 0
    capsys.readouterr()
    out = tmp_path / "p"
    argv = ["--model", model_dir, "--scores", str(scores), "--budget", "1", "--output", str(out)]
    assert main([*argv, *FAST, *COST]) == 0
    lines = _said(capsys)
    assert f"probes reused from {scores}" in lines[0]


def test_score(model_dir, tmp_path, capsys):
    assert main(["score", "--model", model_dir, "--output", str(tmp_path / "s.json"), *FAST]) == 0
    lines = _said(capsys)
    assert "replacement/interchange probes of 5 pairs on 4 windows x 32 tokens" in lines[0]


def test_recipe(model_dir, tmp_path, capsys):
    import yaml

    recipe = tmp_path / "r.yaml"
    data = {
        "model": {"name": model_dir},
        "calibration": {"prompts": 4, "tokens": 32},
        "score": {"output": str(tmp_path / "s.json")},
        "prune": {"budget": 1},
        "export": {"output": str(tmp_path / "out")},
    }
    recipe.write_text(yaml.safe_dump(data))
    assert main(["run", str(recipe), "--no-progress"]) == 0
    lines = _said(capsys)
    assert sum(line.startswith("[estimate] replacement/interchange probes") for line in lines) == 1
    assert any("probes reused from the scores given" in line for line in lines)


def test_compare(model_dir, tmp_path, capsys):
    argv = ["compare", "--model", model_dir, "--budgets", "1", "--criteria", "interchange,bi"]
    args = ["--words", "150", "--max-length", "64", "--output", str(tmp_path / "c")]
    assert main([*argv, *args, *FAST]) == 0
    lines = _said(capsys)
    assert "2 methods x budgets 1" in lines[0] and "3 evaluations of" in lines[0]
    assert any("wikitext2_ppl" in line for line in lines)


def test_validate(model_dir, tmp_path, capsys):
    argv = ["validate", "--model", model_dir, "--criteria", "interchange,bi", "--bootstrap", "20"]
    assert main([*argv, "--output", str(tmp_path / "v"), *FAST]) == 0
    lines = _said(capsys)
    assert "against the cost of deleting each of 6 blocks" in lines[0]


def test_python_api_and_the_modifier_log(capsys):
    """``swapprune.prune(say=...)`` is what the llm-compressor modifier logs through."""
    from tiny_models import tiny_tokenizer

    import swapprune

    said: list[str] = []
    swapprune.prune(
        tiny_model("llama"), tiny_tokenizer(), budget=1, prompts=4, tokens=32, say=said.append
    )
    estimates = [line for line in said if line.startswith("[estimate]")]
    assert estimates[0].startswith("[estimate] interchange, 1 of 6 blocks")
    # and the stage lines the command line prints, the estimate before the selection
    assert said.index(estimates[0]) < said.index("[select] ...")
    assert any(line.startswith("[select] done in ") for line in said)
    try:
        from swapprune.integrations import llmcompressor
    except ImportError:
        return  # the modifier passes its logger as ``say`` (checked where llm-compressor is)
    assert "_log" in llmcompressor.DepthPruningModifier.on_initialize.__code__.co_names


# -- the counts -------------------------------------------------------------------------


@pytest.mark.parametrize("positions", ["all", "last"])
def test_probe_work_is_what_the_engine_spends(positions):
    model = tiny_model("llama")
    res = score(
        model,
        calibration=torch.randint(3, 90, (5, 12)),
        pairs="adjacent",
        batch_size=2,
        progress=False,
        positions=positions,
    )
    t = res.meta["timing"]
    pairs = [(i, i + 1) for i in range(5)]
    work = probe_work(6, pairs, ("replacement", "interchange"), 5, 12, 2, positions)
    assert (work.block_evals, work.block_tokens, work.head_rows) == (
        t["block_evals"],
        t["block_tokens"],
        t["head_rows"],
    )


def test_certificate_bound_holds(model_dir, tmp_path):
    out = tmp_path / "p"
    assert main(["--model", model_dir, "--budget", "2", "--output", str(out), *FAST, *COST]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    spent = metrics["compute"]["certificate"]["block_evals"]
    bound = set_work(6, 2, 6 + 1, 8, 256, 8).block_evals  # certify_sets + 1 sets, 8 x 256
    assert 0 < spent <= bound


# -- the words --------------------------------------------------------------------------


def _forecast(prompts: int, tokens: int) -> fc.Forecast:
    facts = ModelFacts("llama", 30, 8192, 576)
    cfg = RunConfig(
        calibration=CalibrationConfig(prompts=prompts, tokens=tokens),
        prune=SelectConfig(budget=8),
        cost=CostConfig(),
    )
    return fc.selection(cfg, facts, check_model(cfg, facts), False)


def test_a_long_cpu_run_names_the_quick_path():
    # SmolLM2-135M at one thread on an idle 2-core machine (eval/BENCHMARKS.md): 37 ms per
    # block on 8 x 64 tokens; the head and the KL about 1 ms per position.
    rates = Rates(0.037 / 512, 1e-3, (8, 64), 1)
    plan, quick = _forecast(64, 128), _forecast(16, 64)
    fc.timed(plan, rates, cpu=True, quick=quick)
    lines = plan.lines("1 torch thread")
    assert plan.most_seconds() > fc.QUICK_ABOVE_S
    assert "--quick (16 x 64 windows)" in lines[-1]
    assert "at most" in lines[2] and "7 more looks" in lines[2]
    # The same run on a GPU, or a short one, names nothing.
    assert fc.timed(_forecast(64, 128), rates, cpu=False, quick=_forecast(16, 64)).quick is None
    fast = Rates(1e-9, 1e-9, (8, 64), 1)
    assert fc.timed(_forecast(64, 128), fast, cpu=True, quick=_forecast(16, 64)).quick is None


def test_first_look_is_one_tranche_of_the_pool():
    plan = _forecast(64, 128)
    probes = next(p for p in plan.parts if p.what == "probes").work
    pairs = [(i, i + 1) for i in range(29)]
    assert probes == probe_work(30, pairs, ("interchange",), 8, 128, 8, "all")
    assert probes.block_evals == 30 + sum(30 - i for i in range(29))  # one batch of 8


def test_work_adds_up():
    a, b = Work(1, 2, 3), Work(10, 20, 30)
    assert a + b == Work(11, 22, 33) and b - a == Work(9, 18, 27) and a.times(3) == Work(3, 6, 9)


def test_the_screen_is_priced_at_the_ranking_rate():
    plain, fast = Rates(0.037 / 512, 1e-3, (8, 64), 1), Rates(0.037 / 512, 1e-3, (8, 64), 1, 0.25)
    plan = _forecast(64, 128)
    screen = next(p for p in plan.parts if p.what == "screen")
    assert screen.ranking and screen.bound
    others = [p for p in plan.parts if p is not screen]
    assert fast.seconds(screen.work, True) == pytest.approx(0.25 * plain.seconds(screen.work))
    assert all(fast.seconds(p.work, p.ranking) == plain.seconds(p.work) for p in others)
    fc.timed(plan, fast, cpu=True)
    assert "(in bfloat16 for the screens: 0.25x)" in plan.lines("1 torch thread")[-1]
    assert fc.record(plan)["ranking_factor"] == 0.25


def test_the_cost_check_counts_generation_and_drops_the_base_side_when_cached():
    facts = ModelFacts("llama", 30, 8192, 576)
    cfg = RunConfig(prune=SelectConfig(budget=8), cost=CostConfig())
    cold = fc.cost_check_part(cfg, facts, 8)
    warm = fc.cost_check_part(cfg, facts, 8, base_cached=True)
    assert cold.what == "cost check on 8 contract windows and generation"
    assert warm.what.endswith("and generation (the base model's side cached)")
    # the base's contract windows: 30 blocks x 8 x 512; its continuations and choices:
    # 2 x 30 blocks x 32 prompts x 80 tokens
    assert cold.work.block_tokens - warm.work.block_tokens == 30 * 8 * 512 + 2 * 30 * 32 * 80
    off = RunConfig(prune=SelectConfig(budget=8), cost=CostConfig(generative=False))
    plain = pass_work(22, 8, 512, 8) + pass_work(30, 8, 512, 8)
    assert fc.cost_check_part(off, facts, 8).work == plain
