"""``results.md``: the methods table and one verdict table per contract, from ``results.json``.

``results.md``'s verdict tables, one per contract with every test a row states, and the regime.
"""

from __future__ import annotations

import math
from pathlib import Path

from swapprune.evaluation.names import EXTENDED_PPL, WIKITEXT2_PPL
from swapprune.output.artifacts import write_text_atomic
from swapprune.records.policy import relative_line

#: Short names of the perplexity contracts in column headers.
SHORT = {WIKITEXT2_PPL: "matched", EXTENDED_PPL: "extended"}


def _contract_lines(results: dict) -> list[str]:
    """What the numbers were measured on, and a warning when it is not the matched contract."""
    c = results["contract"]
    task = results["primary"]["task"]
    base = results["baseline"].get(task, {})
    n = next((m.get("n") for m in base.values() if isinstance(m, dict) and m.get("n")), None)
    lines = []
    if task == WIKITEXT2_PPL:
        lines.append(
            f"Setting: WikiText-2 test, first {c['words']} words, windows of "
            f"{c['max_length']} tokens, stride {c['stride']}"
            + (f", {n} windows" if n else "")
            + "."
        )
    ext = results["baseline"].get(EXTENDED_PPL)
    if ext:
        windows = next((m.get("n") for m in ext.values() if m.get("n")), None)
        rows = [
            r for t in results.get("verdicts", []) if t["task"] == EXTENDED_PPL for r in t["rows"]
        ]
        articles = next((r["n_clusters"] for r in rows if r.get("n_clusters")), None)
        lines.append(
            f"Extended contract: {windows} windows of {c['max_length']} tokens (the second half "
            f"scored), at most {c.get('per_article') or 1} per article"
            + (f" from {articles} articles" if articles else "")
            + f" of WikiText-2 test after its first {c['words']} words: held out from every "
            "design choice; its CIs and verdicts resample articles."
        )
    matched = c.get("words") == 5000 and c.get("max_length") == 512 and not c.get("limit")
    if c.get("limit"):
        lines.append(
            f"**Warning: limit {c['limit']}: only the first {c['limit']} units of each "
            "task were evaluated. This is a quick look, not the matched contract; "
            "verdicts have less power.**"
        )
    elif task == WIKITEXT2_PPL and not matched:
        lines.append(
            "**Warning: these settings differ from the paper's matched contract "
            "(5000 words, 512-token windows).**"
        )
    return lines


def _value_columns(results: dict) -> list[tuple[str, str, str, str]]:
    """``(task, metric, value header, cost header)`` of the methods table."""
    scopes = [(t["task"], t["metric"]) for t in results.get("verdicts", [])]
    ppl = [(t, m) for t, m in scopes if t in SHORT]
    if not ppl:
        task, metric = results["primary"]["task"], results["primary"]["metric"]
        return [(task, metric, "value [95% CI]", "cost [95% CI]")]
    ppl.sort(key=lambda tm: list(SHORT).index(tm[0]))  # matched, then extended
    out = []
    for task, metric in ppl:
        ci = "article CI" if task == EXTENDED_PPL else "95% CI"
        out.append((task, metric, f"PPL {SHORT[task]} [{ci}]", f"cost {SHORT[task]} [{ci}]"))
    return out


def _removed(m: dict) -> str:
    if m.get("merged"):
        return f"merge {m['merged']} ({m.get('merge') or 'average'})"
    return str(m["removed"])


def _generation(g: dict | None) -> list[str]:
    if not g:
        return ["n/a", "n/a"]
    a, f = g["agreement"], g["first_divergence"]
    return [
        f"{a['mean']:.0%} [{a['ci'][0]:.0%}, {a['ci'][1]:.0%}]",
        f"{f['mean']:.1f} [{f['ci'][0]:.1f}, {f['ci'][1]:.1f}] of {g.get('new_tokens', '?')}",
    ]


def _methods_table(results: dict) -> list[str]:
    cols = _value_columns(results)
    gen = any(m.get("generative") for e in results["budgets"] for m in e["methods"].values())
    head = ["n", "method", "removed (0-based)"] + [h for c in cols for h in c[2:]]
    if gen:
        head += ["generation agreement [95% CI]", "first divergence [95% CI]"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    primary = results["primary"]["task"], results["primary"]["metric"]
    for entry in results["budgets"]:
        for label, m in entry["methods"].items():
            cells = [str(entry["budget"]), label, _removed(m)]
            for task, metric, _, _ in cols:
                r = m["metrics"].get(task, {}).get(metric, {"value": None, "ci": [None, None]})
                cells.append(f"{fmt(r['value'])} {interval(r['ci'])}")
                cells.append(
                    f"{fmt(_times100(r.get('rel_change')), True)} "
                    f"{interval([_times100(x) for x in r.get('rel_change_ci') or (None, None)], True)}"
                )
            if gen:
                cells += _generation(m.get("generative"))
            lines.append("| " + " | ".join(cells) + " |")
        if "random_mean_cost_pct" in entry:
            cells = [str(entry["budget"]), "random (mean of seeds)", ""]
            for task, metric, _, _ in cols:
                on = (task, metric) == primary
                cells += ["", fmt(entry["random_mean_cost_pct"], True) if on else ""]
            lines.append("| " + " | ".join(cells + ([""] * 2 if gen else [])) + " |")
    return lines


def _times100(x):
    return None if x is None else 100 * x


def write_markdown(results: dict, path: Path) -> None:
    """The tables a paper would print: methods with both contracts, then the verdicts."""
    task, metric = results["primary"]["task"], results["primary"]["metric"]
    base = results["baseline"][task][metric]
    # The units said with the baseline: a perplexity differs with the windows it is taken on.
    unit = "windows" if task in SHORT else "examples"
    on = f" on {base['n']} {unit}" if base.get("n") else ""
    lines = [
        f"# Pruning cost by protocol: {results['model']} ({results['num_layers']} blocks)",
        "",
        f"Metric: {task} / {metric}; baseline {fmt(base['value'])} "
        f"[{fmt(base['ci'][0])}, {fmt(base['ci'][1])}]{on}. "
        f"Cost = relative change vs the unpruned model (positive = worse for a lower-is-better "
        f"metric); 95% CIs from a bootstrap over the same units.",
        *_contract_lines(results),
        "",
        *_methods_table(results),
        *verdict_section(results),
        *regime_lines(results.get("regime")),
    ]
    write_text_atomic(path, "\n".join(lines) + "\n")


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
        lines.append(f"Beside it, {relative_line(rel)}.")
    return lines
