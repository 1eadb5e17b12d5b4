"""Layer bootstrap for predictor validity: resample blocks for a Spearman CI (pure numpy).

The window bootstrap of :mod:`swapprune.studies.validity` keeps the ``L`` blocks fixed,
so its interval reflects calibration noise only; even a random criterion's
interval can exclude 0 there, and such intervals cannot rank criteria. Here the
blocks are the unit of replication:

* each of ``B`` resamples draws ``L`` blocks with replacement (the draws of
  :func:`swapprune.stats.bootstrap.resample_indices`);
* over the drawn blocks, the Spearman correlation between each criterion's
  removability and the measured deletion cost is computed with average ranks
  for ties, so a block drawn twice is an exact tie in both variables;
* one draw serves every criterion, so differences between criteria are paired;
* removabilities and costs stay at their point values: the interval is about
  the choice of blocks, not about calibration noise.

Percentile intervals over the resamples where neither side is constant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from swapprune.stats import LEVEL, N_BOOT, SEED
from swapprune.stats.bootstrap import Interval, bootstrap_p_value, resample_indices
from swapprune.stats.clustered import percentile_interval


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..L along the last axis, ties sharing their average rank.

    ``rank = #(smaller) + (#(equal) + 1) / 2``, computed by comparison, so a
    block drawn twice in a resample is an exact tie. Memory ``[..., L, L]``.
    """
    x = np.asarray(x, dtype=np.float64)
    less = (x[..., None, :] < x[..., :, None]).sum(-1)
    equal = (x[..., None, :] == x[..., :, None]).sum(-1)
    return less + (equal + 1) / 2


def spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman correlation along the last axis (NaN where either side is constant)."""
    ra, rb = average_ranks(a), average_ranks(b)
    ra = ra - ra.mean(-1, keepdims=True)
    rb = rb - rb.mean(-1, keepdims=True)
    den = np.sqrt((ra**2).sum(-1) * (rb**2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (ra * rb).sum(-1) / np.where(den > 0, den, 1.0), np.nan)


@dataclass(frozen=True)
class LayerBootstrap:
    """Spearman CIs of several criteria under one block bootstrap.

    Attributes:
        criteria: Criterion names, in the order of :attr:`replicates`.
        intervals: Name -> Spearman on all blocks with its CI.
        n_blocks: ``L``.
        replicates: ``[C, B]`` Spearman of each criterion in each resample
            (NaN where a resample makes one side constant).
        seed: Seed of the block draws.
    """

    criteria: list[str]
    intervals: dict[str, Interval]
    n_blocks: int
    replicates: np.ndarray = field(repr=False, compare=False)
    seed: int = SEED

    def difference(self, a: str, b: str, level: float = LEVEL) -> tuple[Interval, float]:
        """``spearman(a) - spearman(b)`` with its paired CI and two-sided p-value."""
        ia, ib = self.criteria.index(a), self.criteria.index(b)
        d = self.replicates[ia] - self.replicates[ib]
        d = d[np.isfinite(d)]
        est = self.intervals[a].estimate - self.intervals[b].estimate
        return percentile_interval(est, d, level), bootstrap_p_value(d)

    def to_dict(self) -> dict:
        """JSON-ready record (replicates left out)."""
        return {
            "resampled": "blocks (with replacement; removability and cost at their point values)",
            "n_blocks": self.n_blocks,
            "seed": self.seed,
            "criteria": {
                k: {"spearman": v.estimate, "ci": [v.low, v.high], "valid_resamples": v.n_boot}
                for k, v in self.intervals.items()
            },
        }


def layer_bootstrap_spearman(
    removability: Mapping[str, Sequence[float]],
    cost: Sequence[float],
    n_boot: int = N_BOOT,
    level: float = LEVEL,
    seed: int = SEED,
) -> LayerBootstrap:
    """Layer bootstrap of each criterion's Spearman with the per-block deletion cost.

    Args:
        removability: Criterion name -> removability of each block, ``[L]``
            (finite or ``inf``; lower = more removable, as :mod:`swapprune.studies.validity`).
        cost: Measured cost of deleting each block alone, ``[L]``.
        n_boot: Number of resamples.
        level: Confidence level.
        seed: Seed of the block draws.

    Returns:
        Per-criterion intervals and the paired replicates.
    """
    y = np.asarray(cost, dtype=np.float64)
    n_blocks = y.shape[0]
    if y.ndim != 1 or n_blocks < 3:
        raise ValueError(f"need a [L] cost vector with L >= 3, got shape {y.shape}")
    idx = resample_indices(n_blocks, n_boot, seed)  # [B, L]
    y_boot = y[idx]
    names = list(removability)
    reps = np.empty((len(names), n_boot))
    intervals = {}
    for c, name in enumerate(names):
        x = np.asarray(removability[name], dtype=np.float64)
        if x.shape != y.shape:
            raise ValueError(f"{name}: removability has shape {x.shape}, cost {y.shape}")
        reps[c] = spearman(x[idx], y_boot)
        intervals[name] = percentile_interval(float(spearman(x, y)), reps[c], level)
    return LayerBootstrap(names, intervals, n_blocks, reps, seed)
