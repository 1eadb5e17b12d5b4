"""Which pairs can still change a selection: where adaptive calibration spends its windows.

A pair *can still change the selection* when moving its distance to either end
of its 95% bootstrap CI, all other pairs held at their point values, changes
the selected set. Pure numpy.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from swapprune.select.constraints import Constraints
from swapprune.select.stability import select_on

Pair = tuple[int, int]


def pair_ci(scores, protocol: str, pair: Pair, idx: np.ndarray) -> tuple[float, float]:
    v = scores.pairs[pair]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if protocol == "interchange":
            boot = np.nanmean(v["inter"][idx], -1)
        else:
            boot = np.maximum(np.nanmean(v["repl_ij"][idx], -1), np.nanmean(v["repl_ji"][idx], -1))
    lo, hi = np.nanpercentile(boot, [2.5, 97.5])
    return float(lo), float(hi)


def _with_pair_scaled(scores, pair: Pair, keys: Sequence[str], factor: float):
    from swapprune.engine.scores import ScoreResult

    pairs = dict(scores.pairs)
    pairs[pair] = {k: (x * factor if k in keys else x) for k, x in scores.pairs[pair].items()}
    return ScoreResult(meta=scores.meta, pairs=pairs, deletion=scores.deletion)


def decisive_pairs(
    scores, crits, strat, budget: int, cons: Constraints, idx, tiebreak=None
) -> set[Pair]:
    """Pairs whose distance, moved to either end of its CI, changes some criterion's selection."""
    out: set[Pair] = set()
    for crit in crits:
        chosen = select_on(scores, crit, strat, budget, cons, tiebreak=tiebreak)
        keys = ("inter",) if crit.name == "interchange" else ("repl_ij", "repl_ji")
        for pair in scores.pairs:
            if pair in out:
                continue
            point = scores.distance(crit.name, *pair)
            if not point > 0:
                continue
            for bound in pair_ci(scores, crit.name, pair, idx):
                moved = _with_pair_scaled(scores, pair, keys, bound / point)
                if select_on(moved, crit, strat, budget, cons, tiebreak=tiebreak) != chosen:
                    out.add(pair)
                    break
    return out
