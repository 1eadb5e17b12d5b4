"""A comparison's results: ``results.json``, its verdict tables (and, via ``compare_markdown``,
``results.md``).

``results.json`` (schema ``swapprune.compare/2``):

* ``budgets``: per budget, every cell (method) with its removal or merge, its
  metrics and their relative change vs the unpruned model (paired CIs; articles
  resampled on the extended contract), its cost on the primary metric and its
  generative agreement with the base model;
* ``verdicts``: one table per contract, each row a four-outcome verdict with Holm
  over the table's distinct model pairs and over the primary contrasts, the paper's
  overlap test beside it and the ratio of the two costs;
* ``contract``: what was measured and how it was tested (outcomes, margin,
  families and their sizes), so that the file states its own reading rules.

The verdict tables: one per evaluation contract, the extended one first (it is held
out: no design choice of this project looked at it), then the paper's matched one;
without either perplexity task, one table on the comparison's primary metric. Each
row compares two cells of one budget with :func:`swapprune.stats.comparison.compare_cuts`:

* **units**: the contract's windows; the extended contract's ``article`` column
  makes the bootstrap resample articles (:mod:`swapprune.stats.clustered`);
* **outcome**: ``A better``, ``B better``, ``tie (equivalent within +-m)`` (TOST
  against the declared margin) or ``inconclusive (MDD x)``; two cells that are
  the same model (:func:`~swapprune.studies.compare_cells.model_key`) are
  ``identical``, never tested and never counted in a family;
* **multiplicity**: Holm over the table's *distinct* model pairs, all budgets
  together (a pair that two labels reach is one test), and separately over the
  primary contrasts of every budget (:func:`swapprune.stats.multiplicity.primary_contrasts`:
  interchange vs replacement; auto vs the best baseline);
* beside them, the paper's overlap-of-CIs test, labelled as the paper's, and the
  ratio of the two costs with its paired CI (the pruning-level I/R for
  interchange vs replacement).

Random seeds are controls: they get a mean cost, not pairwise verdicts.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import numpy as np

from swapprune.errors import SwappruneError
from swapprune.evaluation import contract
from swapprune.evaluation.names import EXTENDED_PPL, WIKITEXT2_PPL
from swapprune.evaluation.pairing import articles, paired
from swapprune.stats.clustered import cost_ratio
from swapprune.stats.comparison import compare_cuts
from swapprune.stats.multiplicity import holm_distinct, primary_contrasts
from swapprune.stats.verdicts import ALPHA, Margin
from swapprune.studies.compare_cells import criterion_of, is_random, model_key
from swapprune.studies.compare_markdown import write_markdown

if TYPE_CHECKING:
    from swapprune.stats.verdicts import Verdict

SCHEMA = "swapprune.compare/2"

__all__ = ["ALL_PAIRS", "PRIMARY", "SCHEMA", "build_results", "verdict_table", "write_markdown"]


# -- the verdict tables ------------------------------------------------------------------


#: The perplexity contracts, in the order their tables are reported.
CONTRACTS = {
    EXTENDED_PPL: "extended (held out: later articles, article-clustered)",
    WIKITEXT2_PPL: "matched (the paper's: first 5,000 words, window bootstrap)",
}
ALL_PAIRS, PRIMARY = "all distinct pairs", "primary"


def unit_metric(result, task: str) -> str | None:
    """The first metric of ``task`` that can be recomputed from its units."""
    t = result.tasks.get(task)
    if t is None:
        return None
    return next((name for name, m in t.metrics.items() if m.units), None)


def verdict_scopes(base, tasks, primary: tuple[str, str]) -> list[tuple[str, str]]:
    """``(task, metric)`` of each verdict table, the extended contract first."""
    out = []
    for task in CONTRACTS:
        metric = unit_metric(base, task) if task in tasks else None
        if metric is not None:
            out.append((task, metric))
    return out or [primary]


def _units(result, task, metric):
    t = result.tasks[task]
    return t.matrix(metric), t.metrics[metric].statistic


def _verdict(base, ca, cb, a: str, b: str, task: str, metric: str, margin, n_boot: int):
    """The Verdict of cell ``b`` against cell ``a``, or why none can be stated (a string)."""
    ra, rb = ca["result"], cb["result"]
    if any(task not in r.tasks for r in (ra, rb, base)):
        return f"not tested: {task} missing from a cell"
    m = ra.tasks[task].metrics[metric]
    if not m.units:
        return f"not tested: {task}/{metric} has no per-unit values"
    try:
        (ua, stat), (ub, _), (u0, _) = (_units(r, task, metric) for r in (ra, rb, base))
        return compare_cuts(
            ua,
            ub,
            stat,
            a=a,
            b=b,
            a_key=model_key(ca["plan"]),
            b_key=model_key(cb["plan"]),
            higher_is_better=m.higher_is_better,
            base_units=u0,
            clusters=articles(base, task),
            margin=margin,
            scope=f"{task}/{metric}",
            n_boot=n_boot,
        )
    except (ValueError, SwappruneError) as e:
        return f"not tested: {e}"


def _cost_ratio(base, ca, cb, task: str, metric: str, cost_a, cost_b, n_boot: int):
    """``cost(a) / cost(b)`` with its paired CI (articles resampled on the extended contract)."""
    if cost_a is None or not cost_b:
        return None  # no cost to divide by
    (ua, stat), (ub, _), (u0, _) = (
        _units(c, task, metric) for c in (ca["result"], cb["result"], base)
    )
    r = cost_ratio(u0, ua, ub, stat, articles(base, task), n_boot)
    return {"estimate": cost_a / cost_b, "ci": [_finite(r.low), _finite(r.high)]}


def _finite(x):
    return x if x is not None and math.isfinite(x) else None


def _holm_fields(v) -> dict:
    return {
        "family": v.family,
        "family_size": v.family_size,
        "p_holm": _finite(v.p_holm),
        "p_tost_holm": _finite(v.p_tost_holm),
        "mdd_holm": _finite(v.mdd_holm),
        "outcome_holm": v.outcome_holm,
        "label_holm": v.label_holm,
    }


def verdict_table(base, cells, task: str, metric: str, costs, margin, n_boot: int) -> dict:
    """The verdicts of every two non-random cells of each budget on one contract.

    Args:
        base: The unpruned model's :class:`~swapprune.evaluation.EvalResult`.
        cells: ``budget -> label -> {"plan", "result", ...}``.
        task, metric: The contract.
        costs: ``budget -> label -> cost in points`` on this contract (None when unmeasured).
        margin: The declared :class:`~swapprune.stats.verdicts.Margin`.
        n_boot: Bootstrap resamples.

    Returns:
        ``{"task", "metric", "contract", "families", "primary_contrasts", "rows"}``; each row
        is the :class:`~swapprune.stats.verdicts.Verdict` record (Holm over all distinct
        pairs in its flat ``*_holm`` fields), with ``budget``, ``primary`` (the primary
        family's Holm fields, or None) and ``cost_ratio``.
    """
    pending: list[dict] = []  # row records, and the index of each tested row's Verdict
    verdicts: list[Verdict] = []
    primaries: dict[int, list[list[str]]] = {}
    for budget, methods in sorted(cells.items()):
        labels = [lab for lab in methods if not is_random(lab)]
        higher = _higher_is_better(base, task, metric)
        contrasts = primary_contrasts(costs.get(budget, {}), higher)
        primaries[budget] = [list(p) for p in contrasts]  # in primary_contrasts' order
        wanted = {frozenset(p) for p in contrasts}
        for a, b in itertools.combinations(labels, 2):
            ca, cb = methods[a], methods[b]
            v = _verdict(base, ca, cb, a, b, task, metric, margin, n_boot)
            row = {"budget": budget, "a": a, "b": b, "task": task, "metric": metric}
            row["cost_a"], row["cost_b"] = (
                costs.get(budget, {}).get(a),
                costs.get(budget, {}).get(b),
            )
            if isinstance(v, str):
                pending.append({**row, "outcome": None, "label": v, "primary": None})
                continue
            row["is_primary"] = frozenset((a, b)) in wanted
            row["cost_ratio"] = (
                None
                if v.outcome == "identical"
                else _cost_ratio(base, ca, cb, task, metric, row["cost_a"], row["cost_b"], n_boot)
            )
            row["index"] = len(verdicts)
            verdicts.append(v)
            pending.append(row)
    everything = holm_distinct(verdicts, ALL_PAIRS)
    chosen = [i for i, r in enumerate(pending) if r.get("is_primary")]
    primary = holm_distinct([everything[pending[i]["index"]] for i in chosen], PRIMARY)
    by_row = dict(zip(chosen, primary, strict=True))
    rows = []
    for i, r in enumerate(pending):
        if "index" not in r:
            rows.append(r)
            continue
        v = everything[r.pop("index")]
        is_primary = r.pop("is_primary")
        record = {**r, **v.to_dict()}
        record["primary"] = _holm_fields(by_row[i]) if is_primary else None
        rows.append(record)
    k_all = everything[0].family_size if everything else 0
    k_primary = primary[0].family_size if primary else 0
    return {
        "task": task,
        "metric": metric,
        "contract": CONTRACTS.get(task, "primary metric"),
        "families": {ALL_PAIRS: k_all, PRIMARY: k_primary},
        "primary_contrasts": {str(b): p for b, p in primaries.items()},
        "rows": rows,
    }


def _higher_is_better(base, task: str, metric: str) -> bool:
    return bool(base.tasks[task].metrics[metric].higher_is_better) if task in base.tasks else False


# -- results.json ------------------------------------------------------------------------


def _metric_rows(result, base, tasks):
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
