"""``landscape.png``: every set's cost, and where each criterion's cut falls among them.

Left: the screening cost of every admissible set against its rank (both axes
logarithmic when they span decades); each criterion's set is a coloured mark,
and the legend says which criteria chose it, its rank and its regret. Right:
the refined sets on the held-out windows, cheapest at the top, with 95%
bootstrap intervals, in the same colours; a set far costlier than the others
is drawn at the edge with its value written beside it. matplotlib is imported
lazily: the JSON is the result, the picture a view of it.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from pathlib import Path

from swapprune.output.artifacts import save_figure

MARKERS = "osD^vP*Xhp"


def _groups(criteria: list[dict]) -> dict[tuple, list[str]]:
    """Criteria that chose the same set share one mark, in the order of their cost."""
    out: dict[tuple, list[str]] = defaultdict(list)
    for c in criteria:
        out[tuple(c["set"])].append(c["criterion"])
    return out


def write_picture(state: dict, path: str | Path) -> None:
    """Draw the landscape of a complete ``landscape.json`` state into ``path``."""
    import matplotlib  # imports matplotlib

    matplotlib.use("Agg")  # files only: no display is needed or wanted
    import matplotlib.pyplot as plt  # imports matplotlib

    res = state["result"]
    rows, crit = res["sets"], res["criteria"]
    costs = [r["screening_cost_points"] for r in rows]
    groups = _groups(crit)
    by_set = {tuple(c["set"]): c for c in crit}
    palette = plt.get_cmap("tab10")
    colour = {s: palette(i % 10) for i, s in enumerate(groups)}
    marker = {s: MARKERS[i % len(MARKERS)] for i, s in enumerate(groups)}

    fig, (left, right) = plt.subplots(
        1, 2, figsize=(14, 6.5), gridspec_kw={"width_ratios": [1.5, 1]}
    )
    ranks = range(1, len(costs) + 1)
    left.plot(ranks, costs, color="0.45", lw=1.2, zorder=1, label="_all")
    if min(costs) > 0 and max(costs) / min(costs) > 30:
        left.set_yscale("log")
    if len(costs) > 60:
        left.set_xscale("log")
    for s, names in groups.items():
        c = by_set[s]
        if c["screening_cost_points"] is None:
            continue
        outside = "" if c["admissible"] else ", outside the constraints"
        who = textwrap.fill(", ".join(names), 58, subsequent_indent="   ")
        label = (
            f"{list(s)}  rank {c['rank']} of {c['of']} ({c['percentile']:.1f}%), regret "
            f"{c['regret_points']:+.1f} [{c['regret_ci'][0]:+.1f}, {c['regret_ci'][1]:+.1f}]"
            f"{outside}\n   {who}"
        )
        left.scatter(
            [c["rank"]], [c["screening_cost_points"]], s=110, marker=marker[s],
            color=colour[s], edgecolor="black", zorder=3, label=label,
        )  # fmt: skip
    best = res["best"]
    if best.get("screening_rank"):
        r = best["screening_rank"]
        left.scatter(
            [r], [costs[r - 1]], s=260, marker="*", facecolor="none", edgecolor="black",
            lw=1.4, zorder=4, label=f"{best['set']}: the best set on the held-out windows",
        )  # fmt: skip
    left.legend(
        loc="upper left", fontsize=7.5, frameon=True, framealpha=0.9, borderpad=0.6,
        title="each criterion's set: its screening rank; its held-out regret against the "
        "best, paired [95% CI]",
        title_fontsize=7.5,
    )  # fmt: skip
    n = state["settings"]["budget"]
    w = state["windows"]["rounds"][0]
    left.set_xlabel(f"rank among the {len(costs)} admissible sets of {n} blocks")
    left.set_ylabel("screening cost (dPPL points)")
    left.set_title(
        f"every set, screened on {w['prompts']} windows x {w['tokens']} tokens "
        f"({state['rounds'][0]['dtype']})",
        fontsize=10,
    )
    left.grid(True, which="both", alpha=0.2)
    _refined(right, res["refined"], colour, marker, state)
    fig.suptitle(
        f"{state['model']['id'] or 'model'}: where each criterion's cut of {n} blocks ranks "
        f"among all {len(costs)}",
        fontsize=11,
    )
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def _refined(ax, refined: list[dict], colour: dict, marker: dict, state: dict) -> None:
    """Held-out cost with CI of every refined set; far outliers pinned to the right edge."""
    plain = [r for r in refined if tuple(r["set"]) not in colour] or refined
    # The scale the top sets need: up to twice the costliest top set's interval (or the
    # costliest set, when all fit).
    edge = max(r["cost_ci"][1] for r in plain)
    low = min(r["cost_ci"][0] for r in refined)
    limit = edge + 1.0 * (edge - low) if any(r["cost_ci"][1] > 2 * edge for r in refined) else None
    ys = list(range(len(refined)))[::-1]
    for y, r in zip(ys, refined):
        s = tuple(r["set"])
        col = colour.get(s, "0.5")
        lo, hi = r["cost_ci"]
        x = r["cost_points"]
        size = 60 if s in colour else 16
        if limit is not None and lo > limit:
            ax.scatter([limit], [y], marker=">", s=size, color=col, zorder=3, clip_on=False)
            ax.annotate(
                f"{x:+.0f} [{lo:+.0f}, {hi:+.0f}]", (limit, y), xytext=(-6, 0),
                textcoords="offset points", ha="right", va="center", fontsize=7.5, color=col,
            )  # fmt: skip
            continue
        ax.plot(
            [lo, min(hi, limit) if limit else hi], [y, y], color=col, lw=2 if s in colour else 1
        )
        ax.scatter([x], [y], color=col, s=size, zorder=3, marker=marker.get(s, "o"))
    ax.set_yticks(ys)
    ax.set_yticklabels([str(r["set"]) for r in refined], fontsize=7.5)
    for tick, r in zip(ax.get_yticklabels(), refined):
        tick.set_color(colour.get(tuple(r["set"]), "0.25"))
    if limit is not None:
        ax.set_xlim(right=limit * 1.02 if limit > 0 else limit + 1)
    h = state["windows"]["refine"]
    ax.set_xlabel("held-out cost, dPPL points (each set's own 95% CI)")
    ax.set_title(
        f"the refined sets on {h['prompts']} held-out windows x {h['tokens']} tokens (float32)",
        fontsize=10,
    )
    ax.grid(True, axis="x", alpha=0.25)
