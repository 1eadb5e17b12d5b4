"""Criteria turn hand-written scores into per-layer importance."""

import numpy as np
import pytest

from swapprune.engine.scores import ScoreResult
from swapprune.errors import SwappruneError
from swapprune.select import criteria


def table(repl, inter):
    """A ScoreResult whose adjacent pair (i, i+1) has the given constant distances."""
    res = ScoreResult(meta={"num_layers": len(repl) + 1})
    for i, (r, x) in enumerate(zip(repl, inter)):
        res.pairs[(i, i + 1)] = {
            "repl_ij": np.full(4, r),
            "repl_ji": np.full(4, r / 2),
            "inter": np.full(4, x),
        }
    return res


def test_removability_is_min_over_neighbours():
    s = table([0.5, 0.1, 0.9, 0.3], [0.05, 0.4, 0.02, 0.2])
    ctx = criteria.Context(num_layers=5, scores=s)
    np.testing.assert_allclose(
        criteria.get("replacement").importance(ctx), [0.5, 0.1, 0.1, 0.3, 0.3]
    )
    np.testing.assert_allclose(
        criteria.get("interchange").importance(ctx), [0.05, 0.05, 0.02, 0.02, 0.2]
    )


def test_removability_is_min_over_every_scored_partner():
    s = table([0.5, 0.1, 0.9, 0.3], [0.05, 0.4, 0.02, 0.2])
    adjacent = criteria.get("interchange").importance(criteria.Context(num_layers=5, scores=s))
    s.pairs[(0, 2)] = {
        "repl_ij": np.full(4, 0.01),
        "repl_ji": np.full(4, 0.03),
        "inter": np.full(4, 0.3),
    }
    s.pairs[(1, 4)] = {
        "repl_ij": np.full(4, 2.0),
        "repl_ji": np.full(4, 2.0),
        "inter": np.full(4, 0.01),
    }
    ctx = criteria.Context(num_layers=5, scores=s)
    # gap pairs now count: block 1 and 4 drop to 0.01 (interchange); 0 and 2 to 0.03 (replacement)
    np.testing.assert_allclose(
        criteria.get("interchange").importance(ctx), [0.05, 0.01, 0.02, 0.02, 0.01]
    )
    np.testing.assert_allclose(
        criteria.get("replacement").importance(ctx), [0.03, 0.1, 0.03, 0.3, 0.3]
    )
    assert adjacent.tolist() == [0.05, 0.05, 0.02, 0.02, 0.2]  # adjacent only: as before
    assert criteria.get("interchange").pair_table(ctx)[(1, 4)] == pytest.approx(0.01)


def test_replacement_directed_is_min_over_partners_of_the_direction_that_loses_the_block():
    """D(l <- j): slot l runs block j, so block l's own computation is what is lost."""
    s = ScoreResult(meta={"num_layers": 4})
    # (i, j): D(i <- j) in repl_ij, D(j <- i) in repl_ji (hand-written, no symmetry)
    for (i, j), (d_ij, d_ji) in {
        (0, 1): (0.9, 0.2),
        (1, 2): (0.05, 0.7),
        (2, 3): (0.4, 0.3),
        (0, 2): (0.6, 0.01),
    }.items():
        s.pairs[(i, j)] = {"repl_ij": np.full(4, d_ij), "repl_ji": np.full(4, d_ji)}
    ctx = criteria.Context(num_layers=4, scores=s)
    # block 0: D(0<-1) .9, D(0<-2) .6; block 1: D(1<-0) .2, D(1<-2) .05;
    # block 2: D(2<-1) .7, D(2<-3) .4, D(2<-0) .01; block 3: D(3<-2) .3
    directed = criteria.get("replacement-directed").importance(ctx)
    np.testing.assert_allclose(directed, [0.6, 0.05, 0.01, 0.3])
    # d_repl takes the worse direction of each pair: another ranking of the same table
    np.testing.assert_allclose(criteria.get("replacement").importance(ctx), [0.6, 0.7, 0.4, 0.4])
    crit = criteria.get("replacement-directed")
    assert crit.probes == ("replacement",) and "own" in crit.source
    assert "D(l<-j)" in crit.what and crit.default_strategy == "greedy"
    with pytest.raises(SwappruneError, match="'replacement' scores"):
        crit.importance(criteria.Context(num_layers=4, scores=None))
    del s.pairs[(2, 3)]
    with pytest.raises(SwappruneError, match=r"lack pairs for blocks \[3\]"):
        crit.importance(criteria.Context(num_layers=4, scores=s))


def test_every_criterion_says_its_source_and_what_it_computes():
    rows = criteria.describe()
    assert [r[0] for r in rows] == criteria.names()
    assert all(src and what for _, src, what in rows)
    assert "ShortGPT" in dict((n, s) for n, s, _ in rows)["bi"]
    assert criteria.get("bi").default_strategy == "ranked"
    assert criteria.get("bi-greedy").default_strategy == "greedy"
    assert criteria.get("angular").default_strategy == "contiguous"
    assert (
        criteria.get("angular").positions == "last"
        and criteria.get("angular-tokens").positions == "all"
    )
    assert criteria.get("sleb-oneshot").default_strategy == "ranked"
    assert criteria.get("sleb-kl").default_strategy == "iterative"
    assert criteria.get("interchange").tiebreak == "residual"


def test_merge_partner_is_most_redundant_neighbour():
    s = table([0.5, 0.1, 0.9, 0.3], [0.05, 0.4, 0.02, 0.2])
    ctx = criteria.Context(num_layers=5, scores=s)
    assert criteria.get("interchange").partner(ctx, 2) == 3
    assert criteria.get("interchange").partner(ctx, 1) == 0
    assert criteria.get("interchange").partner(ctx, 0) == 1


def test_simple_baselines_and_registry():
    ctx = criteria.Context(num_layers=6, seed=3)
    r1 = criteria.get("random").importance(ctx)
    assert np.array_equal(r1, criteria.get("random").importance(criteria.Context(6, seed=3)))
    assert not np.array_equal(r1, criteria.get("random").importance(criteria.Context(6, seed=4)))
    assert list(np.argsort(criteria.get("reverse").importance(ctx))) == [5, 4, 3, 2, 1, 0]
    assert {
        "interchange",
        "replacement",
        "deletion",
        "bi",
        "angular",
        "sleb",
        "random",
        "reverse",
        "bi-greedy",
        "angular-tokens",
        "sleb-oneshot",
        "sleb-kl",
        "taylor",
    } <= set(criteria.names())
    with pytest.raises(SwappruneError, match="did you mean 'replacement'"):
        criteria.get("replacment")


def test_missing_scores_is_a_clear_error():
    with pytest.raises(SwappruneError, match="interchange"):
        criteria.get("interchange").importance(criteria.Context(num_layers=4))
