"""Selection strategies on hand-written importance tables (pure logic, no torch)."""

import numpy as np
import pytest

from swapprune.errors import SwappruneError
from swapprune.select.constraints import Constraints, max_spaced
from swapprune.select.strategies import (
    INPUTS,
    STRATEGIES,
    Choice,
    Ranked,
    SelectionInputs,
    describe,
    get_strategy,
)

IMP = np.array([0.9, 0.1, 0.2, 0.15, 0.8, 0.05, 0.3, 0.7])


def pick(spec, imp, budget, **cons):
    return get_strategy(spec).select(imp, budget, Constraints(len(imp), **cons))


def test_greedy_takes_most_removable_never_adjacent():
    # order: 5 (0.05), 1 (0.1), 3 (0.15), 2 (0.2), 6 (0.3) ...
    assert pick("greedy", IMP, 1) == [5]
    assert pick("greedy", IMP, 2) == [1, 5]
    assert pick("greedy", IMP, 3) == [1, 3, 5]  # 2 skipped: adjacent to 1 and 3
    chosen = pick("greedy", IMP, 4)
    assert all(b - a >= 2 for a, b in zip(chosen, chosen[1:]))


def test_ties_broken_by_lower_index():
    assert pick("greedy", np.zeros(6), 2) == [0, 2]
    assert pick("greedy", np.ones(6), 3) == [0, 2, 4]


