"""Study v4's analysis on constructed input: coverage, regret against the best, contrasts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parents[1] / "eval" / "study_v4"


@pytest.fixture(scope="module")
def an():
    spec = importlib.util.spec_from_file_location("study_v4_analysis", HERE / "analysis.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _contract(an, costs: dict, n=40, noise=0.001, ordered=False, seed=0):
    rng = np.random.default_rng(seed)
    tokens = np.full(n, 256.0)
    difficulty = rng.normal(0, 0.2, n)
    base = (3.0 + difficulty) * tokens
    nll = {s: (3.0 + np.log1p(c) + difficulty + rng.normal(0, noise, n)) * tokens
           for s, c in costs.items()}  # fmt: skip
    return an.Contract("extended", base, tokens, list(range(n)), nll, ordered=ordered)


def test_coverage_counts_certified_cuts_within_their_delta(an):
    rows = [
        {"certified": True, "delta": 1.0, "true_regret": 0.5},
        {"certified": True, "delta": 1.0, "true_regret": 3.0},  # a miss
        {"certified": True, "delta": 2.0, "true_regret": 2.0},  # exactly at delta: covered
        {"certified": False, "delta": 1.0, "true_regret": 9.0},  # not certified: not counted
    ]
    c = an.coverage(rows)
    assert (c["cuts"], c["certified"], c["covered"]) == (4, 3, 2)
    assert c["coverage"] == pytest.approx(2 / 3) and c["certify_rate"] == 0.75
    assert not c["met"] and len(c["misses"]) == 1 and c["misses"][0]["true_regret"] == 3.0
    lo, hi = c["coverage_ci"]
    assert 0 < lo < 2 / 3 < hi < 1


def test_clopper_pearson_matches_known_values(an):
    lo, hi = an.clopper_pearson(9, 10)  # the textbook 0.555 - 0.997
    assert lo == pytest.approx(0.5550, abs=1e-3) and hi == pytest.approx(0.9975, abs=1e-3)
    assert an.clopper_pearson(0, 10)[0] == 0.0 and an.clopper_pearson(10, 10)[1] == 1.0


def test_regret_against_the_best_and_the_contrast(an):
    c = _contract(an, {(1, 2): 0.30, (3, 4): 0.40, (5, 6): 0.305})
    best, cost = c.best(2)
    assert best == (1, 2) and cost == pytest.approx(30.0, abs=0.5)
    r = an.regret_against_best(c, [(3, 4)] * 3, best, n_boot=500, seed=0)
    assert r["mean"] == pytest.approx(10.0, abs=0.6) and not r["within_margin"]
    near = an.regret_against_best(c, [(5, 6)] * 3, best, n_boot=500, seed=0)
    assert near["upper_95"] < 2.0 and near["within_margin"]
    t = an.contrast(c, "A", [(1, 2)] * 3, "B", [(5, 6)] * 3, n_boot=500, seed=0)
    assert "within +-2 pts" in t["label"], t["label"]  # 0.5 points apart: inside the margin
    t = an.contrast(c, "A", [(1, 2)] * 3, "B", [(3, 4)] * 3, n_boot=500, seed=0)
    assert t["outcome"] == "a_better" and t["d"] > 9 and 0 < t["p_mc_se"] < 0.01
    same = an.contrast(c, "A", [(1, 2)] * 3, "B", [(1, 2)] * 3, n_boot=500, seed=0)
    assert same["outcome"] == "identical"
    out = an.holm_primary([t, same])
    assert out[0]["p_holm"] is not None and out[1].get("p_holm") is None


def test_the_matched_contract_is_resampled_in_blocks(an):
    c = _contract(an, {(1, 2): 0.30, (3, 4): 0.40}, n=23, ordered=True)
    assert c.weights(100, 0).shape == (100, 23)
    t = an.contrast(c, "A", [(1, 2)] * 2, "B", [(3, 4)] * 2, n_boot=300, seed=1)
    assert t["outcome"] == "a_better"
    assert an.percentile_rank(30.0, [10.0, 20.0, 30.0, 40.0]) == 50.0


def test_the_contracts_from_cached_prefixes_equal_lm_evals_scoring(tmp_path):
    """Study v4 evaluates sets on both contracts with the set evaluator; lm-eval's scoring
    of the same windows (``swapprune eval``) gives the same per-window NLL."""
    import copy

    from tiny_models import tiny_model, tiny_tokenizer

    from swapprune.edit.surgery import apply_plan
    from swapprune.evaluation import evaluate
    from swapprune.plan import PrunePlan

    spec = importlib.util.spec_from_file_location("study_v4_contracts", HERE / "contracts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model, tok = tiny_model("llama"), tiny_tokenizer()
    cs = mod.ContractSets(model, tok, tmp_path / "c.json", words=300, max_length=64)
    cs.evaluate([(1, 3)])
    assert cs.has((1, 3)) and not cs.has((2, 3))
    cut = apply_plan(copy.deepcopy(model), PrunePlan.from_removal(6, [1, 3]), lambda *_: None)
    for m, key in ((model, None), (cut, "1,3")):
        res = evaluate(m, tok, ["wikitext2_ppl", "wikitext2_ext"], words=300, max_length=64,
                       n_boot=10)  # fmt: skip
        for name, task in (("matched", "swapprune_wikitext2_ppl"),
                           ("extended", "swapprune_wikitext2_ext")):  # fmt: skip
            t = res.tasks[task]
            mine = cs.data[name]["base"] if key is None else cs.data[name]["sets"][key]
            np.testing.assert_allclose(mine, t.units["nll"], rtol=1e-5, err_msg=name)
            assert cs.data[name]["tokens"] == list(t.units["tokens"])


def test_screening_agreement_ranks_and_overlap(an):
    a = {(i, i + 1): float(i) for i in range(30)}
    same = an.screening_agreement(a, dict(a), top=5)
    assert same["spearman"] == pytest.approx(1.0) and same["top_overlap"] == 5
    rev = an.screening_agreement(a, {s: -v for s, v in a.items()}, top=5)
    assert rev["spearman"] == pytest.approx(-1.0) and rev["top_overlap"] == 0
    assert rev["best_a"] == [0, 1] and rev["best_b"] == [29, 30]
    ties = an.screening_agreement({(1,): 1.0, (2,): 2.0, (3,): 2.0, (4,): 3.0},
                                  {(1,): 1.0, (2,): 2.0, (3,): 2.0, (4,): 3.0}, top=2)  # fmt: skip
    assert ties["spearman"] == pytest.approx(1.0)
