"""Comparing two cuts measured on the same units: the verdict, and the paper's test beside it.

The outcomes and their rules are :mod:`swapprune.stats.verdicts`; this module
resamples the units (windows, or articles when given) and hands the paired
replicates of the difference to :func:`~swapprune.stats.verdicts.verdict_from_replicates`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import replace

import numpy as np

from swapprune.stats import N_BOOT, SEED
from swapprune.stats.bootstrap import intervals_overlap
from swapprune.stats.clustered import WeightedStatistic, paired_replicates, percentile_interval
from swapprune.stats.verdicts import ALPHA, DEFAULT_MARGIN, Margin, Verdict, verdict_from_replicates


def compare_cuts(
    a_units,
    b_units,
    statistic: str | WeightedStatistic,
    *,
    a: str = "A",
    b: str = "B",
    a_key: str,
    b_key: str,
    higher_is_better: bool,
    base_units=None,
    clusters: Sequence[Hashable] | None = None,
    margin: Margin = DEFAULT_MARGIN,
    alpha: float = ALPHA,
    scope: str = "",
    n_boot: int = N_BOOT,
    seed: int = SEED,
) -> Verdict:
    """Compare cut ``b`` with cut ``a`` on the same units (see the module docstring).

    Args:
        a_units, b_units: Per-unit values of each cut, ``[n]`` or ``[n, k]``
            (``(nll, tokens)`` per window for perplexity).
        statistic: A statistic name (``"ppl"``, ``"mean"``, ...) or a weighted callable.
        a, b: Display names.
        a_key, b_key: :func:`cut_key` of each cut; equal keys give ``identical``.
        higher_is_better: Direction of the metric (False for perplexity).
        base_units: The unpruned model's units, same shape; required for a
            margin in points.
        clusters: Article of each unit, ``[n]``: resample articles instead of windows.
        margin: Equivalence margin.
        alpha: Test level (0.05: 95% CI for the difference, 90% for TOST).
        scope: What was measured; part of the test's identity for Holm.
        n_boot: Bootstrap resamples.
        seed: Seed of the draws (the same for every pair of a table keeps them paired
            with each other too).

    Returns:
        A :class:`Verdict`, including the paper's overlap test.

    Raises:
        ValueError: On a margin in points without ``base_units`` or with a base value of 0,
            or units that do not pair.
    """
    resampled = "windows" if clusters is None else "articles"
    n_clusters = None if clusters is None else len(set(clusters))
    n = len(np.asarray(a_units))
    if a_key == b_key:
        return verdict_from_replicates(
            0.0,
            np.zeros(0),
            a=a,
            b=b,
            a_key=a_key,
            b_key=b_key,
            higher_is_better=higher_is_better,
            margin=margin,
            alpha=alpha,
            scope=scope,
            resampled=resampled,
            n_units=n,
            n_clusters=n_clusters,
        )
    runs = [a_units, b_units]
    if margin.unit == "points":
        if base_units is None:
            raise ValueError("a margin in points needs the unpruned model's units (base_units)")
        runs.append(base_units)
    points, reps = paired_replicates(runs, statistic, clusters, n_boot, seed)
    if margin.unit == "points" and not (np.isfinite(points[2]) and points[2] != 0):
        raise ValueError(
            f"a margin in points is relative to the unpruned model's value, which is "
            f"{points[2]:g} here; declare the margin in the metric's own units"
        )
    if margin.unit == "points":
        scale_point, scale_reps = 100.0 / points[2], 100.0 / reps[2]
    else:
        scale_point, scale_reps = 1.0, np.ones(reps.shape[1])
    estimate = float((points[1] - points[0]) * scale_point)
    diff = (reps[1] - reps[0]) * scale_reps
    v = verdict_from_replicates(
        estimate,
        diff,
        a=a,
        b=b,
        a_key=a_key,
        b_key=b_key,
        higher_is_better=higher_is_better,
        margin=margin,
        alpha=alpha,
        scope=scope,
        resampled=resampled,
        n_units=n,
        n_clusters=n_clusters,
    )
    ia = percentile_interval(points[0], reps[0], 1 - alpha)
    ib = percentile_interval(points[1], reps[1], 1 - alpha)
    return replace(
        v,
        overlap=intervals_overlap(ia, ib),
        a_value=float(points[0]),
        b_value=float(points[1]),
    )