def test_protected_blocks_are_never_chosen():
    imp = np.array([0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    assert pick("greedy", imp, 1, protect_first=2, protect_last=1) == [2]


def test_budget_edges():
    cons = Constraints(8)
    g = get_strategy("greedy")
    with pytest.raises(SwappruneError, match=">= 1"):
        g.check(0, cons)
    with pytest.raises(SwappruneError, match="blocks that can be removed from a"):
        g.check(8, cons)
    g.check(4, cons)  # 0,2,4,6
    with pytest.raises(SwappruneError, match="adjacent"):
        g.check(5, cons)
    with pytest.raises(SwappruneError, match="protected"):
        g.check(3, Constraints(8, protect_first=3, protect_last=3))
    assert max_spaced(Constraints(8), 3) == 3


def test_spaced_and_contiguous():
    assert pick("spaced:1", IMP, 3) == [1, 3, 5]
    assert pick("spaced:1", IMP, 4) == [1, 2, 3, 5]
    assert pick("spaced:3", IMP, 2) == [1, 5]
    with pytest.raises(SwappruneError, match="impossible"):
        get_strategy("spaced:4").check(3, Constraints(8))
    assert pick("contiguous", IMP, 3) == [1, 2, 3]  # 0.45 beats every other run
    spans = np.array([5.0, 4.0, 0.5, 3.0, 2.0, 1.0])
    got = get_strategy("contiguous").select(IMP, 3, Constraints(8), span_scores=lambda n: spans)
    assert got == [2, 3, 4]


def test_iterative_rescoring():
    calls = []

    def rescore(removed):
        calls.append(list(removed))
        imp = np.arange(6, dtype=float)[::-1].copy()  # after the first cut, prefer the end
        imp[removed] = np.inf
        return imp

    got = get_strategy("iterative").select(
        np.arange(6, dtype=float), 3, Constraints(6), rescore=rescore
    )
    assert got == [0, 4, 5] and calls == [[0], [0, 5]]


def test_beam_uses_oracle_and_caps_calls():
    cost = {(1, 3): 1.0, (1, 5): 0.2, (3, 5): 2.0}

    def oracle(removed):
        return cost.get(tuple(removed), 10.0 - len(removed))

    beam = get_strategy("beam:2")
    assert beam.select(IMP, 2, Constraints(8), oracle=oracle) == [1, 5]
    assert beam.calls <= beam.max_calls
    with pytest.raises(
        SwappruneError,
        match=r"^beam search needs the model \(an oracle\); it cannot run from scores alone$",
    ):
        beam.select(IMP, 2, Constraints(8))


def test_beam_seeds_then_expands_over_all_layers():
    calls = []

    def oracle(removed):
        calls.append(tuple(removed))
        # block 0 is the worst seed-ranked block, but the best partner of any set
        return sum(1.0 for b in removed if b != 0) + (0.0 if 0 in removed else 0.5)

    beam = get_strategy("beam:2")
    beam.seeds = 3
    sel = beam.choose(SelectionInputs(IMP, 2, Constraints(8), oracle=oracle))
    seeds = [5, 1, 3]  # the three most removable by IMP
    assert calls[:3] == [(5,), (1,), (3,)] and all((s,) in calls for s in seeds)
    assert 0 in sel.removed  # reachable only because expansion covers every layer
    # 3 seeds + 2 beams x 7 other blocks - 1 set reached from both beams
    assert sel.oracle_calls == len(set(calls)) == 3 + 2 * 7 - 1
    assert sel.notes["capped"] is False


def test_beam_cap_completes_by_criterion_and_says_so():
    beam = get_strategy("beam:3")
    beam.max_calls = 13  # 12 seeds + 1
    sel = beam.choose(SelectionInputs(IMP, 3, Constraints(8), oracle=lambda r: float(sum(r))))
    # 8 seeds (only 8 blocks), then 5 expansions of {0}: {0,1} is the cheapest pair
    assert sel.oracle_calls == 13 and sel.notes["capped"] is True
    # the third block comes from the criterion's order (5 is the most removable left)
    assert sel.removed == [0, 1, 5] and sel.notes["completed_by_criterion"] == [5]


def test_ranked_is_n_lowest_without_constraint():
    assert pick("ranked", IMP, 4) == [1, 2, 3, 5]
    assert pick("ranked", IMP, 2, protect_first=2) == [3, 5]


def test_tiebreak_orders_equal_importance():
    imp = np.array([0.5, 0.1, 0.1, 0.9])
    assert pick("ranked", imp, 1) == [1]  # index
    got = get_strategy("ranked").select(imp, 1, Constraints(4), tiebreak=np.array([0, 2.0, 1.0, 0]))
    assert got == [2]  # the weaker contributor
    assert get_strategy("greedy").select(
        imp, 2, Constraints(4), tiebreak=np.array([0, 2.0, 1.0, 0])
    ) == [0, 2]


# The paper's Llama-3.1-8B logic: adjacent pairs ranked by distance, lower index of each,
# no adjacency constraint, first and last blocks skipped -> a contiguous run.
LLAMA_LIKE = {
    (0, 1): 0.0001,
    (24, 25): 0.0016,
    (25, 26): 0.0014,
    (26, 27): 0.0018,
    (22, 23): 0.0019,
    (23, 24): 0.0021,
    (30, 31): 0.0392,
    (10, 11): 0.0025,
    (29, 30): 0.0034,
}


def test_ranked_pairs_on_a_llama_like_table():
    imp = np.ones(32)
    rp = get_strategy("ranked-pairs:skip-ends")
    # (0,1) is skipped (block 0 is protected), then 25, 24, 26
    assert rp.select(imp, 3, Constraints(32), pair_table=LLAMA_LIKE) == [24, 25, 26]
    assert rp.last.order == [25, 24, 26]
    assert rp.select(imp, 5, Constraints(32), pair_table=LLAMA_LIKE) == [22, 23, 24, 25, 26]
    plain = get_strategy("ranked-pairs")
    assert plain.select(imp, 3, Constraints(32), pair_table=LLAMA_LIKE) == [0, 24, 25]
    # every scored pair counts, adjacent or not: a gap-2 pair contributes its lower block
    assert plain.select(imp, 1, Constraints(32), pair_table={(3, 5): 0.1, (4, 5): 0.2}) == [3]
    with pytest.raises(
        SwappruneError,
        match=r"^ranked-pairs needs pair scores \(criterion interchange or replacement\)$",
    ):
        plain.select(imp, 1, Constraints(32))
    with pytest.raises(SwappruneError, match="budget 9"):
        rp.select(imp, 9, Constraints(32), pair_table=LLAMA_LIKE)
    with pytest.raises(SwappruneError, match="skip-ends"):
        get_strategy("ranked-pairs:x")


def test_clustered_region_and_threshold():
    # region 2..4 by range: the three most removable inside it, adjacency allowed
    assert pick("clustered:2-4", IMP, 2) == [2, 3]
    with pytest.raises(SwappruneError, match="exceeds"):
        get_strategy("clustered:2-4").check(4, Constraints(8))
    imp = np.array([0.5, 0.08, 0.3, 0.05, 0.07, 0.09, 0.02, 0.6])
    # longest run <= 0.10 is 3..6 (four blocks); block 1 is alone
    sel = get_strategy("clustered:0.10").choose(SelectionInputs(imp, 3, Constraints(8)))
    assert sel.removed == [3, 4, 6] and sel.notes["region"] == [3, 6]
    # a block exactly at the threshold belongs to the region; the earlier run wins a tie
    at = np.array([0.5, 0.1, 0.1, 0.6, 0.05, 0.1, 0.7, 0.8])
    assert get_strategy("clustered:0.10").region(SelectionInputs(at, 1, Constraints(8))) == [1, 2]
    at[2] = 0.11
    assert get_strategy("clustered:0.10").region(SelectionInputs(at, 1, Constraints(8))) == [4, 5]
    with pytest.raises(SwappruneError, match="holds"):
        get_strategy("clustered:0.01").choose(SelectionInputs(imp, 1, Constraints(8)))
    for bad in ("", "a-b", "5-2"):
        with pytest.raises(SwappruneError):
            get_strategy("clustered:" + bad if bad else "clustered")


def test_distributed_is_a_minimum_gap():
    assert pick("distributed:3", IMP, 2) == pick("spaced:3", IMP, 2) == [1, 5]
    assert pick("distributed", IMP, 3) == pick("greedy", IMP, 3)
    with pytest.raises(SwappruneError, match="impossible"):
        get_strategy("distributed:4").check(3, Constraints(8))


def test_every_strategy_declares_known_inputs_and_a_line():
    for name in STRATEGIES.names():
        cls = STRATEGIES.get(name)
        assert set(cls.needs) | set(cls.wants) <= set(INPUTS), name
    assert get_strategy("beam").needs == {"oracle"} and get_strategy("iterative").needs == {
        "rescore"
    }
    assert get_strategy("ranked-pairs").needs == {"pair_table"}
    assert get_strategy("beam").queries_model and not get_strategy("ranked-pairs").queries_model
    lines = dict(describe())
    assert "clustered:REGION" in lines and "beam:W" in lines and all(lines.values())


def test_unknown_strategy_did_you_mean():
    with pytest.raises(SwappruneError, match="did you mean 'greedy'"):
        get_strategy("gready")
    with pytest.raises(SwappruneError):
        get_strategy("spaced:x")


def test_budget_limits_are_inclusive():
    ranked = get_strategy("ranked")
    ranked.check(1, Constraints(8))
    ranked.check(7, Constraints(8))
    with pytest.raises(SwappruneError, match="budget must be >= 1, got -1"):
        ranked.check(-1, Constraints(8))
    with pytest.raises(
        SwappruneError,
        match="budget 9 is more than the 7 blocks that can be removed from an 8-block",
    ):
        ranked.check(9, Constraints(8))
    tight = Constraints(8, protect_first=3, protect_last=3)
    ranked.check(2, tight)
    with pytest.raises(
        SwappruneError,
        match=r"budget 3 exceeds the 2 removable blocks \(8 blocks, first 3 and last 3 protected\)",
    ):
        ranked.check(3, tight)
    assert tight.candidates() == [3, 4]
    assert Constraints(5).candidates() == [0, 1, 2, 3, 4]


def test_max_spaced_counts():
    assert max_spaced(Constraints(8), 1) == 8
    assert max_spaced(Constraints(8), 2) == 4
    assert max_spaced(Constraints(7), 2) == 4
    assert max_spaced(Constraints(7), 3) == 3
    assert max_spaced(Constraints(9), 4) == 3
    assert max_spaced(Constraints(1), 2) == 1
    assert max_spaced(Constraints(4, protect_first=2, protect_last=2), 2) == 0


def test_greedy_and_spaced_checks_are_inclusive():
    get_strategy("greedy").check(4, Constraints(7))
    with pytest.raises(SwappruneError, match=r"adjacent blocks \(at most 3 here\)"):
        get_strategy("greedy").check(4, Constraints(6))
    get_strategy("spaced:3").check(3, Constraints(7))
    with pytest.raises(SwappruneError, match=r"removals 3 apart \(at most 2 here\)"):
        get_strategy("spaced:3").check(3, Constraints(6))
    with pytest.raises(SwappruneError, match="exceeds"):
        get_strategy("spaced:1").check(3, Constraints(4, protect_first=2))


def test_spaced_without_check_says_what_is_impossible():
    inputs = SelectionInputs(IMP, 5, Constraints(8, protect_first=1, protect_last=2))
    with pytest.raises(
        SwappruneError,
        match="budget 5 is impossible with removals at least 2 blocks apart among blocks 1..5",
    ):
        get_strategy("greedy").choose(inputs)
    # exactly enough room: 1, 3, 5
    assert get_strategy("greedy").choose(SelectionInputs(np.zeros(8), 3, inputs.constraints)) == (
        Choice([1, 3, 5])
    )


def test_strategy_arguments():
    assert get_strategy("spaced").gap == 2 and get_strategy("distributed").gap == 2
    assert get_strategy("spaced:1").gap == 1
    with pytest.raises(SwappruneError, match="spaced:G needs a value >= 1, got 0"):
        get_strategy("spaced:0")
    with pytest.raises(SwappruneError, match="spaced:G needs an integer, got 'x'"):
        get_strategy("spaced:x")
    with pytest.raises(SwappruneError, match="strategy 'greedy' takes no argument \\(got ':x'\\)"):
        get_strategy("greedy:x")
    beam = get_strategy("beam")
    assert (beam.width, beam.max_calls, beam.seeds) == (3, 400, 12)
    assert get_strategy("beam:1").width == 1
    with pytest.raises(SwappruneError, match="beam:W needs a value >= 1"):
        get_strategy("beam:0")
    assert get_strategy("ranked-pairs").skip_ends is False
    assert get_strategy("ranked-pairs:skip-ends").skip_ends is True
    clustered = get_strategy("clustered:2-2")
    assert (clustered.span, clustered.threshold) == ((2, 2), None)
    assert get_strategy("clustered:0-3").span == (0, 3)
    threshold = get_strategy("clustered:0.25")
    assert (threshold.span, threshold.threshold) == (None, 0.25)
    with pytest.raises(SwappruneError, match="clustered:A-B needs 0 <= A <= B, got '5-2'"):
        get_strategy("clustered:5-2")
    with pytest.raises(SwappruneError, match="clustered:REGION is A-B or a threshold"):
        get_strategy("clustered:a-b")
    with pytest.raises(
        SwappruneError,
        match=r"^clustered needs a region: clustered:A-B or clustered:T \(e\.g\. 0\.10\)$",
    ):
        get_strategy("clustered")
    # a negative start is not a range (the first '-' splits A from B)
    with pytest.raises(SwappruneError, match="clustered:REGION is A-B or a threshold"):
        get_strategy("clustered:-1-3")


def test_ranked_pairs_check_protects_the_ends_with_skip_ends():
    rp, plain = get_strategy("ranked-pairs:skip-ends"), get_strategy("ranked-pairs")
    rp.check(6, Constraints(8))
    plain.check(7, Constraints(8))
    with pytest.raises(SwappruneError, match="first 1 and last 1 protected"):
        rp.check(7, Constraints(8))
    # explicit protection wider than the boundary skip wins
    with pytest.raises(SwappruneError, match="first 2 and last 3 protected"):
        rp.check(4, Constraints(8, protect_first=2, protect_last=3))
    rp.check(3, Constraints(8, protect_first=2, protect_last=3))
    with pytest.raises(SwappruneError, match="blocks that can be removed from a"):
        rp.check(8, Constraints(8))
    # blocks 1 and L-2 stay allowed under skip-ends; pairs are read as given (j < i too)
    table = {(7, 6): 0.1, (1, 0): 0.2, (1, 3): 0.3, (6, 7): 0.4, (2, 4): 0.5}
    sel = rp.choose(SelectionInputs(np.ones(8), 3, Constraints(8), pair_table=table))
    assert sel == Choice([1, 2, 6], order=[6, 1, 2])
    with pytest.raises(SwappruneError, match="found only 3 removable lower blocks"):
        rp.choose(SelectionInputs(np.ones(8), 4, Constraints(8), pair_table=table))


def test_ranked_pairs_equal_distances_go_by_lower_index():
    table = {(5, 6): 0.1, (2, 3): 0.1, (4, 7): 0.1, (2, 6): 0.1, (1, 2): 0.2}
    rp = get_strategy("ranked-pairs")
    sel = rp.choose(SelectionInputs(np.ones(8), 4, Constraints(8), pair_table=table))
    # (2, 3) before (2, 6) by the upper index; 2 is taken once
    assert sel.order == [2, 4, 5, 1] and sel.removed == [1, 2, 4, 5]


def test_beam_check():
    beam = get_strategy("beam")
    beam.check(7, Constraints(8))
    with pytest.raises(SwappruneError, match="blocks that can be removed from a"):
        beam.check(8, Constraints(8))
    beam.max_calls, beam.seeds = 1, 1
    beam.check(2, Constraints(8))
    beam.max_calls = 0
    with pytest.raises(SwappruneError, match="^beam search needs max_calls >= 1 and seeds >= 1$"):
        beam.check(2, Constraints(8))
    beam.max_calls, beam.seeds = 1, 0
    with pytest.raises(SwappruneError, match="beam search needs max_calls >= 1 and seeds >= 1"):
        beam.check(2, Constraints(8))


def test_clustered_threshold_edges():
    # equal to the threshold counts; two runs of equal length: the earlier one
    imp = np.array([0.1, 0.1, 0.5, 0.1, 0.1, 0.5, 0.0, 0.9])
    c = get_strategy("clustered:0.10")
    sel = c.choose(SelectionInputs(imp, 2, Constraints(8)))
    assert sel == Choice([0, 1], notes={"region": [0, 1]})
    # a run starting after a break; the longest wins over an earlier shorter one
    imp = np.array([0.0, 0.5, 0.2, 0.1, 0.05, 0.5, 0.9, 0.9])
    sel = get_strategy("clustered:0.2").choose(SelectionInputs(imp, 2, Constraints(8)))
    assert sel == Choice([3, 4], notes={"region": [2, 4]})
    # protected blocks are outside every region
    sel = get_strategy("clustered:0.2").choose(
        SelectionInputs(imp, 1, Constraints(8, protect_first=3))
    )
    assert sel.notes["region"] == [3, 4] and sel.removed == [4]
    with pytest.raises(SwappruneError, match=r"region \[3, 4\] holds 2 blocks; budget 3 needs"):
        get_strategy("clustered:0.2").choose(
            SelectionInputs(imp, 3, Constraints(8, protect_first=3))
        )
    with pytest.raises(SwappruneError, match=r"region \[2, 4\] holds 3 blocks; budget 4 needs"):
        get_strategy("clustered:0.2").choose(SelectionInputs(imp, 4, Constraints(8)))


def test_clustered_range_respects_protection():
    c = get_strategy("clustered:0-3")
    c.check(3, Constraints(8, protect_first=1))
    with pytest.raises(
        SwappruneError, match="budget 4 exceeds the 3 removable blocks in clustered:0-3"
    ):
        c.check(4, Constraints(8, protect_first=1))
    sel = c.choose(SelectionInputs(np.zeros(8), 3, Constraints(8, protect_first=1)))
    assert sel == Choice([1, 2, 3], notes={"region": [1, 3]})
    c3 = get_strategy("clustered:3-3")
    c3.check(1, Constraints(8))
    assert c3.choose(SelectionInputs(np.zeros(8), 1, Constraints(8))).removed == [3]


def test_contiguous_edges():
    # equal sums: the earlier run
    imp = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 5.0])
    assert pick("contiguous", imp, 2) == [0, 1]
    # the last possible run is reachable, protection moves the window
    imp = np.array([5.0, 5.0, 5.0, 5.0, 0.0, 0.0])
    assert pick("contiguous", imp, 2) == [4, 5]
    assert pick("contiguous", imp, 2, protect_last=1) == [3, 4]
    assert pick("contiguous", np.zeros(6), 2, protect_first=2) == [2, 3]
    assert pick("contiguous", np.array([0.0, 0.0, 9.0, 9.0]), 1, protect_first=2) == [2]
    seen = []

    def spans(n):
        seen.append(n)
        return np.array([3.0, 1.0, 1.0, 2.0, 0.5])

    got = get_strategy("contiguous").select(
        np.zeros(6), 2, Constraints(6, protect_last=1), span_scores=spans
    )
    assert got == [1, 2] and seen == [2]  # start 4 would need block 5; 1 ties 2


