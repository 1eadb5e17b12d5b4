"""Selection strategies on hand-written importance tables (pure logic, no torch)."""

import numpy as np
import pytest

from swapprune.errors import SwappruneError
from swapprune.selection import (
    INPUTS,
    STRATEGIES,
    Constraints,
    SelectionInputs,
    describe,
    get_strategy,
    max_spaced,
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
    with pytest.raises(SwappruneError, match="every block"):
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
    with pytest.raises(SwappruneError, match="oracle"):
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
    with pytest.raises(SwappruneError, match="pair"):
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
