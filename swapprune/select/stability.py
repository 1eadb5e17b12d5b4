"""How often a selection comes out when the calibration windows are resampled.

Pure numpy, no forward passes: the per-window probe values already kept in a
:class:`~swapprune.engine.scores.ScoreResult` are resampled with the shared
bootstrap indices (the same windows for every pair and block, so the
between-window variance that all pairs share stays shared), and the criterion
and the selection strategy are re-run on each resampled score table.

Reported: the chosen set's frequency (the fraction of resamples that select
exactly it), each block's inclusion probability, and the most frequent other
sets (a :class:`~swapprune.records.Stability`). Only selections computed
from scores alone can be resampled this way: criteria measured on the model
(``bi``, ``sleb``, ...) and strategies that query it (``beam``, ``iterative``) are
refused with a message.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from swapprune.errors import SwappruneError
from swapprune.records.policy import THRESHOLD, Stability
from swapprune.select import criteria as criteria_mod
from swapprune.select.constraints import Constraints, enforce
from swapprune.select.strategies import get_strategy
from swapprune.stats import N_BOOT
from swapprune.stats.bootstrap import resample_indices


def bootstrappable(criterion, strategy) -> str | None:
    """Why a selection cannot be resampled from scores, or ``None`` if it can."""
    if criterion.needs_model:
        return f"criterion '{criterion.name}' is measured on the model, not from kept scores"
    if strategy.queries_model:
        return f"strategy '{strategy.name}' queries the model"
    return None


def _rows(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    # A pair probed on fewer windows (adaptive calibration stops probing pairs far from
    # the selection boundary) may get none of them in a resample: it keeps all it has.
    out = x[rows]
    return x if np.isnan(out).all() and not np.isnan(x).all() else out


def resampled(scores, rows: np.ndarray):
    """A copy of ``scores`` whose per-window values are those of windows ``rows``."""
    # engine.scores imports select.regime, and so this package's __init__, which imports this
    from swapprune.engine.scores import ScoreResult

    return ScoreResult(
        meta=scores.meta,
        pairs={k: {key: _rows(x, rows) for key, x in v.items()} for k, v in scores.pairs.items()},
        deletion={k: _rows(x, rows) for k, x in scores.deletion.items()},
        n_boot=scores.n_boot,
        seed=scores.seed,
    )


def resolve(criterion, strategy=None):
    """``(criterion, strategy)`` objects from names or objects (strategy: the criterion's default)."""
    crit = criteria_mod.get(criterion) if isinstance(criterion, str) else criterion
    if strategy is None:
        strategy = crit.default_strategy
    strat = get_strategy(strategy) if isinstance(strategy, str) else strategy
    return crit, strat


def select_on(
    scores, crit, strat, budget: int, cons: Constraints, seed: int = 0, tiebreak=None
) -> list[int]:
    """The selection that ``crit`` and ``strat`` make from ``scores`` alone.

    ``tiebreak`` (``[L]``, e.g. the residual norms the plan used) is held fixed:
    it is measured on the model, not resampled. The in-phase constraint
    (``cons.serve``) applies as in :func:`~swapprune.select.core.select_fixed`.
    """
    ctx = criteria_mod.Context(num_layers=cons.num_layers, scores=scores, seed=seed)
    inputs = {}
    want = getattr(strat, "needs", frozenset()) | getattr(strat, "wants", frozenset())
    if "pair_table" in want and hasattr(crit, "pair_table"):
        inputs["pair_table"] = crit.pair_table(ctx)
    if tiebreak is not None:
        inputs["tiebreak"] = np.asarray(tiebreak, dtype=float)
    importance = crit.importance(ctx)
    chosen = sorted(int(b) for b in strat.select(importance, budget, cons, **inputs))
    if cons.serve is None:
        return chosen

    return enforce(cons, chosen, importance, tiebreak)


def selection_stability(
    scores,
    criterion,
    strategy=None,
    budget: int = 1,
    constraints: Constraints | None = None,
    n_boot: int = N_BOOT,
    seed: int = 0,
    threshold: float = THRESHOLD,
    tiebreak=None,
) -> Stability:
    """Bootstrap the calibration windows and re-run the selection on each resample.

    Args:
        scores: a :class:`~swapprune.engine.scores.ScoreResult` (per-window values).
        criterion: a criterion name or object (``interchange``, ``replacement``,
            ``deletion``: anything computed from scores).
        strategy: a strategy spec or object (default: the criterion's).
        budget: blocks to remove.
        constraints: protected blocks (default: none).
        n_boot: resamples.
        seed: seed of the resampling (:func:`swapprune.stats.bootstrap.resample_indices`).
        threshold: frequency below which :meth:`Stability.warning` fires.
        tiebreak: ``[L]`` secondary key for equal importance, held fixed.

    Returns:
        The :class:`Stability` of the selection made on all windows.

    Raises:
        SwappruneError: for a model-measured criterion or strategy, or no windows.
    """
    if not 0 < threshold <= 1:
        raise SwappruneError(f"stability threshold must be in (0, 1], got {threshold}")
    crit, strat = resolve(criterion, strategy)
    reason = bootstrappable(crit, strat)
    if reason:
        raise SwappruneError(f"cannot bootstrap the selection: {reason}")
    n = scores.num_windows()
    if n == 0:
        raise SwappruneError("cannot bootstrap the selection: the scores hold no per-window values")
    cons = constraints or Constraints(scores.num_layers)
    chosen = select_on(scores, crit, strat, budget, cons, seed, tiebreak)
    counts: Counter[tuple[int, ...]] = Counter()
    for rows in resample_indices(n, n_boot, seed):
        sel = select_on(resampled(scores, rows), crit, strat, budget, cons, seed, tiebreak)
        counts[tuple(sel)] += 1
    inclusion = np.zeros(cons.num_layers)
    for s, c in counts.items():
        inclusion[list(s)] += c
    others = [(s, c) for s, c in counts.most_common() if list(s) != chosen][:3]
    return Stability(
        chosen=chosen,
        frequency=counts[tuple(chosen)] / n_boot,
        inclusion=[float(x) for x in inclusion / n_boot],
        alternatives=[{"set": list(s), "frequency": c / n_boot} for s, c in others],
        windows=n,
        n_boot=n_boot,
        seed=seed,
        criterion=crit.name,
        strategy=getattr(strat, "name", str(strategy)),
        budget=budget,
        threshold=threshold,
        counts=dict(counts),
    )


def plan_stability(
    plan,
    scores,
    constraints: Constraints | None = None,
    n_boot: int = N_BOOT,
    seed: int = 0,
    threshold: float = THRESHOLD,
) -> Stability | None:
    """:func:`selection_stability` of the selection behind ``plan``, or ``None`` if it has none.

    Reads the plan's criterion, strategy, budget and tie-break key; returns
    ``None`` for selections that cannot be resampled from scores (model-measured
    criteria, model-querying strategies, ``auto``'s verified sets: see
    ``plan.records.auto.stability`` for those).
    """
    if not plan.budget or not plan.protocol or plan.protocol == "auto" or scores is None:
        return None
    crit, strat = resolve(plan.protocol, plan.strategy)
    if bootstrappable(crit, strat) or not all(p in scores.protocols() for p in crit.probes):
        return None
    tb = (plan.scores.get("tiebreak") or {}).get("values")
    if tb is not None:
        tb = [np.inf if v is None else v for v in tb]
    return selection_stability(
        scores,
        crit,
        strat,
        plan.budget,
        constraints or Constraints(plan.num_layers),
        n_boot,
        seed,
        threshold,
        tb,
    )