def test_beam_keeps_the_cheapest_width_and_counts_calls():
    calls = []

    def oracle(removed):
        calls.append(tuple(removed))
        return float(sum(removed))

    beam = get_strategy("beam:1")
    beam.seeds = 2
    sel = beam.choose(SelectionInputs(IMP, 2, Constraints(8), oracle=oracle))
    # seeds 5 and 1; width 1 keeps {1}; then {1, b} for the 7 other blocks
    assert calls[:2] == [(5,), (1,)] and len(calls) == 2 + 7
    assert sel.removed == [0, 1] and sel.oracle_calls == 9 == beam.calls
    assert sel.notes == {"width": 1, "seeds": 2, "cap": 400, "capped": False}
    assert sel.order is None


def test_beam_respects_protection_and_reuses_cached_sets():
    calls = []

    def oracle(removed):
        calls.append(tuple(removed))
        return float(sum(removed))

    beam = get_strategy("beam:3")
    sel = beam.choose(
        SelectionInputs(
            np.zeros(6), 3, Constraints(6, protect_first=1, protect_last=1), oracle=oracle
        )
    )
    assert sel.removed == [1, 2, 3]
    assert all(0 not in c and 5 not in c for c in calls)
    assert len(calls) == len(set(calls)) == sel.oracle_calls
    # 4 seeds; 6 pairs of 4 blocks; 3 triples extend the beams {1, 2}, {1, 3}, {1, 4}
    assert sel.oracle_calls == 4 + 6 + 3


