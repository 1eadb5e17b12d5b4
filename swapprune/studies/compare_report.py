"""Turn a comparison's evaluations into ``results.json`` (and, via ``compare_markdown``, ``results.md``).

``results.json`` (schema ``swapprune.compare/2``):

* ``budgets``: per budget, every cell (method) with its removal or merge, its
  metrics and their relative change vs the unpruned model (paired CIs; articles
  resampled on the extended contract), its cost on the primary metric and its
  generative agreement with the base model;
* ``verdicts``: one table per contract (:mod:`swapprune.studies.compare_verdicts`),
  the extended contract first, each row a four-outcome verdict with Holm over the
  table's distinct model pairs and over the primary contrasts, the paper's overlap
  test beside it and the ratio of the two costs;
* ``contract``: what was measured and how it was tested (outcomes, margin,
  families and their sizes), so that the file states its own reading rules.
"""

from __future__ import annotations

import math

import numpy as np

from swapprune.evaluation import contract
from swapprune.stats.verdicts import ALPHA, Margin
from swapprune.studies.compare_cells import criterion_of, is_random
from swapprune.studies.compare_markdown import write_markdown
from swapprune.studies.compare_verdicts import (
    ALL_PAIRS,
    PRIMARY,
    verdict_scopes,
    verdict_table,
)

SCHEMA = "swapprune.compare/2"

__all__ = ["SCHEMA", "build_results", "write_markdown"]


def _metric_rows(result, base, tasks):
    from swapprune.evaluation.pairing import paired

    rows = {}
    for task in tasks:
        if task not in result.tasks:
            continue
        rows[task] = {}
        for name, m in result.tasks[task].metrics.items():
            row = {
                "value": m.value,
                "ci": [m.low, m.high],
                "higher_is_better": m.higher_is_better,
                "n": len(result.tasks[task].unit_ids),
            }
            if m.units and base is not None and task in base.tasks:
                cmp = paired(base, result, task, name)
                row["rel_change"] = cmp.ratio.estimate - 1
                row["rel_change_ci"] = [cmp.ratio.low - 1, cmp.ratio.high - 1]
            rows[task][name] = row
    return rows


def _primary(base, tasks):
    for task in tasks:
        if task in base.tasks:
            for name, m in base.tasks[task].metrics.items():
                if m.units:
                    return task, name
    task = tasks[0]
    return task, next(iter(base.tasks[task].metrics))


def _pct(row: dict, key: str):
    x = row.get(key)
    if x is None:
        return None
    return [100 * v for v in x] if isinstance(x, list) else 100 * x


def _generative(gen: dict | None) -> dict | None:
    """The generative measure of a cell, without its per-prompt values (those stay in the cache)."""
    if not gen:
        return None
    keep = ("agreement", "first_divergence", "unchanged_prompts", "new_tokens", "prompts")
    return {k: gen[k] for k in keep if k in gen}


def _method(cell, base, tasks, task, metric) -> dict:
    plan, res = cell["plan"], cell["result"]
    rows = _metric_rows(res, base, tasks)
    prim = rows.get(task, {}).get(metric, {})
    entry = cell.get("entry")
    return {
        "removed": plan.removed,
        "kept": plan.kept,
        "merged": {str(k): v for k, v in plan.merged.items()},
        "op": plan.op,
        "merge": plan.merge,
        "criterion": criterion_of(entry) if entry else plan.protocol,
        "strategy": plan.strategy,
        "metrics": rows,
        "cost_pct": _pct(prim, "rel_change"),
        "cost_pct_ci": _pct(prim, "rel_change_ci"),
        "generative": _generative(cell.get("generative")),
        "select_s": cell["select_s"],
        "eval_s": cell["eval_s"],
    }


def _costs(budgets: list[dict], task: str, metric: str) -> dict:
    """``budget -> label -> cost in points`` on one contract (None where unmeasured)."""
    out: dict[int, dict[str, float | None]] = {}
    for e in budgets:
        out[e["budget"]] = {}
        for label, m in e["methods"].items():
            row = m["metrics"].get(task, {}).get(metric, {})
            x = row.get("rel_change")
            out[e["budget"]][label] = 100 * x if x is not None and math.isfinite(x) else None
    return out


