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
(:mod:`swapprune.evaluation.pairing`). ``swapprune_wikitext2_ext`` adds an
``article`` column: its comparisons resample articles.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from swapprune.errors import SwappruneError


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
