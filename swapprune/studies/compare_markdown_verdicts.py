"""``results.md``'s verdict tables, one per contract with every test a row states, and the regime."""

from __future__ import annotations

import math


def fmt(x, pct=False) -> str:
    """A number for a table cell (``n/a`` for None or NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.1f}%" if pct else f"{x:.4g}"


def interval(pair, pct=False) -> str:
    """``[lo, hi]`` for a table cell."""
    lo, hi = pair or (None, None)
    return f"[{fmt(lo, pct)}, {fmt(hi, pct)}]"


def _signed(x) -> str:
    return "n/a" if x is None else f"{x:+.2f}"


def _verdict_rows(table: dict, unit: str) -> list[str]:
    fam = table["families"]
    k, kp = fam["all distinct pairs"], fam["primary"]
    head = [
        "n",
        "A vs B",
        f"B - A ({'cost ' if unit == 'pts' else ''}{unit}) [95% CI]",
        "90% CI (TOST)",
        "p",
        "verdict",
        f"Holm over {k} distinct pairs: p, verdict",
        f"primary family ({kp}): p, verdict",
        "paper's overlap test",
        f"MDD ({unit})",
        "cost A / B [95% CI]",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table["rows"]:
        pair = f"{r['a']} vs {r['b']}"
        if r.get("outcome") in (None, "identical"):
            cells = [str(r["budget"]), pair, "", "", "", r["label"]] + [""] * 5
            lines.append("| " + " | ".join(cells) + " |")
            continue
        lo, hi = r["ci"]
        tlo, thi = r["ci_tost"]
        prim = r.get("primary")
        ratio = r.get("cost_ratio")
        cells = [
            str(r["budget"]),
            pair,
            f"{_signed(r['estimate'])} [{_signed(lo)}, {_signed(hi)}]",
            f"[{_signed(tlo)}, {_signed(thi)}]",
            f"{r['p_value']:.3g}",
            r["label"],
            f"{r['p_holm']:.3g}, {r['label_holm']}",
            f"{prim['p_holm']:.3g}, {prim['label_holm']}" if prim else "",
            r.get("overlap_label") or "",
            "n/a" if r.get("mdd") is None else f"{r['mdd']:.2g}",
            "n/a" if not ratio else f"{fmt(ratio['estimate'])} {interval(ratio['ci'])}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def verdict_section(results: dict) -> list[str]:
    c = results["contract"]
    margin = c.get("margin") or {"label": "+-2 pts", "unit": "points"}
    lines = [
        "",
        f"Verdicts: {c['test']} {c['multiplicity']}. The paper's overlap test is shown "
        "beside, labelled as the paper's. MDD: the smallest difference the paired test "
        "detects with 80% power. Cost A / B: the ratio of the two costs with a paired CI "
        "(interchange vs replacement: the pruning-level I/R).",
    ]
    for table in results.get("verdicts", []):
        unit = "pts" if margin["unit"] == "points" else table["metric"]
        lines += [
            "",
            f"### {table['task']} / {table['metric']}: {table['contract']}",
            "",
            f"Margin {margin['label']}; primary contrasts per budget: "
            + (
                "; ".join(
                    f"n={b}: " + ", ".join(" vs ".join(p) for p in ps)
                    for b, ps in table["primary_contrasts"].items()
                    if ps
                )
                or "none"
            )
            + ".",
            "",
            *_verdict_rows(table, unit),
        ]
    return lines


def regime_lines(reg: dict | None) -> list[str]:
    """The probe regime under the tables, with its relative band when deletion was probed."""
    if not reg:
        return []
    lines = [
        "",
        f"Probe regime (adjacent pairs): **{reg['call']}**: median d_repl "
        f"{reg['median_replacement']:.3g}, d_inter {reg['median_interchange']:.3g}, "
        f"I/R {fmt(reg['median_ir'])}. {reg['advice']}.",
    ]
    rel = reg.get("relative")
    if rel:
        from swapprune.select.regime import relative_line

        lines.append(f"Beside it, {relative_line(rel)}.")
    return lines
