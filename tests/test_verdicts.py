"""Four-outcome verdicts: TOST equivalence, inconclusive with its MDD, Holm over distinct pairs."""

import warnings

import numpy as np
import pytest

from swapprune.stats.comparison import compare_cuts
from swapprune.stats.multiplicity import holm_distinct, primary_contrasts
from swapprune.stats.verdicts import Margin, cut_key, verdict_from_replicates

TOKENS = 256


def _windows(n: int, seed: int = 0):
    """Per-window ``(nll, tokens)`` of a base model and of one cut measured twice.

    ``a`` and ``b`` are the same cut by construction (cost +30% on every
    window's perplexity); each carries its own small measurement noise.
    """
    rng = np.random.default_rng(seed)
    log_ppl = rng.normal(3.0, 0.3, n)  # windows differ a lot from each other
    cut = log_ppl + np.log(1.3)
    base = np.column_stack([log_ppl * TOKENS, np.full(n, TOKENS)])
    a = np.column_stack([(cut + rng.normal(0, 0.05, n)) * TOKENS, np.full(n, TOKENS)])
    b = np.column_stack([(cut + rng.normal(0, 0.05, n)) * TOKENS, np.full(n, TOKENS)])
    return base, a, b


def _compare(ua, ub, u0, **kw):
    kw.setdefault("a_key", "kept:0,1,2")
    kw.setdefault("b_key", "kept:0,1,3")
    return compare_cuts(ua, ub, "ppl", base_units=u0, higher_is_better=False, **kw)


def test_tost_calls_two_copies_of_one_cut_equivalent():
    base, a, b = _windows(200)
    v = _compare(a, b, base)
    assert v.outcome == "equivalent" and v.label == "tie (equivalent within +-2 pts)"
    assert v.p_value >= 0.05 and v.p_tost < 0.05
    # The TOST decision and the 90% CI inside (-m, m) agree.
    assert -2 < v.ci_tost[0] < v.ci_tost[1] < 2
    assert v.equivalence_bound < 2
    # The same data with a margin below their resolution are not a tie.
    tight = _compare(a, b, base, margin=Margin(0.1))
    assert tight.outcome == "inconclusive"


def test_too_few_windows_are_inconclusive_never_a_tie():
    base, a, b = _windows(200)
    v = _compare(a[:6], b[:6], base[:6])  # the same cuts and margin, 6 windows
    assert v.outcome == "inconclusive"
    assert v.label.startswith("inconclusive (MDD ") and "tie" not in v.label
    assert v.mdd == pytest.approx(2.80 * v.se, rel=0.01) and v.mdd > 2
    assert v.p_tost >= 0.05


def test_a_real_difference_names_the_better_cut():
    base, a, _ = _windows(100)
    worse = a.copy()
    worse[:, 0] += np.log(1.1) * TOKENS  # B costs 10% more perplexity on every window
    v = _compare(a, worse, base, a="interchange", b="replacement")
    assert v.outcome == "a_better" and v.label == "interchange better"
    assert v.estimate == pytest.approx(13.0, abs=0.5)  # 1.3 * 10% = 13 dPPL points
    assert v.ci[0] > 0 and not v.within_margin
    # The paper's overlap test misses what the paired test finds: windows vary more than cuts.
    assert v.overlap and v.overlap_label == "CIs overlap (paper's test: tie)"
    # Metric units: the same verdict on the perplexity difference itself.
    m = _compare(a, worse, None, margin=Margin(0.5, "metric"))
    assert m.outcome == "a_better" and m.estimate == pytest.approx(m.b_value - m.a_value)


def test_identical_sets_are_not_tested():
    base, a, b = _windows(50)
    v = _compare(a, b, base, a_key="kept:0,2", b_key="kept:0,2")
    assert v.outcome == "identical" and v.label == "identical"
    assert np.isnan(v.p_value) and v.to_dict()["p_value"] is None
    assert cut_key([0, 2]) == cut_key((0, 2)) != cut_key([0, 2], {0: [0, 1]})


def test_points_need_a_base():
    _, a, b = _windows(20)
    with pytest.raises(ValueError, match="base_units"):
        compare_cuts(a, b, "ppl", a_key="x", b_key="y", higher_is_better=False)
    with pytest.raises(ValueError, match="> 0"):
        Margin(0.0)


def _row(a_key, b_key, center, a="A", b="B", seed=0, flip=False):
    reps = np.random.default_rng(seed).normal(center, 1.0, 1000)
    if flip:  # the same comparison written the other way round: d -> -d
        center, reps = -center, -reps
    return verdict_from_replicates(
        center, reps, a=a, b=b, a_key=a_key, b_key=b_key, higher_is_better=False
    )


