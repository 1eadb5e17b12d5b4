"""The report of a complete landscape: every set's rank, the refined sets, each criterion's row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from swapprune.select.landscape import (
    Removal,
    costs_points,
    parse_key,
    percentile_rank,
    refined_rows,
)


def arrays(rec: dict) -> dict[Removal, np.ndarray]:
    """``{set: per-window NLL}`` of one stage's record in ``landscape.json``."""
    return {parse_key(k): np.asarray(v, dtype=np.float64) for k, v in rec["nll"].items()}


def result(
    state: dict, sets: Sequence[Removal], final: Sequence[Removal], picks: dict, settings
) -> dict:
    """Every set's screening cost and rank, the refined sets' held-out costs, each criterion's row."""
    r0 = state["rounds"][0]
    tokens0, base0 = np.asarray(r0["tokens"]), np.asarray(r0["base"])
    costs0 = costs_points(arrays(r0), base0, tokens0)
    adm = [costs0[s] for s in sets]
    later = []
    for rec in state["rounds"][1:]:
        later.append(costs_points(arrays(rec), np.asarray(rec["base"]), np.asarray(rec["tokens"])))
    ref = state["refine"]
    best, rows = refined_rows(
        arrays(ref),
        np.asarray(ref["base"]),
        np.asarray(ref["tokens"]),
        settings.n_boot,
        settings.seed,
    )
    by_heldout = sorted(rows, key=lambda s: (rows[s]["cost_points"], s))
    order = sorted(sets, key=lambda s: (costs0[s], s))
    table = []
    for s in order:
        rank, pct = percentile_rank(costs0[s], adm)
        row: dict[str, Any] = {"set": list(s), "screening_cost_points": costs0[s], "rank": rank,
                               "percentile": pct}  # fmt: skip
        extra = [c[s] for c in later if s in c]
        if extra:
            row["later_rounds_cost_points"] = extra
        if s in rows:
            row["heldout"] = rows[s] | {"rank": by_heldout.index(s) + 1}
        table.append(row)
    crit = []
    admitted = set(sets)
    for name, s in picks.items():
        member = s in admitted
        rank, pct = percentile_rank(costs0[s], adm, member)
        rounds = 1 + sum(1 for c in later if s in c)
        crit.append({
            "criterion": name,
            "set": list(s),
            "admissible": member,
            "screening_cost_points": costs0.get(s),
            "rank": rank,
            "of": len(adm),
            "percentile": pct,
            "screened_out": member and s not in set(final),
            "rounds": rounds if member else None,
            **{k: v for k, v in rows[s].items()},
            "heldout_rank": by_heldout.index(s) + 1,
        })  # fmt: skip
    crit.sort(key=lambda c: (c["cost_points"], c["criterion"]))
    return {
        "best": {
            "set": list(best),
            **rows[best],
            "screening_rank": (order.index(best) + 1) if best in admitted else None,
        },
        "sets": table,
        "refined": [{"set": list(s), **rows[s]} for s in by_heldout],
        "criteria": crit,
        "summary": _summary(best, rows, crit, len(adm)),
    }


def _summary(best, rows, crit, count) -> list[str]:
    lines = [
        f"best of {count} sets on the held-out windows: {list(best)} at "
        f"{rows[best]['cost_points']:+.1f} dPPL points [{rows[best]['cost_ci'][0]:+.1f}, "
        f"{rows[best]['cost_ci'][1]:+.1f}]"
    ]
    for c in crit:
        rank = (
            f"rank {c['rank']} of {c['of']} ({c['percentile']:.1f}%)" if c["rank"] else "unranked"
        )
        lines.append(
            f"{c['criterion']}: {c['set']} {rank}, regret {c['regret_points']:+.1f} "
            f"[{c['regret_ci'][0]:+.1f}, {c['regret_ci'][1]:+.1f}] points"
        )
    return lines
