"""``--protocol auto``: each regime leads to its documented action (tiny models)."""

import dataclasses
from itertools import combinations

import numpy as np
import pytest
from tiny_models import tiny_ids, tiny_model, tiny_tokenizer

from swapprune.api import plan_pruning
from swapprune.calibration.windows import Calibration
from swapprune.config import CalibrationConfig, SelectConfig
from swapprune.engine.oracle import CalibrationOracle
from swapprune.engine.scores import ScoreResult
from swapprune.errors import SwappruneError
from swapprune.select import criteria, select
from swapprune.select.auto import shortlist
from swapprune.select.constraints import Constraints
from swapprune.select.reference import Heldout
from swapprune.select.search import beam_over
from swapprune.select.spec import build

L, N = 6, 8


def scores_table(repl: list[float], inter: list[float]) -> ScoreResult:
    """Adjacent pairs with the given distances (window noise +-10%, fixed seed)."""
    rng = np.random.default_rng(0)
    pairs = {}
    for i in range(L - 1):
        w = 1 + 0.1 * rng.uniform(-1, 1, N)
        pairs[(i, i + 1)] = {
            "repl_ij": repl[i] * w,
            "repl_ji": repl[i] * w * 0.8,
            "inter": inter[i] * w,
        }
    return ScoreResult(meta={"num_layers": L, "positions": "all"}, pairs=pairs, n_boot=100)


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def calib():
    return Calibration(tiny_ids(4, 16), "tensor", 0)


def auto_spec(budget=1, **kw):
    spec = build(SelectConfig(budget=budget, protocol="auto", **kw), CalibrationConfig(), L, True)
    return dataclasses.replace(spec, n_boot=200)


def held():
    """Held-out windows, none of them the scoring windows: certify and verify sets."""
    return Heldout(
        certify=Calibration(tiny_ids(6, 16, seed=11), "tensor", 11),
        verify=Calibration(tiny_ids(6, 16, seed=12), "tensor", 12),
    )


def run(model, calib, scores, budget=1, heldout="new", **kw):
    from swapprune.select.auto import select_auto

    heldout = held() if heldout == "new" else heldout
    return select_auto(model, auto_spec(budget), calib, scores, heldout=heldout, **kw)


def test_divergent_acts_interchange_guided(model, calib):
    s = scores_table([0.6, 0.5, 0.7, 0.4, 0.6], [0.09, 0.02, 0.08, 0.06, 0.07])
    plan, _ = run(model, calib, s)
    d = plan.records.auto
    assert d.regime["call"] == "divergent" and d.action.startswith("interchange-guided")
    # interchange's choice is the incumbent; auto may keep any set of the reference that beats it
    cert = plan.records.certificate
    assert cert.chosen == d.selections["interchange"] and cert.chosen[0] in (1, 2)
    assert plan.removed == cert.kept == d.chosen and cert.switch_among == "reference"
    assert d.oracle_calls == 0 and plan.protocol == "auto" and d.search is None
    assert d.stability["interchange"].frequency > 0.5


def test_tie_like_says_the_regime(model, calib):
    s = scores_table([0.03, 0.02, 0.04, 0.035, 0.03], [0.029, 0.019, 0.039, 0.034, 0.031])
    plan, _ = run(model, calib, s)
    d = plan.records.auto
    assert d.regime["call"] == "tie-like" and "tie-like regime" in d.action
    assert plan.records.certificate.chosen == d.selections["interchange"]
    assert plan.removed == plan.records.certificate.kept
    assert d.agree == (d.selections["interchange"] == d.selections["replacement"])
    assert any(line.startswith("tie-like regime: interchange") for line in d.lines())


def test_both_high_verifies_on_held_out_windows(model, calib):
    s = scores_table([0.6, 0.5, 0.7, 0.4, 0.6], [0.3, 0.2, 0.25, 0.15, 0.4])
    h = held()
    plan, _ = run(model, calib, s, budget=2, heldout=h, width=100, max_calls=1000, shortlist_size=3)
    d = plan.records.auto
    assert d.regime["call"] == "both-high" and d.action.startswith("verify")
    found = d.search
    cons = Constraints(L)
    ctx = criteria.Context(L, scores=s)
    imps = [criteria.get(p).importance(ctx) for p in ("interchange", "replacement")]
    assert found.shortlist == shortlist(imps, 2, cons, 3)
    # an unbounded beam over the shortlist is exhaustive: it finds the cheapest pair on the
    # verify windows, never on the scoring windows
    oracle = CalibrationOracle(model, h.verify.input_ids, 8, "ppl")
    costs = {c: oracle.cost(c) for c in combinations(found.shortlist, 2)}
    assert tuple(found.verified) == min(costs, key=costs.get)
    assert found.oracle_windows == list(h.verify.input_ids.shape)
    assert d.oracle_calls == found.beam["calls"] + 1  # + the base model's cost
    # the verified set challenges interchange's choice on the certify windows
    cert = plan.records.measured
    assert cert.chosen == d.selections["interchange"]
    assert found.verified in [row["set"] for row in cert.sets]
    assert plan.removed == cert.kept == d.chosen
    assert cert.switched == (cert.kept != cert.chosen)
    assert plan.strategy.startswith("auto-verify")
    assert any("beam on held-out windows" in line for line in d.lines())


