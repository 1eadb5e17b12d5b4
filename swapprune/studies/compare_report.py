"""Turn a comparison's evaluations into ``results.json`` and ``results.md``.

Every relative change and every verdict comes from a *paired* bootstrap over
the same units (windows for perplexity, documents, examples):
:func:`swapprune.evaluation.compare`. A verdict is ``tie`` when the 95% CI of
the difference between two methods includes zero.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np

from swapprune.evaluation import contract

SCHEMA = "swapprune.compare/1"


def _metric_rows(result, base, tasks):
    from swapprune.evaluation import compare

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
            if m.units and base is not None:
                cmp, _ = compare(base, result, task, name)
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


ALPHA = 0.05


def _finite(x):
    return x if x is not None and math.isfinite(x) else None


def _units(result, task, metric):
    t = result.tasks[task]
    return t.matrix(metric), t.metrics[metric].statistic


def _comparison(base, ca, cb, a: str, b: str, task: str, metric: str, rows: dict) -> dict:
    """Method ``b`` against method ``a`` at one budget: every test the report states.

    * paired: bootstrap of ``b - a`` over the same units (tie when its CI holds 0),
      with its p-value and the minimum detectable difference (80% power);
    * overlap: the paper's test, tie when the two marginal CIs overlap;
    * ratio of costs ``cost(a) / cost(b)`` with a paired CI (the pruning-level I/R
      when ``a`` is interchange and ``b`` replacement).
    """
    from swapprune.evaluation import compare
    from swapprune.stats.bootstrap import (
        Interval,
        intervals_overlap,
        minimum_detectable_difference,
        paired_cost_ratio,
        verdict,
    )

    # A cost is undefined (None, or NaN from a zero baseline) when the metric has no units
    # or no base to be relative to; no ratio of such costs is stated.
    cost_a, cost_b = (_finite(rows[x]["cost_pct"]) for x in (a, b))
    same = ca["plan"].kept == cb["plan"].kept and ca["plan"].merged == cb["plan"].merged
    comp: dict = {
        "a": a,
        "b": b,
        "task": task,
        "metric": metric,
        "same_layers": same,
        "ratio_of_costs": (cost_a / cost_b) if cost_a is not None and cost_b else None,
    }
    if same:
        comp["verdict"] = "same layers: identical models"
        comp["overlap_verdict"] = comp["verdict"]
        return comp
    cmp, _ = compare(ca["result"], cb["result"], task, metric)
    ma = ca["result"].tasks[task].metrics[metric]
    mb = cb["result"].tasks[task].metrics[metric]
    higher = ma.higher_is_better
    comp["difference"] = {
        "estimate": cmp.difference.estimate,
        "ci": [cmp.difference.low, cmp.difference.high],
    }
    comp["verdict"] = verdict(cmp, higher, names=(a, b))
    comp["p_value"] = cmp.p_value
    comp["winner"] = b if (cmp.difference.estimate > 0) == higher else a
    mdd = minimum_detectable_difference(cmp.se)
    comp["mdd"] = mdd
    base_value = base.tasks[task].metrics[metric].value
    comp["mdd_pct"] = 100 * mdd / base_value if base_value else None
    overlap = intervals_overlap(
        Interval(ma.value, ma.low, ma.high), Interval(mb.value, mb.low, mb.high)
    )
    comp["overlap_verdict"] = "tie" if overlap else f"{comp['winner']} better"
    if ma.units and cost_a is not None and cost_b:
        (ua, stat), (ub, _), (u0, _) = (
            _units(ca["result"], task, metric),
            _units(cb["result"], task, metric),
            _units(base, task, metric),
        )
        r = paired_cost_ratio(u0, ua, ub, stat)
        comp["ratio_of_costs_ci"] = [r.low, r.high]
    return comp


def _holm(comparisons: list[dict]) -> None:
    """Holm-adjust the paired p-values of one table (identical-model rows are not tests)."""
    from swapprune.stats.bootstrap import holm

    tested = [c for c in comparisons if "p_value" in c]
    for c, p in zip(tested, holm([c["p_value"] for c in tested]), strict=True):
        c["p_holm"] = p
        c["verdict_holm"] = "tie" if p >= ALPHA else f"{c['winner']} better"


def build_results(job, model_id, num_layers, base, cells, scores, tasks) -> dict:
    """The ``results.json`` document (see the module docstring)."""
    task, metric = _primary(base, tasks)
    budgets = []
    for budget, methods in sorted(cells.items()):
        entry = {"budget": budget, "methods": {}, "comparisons": []}
        for label, cell in methods.items():
            plan, res = cell["plan"], cell["result"]
            rows = _metric_rows(res, base, tasks)
            prim = rows.get(task, {}).get(metric, {})
            entry["methods"][label] = {
                "removed": plan.removed,
                "kept": plan.kept,
                "merged": {str(k): v for k, v in plan.merged.items()},
                "metrics": rows,
                "cost_pct": 100 * prim["rel_change"] if "rel_change" in prim else None,
                "cost_pct_ci": [100 * x for x in prim["rel_change_ci"]]
                if "rel_change_ci" in prim
                else None,
                "select_s": cell["select_s"],
                "eval_s": cell["eval_s"],
            }
        labels = [lab for lab in methods if not lab.startswith("random:")]
        for a, b in itertools.combinations(labels, 2):
            entry["comparisons"].append(
                _comparison(base, methods[a], methods[b], a, b, task, metric, entry["methods"])
            )
        _holm(entry["comparisons"])
        randoms = [
            entry["methods"][lab]["cost_pct"] for lab in methods if lab.startswith("random:")
        ]
        if randoms and all(r is not None for r in randoms):
            entry["random_mean_cost_pct"] = float(np.mean(randoms))
        budgets.append(entry)
    base_rows = _metric_rows(base, None, tasks)
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
            "ci": f"95% percentile bootstrap, {job.eval.bootstrap} resamples over the task's units",
            "test": "paired bootstrap of the metric difference over the same units; "
            "tie when its 95% CI includes zero; p-values Holm-adjusted across the "
            "comparisons of one budget; overlap verdict: tie when the two marginal "
            "95% CIs overlap (the paper's test); mdd: the difference detectable with "
            "80% power at alpha 0.05",
            "cost": "relative change of the metric vs the unpruned model (dPPL% for perplexity)",
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
        "baseline": base_rows,
        "budgets": budgets,
    }


def _fmt(x, pct=False):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.1f}%" if pct else f"{x:.4g}"


def _contract_lines(results: dict) -> list[str]:
    """What the numbers were measured on, and a warning when it is not the matched contract."""
    c = results["contract"]
    task = results["primary"]["task"]
    base = results["baseline"].get(task, {})
    n = next((m.get("n") for m in base.values() if isinstance(m, dict) and m.get("n")), None)
    lines = []
    if task == "swapprune_wikitext2_ppl":
        lines.append(
            f"Setting: WikiText-2 test, first {c['words']} words, windows of "
            f"{c['max_length']} tokens, stride {c['stride']}"
            + (f", {n} windows" if n else "")
            + "."
        )
    matched = c.get("words") == 5000 and c.get("max_length") == 512 and not c.get("limit")
    if c.get("limit"):
        lines.append(
            f"**Warning: limit {c['limit']}: only the first {c['limit']} units of each "
            "task were evaluated. This is a quick look, not the matched contract; "
            "verdicts have less power.**"
        )
    elif task == "swapprune_wikitext2_ppl" and not matched:
        lines.append(
            "**Warning: these settings differ from the paper's matched contract "
            "(5000 words, 512-token windows).**"
        )
    return lines


def write_markdown(results: dict, path: Path) -> None:
    """The table a paper would print, with the verdict column."""
    task, metric = results["primary"]["task"], results["primary"]["metric"]
    base = results["baseline"][task][metric]
    lines = [
        f"# Pruning cost by protocol: {results['model']} ({results['num_layers']} blocks)",
        "",
        f"Metric: {task} / {metric}; baseline {_fmt(base['value'])} "
        f"[{_fmt(base['ci'][0])}, {_fmt(base['ci'][1])}]. "
        f"Cost = relative change vs the unpruned model (positive = worse for a lower-is-better "
        f"metric); 95% CIs from a bootstrap over the same units.",
        *_contract_lines(results),
        "",
        "| n | method | removed (0-based) | value [95% CI] | cost [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for entry in results["budgets"]:
        for label, m in entry["methods"].items():
            r = m["metrics"].get(task, {}).get(metric, {"value": None, "ci": [None, None]})
            ci = m["cost_pct_ci"] or [None, None]
            lines.append(
                f"| {entry['budget']} | {label} | {m['removed'] or list(m['merged'].items())} | "
                f"{_fmt(r['value'])} [{_fmt(r['ci'][0])}, {_fmt(r['ci'][1])}] | "
                f"{_fmt(m['cost_pct'], True)} [{_fmt(ci[0], True)}, {_fmt(ci[1], True)}] |"
            )
        if "random_mean_cost_pct" in entry:
            lines.append(
                f"| {entry['budget']} | random (mean of seeds) | | | "
                f"{_fmt(entry['random_mean_cost_pct'], True)} |"
            )
    lines += [
        "",
        f"Verdicts. Paired: B - A is the difference of {metric} over the same units; tie "
        "when its 95% CI includes zero. Holm: the paired p-values adjusted across the "
        "comparisons of one budget (tie when >= 0.05). Overlap: the paper's test, tie when "
        "the two marginal 95% CIs overlap. MDD: the smallest difference the paired test "
        "detects with 80% power, as cost points (% of the baseline). Cost ratio: "
        "cost(A) / cost(B) with a paired 95% CI (interchange vs replacement: the "
        "pruning-level I/R).",
        "",
        f"| n | A vs B | B - A ({metric}) [95% CI] | p (Holm) | paired | Holm | overlap | "
        "MDD (pts) | cost A / B [95% CI] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in results["budgets"]:
        for c in entry["comparisons"]:
            d = c.get("difference")
            diff = f"{_fmt(d['estimate'])} [{_fmt(d['ci'][0])}, {_fmt(d['ci'][1])}]" if d else "0"
            p = f"{c['p_value']:.3g} ({c['p_holm']:.3g})" if "p_holm" in c else ""
            rci = c.get("ratio_of_costs_ci")
            ratio = _fmt(c.get("ratio_of_costs")) + (
                f" [{_fmt(rci[0])}, {_fmt(rci[1])}]" if rci else ""
            )
            mdd = f"{c['mdd_pct']:.1f}" if c.get("mdd_pct") is not None else ""
            lines.append(
                f"| {entry['budget']} | {c['a']} vs {c['b']} | {diff} | {p} | {c['verdict']} | "
                f"{c.get('verdict_holm', '')} | {c['overlap_verdict']} | {mdd} | {ratio} |"
            )
    reg = results.get("regime")
    if reg:
        lines += [
            "",
            f"Probe regime (adjacent pairs): **{reg['call']}**: median d_repl "
            f"{reg['median_replacement']:.3g}, d_inter {reg['median_interchange']:.3g}, "
            f"I/R {_fmt(reg['median_ir'])}. {reg['advice']}.",
        ]
    path.write_text("\n".join(lines) + "\n")
