"""Selection strategies on hand-written importance tables (pure logic, no torch)."""

import numpy as np
import pytest

from swapprune.errors import SwappruneError
from swapprune.selection import Constraints, get_strategy, max_spaced

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

    got = get_strategy("iterative").select(np.arange(6, dtype=float), 3, Constraints(6), rescore=rescore)
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


def test_unknown_strategy_did_you_mean():
    with pytest.raises(SwappruneError, match="did you mean 'greedy'"):
        get_strategy("gready")
    with pytest.raises(SwappruneError):
        get_strategy("spaced:x")
