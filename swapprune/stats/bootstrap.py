"""Seeded percentile bootstrap for evaluation metrics (pure numpy).

Every metric here is a statistic of per-unit values: windows for sliding-window
perplexity, documents for document-level perplexity, examples for accuracy.
Resampling units (not tokens) keeps the dependence between tokens of one unit
inside the resample, which is what makes the intervals honest.

Units are arrays of shape ``[n]`` or ``[n, k]`` (``k`` columns per unit, e.g.
``(nll_sum, n_tokens)``). A statistic maps a batch of resamples ``[B, n, k]`` to
``[B]``; named statistics cover the metrics swapprune reports. Resampling is
vectorised with an index matrix ``[n_boot, n]``, evaluated in row blocks so
memory stays bounded on large tasks.

A paired comparison resamples the *same* unit indices for both methods, so the
between-unit variance that both share cancels: two identical models differ by
exactly 0 on every resample, and small but consistent differences are detected.
What a difference *means* (better, equivalent within a margin, inconclusive) is
:mod:`swapprune.stats.verdicts`'s to say.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from swapprune.stats import LEVEL, N_BOOT, SEED

# Upper bound on resampled elements held at once (rows x units x columns).
_BLOCK_ELEMENTS = 4_000_000

Statistic = Callable[[np.ndarray], np.ndarray]


def _ratio(x: np.ndarray) -> np.ndarray:
    return x[..., 0].sum(axis=-1) / x[..., 1].sum(axis=-1)


STATISTICS: dict[str, Statistic] = {
    # Mean of column 0: accuracy and other per-example scores.
    "mean": lambda x: x[..., 0].mean(axis=-1),
    # sum(col 0) / sum(col 1): e.g. NLL per token.
    "ratio": _ratio,
    # exp(sum nll / sum tokens): token-weighted perplexity.
    "ppl": lambda x: np.exp(_ratio(x)),
    # sum nll (nats) / sum bytes, in bits: lm-eval's bits_per_byte.
    "bits": lambda x: _ratio(x) / np.log(2.0),
    # exp(-mean loglikelihood): lm-eval's per-example "perplexity" aggregation.
    "exp_neg_mean": lambda x: np.exp(-x[..., 0].mean(axis=-1)),
}


@dataclass(frozen=True)
class Interval:
    """A point estimate with its percentile-bootstrap confidence interval."""

    estimate: float
    low: float
    high: float
    level: float = LEVEL
    n_boot: int = N_BOOT


@dataclass(frozen=True)
class PairedComparison:
    """Method ``b`` against method ``a`` on the same units.

    Attributes:
        a: Statistic of ``a`` on all units.
        b: Statistic of ``b`` on all units.
        difference: ``b - a`` with its CI (same resampled units for both).
        ratio: ``b / a`` with its CI.
        n_units: Number of paired units.
        p_value: Two-sided bootstrap p-value of "no difference" (:func:`bootstrap_p_value`).
        se: Bootstrap standard error of the difference.
    """

    a: float
    b: float
    difference: Interval
    ratio: Interval
    n_units: int
    p_value: float = float("nan")
    se: float = float("nan")


def _as_units(values) -> np.ndarray:
    """Return ``values`` as a float64 ``[n, k]`` array."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"units must be a non-empty [n] or [n, k] array, got shape {x.shape}")
    return x


def _statistic(statistic: str | Statistic) -> Statistic:
    if callable(statistic):
        return statistic
    try:
        return STATISTICS[statistic]
    except KeyError:
        raise ValueError(f"unknown statistic {statistic!r}; known: {sorted(STATISTICS)}") from None