def test_holm_counts_each_distinct_pair_once():
    xy = _row("x", "y", 2.5)  # p about 0.01
    xz = _row("x", "z", 0.3, seed=1)
    rows = [
        xy,
        _row("x", "y", 2.5, a="seed1 A", b="seed1 B"),  # the same test on another seed
        _row("y", "x", 2.5, flip=True),  # the same pair, the other way round
        xz,
        _row("x", "x", 0.0),  # identical sets
    ]
    assert rows[2].p_value == xy.p_value
    out = holm_distinct(rows)
    assert {r.family_size for r in out} == {2}
    smaller = min(xy.p_value, xz.p_value)
    assert out[0].p_holm == pytest.approx(min(1.0, 2 * smaller))  # 2 tests, not 4
    assert out[0].p_holm == out[1].p_holm == out[2].p_holm
    assert out[0].outcome_holm == "a_better" and out[2].outcome_holm == "b_better"
    assert out[0].label_holm == "A better" and out[3].label_holm.startswith("inconclusive (MDD ")
    assert out[4].outcome == "identical" and out[4].p_holm is None
    assert out[0].mdd_holm > out[0].mdd
    # Rows that claim one pair but carry different tests are a caller's bug.
    with pytest.raises(ValueError, match="same pair of models"):
        holm_distinct([xy, _row("x", "y", 0.5)])


def test_primary_contrasts():
    costs = {"interchange": 30.0, "replacement": 41.0, "auto": 29.0, "bi": 33.0, "sleb": 31.0}
    costs["random:3"] = 10.0  # random is a control, never "the best baseline"
    assert primary_contrasts(costs) == [("interchange", "replacement"), ("auto", "sleb")]
    assert primary_contrasts({"auto": 1.0, "bi": None}) == []
    # a strategy-matched baseline is a baseline; a merge or a patched cell is another operation
    cells = {"auto": 30.0, "sleb": 31.0, "bi@greedy": 29.5, "bi@merge:laco": 1.0, "bi+linear": 2.0}
    assert primary_contrasts(cells) == [("auto", "bi@greedy")]


def test_baseline_labels_name_their_criterion():
    # a spec after ":" or "@" still names the criterion; a patched or merged cell does not
    costs = {"auto": 30.0, "bi:3:4": 29.0, "sleb@a@b": 28.0, "bi@greedy+linear": 1.0}
    assert primary_contrasts(costs) == [("auto", "sleb@a@b")]
    assert primary_contrasts({"auto": 30.0, "bi:3": 29.0}) == [("auto", "bi:3")]


def test_cut_keys_name_kept_blocks_and_merges():
    assert cut_key([0, 2, 5]) == "kept:0,2,5"
    assert cut_key([0, 2], {3: [4, 3], 1: [1, 2]}) == "kept:0,2|merged:1=1,2;3=4,3"
    assert cut_key([0, 2], {}) == "kept:0,2"


def test_verdict_record_is_json_and_carries_every_label():
    import json

    base, a, b = _windows(60)
    rows = holm_distinct([_compare(a, b, base, a="A", b="B"), _row("x", "z", 0.3, seed=1)])
    d = rows[0].to_dict()
    assert json.loads(json.dumps(d)) == d  # lists, not tuples; no NaN
    assert d["margin"] == {"value": 2.0, "unit": "points"}
    assert d["label"] == rows[0].label and d["label_holm"] == rows[0].label_holm is not None
    assert d["overlap_label"] == rows[0].overlap_label
    assert d["ci"] == list(rows[0].ci) and d["ci_tost"] == list(rows[0].ci_tost)


def test_the_papers_overlap_label_names_the_winner_by_direction():
    from swapprune.stats.bootstrap import Interval
    from swapprune.stats.verdicts import paper_overlap, paper_overlap_label

    assert paper_overlap_label(True, "a", "b", True, False) == "CIs overlap (paper's test: tie)"
    assert paper_overlap_label(False, "a", "b", True, False) == "a better (paper's test: CIs apart)"
    assert paper_overlap_label(False, "a", "b", True, True) == "b better (paper's test: CIs apart)"
    assert paper_overlap_label(False, "a", "b", False, False).startswith("b better")
    assert paper_overlap(Interval(1.0, 0.5, 1.5), Interval(2.0, 1.5, 2.5))
    assert not paper_overlap(Interval(1.0, 0.5, 1.5), Interval(2.0, 1.6, 2.5))


def test_the_interchange_replacement_contrast_needs_both():
    assert primary_contrasts({"interchange": 30.0, "auto": 29.0, "bi": 33.0}) == [("auto", "bi")]
    assert primary_contrasts({"replacement": 30.0}) == []


def test_a_better_cut_inside_the_margin_says_so():
    base, a, _ = _windows(400)
    b = a.copy()
    b[:, 0] += np.log(1.005) * TOKENS  # 0.5% more perplexity on every window: real but small
    v = _compare(a, b, base, a="A", b="B")
    assert v.outcome == "a_better" and v.within_margin
    assert v.label == "A better (within +-2 pts)"