def test_beam_cap_on_seeds_and_budget_one():
    beam = get_strategy("beam:2")
    beam.max_calls = 2
    sel = beam.choose(SelectionInputs(IMP, 3, Constraints(8), oracle=lambda r: float(sum(r))))
    # only two seeds scored (5 and 1); the cheaper one is completed by the criterion
    assert sel.oracle_calls == 2 and sel.notes["capped"] is True
    assert sel.removed == [1, 3, 5] and sel.notes["completed_by_criterion"] == [5, 3]
    one = get_strategy("beam:2")
    sel = one.choose(SelectionInputs(IMP, 1, Constraints(8), oracle=lambda r: -float(r[0])))
    assert sel.removed == [7] and sel.oracle_calls == 8
    assert "completed_by_criterion" not in sel.notes


def test_iterative_calls_rescore_between_steps_only():
    calls = []

    def rescore(removed):
        calls.append(list(removed))
        return np.zeros(6)

    it = get_strategy("iterative")
    sel = it.choose(
        SelectionInputs(np.array([3.0, 2, 1, 0, 5, 5]), 2, Constraints(6), rescore=rescore)
    )
    assert sel == Choice([0, 3], order=[3, 0]) and it.order == [3, 0] and calls == [[3]]
    one = it.choose(
        SelectionInputs(np.array([3.0, 2, 1, 0, 5, 5]), 1, Constraints(6), rescore=rescore)
    )
    assert one.removed == [3] and calls == [[3]]
    got = it.select(np.zeros(6), 2, Constraints(6, protect_first=4), rescore=rescore)
    assert got == [4, 5]
    with pytest.raises(
        SwappruneError,
        match="^iterative selection needs a criterion that can rescore a pruned model$",
    ):
        it.choose(SelectionInputs(np.zeros(6), 1, Constraints(6)))


