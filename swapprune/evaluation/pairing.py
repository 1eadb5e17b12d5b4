"""Pairing two evaluation runs unit by unit: the paired change and its four-outcome verdict.

Two runs of one task pair when they cover the same units with the same counts
and articles. :func:`paired` is the paired bootstrap of the metric's difference
and ratio; :func:`compare` adds the verdict of :mod:`swapprune.stats.verdicts`.
An ``article`` column (``swapprune_wikitext2_ext``) makes both resample articles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from swapprune.errors import SwappruneError
from swapprune.evaluation.results import EvalResult
from swapprune.stats import bootstrap
from swapprune.stats.clustered import paired_replicates, percentile_interval
from swapprune.stats.comparison import compare_cuts
from swapprune.stats.verdicts import DEFAULT_MARGIN

if TYPE_CHECKING:
    from swapprune.stats.verdicts import Verdict


def _pairable(a: EvalResult, b: EvalResult, task: str, metric: str | None):
    """The two runs' task results and the metric, checked to pair unit by unit."""
    for run, label in ((a, "a"), (b, "b")):
        if task not in run.tasks:
            raise SwappruneError(f"task '{task}' missing from run {label}")
    ta, tb = a.tasks[task], b.tasks[task]
    metric = metric or next(iter(ta.metrics))
    if ta.unit_ids != tb.unit_ids:
        raise SwappruneError(f"runs of '{task}' cover different units; cannot pair them")
    cols = ta.metrics[metric].units
    # Token counts (and articles) must agree too, or the two runs cut the text differently.
    for c in ("tokens", "words", "bytes", "article"):
        if (c in cols or c == "article") and ta.units.get(c) != tb.units.get(c):
            raise SwappruneError(f"runs of '{task}' differ in per-unit {c}; cannot pair them")
    if ta.metrics[metric].statistic is None:
        raise SwappruneError(f"'{task}' {metric} cannot be recomputed from its units; no pairing")
    return ta, tb, metric


def articles(result: EvalResult, task: str) -> list | None:
    """The article of each unit when the task records one (the extended contract), else None."""
    col = result.tasks[task].units.get("article")
    return list(col) if col is not None else None


def paired(
    a: EvalResult,
    b: EvalResult,
    task: str,
    metric: str | None = None,
    n_boot: int = bootstrap.N_BOOT,
    seed: int = bootstrap.SEED,
) -> bootstrap.PairedComparison:
    """Paired bootstrap of run ``b`` against run ``a`` on one task metric.

    The same units enter every resample of both runs; a task whose units carry an
    ``article`` column (``swapprune_wikitext2_ext``) resamples whole articles
    (:mod:`swapprune.stats.clustered`), any other resamples its units.

    Raises:
        SwappruneError: If the task is missing or the units do not pair up.
    """
    ta, tb, metric = _pairable(a, b, task, metric)
    stat = ta.metrics[metric].statistic
    assert stat is not None  # checked by _pairable
    (sa, sb), (ra, rb) = paired_replicates(
        [ta.matrix(metric), tb.matrix(metric)], stat, articles(a, task), n_boot, seed
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = float(sb / sa) if sa != 0 else float("nan")
        ratio_reps = rb / ra
    diff = rb - ra
    return bootstrap.PairedComparison(
        a=float(sa),
        b=float(sb),
        difference=percentile_interval(float(sb - sa), diff),
        ratio=percentile_interval(ratio, ratio_reps),
        n_units=len(ta.unit_ids),
        p_value=bootstrap.bootstrap_p_value(diff),
        se=float(np.std(diff, ddof=1)) if n_boot > 1 else float("nan"),
    )


def compare(
    a: EvalResult,
    b: EvalResult,
    task: str,
    metric: str | None = None,
    n_boot: int = bootstrap.N_BOOT,
    seed: int = bootstrap.SEED,
    *,
    names: tuple[str, str] = ("a", "b"),
    keys: tuple[str, str] = ("a", "b"),
    margin=None,
) -> tuple[bootstrap.PairedComparison, Verdict]:
    """The paired comparison of run ``b`` with run ``a``, and its four-outcome verdict.

    Args:
        a: Baseline run (a margin in points is relative to its value).
        b: Other run, on the same units (same tokenizer, task and limit).
        task: Task name (aliases are not resolved here).
        metric: Metric name; the task's first metric if None.
        n_boot: Number of resamples.
        seed: Seed of the resampling generator.
        names: Display names of ``a`` and ``b`` in the verdict.
        keys: What each run's model is (:func:`swapprune.stats.verdicts.cut_key`);
            equal keys are the same model, "identical" and not tested.
        margin: The equivalence margin (:class:`~swapprune.stats.verdicts.Margin`;
            default 2 points).

    Returns:
        :func:`paired` and the :class:`~swapprune.stats.verdicts.Verdict` (``b better``,
        ``a better``, ``tie (equivalent within +-m)``, ``inconclusive (MDD x)`` or ``identical``).

    Raises:
        SwappruneError: If the task is missing, the units do not pair up, or a margin in
            points has a baseline value of 0.
    """
    cmp = paired(a, b, task, metric, n_boot, seed)
    ta, tb, metric = _pairable(a, b, task, metric)
    m = ta.metrics[metric]
    assert m.statistic is not None
    try:
        verdict = compare_cuts(
            ta.matrix(metric),
            tb.matrix(metric),
            m.statistic,
            a=names[0],
            b=names[1],
            a_key=keys[0],
            b_key=keys[1],
            higher_is_better=m.higher_is_better,
            base_units=ta.matrix(metric),
            clusters=articles(a, task),
            margin=margin or DEFAULT_MARGIN,
            scope=f"{task}/{metric}",
            n_boot=n_boot,
            seed=seed,
        )
    except ValueError as e:
        raise SwappruneError(f"'{task}' {metric}: {e}") from None
    return cmp, verdict
