"""Bootstraps over articles and over seeds x articles (pure numpy, seeded).

The window bootstrap of :mod:`swapprune.stats.bootstrap` treats every window as an
independent draw. Windows of one article are not (``docs/method.md`` section 12), a
calibration seed that selects the same set as another re-tests the same pair of
models, and a predictor-validity correlation over ``L`` blocks is uncertain in
the blocks, not only in the windows. Each bootstrap here (and the layer
bootstrap of :mod:`swapprune.stats.layers`) resamples the unit that is
actually replicated.

**Resamples as multiplicity weights.** A resample is written as one weight per
window: how many times the window (or its article) was drawn. A statistic of a
resample is then a statistic of weighted sums, which for every statistic
swapprune reports (means, ratios of sums and functions of those) is exactly the
statistic of the concatenated resample. Weights let resamples of whole
articles, whose window counts differ, share one ``[B, n]`` matrix.

**Procedures** (``B`` resamples, ``n`` windows, ``G`` articles, ``S`` seeds):

* *Window* (:func:`window_weights`): each resample draws ``n`` windows with
  replacement; the draws are those of :func:`swapprune.stats.bootstrap.resample_indices`
  with the same seed, so the replicates equal that module's (to rounding).
* *Article-clustered* (:func:`cluster_weights`): each resample draws ``G``
  articles with replacement from the ``G`` present, and every drawn article
  brings all of its windows as they are (nothing is resampled inside an
  article). A window's weight is the number of times its article was drawn.
* *Two-level, seed x article, paired* (:func:`two_level_cost_difference`):
  seeds and articles are crossed, not nested (every seed's cuts are evaluated
  on the same windows), so each resample draws ``S`` seeds with replacement
  and, independently, ``G`` articles with replacement (the pigeonhole
  bootstrap for crossed designs, Owen 2007). For each drawn seed the paired
  cost difference is computed on the drawn articles, with the same article
  weights for the base model, both cuts and every seed; the replicate is the
  mean over the drawn seeds.
* *Layer*: in :mod:`swapprune.stats.layers`.

Every interval is a percentile interval; every generator is seeded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from swapprune.stats import LEVEL, N_BOOT, SEED
from swapprune.stats.bootstrap import Interval, bootstrap_p_value, resample_indices

#: ``(units [n, k], weights [B, n]) -> [B]``: a statistic of weighted resamples.
WeightedStatistic = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _weighted_mean(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return (w @ x[:, 0]) / w.sum(axis=1)


def _weighted_ratio(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    s = w @ x[:, :2]  # [B, 2]
    return s[:, 0] / s[:, 1]


#: The named statistics of :data:`swapprune.stats.bootstrap.STATISTICS`, on weighted resamples.
WEIGHTED_STATISTICS: dict[str, WeightedStatistic] = {
    "mean": _weighted_mean,
    "ratio": _weighted_ratio,
    "ppl": lambda x, w: np.exp(_weighted_ratio(x, w)),
    "bits": lambda x, w: _weighted_ratio(x, w) / np.log(2.0),
    "exp_neg_mean": lambda x, w: np.exp(-_weighted_mean(x, w)),
}


def _as_units(values) -> np.ndarray:
    """``values`` as a float64 ``[n, k]`` array."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"units must be a non-empty [n] or [n, k] array, got shape {x.shape}")
    return x


def weighted_statistic(statistic: str | WeightedStatistic) -> WeightedStatistic:
    """Resolve a statistic name (see :data:`WEIGHTED_STATISTICS`) or pass a callable through."""
    if callable(statistic):
        return statistic
    try:
        return WEIGHTED_STATISTICS[statistic]
    except KeyError:
        known = sorted(WEIGHTED_STATISTICS)
        raise ValueError(f"unknown statistic {statistic!r}; known: {known}") from None