def _test_text(margin: Margin) -> str:
    return (
        "each two cells of a budget: paired bootstrap of d = B - A over the same units "
        f"(articles for the extended contract), on the margin's scale ({margin.unit}); the first "
        f"outcome that holds: 'A better' / 'B better' when the two-sided p < {ALPHA} (the 95% "
        f"CI of d excludes 0); 'tie (equivalent within {margin.label()})' when both one-sided "
        f"tests reject |d| >= {margin.value:g} (TOST: the 90% CI of d inside the margin); "
        "otherwise 'inconclusive (MDD x)', x the difference the test detects with 80% power. "
        "Cells that are the same model are 'identical' and not tested. Equivalence is never "
        "claimed without a margin."
    )


def build_results(job, model_id, num_layers, base, cells, scores, tasks) -> dict:
    """The ``results.json`` document (see the module docstring)."""
    task, metric = _primary(base, tasks)
    cmp_cfg = getattr(job, "compare", None)
    margin = Margin(getattr(cmp_cfg, "margin", 2.0), getattr(cmp_cfg, "margin_unit", "points"))
    n_boot = job.eval.bootstrap
    budgets = []
    for budget, methods in sorted(cells.items()):
        entry: dict = {"budget": budget, "methods": {}}
        for label, cell in methods.items():
            entry["methods"][label] = _method(cell, base, tasks, task, metric)
        randoms = [entry["methods"][lab]["cost_pct"] for lab in methods if is_random(lab)]
        if randoms and all(r is not None for r in randoms):
            entry["random_mean_cost_pct"] = float(np.mean(randoms))
        budgets.append(entry)
    tables = [
        verdict_table(base, cells, t, m, _costs(budgets, t, m), margin, n_boot)
        for t, m in verdict_scopes(base, tasks, (task, metric))
    ]
    summary = scores.to_dict()["summary"] if scores is not None else {}
    return {
        "schema": SCHEMA,
        "model": model_id,
        "num_layers": num_layers,
        "tasks": tasks,
        "primary": {"task": task, "metric": metric},
        "contract": {
            "limit": job.limit,
            "words": job.words,
            "max_length": job.max_length,
            "stride": contract.stride(job.max_length),
            "per_article": getattr(job.eval, "per_article", None),
            "ci": f"95% percentile bootstrap, {n_boot} resamples over the task's units "
            "(over articles for swapprune_wikitext2_ext)",
            "test": _test_text(margin),
            "margin": {"value": margin.value, "unit": margin.unit, "label": margin.label()},
            "alpha": ALPHA,
            "multiplicity": f"Holm over the distinct model pairs of each verdict table ('{ALL_PAIRS}', "
            "all budgets together, identical cells excluded), and separately over the primary "
            f"contrasts ('{PRIMARY}': interchange vs replacement, auto vs the best baseline, "
            "at each budget)",
            "families": {t["task"]: t["families"] for t in tables},
            "overlap": "the paper's test: tie when the two marginal 95% CIs overlap; weaker "
            "than the paired test, shown beside the verdicts",
            "cost": "relative change of the metric vs the unpruned model (dPPL% for perplexity)",
            "generative": "greedy choices given the base model's greedy continuation: agreement "
            "and first divergence over 32 LAMBADA prompts x 32 tokens, 95% CIs over prompts",
            "calibration": {
                "source": job.calib.calib or "wikitext2-valid",
                "prompts": job.calib.prompts,
                "tokens": job.calib.tokens,
                "positions": job.calib.positions,
                "seed": job.calib.seed,
            },
            "strategy": job.strategy or "criterion default (greedy; iterative for sleb)",
        },
        "regime": summary.get("regime"),
        "baseline": _metric_rows(base, None, tasks),
        "budgets": budgets,
        "verdicts": tables,
    }
