"""The in-phase constraint in selection (``--serve``): resolved, enforced, bootstrapped, certified.

Pure parts on hand-written score tables; the command line on a tiny Gemma-3 GGUF
(period 6: layer 5 of 8 is the one full-attention layer).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path

import numpy as np
import pytest
from tiny_gguf import write_tiny_gguf

import swapprune.pipeline.stages as stages
from swapprune.cli import main
from swapprune.config import CalibrationConfig, SelectConfig
from swapprune.engine.scores import ScoreResult
from swapprune.errors import SwappruneError
from swapprune.gguf.decision import GGUFOutput
from swapprune.gguf.source import GGUFSource
from swapprune.model.facts import ModelFacts
from swapprune.pipeline.checks import check_selection
from swapprune.plan import PrunePlan
from swapprune.select.constraints import Constraints, cheapest, enforce, own_types, resolve
from swapprune.select.core import select_fixed
from swapprune.select.spec import build
from swapprune.select.stability import selection_stability
from swapprune.serving.phase import eligible_removals, in_phase, phase_rule
from swapprune.serving.view import FULL, SLIDING

S, F = SLIDING, FULL


def period(n: int, p: int) -> list[str]:
    return [F if (i + 1) % p == 0 else S for i in range(n)]


def gemma3(n: int, **config) -> ModelFacts:
    types = period(n, 6)
    cfg = {"model_type": "gemma3_text", "num_hidden_layers": n, "layer_types": types}
    cfg |= {"sliding_window": 4, **config}  # llama.cpp uses no window at all without one
    return ModelFacts("gemma3_text", n, 128, 64, tuple(types), cfg)


# -- the cheapest eligible set ----------------------------------------------------------------


@pytest.mark.parametrize(("p", "n"), [(6, 12), (2, 9), (4, 10), (6, 14)])
def test_cheapest_is_the_minimum_over_every_eligible_set(p, n):
    family = {6: "gemma3_text", 2: "gemma2", 4: "cohere2"}[p]
    types, rules = period(n, p), [phase_rule(family, "llama.cpp", {})]
    rng = np.random.default_rng(n)
    checked = 0
    for budget in range(1, n - 1):
        for trial in range(6):
            # integer importances tie often: the tie-break and then the index decide
            imp = rng.integers(0, 3, n).astype(float) if trial % 2 else rng.random(n)
            tb = rng.random(n) if trial >= 4 else None
            protected = [0] if trial == 3 else []
            sets = list(eligible_removals(types, budget, rules, protected))
            got = cheapest(types, budget, rules, imp, tb, protected)
            if not sets:
                assert got is None
                continue
            key = np.zeros(n) if tb is None else tb
            want = min(sets, key=lambda s: (imp[list(s)].sum(), key[list(s)].sum(), s))
            assert got == want, (budget, trial)
            checked += 1
    assert checked > 10


def test_enforce_keeps_an_in_phase_choice_and_replaces_any_other():
    serve = resolve(["llama.cpp"], gemma3(12))
    assert serve is not None and serve.runtimes == ("llama.cpp",)
    cons = Constraints(12, serve=serve)
    imp = np.linspace(1.0, 2.0, 12)
    assert enforce(cons, [7, 11], imp) == [7, 11]  # in phase: the strategy's choice stands
    # [1, 3] moves the full layer 5 to slot 3; of the eligible {x, 11}, x in 6..10, 6 is cheapest
    assert not serve.in_phase([1, 3])
    assert enforce(cons, [1, 3], imp) == [6, 11]
    imp[9] = 0.0
    assert enforce(cons, [1, 3], imp) == [9, 11]
    assert enforce(Constraints(12), [1, 3], imp) == [1, 3]  # no constraint, no change


# -- resolution ------------------------------------------------------------------------------


def _source(metadata: dict) -> GGUFOutput:
    return GGUFOutput(True, None, GGUFSource(Path("x.gguf"), "gemma3", 8, metadata))


def test_resolve_defaults_on_while_a_gguf_is_written():
    facts = gemma3(8)
    meta = {"general.architecture": "gemma3", "gemma3.block_count": 8}
    default = resolve(None, facts, _source(meta))
    assert default is not None and default.default
    assert default.runtimes == ("llama.cpp", "transformers-gguf")
    assert resolve(None, facts, GGUFOutput(False, "--gguf off")) is None
    assert resolve(None, facts) is None
    assert resolve(["none"], facts, _source(meta)) is None
    assert resolve(["vllm", "transformers"], facts) is None  # both read layer_types
    llama = ModelFacts("llama", 8, config={"model_type": "llama"})
    assert resolve(["llama.cpp", "transformers-gguf"], llama) is None  # nothing derived
    # a per-layer list in the source GGUF survives the cut: llama.cpp reads it
    listed = meta | {"gemma3.attention.sliding_window_pattern": [True] * 5 + [False] + [True] * 2}
    only = resolve(["llama.cpp", "transformers-gguf"], facts, _source(listed))
    assert only is not None and only.runtimes == ("transformers-gguf",)


def test_a_gguf_header_states_no_types_and_the_loaders_pattern_is_used():
    header = {"general.architecture": "gemma3", "gemma3.block_count": 8}
    facts = ModelFacts("gemma3_text", 8, config=header)
    assert own_types(facts) == period(8, 6)


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["llama.cp"], "did you mean 'llama.cpp'"),
        (["none", "vllm"], "takes no other runtime"),
        ([], "needs runtime names"),
    ],
)
def test_bad_serve_names_are_one_line(names, message):
    with pytest.raises(SwappruneError, match=message):
        check_selection(SelectConfig(budget=1, serve=names), CalibrationConfig())
    with pytest.raises(SwappruneError, match="does not combine with --op merge"):
        check_selection(
            SelectConfig(budget=1, serve=["llama.cpp"], op="merge"), CalibrationConfig()
        )


# -- selection on a hand-written score table ---------------------------------------------------

L, N = 12, 16


def deletion_scores(imp: np.ndarray) -> ScoreResult:
    rng = np.random.default_rng(0)
    deletion = {i: imp[i] * (1 + 0.05 * rng.standard_normal(N)) for i in range(L)}
    return ScoreResult(meta={"num_layers": L}, deletion=deletion, n_boot=200)


def test_a_constrained_selection_is_in_phase_as_are_its_bootstrap_and_plausible_sets():
    from swapprune.select.reference import plausible

    imp = np.array([9, 1, 1.1, 1.2, 9, 9, 5, 5, 3, 5, 5, 2.0])  # greedy: [1, 3]
    serve = resolve(["llama.cpp"], gemma3(L))
    select = SelectConfig(budget=2, protocol="deletion", certify=False)
    spec = build(select, CalibrationConfig(adaptive="off"), L, True, serve)
    plan, scores = select_fixed(None, spec, None, deletion_scores(imp))
    assert plan.removed == [8, 11]  # the cheapest x + 11 with x after the full layer 5
    rec = plan.records.serve
    assert rec.strategy_choice == [1, 3] and rec.replaced and not rec.to_dict()["strategy_in_phase"]
    assert rec.eligible_sets == 5 and rec.removal_sets == 66
    assert "replaced by [8, 11]" in rec.summary() and "overrides" in rec.summary()
    stab = selection_stability(scores, "deletion", "greedy", 2, spec.constraints, 200)
    assert stab.chosen == [8, 11] and all(serve.in_phase(s) for s in stab.counts)
    sets, _, _ = plausible(spec, plan, scores, extra=[(1, 3), (7, 11)])
    assert (7, 11) in sets and (1, 3) not in sets and all(serve.in_phase(s) for s in sets)

    free = build(select, CalibrationConfig(adaptive="off"), L, True)
    unconstrained, _ = select_fixed(None, free, None, deletion_scores(imp))
    assert unconstrained.removed == [1, 3] and unconstrained.records.serve is None


def test_an_infeasible_budget_is_refused_when_the_spec_is_built():
    serve = resolve(["llama.cpp"], gemma3(8))
    select = SelectConfig(budget=2, protect_last=1)
    with pytest.raises(SwappruneError, match="no removal of 2 of 8 blocks with blocks \\[7\\]"):
        build(select, CalibrationConfig(), 8, serve=serve)
    build(SelectConfig(budget=1, protect_last=1), CalibrationConfig(), 8, serve=serve)


# -- the command line on a tiny Gemma-3 GGUF ---------------------------------------------------


@pytest.fixture(scope="module")
def gemma(tmp_path_factory) -> tuple[Path, Path]:
    """The GGUF, and calibration text its tiny vocabulary spells (letters only)."""
    root = tmp_path_factory.mktemp("gemma")
    words = "the cat in a hat sat on her mat and ran to the red barn".split()
    rnd = random.Random(0)
    (root / "calib.txt").write_text("".join(rnd.choice(words) for _ in range(6000)))
    return write_tiny_gguf(root / "gemma3.gguf", "gemma3", 8), root / "calib.txt"


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SWAPPRUNE_CACHE", str(tmp_path_factory.getbasetemp() / "serve-cache"))


def _run(args: list[str]) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(args)
    return rc, buf.getvalue()


def test_the_gguf_default_keeps_the_cut_in_phase_and_says_so(gemma, tmp_path):
    gguf, calib = gemma
    out = tmp_path / "in-phase"
    args = ["--model", str(gguf), "--budget", "2", "--calib", str(calib), "--output", str(out)]
    rc, said = _run([*args, "--prompts", "4", "--tokens", "32", "--no-eval", "--no-progress"])
    assert rc == 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan["removed"] == [6, 7]  # the only in-phase removal of 2 (greedy never picks it)
    rec = plan["scores"]["serve"]
    assert rec["default"] and rec["runtimes"] == ["llama.cpp", "transformers-gguf"]
    assert rec["replaced"] and rec["eligible_sets"] == 1
    assert rec["summary"] in said and "replaced by [6, 7]" in said
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["gguf"]["selfcheck"]["logits_exact"]
    card = (out / "README.md").read_text()
    assert "**In phase for llama.cpp, transformers-gguf** (on by default" in card
    assert "| 5 | 5 | F | F | F |" in card and "**S (" not in card and "**F**" not in card
    assert "serving (" not in said  # no runtime serves it otherwise


def test_an_out_of_phase_cut_gets_no_gguf_and_a_serving_table_that_shows_it(gemma, tmp_path):
    """A saved plan removing block 2 moves the full layer 5 to slot 4 (Gemma-3's period 6)."""
    gguf, _ = gemma
    plan = tmp_path / "plan.json"
    PrunePlan.from_removal(8, [2]).to_json(plan)
    out = tmp_path / "cut"
    args = ["apply", "--plan", str(plan), "--model", str(gguf), "--output", str(out)]
    rc, said = _run([*args, "--no-eval", "--no-progress"])
    assert rc == 0 and not (out / "model.gguf").exists()
    assert "gguf: not written: transformers' GGUF loader derives gemma3_text layer types" in said
    assert "serving (the checkpoint (config.json)): llama.cpp serves 2 layer(s)" in said
    card = (out / "README.md").read_text()
    assert "| layer | original | own type | transformers | vllm | llama.cpp |" in card
    assert "| 4 | 5 | F | F | F | **S (4)** |" in card
    assert "| 5 | 6 | S | S (4) | S (4) | **F** |" in card
    metrics = json.loads((out / "metrics.json").read_text())
    flips = metrics["serving"]["safetensors"]["runtimes"]["llama.cpp"]["differs"]
    assert flips == [[4, 5, F, S], [5, 6, S, F]]
    assert [g for g in metrics["serving"] if g != "warnings"] == ["safetensors"]


@pytest.fixture
def no_load(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the model was loaded before the budget was checked")

    monkeypatch.setattr(stages, "load", refuse)


def test_an_infeasible_serve_budget_fails_before_the_model_loads(tmp_path, capsys, no_load):
    """A config.json alone (no weights): the refusal needs only the model's facts."""
    model = tmp_path / "gemma3-config-only"
    model.mkdir()
    types = period(6, 6)
    config = {
        "model_type": "gemma3_text",
        "num_hidden_layers": 6,
        "layer_types": types,
        "sliding_window": 4,
        "max_position_embeddings": 128,
        "hidden_size": 64,
    }
    (model / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    args = ["--model", str(model), "--budget", "1", "--protect-last", "1", "--output", str(out)]
    assert main([*args, "--serve", "llama.cpp", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no removal of 1 of 6 blocks with blocks [5] protected keeps the layer pattern" in err
    assert "for llama.cpp" in err and "\n" not in err and not out.exists()
    assert in_phase(types, [5], phase_rule("gemma3_text", "llama.cpp", config))


def test_list_names_the_serving_runtimes(capsys):
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    assert "serving runtimes (--serve" in text
    for name in ("transformers-gguf", "llama.cpp", "vllm", "none"):
        assert f"  {name} " in text
