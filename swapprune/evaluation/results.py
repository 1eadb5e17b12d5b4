"""Evaluation results: metrics with CIs, per-unit values, JSON round trip, pairing.

Each task keeps the per-unit values its metrics are computed from, as named
columns of equal length aligned with ``unit_ids``:

* ``swapprune_wikitext2_ppl``: one unit per window, columns ``nll`` (summed
  negative log-likelihood in nats of the tokens the window scores) and
  ``tokens`` (how many it scores);
* ``swapprune_wikitext``: one unit per article, ``nll``, ``words``, ``bytes``;
* accuracy tasks: one unit per example, one 0/1 column per metric (``acc``,
  ``acc_norm``); LAMBADA adds ``loglikelihood`` of the target word.

A :class:`Metric` names the columns and the bootstrap statistic that turn those
units into its value, so a paired comparison of two runs needs nothing else
(:func:`compare`: the paired bootstrap and the four-outcome verdict of
:mod:`swapprune.stats.verdicts`). ``swapprune_wikitext2_ext`` adds an ``article``
column: its comparisons resample articles.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from swapprune.errors import SwappruneError
from swapprune.stats import bootstrap

if TYPE_CHECKING:
    from swapprune.stats.verdicts import Verdict


@dataclass
class Metric:
    """One metric of one task.

    Attributes:
        value: The metric on all units.
        low: Lower end of the CI (None if no CI is available).
        high: Upper end of the CI.
        higher_is_better: Direction of the metric.
        units: Columns of :attr:`TaskResult.units` the metric is computed from
            (empty if the metric cannot be recomputed from units).
        statistic: Name in :data:`swapprune.stats.bootstrap.STATISTICS` mapping those
            columns to the metric, or None.
        ci: How the interval was obtained.
        stderr: lm-eval's standard error, where it reports one.
    """

    value: float
    low: float | None
    high: float | None
    higher_is_better: bool
    units: list[str] = field(default_factory=list)
    statistic: str | None = None
    ci: str = ""
    stderr: float | None = None


@dataclass
class TaskResult:
    """Metrics of one task and the per-unit values behind them.

    Attributes:
        task: Canonical task name.
        unit: What a unit is: ``"window"``, ``"document"``, ``"example"``, or
            ``"group"`` (lm-eval group aggregate, no units).
        unit_ids: Identifier of each unit (window index or lm-eval ``doc_id``).
        units: Column name -> per-unit values aligned with ``unit_ids``.
        metrics: Metric name -> :class:`Metric`.
        info: Task-specific facts (token counts, window settings, wall time).
    """

    task: str
    unit: str
    unit_ids: list[int]
    units: dict[str, list[Any]]  # numbers per unit (token counts are ints)
    metrics: dict[str, Metric]
    info: dict[str, Any] = field(default_factory=dict)

    def matrix(self, metric: str) -> np.ndarray:
        """Per-unit ``[n, k]`` array of the columns ``metric`` is computed from."""
        m = self.metrics[metric]
        if not m.units:
            raise SwappruneError(f"{self.task}/{metric} has no per-unit values to resample")
        return np.column_stack([self.units[c] for c in m.units])


@dataclass
class EvalResult:
    """Results of :func:`swapprune.evaluation.evaluate` for several tasks.

    Attributes:
        tasks: Task name -> :class:`TaskResult`, in evaluation order.
        config: Settings of the run (limit, words, max_length, versions, ...).
    """

    tasks: dict[str, TaskResult]
    config: dict[str, Any] = field(default_factory=dict)

    def to_json(self, indent: int | None = None) -> str:
        """Serialise to a JSON string (per-unit values included)."""
        return json.dumps(asdict(self), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> EvalResult:
        """Inverse of :meth:`to_json`."""
        data = json.loads(text)
        tasks = {}
        for name, t in data["tasks"].items():
            metrics = {k: Metric(**m) for k, m in t.pop("metrics").items()}
            tasks[name] = TaskResult(metrics=metrics, **t)
        return cls(tasks=tasks, config=data.get("config", {}))


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
    import numpy as np

    from swapprune.stats.clustered import paired_replicates, percentile_interval

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
    from swapprune.stats.comparison import compare_cuts
    from swapprune.stats.verdicts import DEFAULT_MARGIN

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
