"""Turn a comparison's evaluations into ``results.json``, ``results.md`` and plots.

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

SCHEMA = "swapprune.compare/1"


def _metric_rows(result, base, tasks):
    from swapprune.evaluation import compare

    rows = {}
    for task in tasks:
        if task not in result.tasks:
            continue
        rows[task] = {}
        for name, m in result.tasks[task].metrics.items():
            row = {"value": m.value, "ci": [m.low, m.high], "higher_is_better": m.higher_is_better}
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


def build_results(job, model_id, num_layers, base, cells, scores, tasks) -> dict:
    """The ``results.json`` document (see the module docstring)."""
    from swapprune.bootstrap import verdict
    from swapprune.evaluation import compare

    task, metric = _primary(base, tasks)
    budgets = []
    for budget, methods in sorted(cells.items()):
        entry = {"budget": budget, "methods": {}, "comparisons": []}
        for label, cell in methods.items():
            plan, res = cell["plan"], cell["result"]
            rows = _metric_rows(res, base, tasks)
            prim = rows.get(task, {}).get(metric, {})
            entry["methods"][label] = {
                "removed": plan.removed, "kept": plan.kept,
                "merged": {str(k): v for k, v in plan.merged.items()},
                "metrics": rows,
                "cost_pct": 100 * prim["rel_change"] if "rel_change" in prim else None,
                "cost_pct_ci": [100 * x for x in prim["rel_change_ci"]] if "rel_change_ci" in prim else None,
                "select_s": cell["select_s"], "eval_s": cell["eval_s"],
            }
        labels = [lab for lab in methods if not lab.startswith("random:")]
        for a, b in itertools.combinations(labels, 2):
            ca, cb = methods[a], methods[b]
            same = ca["plan"].kept == cb["plan"].kept and ca["plan"].merged == cb["plan"].merged
            cost_a = entry["methods"][a]["cost_pct"]
            cost_b = entry["methods"][b]["cost_pct"]
            comp = {"a": a, "b": b, "task": task, "metric": metric, "same_layers": same,
                    "ratio_of_costs": (cost_a / cost_b) if cost_a is not None and cost_b else None}
            if same:
                comp["verdict"] = "same layers: identical models"
            else:
                cmp, _ = compare(ca["result"], cb["result"], task, metric)
                higher = ca["result"].tasks[task].metrics[metric].higher_is_better
                comp["difference"] = {"estimate": cmp.difference.estimate,
                                      "ci": [cmp.difference.low, cmp.difference.high]}
                comp["verdict"] = verdict(cmp, higher, names=(a, b))
            entry["comparisons"].append(comp)
        randoms = [entry["methods"][lab]["cost_pct"] for lab in methods if lab.startswith("random:")]
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
            "limit": job.limit, "words": job.words, "max_length": job.max_length,
            "stride": job.max_length // 2,
            "ci": "95% percentile bootstrap, 1000 resamples over the task's units",
            "test": "paired bootstrap of the metric difference over the same units; "
                    "tie when its 95% CI includes zero",
            "cost": "relative change of the metric vs the unpruned model (dPPL% for perplexity)",
            "calibration": {"source": job.calib.calib or "wikitext2-valid",
                            "prompts": job.calib.prompts, "tokens": job.calib.tokens,
                            "positions": job.calib.positions, "seed": job.calib.seed},
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


def write_markdown(results: dict, path: Path) -> None:
    """The table a paper would print, with the verdict column."""
    task, metric = results["primary"]["task"], results["primary"]["metric"]
    base = results["baseline"][task][metric]
    lines = [
        f"# Pruning cost by protocol: {results['model']} ({results['num_layers']} blocks)",
        "",
        f"Metric: {task} / {metric}; baseline {_fmt(base['value'])} "
        f"[{_fmt(base['ci'][0])}, {_fmt(base['ci'][1])}]. "
        f"Cost = relative change vs the unpruned model; 95% CIs from a paired bootstrap.",
        "",
        "| n | method | removed (0-based) | value [95% CI] | cost [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for entry in results["budgets"]:
        for label, m in entry["methods"].items():
            r = m["metrics"][task][metric]
            ci = m["cost_pct_ci"] or [None, None]
            lines.append(
                f"| {entry['budget']} | {label} | {m['removed'] or list(m['merged'].items())} | "
                f"{_fmt(r['value'])} [{_fmt(r['ci'][0])}, {_fmt(r['ci'][1])}] | "
                f"{_fmt(m['cost_pct'], True)} [{_fmt(ci[0], True)}, {_fmt(ci[1], True)}] |"
            )
        if "random_mean_cost_pct" in entry:
            lines.append(f"| {entry['budget']} | random (mean of seeds) | | | "
                         f"{_fmt(entry['random_mean_cost_pct'], True)} |")
    lines += ["", "| n | A vs B | cost ratio A/B | difference [95% CI] | verdict |", "|---|---|---|---|---|"]
    for entry in results["budgets"]:
        for c in entry["comparisons"]:
            d = c.get("difference")
            diff = f"{_fmt(d['estimate'])} [{_fmt(d['ci'][0])}, {_fmt(d['ci'][1])}]" if d else "0"
            lines.append(f"| {entry['budget']} | {c['a']} vs {c['b']} | {_fmt(c['ratio_of_costs'])} | "
                         f"{diff} | {c['verdict']} |")
    reg = results.get("regime")
    if reg:
        lines += ["", f"Probe regime (adjacent pairs): **{reg['call']}**: median d_repl "
                      f"{reg['median_replacement']:.3g}, d_inter {reg['median_interchange']:.3g}, "
                      f"I/R {_fmt(reg['median_ir'])}. {reg['advice']}."]
    path.write_text("\n".join(lines) + "\n")


def write_plots(results: dict, scores, out: Path) -> list[Path]:
    """Cost vs budget per method, distance heatmaps, and I/R along depth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    fig, ax = plt.subplots(figsize=(6, 4))
    labels = sorted({lab for e in results["budgets"] for lab in e["methods"]})
    for lab in labels:
        pts = [(e["budget"], e["methods"][lab]) for e in results["budgets"] if lab in e["methods"]]
        pts = [(b, m) for b, m in pts if m["cost_pct"] is not None]
        if not pts:
            continue
        xs = [b for b, _ in pts]
        ys = [m["cost_pct"] for _, m in pts]
        style = dict(alpha=0.35, lw=1) if lab.startswith("random:") else dict(lw=2, marker="o")
        ax.plot(xs, ys, label=lab, **style)
        if not lab.startswith("random:"):
            lo = [m["cost_pct_ci"][0] for _, m in pts]
            hi = [m["cost_pct_ci"][1] for _, m in pts]
            ax.fill_between(xs, lo, hi, alpha=0.15)
    ax.set_xlabel("blocks removed")
    ax.set_ylabel(f"cost: {results['primary']['metric']} change vs base (%)")
    ax.set_title(results["model"])
    ax.legend(fontsize=7)
    fig.tight_layout()
    written.append(out / "cost_vs_budget.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    if scores is not None and scores.pairs:
        written += plot_scores(scores, out)
    return written


def plot_scores(scores, out: Path) -> list[Path]:
    """Heatmaps of d_repl and d_inter side by side, and per-pair I/R along depth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    L = scores.num_layers
    mats = {p: np.full((L, L), np.nan) for p in ("replacement", "interchange")}
    for (i, j) in scores.pairs:
        for p in mats:
            if p in scores.protocols():
                mats[p][i, j] = mats[p][j, i] = scores.distance(p, i, j)
    vals = np.concatenate([m[np.isfinite(m)] for m in mats.values()])
    written = []
    if vals.size and (vals > 0).any():
        norm = LogNorm(vmin=max(vals[vals > 0].min(), 1e-6), vmax=vals.max())
        fig, axes = plt.subplots(1, 2, figsize=(10, 4.4))
        for ax, (p, m) in zip(axes, mats.items()):
            im = ax.imshow(np.ma.masked_invalid(m), norm=norm, cmap="viridis")
            ax.set_title(f"{ {'replacement': 'd_repl', 'interchange': 'd_inter'}[p]} (nats, {scores.meta.get('positions')} positions)")
            ax.set_xlabel("block j")
            ax.set_ylabel("block i")
        fig.colorbar(im, ax=axes, shrink=0.8)
        written.append(out / "distance_heatmaps.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    adj = sorted(k for k in scores.pairs if k[1] - k[0] == 1)
    if adj and {"replacement", "interchange"} <= set(scores.protocols()):
        d = scores.to_dict()
        rows = {(r["i"], r["j"]): r for r in d["pairs"]}
        xs = [i for i, _ in adj]
        ir = [rows[k]["ir_ratio"]["value"] or np.nan for k in adj]
        lo = [rows[k]["ir_ratio"]["ci"][0] for k in adj]
        hi = [rows[k]["ir_ratio"]["ci"][1] for k in adj]
        fig, ax = plt.subplots(figsize=(7, 3.6))
        ax.plot(xs, ir, marker="o", label="I/R = d_inter / d_repl")
        ax.fill_between(xs, lo, hi, alpha=0.2, label="95% bootstrap CI")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_xlabel("pair (i, i+1), i")
        ax.set_ylabel("I/R")
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(out / "ir_along_depth.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    return written