# -- the primitives, at their edges --------------------------------------------------------


def test_tost_p_values_count_the_margin_itself():
    from swapprune.stats.verdicts import tost_p_values

    reps = np.array([-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, np.inf])  # the inf is dropped
    assert tost_p_values(reps, 2.0) == (3 / 8, 3 / 8)
    assert tost_p_values(np.array([5.0, 6.0]), 2.0) == (1 / 3, 1.0)
    assert all(np.isnan(tost_p_values(np.array([np.nan]), 2.0)))


def test_outcomes_at_exactly_alpha_are_not_claims():
    from swapprune.stats.verdicts import outcome_of

    assert outcome_of(0.05, 0.5, True, False, 0.05) == "inconclusive"
    assert outcome_of(0.5, 0.05, True, False, 0.05) == "inconclusive"
    assert outcome_of(0.049, 0.5, True, False, 0.05) == "a_better"
    assert outcome_of(0.049, 0.5, True, True, 0.05) == "b_better"
    assert outcome_of(0.5, 0.049, True, True, 0.05) == "equivalent"


def test_verdict_from_replicates_records_what_it_was_given():
    from swapprune.stats.bootstrap import bootstrap_p_value, minimum_detectable_difference
    from swapprune.stats.clustered import percentile_interval
    from swapprune.stats.verdicts import tost_p_values

    reps = np.random.default_rng(3).normal(0.5, 0.1, 400)  # B a little worse, clearly
    v = verdict_from_replicates(0.5, reps, a="A", b="B", a_key="k1", b_key="k2",
                                higher_is_better=False, scope="ppl/x")  # fmt: skip
    assert v.outcome == "a_better" and v.scope == "ppl/x"
    assert (v.resampled, v.n_units, v.n_clusters, v.alpha) == ("windows", 0, None, 0.05)
    ci, ci_tost = percentile_interval(0.5, reps, 0.95), percentile_interval(0.5, reps, 0.9)
    assert v.ci == (ci.low, ci.high) and v.ci_tost == (ci_tost.low, ci_tost.high)
    assert v.p_value == bootstrap_p_value(reps) and v.p_tost == max(tost_p_values(reps, 2.0))
    assert v.within_margin is True and v.equivalence_bound == max(abs(ci_tost.low), ci_tost.high)
    assert v.se == pytest.approx(float(np.std(reps, ddof=1)))
    assert v.mdd == pytest.approx(minimum_detectable_difference(v.se, 0.95, 0.8))
    wide = verdict_from_replicates(0.5, reps * 40, a="A", b="B", a_key="k1", b_key="k2",
                                   higher_is_better=False)  # fmt: skip
    assert wide.within_margin is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one = verdict_from_replicates(0.5, reps[:1], a="A", b="B", a_key="k1", b_key="k2",
                                      higher_is_better=False)  # fmt: skip
    assert np.isnan(one.se)
    two = verdict_from_replicates(0.5, reps[:2], a="A", b="B", a_key="k1", b_key="k2",
                                  higher_is_better=False)  # fmt: skip
    assert np.isfinite(two.se)


def test_holm_rows_carry_family_level_and_orientation():
    from dataclasses import replace

    from swapprune.stats.bootstrap import minimum_detectable_difference

    xy = _row("x", "y", 0.5)  # half a standard error: p about 0.6
    strong = _row("x", "z", 3.5, seed=2)
    same = _row("x", "x", 0.0)
    out = holm_distinct([xy, strong, same])
    assert [r.family for r in out] == ["all distinct pairs"] * 3
    assert out[1].p_tost_holm is not None and out[1].outcome_holm == "a_better"
    assert out[1].mdd_holm == pytest.approx(
        minimum_detectable_difference(out[1].se, 1 - 0.05 / 2, 0.8)
    )
    strict = holm_distinct([xy, strong], family="mine", alpha=1e-9)
    assert strict[1].outcome_holm == "inconclusive" and strict[1].family == "mine"
    # p-values that differ by less than the absolute tolerance are the same test
    zero = replace(strong, p_value=0.0)
    holm_distinct([zero, replace(zero, a="other A", p_value=5e-13)])
    for changed in (dict(p_value=strong.p_value * 3), dict(p_tost=0.5 * strong.p_tost)):
        with pytest.raises(ValueError, match="same pair of models"):
            holm_distinct([strong, replace(strong, **changed)])


def test_primary_contrasts_pick_the_best_baseline_by_direction():
    costs = {"auto": 0.6, "bi": 0.5, "sleb": 0.7}
    assert primary_contrasts(costs, higher_is_better=True) == [("auto", "sleb")]
    assert primary_contrasts(costs) == [("auto", "bi")]


def test_margin_refuses_an_unknown_unit():
    with pytest.raises(ValueError, match=r"margin unit must be one of .*, got 'furlongs'"):
        Margin(1.0, "furlongs")