def test_both_high_without_held_out_windows_says_it_did_not_verify(model, calib):
    s = scores_table([0.6, 0.5, 0.7, 0.4, 0.6], [0.3, 0.2, 0.25, 0.15, 0.4])
    plan, _ = run(model, calib, s, budget=2, heldout=None)
    d = plan.records.auto
    assert "not run: no held-out windows" in d.action and d.search is None
    assert "beam" not in d.to_dict() and plan.removed == d.selections["interchange"]


def test_both_high_respects_the_oracle_cap(model, calib):
    s = scores_table([0.6, 0.5, 0.7, 0.4, 0.6], [0.3, 0.2, 0.25, 0.15, 0.4])
    plan, _ = run(model, calib, s, budget=2, max_calls=3)
    beam = plan.records.auto.search.beam
    assert beam["capped"] and beam["calls"] == 3 and len(plan.removed) == 2
    # default cap: half of SLEB-iterative's calls at this budget (2 x 6 - 1 = 11 -> 5)
    plan, _ = run(model, calib, s, budget=2)
    beam = plan.records.auto.search.beam
    assert beam["cap"] == 5 and beam["calls"] <= 5


def test_beam_over_is_exhaustive_when_wide_and_completes_when_capped():
    cost = {(0,): 3.0, (1,): 1.0, (2,): 2.0, (0, 1): 5.0, (0, 2): 0.5, (1, 2): 4.0}
    best, notes = beam_over([1, 2, 0], 2, lambda k: cost[k], width=3, max_calls=100)
    assert best == [0, 2] and notes["calls"] == 6 and not notes["capped"]
    best, notes = beam_over([1, 2, 0], 2, lambda k: cost[k], width=1, max_calls=100)
    assert best == [1, 2]  # greedy from the cheapest single block
    best, notes = beam_over([1, 2, 0], 2, lambda k: cost[k], width=3, max_calls=3)
    assert notes["capped"] and notes["completed_by_order"] == [2] and best == [1, 2]


def test_end_to_end_through_plan_pruning(model):
    plan, scores = plan_pruning(
        model,
        tiny_tokenizer(),
        budget=1,
        protocol="auto",
        adaptive="off",
        calibration=Calibration(tiny_ids(4, 16), "tensor", 0),
        progress=False,
    )
    d = plan.records.auto
    assert set(scores.protocols()) >= {"replacement", "interchange"}
    assert d.regime["call"] in ("divergent", "tie-like", "both-high")
    assert d.regime["confidence"] is not None and len(plan.removed) == 1


def test_bad_input(model, calib):
    only_inter = ScoreResult(
        meta={"num_layers": L}, pairs={(i, i + 1): {"inter": np.ones(N)} for i in range(L - 1)}
    )
    with pytest.raises(SwappruneError, match="replacement and interchange"):
        run(model, calib, only_inter)
    s = scores_table([0.6] * 5, [0.3] * 5)
    with pytest.raises(SwappruneError, match="does not merge"):
        auto_spec(op="merge")
    assert auto_spec().probes == ("interchange", "replacement")
    assert "auto" not in criteria.CRITERIA  # a policy over criteria, not a criterion
    plan, _ = select(model, auto_spec(), calib, s)
    assert plan.protocol == "auto"


@pytest.mark.parametrize("source", ["bi", "random"])
def test_both_high_controls_search_another_shortlist_of_the_same_size(model, calib, source):
    """auto's beam over a BI or a random mid-stack shortlist: same size, cap and windows."""
    from swapprune.select.auto import random_midstack, select_auto

    s = scores_table([0.6, 0.5, 0.7, 0.4, 0.6], [0.3, 0.2, 0.25, 0.15, 0.4])
    swap, _ = run(model, calib, s, budget=2, shortlist_size=2)
    spec = dataclasses.replace(auto_spec(2, auto_shortlist=source))
    plan, _ = select_auto(model, spec, calib, s, heldout=held(), shortlist_size=2)
    d, d_swap = plan.records.auto.search, swap.records.auto.search
    assert d.shortlist_source == source and d_swap.shortlist_source == "swap"
    assert len(d.shortlist) == len(d_swap.shortlist)
    if source == "bi":
        bi = criteria.get("bi").importance(
            criteria.Context(L, oracle=CalibrationOracle(model, calib.input_ids))
        )
        want = sorted(range(L), key=lambda b: (bi[b], b))[: len(d_swap.shortlist)]
    else:
        want = random_midstack(list(range(L)), L, len(d_swap.shortlist), 0)
        assert want == random_midstack(list(range(L)), L, len(want), 0)  # seeded
    assert d.shortlist == sorted(want)
    assert set(d.verified) <= set(d.shortlist)
    lines = plan.records.auto.lines()
    assert any(f"control shortlist ({source})" in line for line in lines)


def test_a_control_shortlist_is_a_setting_of_auto_only():
    with pytest.raises(SwappruneError, match="setting of --protocol auto"):
        SelectConfig(budget=1, protocol="bi", auto_shortlist="random").check()
    with pytest.raises(SwappruneError, match="did you mean 'random'"):
        SelectConfig(budget=1, protocol="auto", auto_shortlist="randm").check()
