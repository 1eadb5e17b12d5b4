"""The oracle's memory of answers, and oracles that share it (``shared_oracles``)."""

import json

import numpy as np
import pytest
from tiny_models import save_tiny, tiny_ids, tiny_model

from swapprune.api import plan_pruning
from swapprune.engine import oracle as oracle_mod
from swapprune.engine.oracle import CalibrationOracle, shared_oracles

IDS = tiny_ids(6, 24, seed=3)


def counting(monkeypatch):
    """Count the forward passes over the windows the oracles make (one per batch: a walk of
    the plans asked, for a cost or for per-window costs)."""
    seen = []
    real = oracle_mod.PlanRunner.run_plans

    def run_plans(self, plans, cache):
        seen.append(tuple(tuple(p) for p in plans))
        return real(self, plans, cache)

    monkeypatch.setattr(oracle_mod.PlanRunner, "run_plans", run_plans)
    return seen


def test_a_repeated_query_is_answered_from_memory_with_the_same_value(monkeypatch):
    model = tiny_model("llama")
    seen = counting(monkeypatch)
    o = CalibrationOracle(model, IDS, batch_size=3)
    first = o.cost([2])
    assert len(seen) == 2  # two batches of 3 windows
    assert o.cost([2]) == first and o.cost((2,)) == first
    assert len(seen) == 2 and o.calls == 3 and o.computed == 1
    assert o.cost([2], "kl") != first and o.computed == 2  # the metric is part of the question
    w = o.window_costs([1])
    w[:] = -1.0  # the caller's copy, not the oracle's memory
    assert (o.window_costs([1]) > 0).all() and o.computed == 3


def test_oracles_outside_the_block_share_nothing(monkeypatch):
    model = tiny_model("llama")
    a, b = CalibrationOracle(model, IDS), CalibrationOracle(model, IDS)
    assert a.caches is not b.caches
    seen = counting(monkeypatch)
    assert a.cost([3]) == b.cost([3])
    assert len(seen) == 2 and a.computed == b.computed == 1


def test_shared_answers_equal_fresh_ones_bitwise(monkeypatch):
    model = tiny_model("qwen2")
    fresh = CalibrationOracle(model, IDS, batch_size=4)
    want = {
        r: (fresh.cost(r), fresh.cost(r, "kl"), fresh.window_costs(r))
        for r in ((), (0,), (2, 4), (5,))
    }
    with shared_oracles():
        a = CalibrationOracle(model, IDS, batch_size=4, metric="ppl")
        b = CalibrationOracle(model, IDS, batch_size=4, metric="kl")
        assert b.caches is a.caches and b.runner is a.runner
        seen = counting(monkeypatch)
        for r, (ppl, kl, win) in want.items():
            assert a.cost(r) == ppl and b.cost(r) == kl
            assert b.cost(r, "ppl") == ppl  # answered by a's work
            assert np.array_equal(a.window_costs(r), win)
        assert len(seen) == 2 * 3 * 4  # 2 batches x (ppl, kl, windows) x 4 sets, once each
        assert a.calls == 8 and b.calls == 8 and a.computed == b.computed == 12


def test_other_windows_other_batches_or_another_model_are_not_shared():
    model = tiny_model("llama")
    with shared_oracles():
        base = CalibrationOracle(model, IDS, batch_size=3)
        same = CalibrationOracle(model, IDS.clone(), batch_size=3)  # equal content, new tensor
        assert same.caches is base.caches
        for other in (
            CalibrationOracle(model, tiny_ids(6, 24, seed=4), batch_size=3),
            CalibrationOracle(model, IDS, batch_size=2),
            CalibrationOracle(tiny_model("llama", seed=1), IDS, batch_size=3),
        ):
            assert other.caches is not base.caches
            assert other.cost([1]) != base.cost([1]) or other.batch_size != base.batch_size
    after = CalibrationOracle(model, IDS, batch_size=3)
    assert after.caches is not base.caches  # leaving the block forgets the shared states


def test_sleb_one_shot_after_sleb_measures_nothing_new(monkeypatch):
    """SLEB one-shot's scores are SLEB's first step: with shared oracles, no new forward."""
    model = tiny_model("llama")
    alone, _ = plan_pruning(model, None, budget=2, protocol="sleb-oneshot", calibration=_cal())
    with shared_oracles():
        sleb, _ = plan_pruning(model, None, budget=2, protocol="sleb", calibration=_cal())
        seen = counting(monkeypatch)
        one, _ = plan_pruning(model, None, budget=2, protocol="sleb-oneshot", calibration=_cal())
    assert seen == []
    # the same selection and recorded calls; only the work differs: none was left to do
    work_alone = alone.scores.pop("oracle_compute")
    work_one = one.scores.pop("oracle_compute")
    assert alone.records.compute.oracle.to_dict() == work_alone
    assert one.records.compute.oracle.to_dict() == work_one
    alone.records.compute = one.records.compute = None
    assert one.to_dict() == alone.to_dict()
    assert work_one == {"block_evals": 0, "block_tokens": 0} and work_alone["block_evals"] > 0
    assert one.scores["oracle_calls"] == 6