def resample_indices(n: int, n_boot: int = N_BOOT, seed: int = SEED) -> np.ndarray:
    """Return the ``[n_boot, n]`` matrix of unit indices drawn with replacement."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def _boot(units: list[np.ndarray], stat: Statistic, n_boot: int, seed: int) -> list[np.ndarray]:
    """Bootstrap replicates of ``stat`` for each array in ``units``, sharing indices."""
    n, k = units[0].shape
    idx = resample_indices(n, n_boot, seed)
    rows = max(1, _BLOCK_ELEMENTS // (n * k))
    out = [np.empty(n_boot) for _ in units]
    for start in range(0, n_boot, rows):
        block = idx[start : start + rows]
        for o, u in zip(out, units, strict=True):
            o[start : start + len(block)] = stat(u[block])
    return out


def _interval(estimate: float, reps: np.ndarray, level: float, n_boot: int) -> Interval:
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(reps, [tail, 100 - tail])
    return Interval(float(estimate), float(low), float(high), level, n_boot)


def ci_of_statistic(
    units,
    statistic: str | Statistic,
    n_boot: int = N_BOOT,
    level: float = LEVEL,
    seed: int = SEED,
) -> Interval:
    """Percentile-bootstrap CI of ``statistic`` over units.

    Args:
        units: Per-unit values, ``[n]`` or ``[n, k]``.
        statistic: A name from :data:`STATISTICS` or a callable mapping
            ``[B, n, k]`` resamples to ``[B]``.
        n_boot: Number of resamples.
        level: Confidence level.
        seed: Seed of the resampling generator.

    Returns:
        The statistic on all units and its interval.
    """
    x = _as_units(units)
    stat = _statistic(statistic)
    (reps,) = _boot([x], stat, n_boot, seed)
    return _interval(stat(x[None])[0], reps, level, n_boot)


def ci_mean(values, n_boot: int = N_BOOT, level: float = LEVEL, seed: int = SEED) -> Interval:
    """CI of the mean of per-unit values (e.g. 0/1 correctness)."""
    return ci_of_statistic(values, "mean", n_boot, level, seed)


def ci_ppl(
    nll_sums, counts, n_boot: int = N_BOOT, level: float = LEVEL, seed: int = SEED
) -> Interval:
    """CI of ``exp(sum nll / sum tokens)``, resampling whole windows or documents.

    Args:
        nll_sums: Summed negative log-likelihood (nats) of each unit.
        counts: Number of scored tokens (or words, bytes) of each unit.
        n_boot: Number of resamples.
        level: Confidence level.
        seed: Seed of the resampling generator.
    """
    return ci_of_statistic(np.column_stack([nll_sums, counts]), "ppl", n_boot, level, seed)


def _paired(
    runs: list, statistic: str | Statistic, n_boot: int, seed: int
) -> tuple[list[float], list[np.ndarray], int]:
    """Point values and bootstrap replicates of ``statistic`` for runs on the same units.

    One index set per resample is applied to every run. Returns the statistic of
    each run on all units, the replicates of each, and the number of units.
    """
    units = [_as_units(r) for r in runs]
    if any(u.shape != units[0].shape for u in units):
        shapes = " vs ".join(str(u.shape) for u in units)
        raise ValueError(f"paired units differ in shape: {shapes}")
    stat = _statistic(statistic)
    reps = _boot(units, stat, n_boot, seed)
    return [float(stat(u[None])[0]) for u in units], reps, units[0].shape[0]


def paired_difference(
    a_units,
    b_units,
    statistic: str | Statistic,
    n_boot: int = N_BOOT,
    level: float = LEVEL,
    seed: int = SEED,
) -> PairedComparison:
    """Paired bootstrap of ``statistic(b) - statistic(a)`` and ``statistic(b) / statistic(a)``.

    Unit ``i`` of ``a`` and unit ``i`` of ``b`` must be the same window, document
    or example; each resample draws one index set and applies it to both.

    Args:
        a_units: Per-unit values of method ``a``, ``[n]`` or ``[n, k]``.
        b_units: Per-unit values of method ``b``, same shape.
        statistic: A name from :data:`STATISTICS` or a vectorised callable.
        n_boot: Number of resamples.
        level: Confidence level.
        seed: Seed of the resampling generator.
    """
    (sa, sb), (ra, rb), n = _paired([a_units, b_units], statistic, n_boot, seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio_est = sb / sa if sa != 0 else float("nan")
        ratio_reps = rb / ra
    diff = rb - ra
    return PairedComparison(
        a=sa,
        b=sb,
        difference=_interval(sb - sa, diff, level, n_boot),
        ratio=_interval(ratio_est, ratio_reps, level, n_boot),
        n_units=n,
        p_value=bootstrap_p_value(diff),
        se=float(np.std(diff, ddof=1)) if n_boot > 1 else float("nan"),
    )


def bootstrap_p_value(reps) -> float:
    """Two-sided p-value of "the statistic is 0" from its bootstrap replicates.

    Twice the smaller share of replicates on either side of zero (a replicate at
    exactly zero counts for both sides), with the ``(k + 1) / (B + 1)``
    correction so that ``B`` replicates never give less than ``2 / (B + 1)``.
    Identical methods (every replicate 0) get 1.
    """
    r = np.asarray(reps, dtype=np.float64)
    r = r[~np.isnan(r)]
    if r.size == 0:
        return float("nan")
    tail = min(int(np.sum(r <= 0)), int(np.sum(r >= 0)))
    return float(min(1.0, 2 * (tail + 1) / (r.size + 1)))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (step-down, monotone), in the order given.

    Reject hypothesis ``i`` at family-wise level ``alpha`` when its adjusted
    value is below ``alpha``. NaNs stay NaN and do not count towards the family.
    """
    p = np.asarray(p_values, dtype=np.float64)
    ok = np.flatnonzero(~np.isnan(p))
    out = np.full(p.shape, np.nan)
    m = ok.size
    running = 0.0
    for rank, i in enumerate(ok[np.argsort(p[ok], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def minimum_detectable_difference(se: float, level: float = LEVEL, power: float = 0.8) -> float:
    """Smallest true difference a two-sided test at ``level`` detects with ``power``.

    Normal approximation: ``(z_{(1+level)/2} + z_{power}) * se``; with the defaults
    ``2.80 * se``. A failure to find a difference says nothing about differences below this.
    """
    z = NormalDist()
    return float((z.inv_cdf((1 + level) / 2) + z.inv_cdf(power)) * se)


def intervals_overlap(a: Interval, b: Interval) -> bool:
    """Whether two marginal CIs share a point (the paper's tie test)."""
    return a.low <= b.high and b.low <= a.high


def paired_cost_ratio(
    base_units,
    a_units,
    b_units,
    statistic: str | Statistic,
    n_boot: int = N_BOOT,
    level: float = LEVEL,
    seed: int = SEED,
) -> Interval:
    """CI of ``cost(a) / cost(b)``, with ``cost(x) = statistic(x) / statistic(base) - 1``.

    For perplexity this is the paper's pruning-level protocol ratio
    ``I/R = dPPL%(interchange-guided) / dPPL%(replacement-guided)``. The three
    runs must be on the same units; every resample applies one index set to all
    three, so the shared window-to-window variation cancels.
    """
    (s0, sa, sb), (r0, ra, rb), _ = _paired([base_units, a_units, b_units], statistic, n_boot, seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        est = (sa / s0 - 1) / (sb / s0 - 1) if s0 != 0 and sb != s0 else float("nan")
        reps = (ra / r0 - 1) / (rb / r0 - 1)
    reps = reps[np.isfinite(reps)]
    if reps.size == 0:
        return Interval(est, float("nan"), float("nan"), level, n_boot)
    return _interval(est, reps, level, n_boot)
