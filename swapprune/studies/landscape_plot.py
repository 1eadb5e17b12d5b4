"""``landscape.png``: every set's cost, and where each criterion's cut falls among them.

Left: the screening cost of every admissible set against its rank (both axes
logarithmic when they span decades), each criterion's set marked and labelled
where it falls. Right: the refined sets on the held-out windows, cheapest at the
top, with 95% bootstrap intervals; the criteria's sets are coloured and named.
matplotlib is imported lazily: the JSON is the result, the picture a view of it.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path


def _groups(criteria: list[dict]) -> dict[tuple, list[str]]:
    """Criteria that chose the same set share one mark."""
    out: dict[tuple, list[str]] = defaultdict(list)
    for c in criteria:
        out[tuple(c["set"])].append(c["criterion"])
    return out


def write_picture(state: dict, path: str | Path) -> None:
    """Draw the landscape of a complete ``landscape.json`` state into ``path``."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display is needed or wanted
    import matplotlib.pyplot as plt

    res = state["result"]
    rows = res["sets"]
    crit = res["criteria"]
    costs = [r["screening_cost_points"] for r in rows]
    ranks = list(range(1, len(costs) + 1))
    groups = _groups(crit)
    colours = plt.get_cmap("tab10")
    colour = {s: colours(i % 10) for i, s in enumerate(groups)}

    fig, (left, right) = plt.subplots(
        1, 2, figsize=(13, 6.2), gridspec_kw={"width_ratios": [1.35, 1]}
    )
    left.plot(ranks, costs, color="0.35", lw=1.2, zorder=1)
    left.scatter(ranks, costs, s=6, color="0.35", zorder=1)
    positive = min(costs) > 0
    if positive and max(costs) / min(costs) > 30:
        left.set_yscale("log")
    if len(costs) > 60:
        left.set_xscale("log")
    best = res["best"]
    if best.get("screening_rank"):
        r = best["screening_rank"]
        left.scatter([r], [costs[r - 1]], s=150, marker="*", color="black", zorder=4)
        left.annotate(
            f"best held-out {best['set']}",
            (r, costs[r - 1]),
            xytext=(12, -4),
            textcoords="offset points",
            fontsize=8,
        )
    placed = 0
    for s, names in sorted(groups.items(), key=lambda kv: _rank_of(crit, kv[0])):
        c = next(c for c in crit if tuple(c["set"]) == s)
        if c["screening_cost_points"] is None:
            continue
        x = c["rank"]
        y = c["screening_cost_points"]
        left.scatter([x], [y], s=60, color=colour[s], edgecolor="black", zorder=3)
        dy = 26 + 14 * (placed % 4)
        left.annotate(
            f"{', '.join(names)} {list(s)}" + ("" if c["admissible"] else " (outside)"),
            (x, y),
            xytext=(-10 if placed % 2 else 8, dy if placed % 2 == 0 else -dy),
            textcoords="offset points",
            fontsize=8,
            color=colour[s],
            arrowprops={"arrowstyle": "-", "color": colour[s], "lw": 0.8},
        )
        placed += 1
    n = state["settings"]["budget"]
    w = state["windows"]["rounds"][0]
    left.set_xlabel(f"rank among the {len(costs)} admissible sets of {n} blocks")
    left.set_ylabel("screening cost (dPPL points)")
    left.set_title(
        f"every set, screened on {w['prompts']} x {w['tokens']} tokens "
        f"({state['rounds'][0]['dtype']})",
        fontsize=10,
    )
    left.grid(True, which="both", alpha=0.25)

    refined = res["refined"]
    ys = list(range(len(refined)))[::-1]
    for y, r in zip(ys, refined):
        s = tuple(r["set"])
        col = colour.get(s, "0.55")
        lo, hi = r["cost_ci"]
        right.plot([lo, hi], [y, y], color=col, lw=2 if s in colour else 1.2)
        right.scatter([r["cost_points"]], [y], color=col, s=28 if s in colour else 14, zorder=3)
    labels = []
    for r in refined:
        s = tuple(r["set"])
        named = groups.get(s)
        labels.append(f"{list(s)}  {', '.join(named)}" if named else str(list(s)))
    right.set_yticks(ys)
    right.set_yticklabels(labels, fontsize=7)
    for tick, r in zip(right.get_yticklabels(), refined):
        if tuple(r["set"]) in colour:
            tick.set_color(colour[tuple(r["set"])])
    h = state["windows"]["refine"]
    right.set_xlabel("held-out cost (dPPL points, 95% CI)")
    right.set_title(f"refined on {h['prompts']} held-out x {h['tokens']} tokens", fontsize=10)
    right.grid(True, axis="x", alpha=0.25)
    fig.suptitle(
        f"{state['model']['id'] or 'model'}: all {len(costs)} removal sets of {n} blocks",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _rank_of(crit: list[dict], s: tuple) -> float:
    c = next(c for c in crit if tuple(c["set"]) == s)
    return c["rank"] if c["rank"] is not None else float("inf")