@pytest.mark.slow  # minutes on a shared 2-core machine; CI runs it in the slow step
def test_compare_selections_are_unchanged_by_sharing(tmp_path, monkeypatch):
    """compare with SLEB, SLEB one-shot and auto: the same plans as with sharing off."""
    from swapprune.config import (
        CalibrationConfig,
        CompareConfig,
        EvalConfig,
        ModelConfig,
        RunConfig,
        ScoreConfig,
    )
    from swapprune.studies.compare import CompareJob, run_compare

    model_dir = str(save_tiny("llama", tmp_path / "m"))

    def run(out, share):
        if not share:
            # every oracle its own windows key: counted as usual, nothing shared
            monkeypatch.setattr(oracle_mod, "_windows_key", lambda *a: object())
        seen = counting(monkeypatch)
        job = CompareJob(
            run=RunConfig(
                model=ModelConfig(model_dir),
                calibration=CalibrationConfig(prompts=4, tokens=32),
                eval=EvalConfig(words=150, max_length=64),
                score=ScoreConfig(),
            ),
            compare=CompareConfig(
                output=str(tmp_path / out),
                budgets=[1, 2],
                criteria=["sleb", "sleb-oneshot", "auto"],
                random_seeds=[],
            ),
        )
        res = run_compare(job, progress=False)
        monkeypatch.undo()
        return res, len(seen)

    shared, n_shared = run("a", True)
    alone, n_alone = run("b", False)
    for a, b in zip(shared["budgets"], alone["budgets"]):
        for m in ("sleb", "sleb-oneshot", "auto"):
            assert a["methods"][m]["removed"] == b["methods"][m]["removed"]

    def plans(d):
        out = {}
        for p in (tmp_path / d / "cache").glob("plan-*"):
            plan = json.loads(p.read_text())
            for key in ("compute", "oracle_compute"):  # the work done: less when shared
                plan["scores"].pop(key, None)
            if "certificate" in plan["scores"]:
                plan["scores"]["certificate"].pop("compute")
                plan["scores"]["certificate"].pop("reference_compute")  # work done, too
                plan["scores"]["certificate"].pop("summary")
            out[p.name] = plan
        return out

    assert len(plans("a")) == 6 and plans("a") == plans("b")  # recorded call counts too
    assert n_shared < n_alone
    t_shared, t_alone = shared["timing"], alone["timing"]
    assert t_shared["oracle_queries"] == t_alone["oracle_queries"] > 0
    assert t_shared["oracle_computed"] < t_alone["oracle_computed"] <= t_alone["oracle_queries"]
    # the one-shot's 6 single-block queries per budget are all SLEB's first step
    assert t_alone["oracle_computed"] - t_shared["oracle_computed"] >= 12


def test_counts_survive_the_block_and_the_states_do_not():
    model = tiny_model("llama")
    with shared_oracles() as counts:
        a = CalibrationOracle(model, IDS, batch_size=3)
        a.cost([1])
        a.cost([1])
        CalibrationOracle(model, IDS, batch_size=3).window_costs([2])
    assert (counts.asked, counts.computed) == (3, 2)
    shared = a._shared
    assert shared.answers == {} and shared.caches == []


def _cal():
    from swapprune.calibration.windows import Calibration

    return Calibration(input_ids=IDS, source="test", seed=0)


@pytest.mark.parametrize("family", ["llama", "gemma3_text", "gpt2"])
def test_sets_walked_together_equal_each_set_alone_bitwise_with_fewer_blocks(family):
    """window_costs_many walks the sets as one trie: the same numbers as one call per set,
    bitwise, for both metrics, and fewer decoder-block calls when the sets share a prefix."""
    model = tiny_model(family)
    sets = [(1, 3), (1, 4), (1, 3, 5), (2,), (), (1, 4)]  # shared prefixes, a repeat, the base
    alone = CalibrationOracle(model, IDS, batch_size=4)
    together = CalibrationOracle(model, IDS, batch_size=4)
    for metric in ("ppl", "kl"):
        want = [alone.window_costs(s, metric) for s in sets]
        got = together.window_costs_many(sets, metric)
        assert all(np.array_equal(w, g) for w, g in zip(want, got)), metric
    assert together.calls == alone.calls == 2 * len(sets)
    assert together.computed == alone.computed == 2 * 5  # the repeat is answered from memory
    assert together.compute()["block_evals"] < alone.compute()["block_evals"]
    # answered sets cost nothing again, and a mix of old and new computes only the new
    before = together.compute()["block_evals"]
    assert np.array_equal(
        together.window_costs_many([(1, 3)])[0], want_ppl := alone.window_costs((1, 3))
    )
    assert together.compute()["block_evals"] == before and want_ppl.shape == (IDS.shape[0],)