def test_order_and_select_record_the_choice():
    inputs = SelectionInputs(np.array([0.2, 0.1, 0.1, 0.0]), 1, Constraints(4))
    assert inputs.order() == [3, 1, 2, 0]
    assert inputs.order([0, 1, 2]) == [1, 2, 0]
    assert inputs.order([0, 3], np.array([0.0, 0, 0, -1])) == [3, 0]
    ranked = get_strategy("ranked")
    assert ranked.select([0.2, 0.1, 0.1, 0.0], 2, Constraints(4)) == [1, 3]
    assert ranked.last == Choice([1, 3])


def test_describe_lists_every_spec_with_its_first_line():
    lines = dict(describe())
    assert sorted(lines) == [
        "beam:W",
        "clustered:REGION",
        "contiguous",
        "distributed:G",
        "exhaustive",
        "greedy",
        "iterative",
        "ranked",
        "ranked-pairs",
        "spaced:G",
    ]
    assert (
        lines["greedy"]
        == "The paper's stated rule: the n most removable blocks, never two adjacent."
    )
    assert lines["spaced:G"].startswith("``spaced:G``: the most removable blocks")


def test_beam_capped_at_the_seeds_or_before_any_call():
    beam = get_strategy("beam:3")
    beam.seeds = beam.max_calls = 2
    sel = beam.choose(SelectionInputs(IMP, 2, Constraints(8), oracle=lambda r: -float(sum(r))))
    # both seeds scored (5 and 1; 5 is costlier), then the cap: filled by the criterion
    assert sel.removed == [1, 5] and sel.oracle_calls == 2 and sel.notes["capped"] is True
    assert sel.notes["completed_by_criterion"] == [1]
    # no call allowed at all (choose without check): the criterion's order alone
    beam.max_calls = 0
    sel = beam.choose(SelectionInputs(IMP, 2, Constraints(8), oracle=lambda r: 0.0))
    assert sel.removed == [1, 5] and sel.oracle_calls == 0
    assert sel.notes["completed_by_criterion"] == [5, 1]


class _Spy(Ranked):
    def choose(self, inputs):
        self.seen = inputs.importance
        return super().choose(inputs)


def test_select_hands_strategies_float_importance():
    spy = _Spy()
    assert spy.select([3, 1, 2], 1, Constraints(3)) == [1]
    assert spy.seen.dtype == np.float64 and spy.seen.tolist() == [3.0, 1.0, 2.0]
