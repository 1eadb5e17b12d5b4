"""Run lm-eval tasks (the pack's or any of lm-eval's) and keep per-unit values.

lm-eval's stderr is missing for document-level perplexities and only
approximate for accuracies, and it cannot pair two runs. So every sample is
logged (``log_samples=True``) and each metric is rebuilt from per-example
values by the aggregation lm-eval itself uses, which the bootstrap then
resamples. Metrics whose aggregation is not one of those (F1, BLEU, ...) keep
lm-eval's value and, where given, a normal interval from its stderr.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

from swapprune.evaluation.results import Metric, TaskResult
from swapprune.stats import bootstrap

# Weight column of lm-eval's (loglikelihood, weight) perplexity metrics.
_WEIGHTS = {"word_perplexity": "words", "byte_perplexity": "bytes", "bits_per_byte": "bytes"}


def _column(name: str, filter_key: str) -> str:
    return name if filter_key == "none" else f"{name},{filter_key}"


def _units_of(
    metric: str, agg: str, values: list, filter_key: str
) -> tuple[dict, list, str | None]:
    """Per-unit columns, their order and the statistic reproducing ``agg``.

    Returns ``({}, [], None)`` for aggregations the bootstrap cannot reproduce.
    """
    if agg in ("mean", "nanmean") and all(
        _number(v) is not None and math.isfinite(v) for v in values
    ):
        col = _column(metric, filter_key)
        return {col: [float(v) for v in values]}, [col], "mean"
    if agg == "perplexity":
        # Items are per-example loglikelihoods; lm-eval reports exp(-mean).
        col = _column("loglikelihood", filter_key)
        return {col: [float(v) for v in values]}, [col], "exp_neg_mean"
    if agg in ("weighted_perplexity", "bits_per_byte"):
        # Items are (loglikelihood, weight); keep NLL so that all perplexities
        # share the nll column.
        nll, w = (
            _column("nll", filter_key),
            _column(_WEIGHTS.get(metric, f"{metric}_weight"), filter_key),
        )
        cols = {nll: [-float(ll) for ll, _ in values], w: [float(n) for _, n in values]}
        return cols, [nll, w], "ppl" if agg == "weighted_perplexity" else "bits"
    return {}, [], None


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) else None


def _mean_stderr(values: list[float]) -> float | None:
    """lm-eval's closed-form ``mean_stderr``: sample std / sqrt(n)."""
    n = len(values)
    if n < 2:
        return None
    mu = sum(values) / n
    return math.sqrt(sum((v - mu) ** 2 for v in values) / (n - 1) / n)


def task_result(
    name: str,
    task,
    reported: dict[str, Any],
    higher: dict[str, bool],
    samples: list[dict] | None,
    n_boot: int,
) -> TaskResult:
    """Build the :class:`TaskResult` of one lm-eval task or group.

    Args:
        name: Task or group name.
        task: The lm-eval ``Task`` (None for a group).
        reported: lm-eval's ``results[name]`` (``"metric,filter"`` keys).
        higher: lm-eval's ``higher_is_better[name]``.
        samples: lm-eval's logged samples of the task (None for a group).
        n_boot: Bootstrap resamples.
    """
    aggregations = {
        k: getattr(f, "__name__", "") for k, f in (task.aggregation() if task else {}).items()
    }
    by_filter: dict[str, list[dict]] = defaultdict(list)
    for s in samples or []:
        by_filter[s["filter"]].append(s)
    unit_ids: list[int] = []
    units: dict[str, list[float]] = {}
    metrics: dict[str, Metric] = {}
    for key, value in reported.items():
        if "," not in key or "_stderr," in key:
            continue
        metric, filter_key = key.split(",", 1)
        value = _number(value)
        if value is None:
            continue
        stderr = _number(reported.get(f"{metric}_stderr,{filter_key}"))
        rows = sorted(by_filter.get(filter_key, []), key=lambda s: s["doc_id"])
        cols: dict[str, list[float]] = {}
        order: list = []
        stat: str | None = None
        if rows and all(metric in r for r in rows):
            cols, order, stat = _units_of(
                metric, aggregations.get(metric, ""), [r[metric] for r in rows], filter_key
            )
        label = _column(metric, filter_key)
        hib = bool(higher.get(metric, True))
        if stat is not None:
            unit_ids = [int(r["doc_id"]) for r in rows]
            units.update(cols)
            matrix = list(zip(*(cols[c] for c in order), strict=True))
            ci = bootstrap.ci_of_statistic(matrix, stat, n_boot=n_boot)
            # Our statistic must reproduce lm-eval's number, or the units are wrong.
            assert math.isclose(ci.estimate, value, rel_tol=1e-6, abs_tol=1e-9), (name, metric)
            if stat == "mean" and stderr is None:
                # bootstrap_iters=0 stops lm-eval computing it; same formula.
                stderr = _mean_stderr(cols[order[0]])
            metrics[label] = Metric(
                value=value,
                low=ci.low,
                high=ci.high,
                higher_is_better=hib,
                units=order,
                statistic=stat,
                ci=f"percentile bootstrap over {_unit(task)}s ({n_boot})",
                stderr=stderr,
            )
        elif stderr is not None:
            half = 1.959963984540054 * stderr
            metrics[label] = Metric(
                value, value - half, value + half, hib, ci="normal, lm-eval stderr", stderr=stderr
            )
        else:
            metrics[label] = Metric(value, None, None, hib, ci="none", stderr=stderr)
    return TaskResult(task=name, unit=_unit(task), unit_ids=unit_ids, units=units, metrics=metrics)


def _unit(task) -> str:
    if task is None:
        return "group"
    return "document" if task.OUTPUT_TYPE == "loglikelihood_rolling" else "example"


def run_harness(
    lm, names: list[str], manager, limit: int | None, n_boot: int
) -> dict[str, TaskResult]:
    """Evaluate lm-eval task/group/tag ``names`` with per-sample logging.

    Args:
        lm: lm-eval ``LM`` (``HFLM``).
        names: Resolved names known to ``manager``.
        manager: ``TaskManager`` indexing the pack (and lm-eval's tasks if needed).
        limit: Examples per task (None: all).
        n_boot: Bootstrap resamples.

    Returns:
        Task (and group) name -> :class:`TaskResult`.
    """
    from lm_eval.evaluator import evaluate as lm_evaluate  # imports lm_eval

    start = time.perf_counter()
    loaded = manager.load(names)
    for task in loaded["tasks"].values():
        # What simple_evaluate does: zero-shot unless the task fixes a count.
        if task.get_config("num_fewshot") is None:
            task.set_config(key="num_fewshot", value=0)
        task.set_fewshot_seed(seed=1234)
    # lm-eval's own stderr is not needed (we bootstrap); 0 skips its resampling.
    out = lm_evaluate(lm=lm, task_dict=loaded, limit=limit, bootstrap_iters=0, log_samples=True)
    wall = time.perf_counter() - start
    results: dict[str, TaskResult] = {}
    for name, reported in out["results"].items():
        task = loaded["tasks"].get(name)
        results[name] = task_result(
            name,
            task,
            reported,
            out["higher_is_better"].get(name, {}),
            out.get("samples", {}).get(name),
            n_boot,
        )
        results[name].info = {
            "n_samples": len(results[name].unit_ids),
            "wall_s_all_lm_eval_tasks": wall,
            "version": out.get("versions", {}).get(name),
        }
    return results