def _counts(idx: np.ndarray, size: int) -> np.ndarray:
    """``[B, size]`` counts of each value in each row of the ``[B, m]`` index matrix."""
    rows = idx.shape[0]
    flat = (idx + np.arange(rows)[:, None] * size).ravel()
    return np.bincount(flat, minlength=rows * size).reshape(rows, size).astype(np.float64)


def window_weights(n: int, n_boot: int = N_BOOT, seed: int = SEED) -> np.ndarray:
    """``[B, n]`` multiplicities of a window bootstrap (the draws of ``resample_indices``)."""
    return _counts(resample_indices(n, n_boot, seed), n)


def cluster_codes(clusters: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct cluster labels ``[G]`` (sorted) and each unit's code into them ``[n]``."""
    labels, codes = np.unique(np.asarray(clusters), return_inverse=True)
    return labels, codes


def cluster_weights(clusters: Sequence[Any], n_boot: int = N_BOOT, seed: int = SEED) -> np.ndarray:
    """``[B, n]`` multiplicities of an article-clustered bootstrap.

    Args:
        clusters: The article (any hashable label) of each window, ``[n]``.
        n_boot: Number of resamples ``B``.
        seed: Seed of the article draws.

    Returns:
        Weight of each window in each resample: the number of times its
        article was drawn when ``G`` articles are drawn with replacement.
    """
    labels, codes = cluster_codes(clusters)
    counts = _counts(resample_indices(len(labels), n_boot, seed), len(labels))  # [B, G]
    return counts[:, codes]


def resample_weights(
    n: int, clusters: Sequence[Any] | None = None, n_boot: int = N_BOOT, seed: int = SEED
) -> np.ndarray:
    """Weights ``[B, n]`` of a window bootstrap, or of an article-clustered one if ``clusters``."""
    if clusters is None:
        return window_weights(n, n_boot, seed)
    if len(clusters) != n:
        raise ValueError(f"{len(clusters)} cluster labels for {n} units")
    return cluster_weights(clusters, n_boot, seed)


def block_weights(n: int, block: int, n_boot: int = N_BOOT, seed: int = SEED) -> np.ndarray:
    """Weights ``[B, n]`` of a moving-block bootstrap over ``n`` units in their order.

    Each resample draws ``ceil(n / block)`` starting units uniformly from the
    ``n - block + 1`` possible ones and takes ``block`` consecutive units from each, so
    neighbours stay together (windows of one article in document order are
    correlated); the last block is cut so that every resample holds ``n`` units.
    """
    if not 1 <= block <= n:
        raise ValueError(f"block length must be in [1, {n}], got {block}")
    k = -(-n // block)
    starts = np.random.default_rng(seed).integers(0, n - block + 1, size=(n_boot, k))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(n_boot, -1)[:, :n]
    return _counts(idx, n)


def paired_replicates(
    runs: Sequence[Any],
    statistic: str | WeightedStatistic,
    clusters: Sequence[Any] | None = None,
    n_boot: int = N_BOOT,
    seed: int = SEED,
) -> tuple[np.ndarray, np.ndarray]:
    """Point values ``[R]`` and replicates ``[R, B]`` of ``statistic`` for runs on the same units.

    One weight matrix serves every run, so the runs are paired: the same
    windows (or articles) enter each resample of each run.

    Args:
        runs: ``R`` per-unit arrays, each ``[n]`` or ``[n, k]``, all the same shape.
        statistic: A name of :data:`WEIGHTED_STATISTICS` or a weighted callable.
        clusters: Article of each unit, ``[n]``; None for the window bootstrap.
        n_boot: Number of resamples.
        seed: Seed of the draws.
    """
    units = [_as_units(r) for r in runs]
    if any(u.shape != units[0].shape for u in units):
        raise ValueError(
            "paired units differ in shape: " + " vs ".join(str(u.shape) for u in units)
        )
    stat = weighted_statistic(statistic)
    n = units[0].shape[0]
    w = resample_weights(n, clusters, n_boot, seed)
    ones = np.ones((1, n))
    points = np.array([stat(u, ones)[0] for u in units])
    return points, np.stack([stat(u, w) for u in units])


def percentile_interval(estimate: float, reps: np.ndarray, level: float = LEVEL) -> Interval:
    """Percentile interval of the finite ``reps`` around ``estimate``."""
    r = np.asarray(reps, dtype=np.float64)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return Interval(float(estimate), float("nan"), float("nan"), level, 0)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(r, [tail, 100 - tail])
    return Interval(float(estimate), float(low), float(high), level, int(r.size))


def clustered_ci(
    units,
    clusters: Sequence[Any],
    statistic: str | WeightedStatistic = "ppl",
    n_boot: int = N_BOOT,
    level: float = LEVEL,
    seed: int = SEED,
) -> Interval:
    """Article-clustered percentile CI of ``statistic`` (see the module docstring).

    Args:
        units: Per-window values, ``[n]`` or ``[n, k]`` (``(nll, tokens)`` for perplexity).
        clusters: Article of each window, ``[n]``.
        statistic: A name of :data:`WEIGHTED_STATISTICS` or a weighted callable.
        n_boot: Number of resamples.
        level: Confidence level.
        seed: Seed of the article draws.
    """
    points, reps = paired_replicates([units], statistic, clusters, n_boot, seed)
    return percentile_interval(points[0], reps[0], level)


def clustered_ci_ppl(
    nll_sums,
    counts,
    clusters: Sequence[Any],
    n_boot: int = N_BOOT,
    level: float = LEVEL,
    seed: int = SEED,
) -> Interval:
    """CI of ``exp(sum nll / sum tokens)``, resampling whole articles."""
    return clustered_ci(np.column_stack([nll_sums, counts]), clusters, "ppl", n_boot, level, seed)


def cost_ratio(
    base,
    a,
    b,
    statistic: str | WeightedStatistic = "ppl",
    clusters: Sequence[Any] | None = None,
    n_boot: int = N_BOOT,
    level: float = LEVEL,
    seed: int = SEED,
) -> Interval:
    """CI of ``cost(a) / cost(b)``, ``cost(x) = stat(x) / stat(base) - 1``, resampling articles.

    The clustered counterpart of :func:`swapprune.stats.bootstrap.paired_cost_ratio`
    (equal to it when ``clusters`` is None): for perplexity, the pruning-level
    ``I/R`` when ``a`` is interchange-guided and ``b`` replacement-guided.
    Replicates where ``cost(b)`` is 0 are dropped.
    """
    (s0, sa, sb), (r0, ra, rb) = paired_replicates([base, a, b], statistic, clusters, n_boot, seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        est = (sa / s0 - 1) / (sb / s0 - 1) if s0 != 0 and sb != s0 else float("nan")
        reps = (ra / r0 - 1) / (rb / r0 - 1)
    return percentile_interval(float(est), reps, level)


@dataclass(frozen=True)
class TwoLevelDifference:
    """A cost difference across calibration seeds and articles.

    Attributes:
        estimate: Mean over seeds of ``scale * (stat(b_s) - stat(a_s)) / stat(base)``
            on all windows (for perplexity and ``scale = 100``: cost(B) - cost(A)
            in dPPL points).
        interval: Its percentile CI under the two-level bootstrap.
        p_value: Two-sided bootstrap p-value of "no difference".
        se: Bootstrap standard error.
        per_seed: The difference of each seed on all windows.
        n_seeds, n_clusters: ``S`` and ``G``.
        replicates: The ``[B]`` bootstrap replicates (not serialised).
    """

    estimate: float
    interval: Interval
    p_value: float
    se: float
    per_seed: list[float]
    n_seeds: int
    n_clusters: int
    replicates: np.ndarray = field(repr=False, compare=False)

    def to_dict(self) -> dict:
        """JSON-ready record (replicates left out)."""
        return {
            "estimate": self.estimate,
            "ci": [self.interval.low, self.interval.high],
            "level": self.interval.level,
            "p_value": self.p_value,
            "se": self.se,
            "per_seed": self.per_seed,
            "n_seeds": self.n_seeds,
            "n_clusters": self.n_clusters,
            "resampled": "seeds x articles (crossed, independent draws)",
        }


def _per_seed(values, n: int) -> np.ndarray:
    """``values`` as ``[S, n, k]``."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 2:
        x = x[:, :, None]
    if x.ndim != 3 or x.shape[1] != n or x.shape[0] == 0:
        raise ValueError(f"per-seed units must be [S, {n}] or [S, {n}, k], got {x.shape}")
    return x


def two_level_cost_difference(
    base,
    a,
    b,
    clusters: Sequence[Any],
    statistic: str | WeightedStatistic = "ppl",
    scale: float = 100.0,
    n_boot: int = N_BOOT,
    level: float = LEVEL,
    seed: int = SEED,
    weights: np.ndarray | None = None,
) -> TwoLevelDifference:
    """Two-level (seed x article) paired bootstrap of ``cost(B) - cost(A)``.

    Args:
        base: The unpruned model's per-window units, ``[n]`` or ``[n, k]``
            (the same for every seed).
        a: Cut A of each seed, ``[S, n]`` or ``[S, n, k]``; seeds that chose the
            same set repeat the same rows, which is what makes them count once
            per draw and not as independent replications.
        b: Cut B of each seed, same shape as ``a``.
        clusters: Article of each window, ``[n]``.
        statistic: A name of :data:`WEIGHTED_STATISTICS` or a weighted callable.
        scale: Factor on the relative difference (100: points of the base value).
        n_boot: Number of resamples.
        level: Confidence level.
        seed: Seed of the draws (articles from ``seed``; seeds from an independent stream).
        weights: ``[B, n]`` unit weights to use instead of the article draws (e.g.
            :func:`block_weights` where the windows are ordered, not clustered).

    Returns:
        The difference, its CI, p-value and the per-seed values.
    """
    u0 = _as_units(base)
    n = u0.shape[0]
    ua, ub = _per_seed(a, n), _per_seed(b, n)
    if ua.shape != ub.shape or ua.shape[2] != u0.shape[1]:
        raise ValueError(f"cuts A {ua.shape}, B {ub.shape} and base {u0.shape} do not pair up")
    stat = weighted_statistic(statistic)
    n_seeds = ua.shape[0]
    w = resample_weights(n, clusters, n_boot, seed) if weights is None else weights  # [B, n]
    n_boot = w.shape[0]
    ones = np.ones((1, n))
    # The seed draws use their own stream so that the article draws match
    # cluster_weights(clusters, n_boot, seed) exactly.
    seed_idx = np.random.default_rng(np.random.SeedSequence([seed, 1])).integers(
        n_seeds, size=(n_boot, n_seeds)
    )
    seed_counts = _counts(seed_idx, n_seeds)  # [B, S]

    def diffs(weights: np.ndarray) -> np.ndarray:  # [S, B']
        s0 = stat(u0, weights)
        return np.stack(
            [scale * (stat(ub[s], weights) - stat(ua[s], weights)) / s0 for s in range(n_seeds)]
        )

    per_seed = diffs(ones)[:, 0]
    reps = (seed_counts * diffs(w).T).sum(axis=1) / n_seeds
    estimate = float(per_seed.mean())
    return TwoLevelDifference(
        estimate=estimate,
        interval=percentile_interval(estimate, reps, level),
        p_value=bootstrap_p_value(reps),
        se=float(np.std(reps, ddof=1)) if n_boot > 1 else float("nan"),
        per_seed=[float(x) for x in per_seed],
        n_seeds=n_seeds,
        n_clusters=len(cluster_codes(clusters)[0]),
        replicates=reps,
    )
