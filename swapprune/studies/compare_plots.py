"""The plots of a comparison and of a scores file (matplotlib, imported when called).

:func:`write_plots` draws the cost of each criterion against the budget from a
``results.json`` document (:mod:`swapprune.studies.compare_report`); :func:`plot_scores`
draws a scores file's distances. The numbers and verdicts live in the report
module; nothing here computes them.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from swapprune.output.artifacts import save_figure
from swapprune.select.regime import HIGH as CONDITIONAL
from swapprune.select.regime import REPL_FLOOR as STRONG

#: One marker and dash per method, so lines that lie on each other stay apart.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DASHES = ("-", "--", "-.", ":")
#: Methods at one budget are drawn this far apart on the budget axis (a fraction of a step).
SPREAD = 0.12


def _short(model: str) -> str:
    """A model id for a plot title: the hub id, or the last part of a path."""
    return (
        model
        if model.count("/") == 1 and not model.startswith(("/", "."))
        else Path(model.rstrip("/")).name
    )


def _setting(results: dict) -> str:
    c = results["contract"]
    task = results["primary"]["task"]
    base = results["baseline"].get(task, {})
    n = next((m.get("n") for m in base.values() if isinstance(m, dict) and m.get("n")), None)
    text = task.removeprefix("swapprune_")
    if n:
        text += f", {n} units"
    if c.get("limit"):
        text += f", limit {c['limit']} (not the contract)"
    return text


def write_plots(results: dict, scores, out: Path) -> list[Path]:
    """Cost vs budget per method, and the probe distances (see :func:`plot_scores`)."""
    import matplotlib  # imports matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # imports matplotlib
    from matplotlib.patches import Patch  # imports matplotlib
    from matplotlib.ticker import MaxNLocator  # imports matplotlib

    written = []
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    labels = sorted({lab for e in results["budgets"] for lab in e["methods"]})
    named = [lab for lab in labels if not lab.startswith("random:")]
    seen_random = False
    for lab in labels:
        pts = [(e["budget"], e["methods"][lab]) for e in results["budgets"] if lab in e["methods"]]
        pts = [(b, m) for b, m in pts if m["cost_pct"] is not None]
        if not pts:
            continue
        ys = [m["cost_pct"] for _, m in pts]
        if lab.startswith("random:"):
            xs = [b for b, _ in pts]
            ax.plot(
                xs,
                ys,
                color="grey",
                alpha=0.35,
                lw=1,
                label=None if seen_random else "random (one line per seed, labelled at its end)",
            )
            ax.annotate(
                f"seed {lab.split(':', 1)[1]}",
                (xs[-1], ys[-1]),
                xytext=(3, 0),
                textcoords="offset points",
                fontsize=6,
                color="grey",
                va="center",
            )
            seen_random = True
            continue
        k = named.index(lab)
        # Methods that cost the same would hide each other: each gets its own small offset
        # along the budget axis, marker and dash.
        shift = (k - (len(named) - 1) / 2) * SPREAD / max(1, len(named) - 1) * 2
        xs = [b + shift for b, _ in pts]
        (line,) = ax.plot(
            xs,
            ys,
            label=lab,
            lw=1.8,
            marker=MARKERS[k % len(MARKERS)],
            ls=DASHES[k % len(DASHES)],
            ms=5,
        )
        lo = [m["cost_pct_ci"][0] for _, m in pts]
        hi = [m["cost_pct_ci"][1] for _, m in pts]
        ax.fill_between(xs, lo, hi, alpha=0.12, color=line.get_color())
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("blocks removed (budget n)")
    ax.set_ylabel(f"cost: {results['primary']['metric']} change vs unpruned (%)")
    title = f"{_short(results['model'])}: pruning cost ({_setting(results)})"
    ax.set_title(textwrap.fill(title, 72), fontsize=9)  # wrapped, never cut off
    handles, names = ax.get_legend_handles_labels()
    handles.append(Patch(color="grey", alpha=0.15))
    names.append("shaded: 95% bootstrap CI")
    ax.legend(handles, names, fontsize=7)
    fig.tight_layout()
    written.append(out / "cost_vs_budget.png")
    save_figure(fig, written[-1], dpi=120)
    plt.close(fig)
    if scores is not None and scores.pairs:
        written += plot_scores(scores, out)
    return written


def plot_scores(scores, out: Path) -> list[Path]:
    """Probe distances: along depth for adjacent pairs, as heatmaps when farther pairs exist.

    Also the per-pair protocol gap ``I/R`` along depth.
    """
    import matplotlib  # imports matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # imports matplotlib
    from matplotlib.colors import LogNorm  # imports matplotlib
    from matplotlib.ticker import MaxNLocator  # imports matplotlib

    L = scores.num_layers
    positions = scores.meta.get("positions")
    names = {"replacement": "d_repl", "interchange": "d_inter"}
    protos = [p for p in names if p in scores.protocols()]
    adj = sorted(k for k in scores.pairs if k[1] - k[0] == 1)
    written = []
    if adj and protos:
        fig, ax = plt.subplots(figsize=(7, 3.8))
        for k, p in enumerate(protos):
            ax.plot(
                [i for i, _ in adj],
                [scores.distance(p, i, j) for i, j in adj],
                marker=MARKERS[k],
                ls=DASHES[k],
                label=names[p],
            )
        ax.axhline(
            STRONG,
            color="green",
            lw=0.8,
            ls=":",
            label=f"{STRONG}: strongly swap-similar below (paper's band)",
        )
        ax.axhline(
            CONDITIONAL,
            color="orange",
            lw=0.8,
            ls="--",
            label=f"{CONDITIONAL}: not swap-similar above (paper's band)",
        )
        ax.set_yscale("log")
        ax.set_xlabel("adjacent pair (i, i+1): i")
        ax.set_ylabel(f"KL(p_base || p_swapped), nats ({positions} positions)")
        ax.set_title(
            f"{_short(str(scores.meta.get('model', '')))}: adjacent-pair swap distances", fontsize=9
        )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7)
        fig.tight_layout()
        written.append(out / "distances_along_depth.png")
        save_figure(fig, written[-1], dpi=120)
        plt.close(fig)
    if any(j - i > 1 for i, j in scores.pairs) and protos:
        mats = {p: np.full((L, L), np.nan) for p in protos}
        for i, j in scores.pairs:
            for p in mats:
                mats[p][i, j] = mats[p][j, i] = scores.distance(p, i, j)
        vals = np.concatenate([m[np.isfinite(m)] for m in mats.values()])
        if vals.size and (vals > 0).any():
            norm = LogNorm(vmin=max(vals[vals > 0].min(), 1e-6), vmax=vals.max())
            fig, axes = plt.subplots(1, len(mats), figsize=(5 * len(mats), 4.4), squeeze=False)
            for ax, (p, m) in zip(axes[0], mats.items()):
                im = ax.imshow(np.ma.masked_invalid(m), norm=norm, cmap="viridis")
                ax.set_title(f"{names[p]} ({positions} positions); blank = not scored", fontsize=9)
                ax.set_xlabel("block j")
                ax.set_ylabel("block i")
            cbar = fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
            cbar.set_label("KL(p_base || p_swapped), nats")
            written.append(out / "distance_heatmaps.png")
            save_figure(fig, written[-1], dpi=120)
            plt.close(fig)
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
        ax.axhline(1.0, color="grey", lw=0.8, ls="--", label="I/R = 1: no protocol gap")
        ax.set_yscale("log")
        ax.set_xlabel("adjacent pair (i, i+1): i")
        ax.set_ylabel("I/R")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(
            f"{_short(str(scores.meta.get('model', '')))}: protocol gap along depth "
            f"({positions} positions)",
            fontsize=9,
        )
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(out / "ir_along_depth.png")
        save_figure(fig, written[-1], dpi=120)
        plt.close(fig)
    return written
