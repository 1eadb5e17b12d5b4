"""Study v4's report: REPORT.md and study.json from ``results/`` (design: PLAN.md)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from analysis import (
    MARGIN,
    N_BOOT,
    Contract,
    contrast,
    coverage,
    holm_primary,
    regret_against_best,
)

CONTRACTS = ("extended", "matched")
PROTOCOLS = ("interchange", "replacement")


def parse(k: str) -> tuple[int, ...]:
    return tuple(int(x) for x in k.split(",")) if k else ()


def load_contracts(results: Path) -> dict[str, Contract]:
    data = json.loads((results / "contracts.json").read_text())
    out = {}
    for name in CONTRACTS:
        d = data[name]
        out[name] = Contract(
            name,
            np.asarray(d["base"], float),
            np.asarray(d["tokens"], float),
            d["clusters"],
            {parse(k): np.asarray(v, float) for k, v in d["sets"].items()},
            ordered=name == "matched",
        )
    return out


def load_cuts(results: Path) -> list[dict]:
    rows = []
    for f in sorted((results / "cuts").rglob("*.json")):
        d = json.loads(f.read_text())
        plan = d["plan"]
        cert = plan["scores"].get("certificate") or {}
        rows.append(
            {
                "seed": d["seed"],
                "budget": d["budget"],
                "criterion": d["criterion"],
                "set": tuple(plan["removed"]),
                "certified": bool(cert.get("certified")),
                "measured": "delta_points" in cert,
                "delta": cert.get("delta_points"),
                "r95": cert.get("r95_points"),
                "reasons": cert.get("reasons", []),
                "best_alternative": cert.get("best_alternative"),
                "sets_compared": len(cert.get("sets", [])),
                "cpu_s": d["cpu_s"],
            }
        )
    return rows


def landscapes(results: Path) -> dict[tuple[str, int], dict]:
    out = {}
    for f in sorted(results.glob("landscape-*/landscape.json")):
        state = json.loads(f.read_text())
        if state.get("complete"):
            text = f.parent.name.split("-")[1]
            out[(text, state["settings"]["budget"])] = state
    return out


def analyse(results: Path, n_boot: int = N_BOOT) -> dict:
    con = load_contracts(results)
    cuts = load_cuts(results)
    lands = landscapes(results)
    ext = con["extended"]
    out: dict = {"budgets": {}, "cuts": [], "landscapes": {}}
    budgets = sorted({c["budget"] for c in cuts if c["budget"] in (2, 3)})
    for n in budgets:
        best, best_cost = ext.best(n)
        rows = []
        for c in (c for c in cuts if c["budget"] == n):
            cost = ext.cost(c["set"])
            row = {**c, "set": list(c["set"]), "cost_ext": cost, "true_regret": cost - best_cost,
                   "cost_matched": con["matched"].cost(c["set"])}  # fmt: skip
            rows.append(row)
        out["cuts"] += rows
        seeds = sorted({r["seed"] for r in rows})

        def sets_of(criterion: str, rows=rows, seeds=seeds) -> list[tuple[int, ...]]:
            by = {r["seed"]: tuple(r["set"]) for r in rows if r["criterion"] == criterion}
            return [by[s] for s in seeds if s in by]

        entry: dict = {
            "best": {
                "set": list(best),
                "cost_ext": best_cost,
                "cost_matched": con["matched"].cost(best),
            },  # fmt: skip
            "coverage": coverage([r for r in rows if r["measured"]]),
            "regret": {},
            "contrasts": {},
        }
        for crit in sorted({r["criterion"] for r in rows}):
            entry["regret"][crit] = regret_against_best(ext, sets_of(crit), best, n_boot, 0)
        for cname, c in con.items():
            h1 = contrast(c, "interchange", sets_of("interchange"), "replacement",
                          sets_of("replacement"), n_boot, 0)  # fmt: skip
            mean = {b: np.mean([c.cost(s) for s in sets_of(b)]) for b in ("bi", "sleb")}
            baseline = min(mean, key=lambda b: mean[b])
            h2 = contrast(c, "auto", sets_of("auto"), baseline, sets_of(baseline), n_boot, 0)
            h2["baseline_by_mean_cost"] = {b: float(v) for b, v in mean.items()}
            entry["contrasts"][cname] = {"H1": h1, "H2": h2}
        out["budgets"][n] = entry
    # the primary family: H1 and H2 at n = 3 on the extended contract
    if 3 in out["budgets"]:
        prim = out["budgets"][3]["contrasts"]["extended"]
        holm_primary([prim["H1"], prim["H2"]])
    for (text, n), state in lands.items():
        res = state["result"]
        allcosts = [v for v in res.get("screening_costs", {}).values()] if isinstance(
            res.get("screening_costs"), dict) else []  # fmt: skip
        picks = {}
        for name, c in state["criteria"].items():
            if c.get("set") is None:
                continue
            s = tuple(c["set"])
            row = {"set": list(s)}
            if s in ext.nll:
                row["cost_ext"] = ext.cost(s)
                row["regret_ext"] = ext.cost(s) - out["budgets"].get(n, {}).get("best", {}).get(
                    "cost_ext", np.nan)  # fmt: skip
            row.update({k: v for k, v in c.items() if k in ("rank", "percentile", "regret")})
            picks[name] = row
        out["landscapes"][f"{text}-n{n}"] = {
            "criteria": picks,
            "compute": state.get("compute"),
            "top": res.get("refined", [])[:5],
            "n_sets": state["sets"],
            "screening_costs": len(allcosts),
        }
    for v in out["budgets"].values():
        for cs in v["contrasts"].values():
            for t in cs.values():
                t.pop("verdict", None)
    return out


def _f(x, d=1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and x != x) else f"{x:+.{d}f}"


def write_report(results: Path, here: Path) -> None:
    data = analyse(results)
    (here / "study.json").write_text(json.dumps(data, indent=1, default=float))
    lines = ["# Study v4 (confirmatory): report", "",
             "Generated by `eval/study_v4/run.py report` from `results/` (design: `PLAN.md`).",
             ""]  # fmt: skip
    for n, e in sorted(data["budgets"].items()):
        c = e["coverage"]
        lines += [
            f"## n = {n}",
            "",
            f"Best cut on the extended contract: {e['best']['set']} at "
            f"{_f(e['best']['cost_ext'])}% (matched {_f(e['best']['cost_matched'])}%).",
            "",
            f"**Coverage (C1):** {c['covered']} of {c['certified']} certified cuts within their "
            f"delta ({c['coverage']:.0%}, exact 95% CI {c['coverage_ci'][0]:.0%}-"
            f"{c['coverage_ci'][1]:.0%}); certify rate {c['certified']} of {c['cuts']} "
            f"({c['certify_rate']:.0%}); target >= 90% with a certify rate >= 20%: "
            f"{'met' if c['met'] else 'NOT met'}.",
            "",
            "| criterion | seeds | sets | certified | mean regret vs best, ext [95% CI] | one-sided "
            "upper 95% | within 2 pts |",
            "|---|---|---|---|---|---|---|",
        ]
        for crit, r in sorted(e["regret"].items()):
            rows = [x for x in data["cuts"] if x["budget"] == n and x["criterion"] == crit]
            sets = ", ".join(f"{x['seed']}: {{{','.join(map(str, x['set']))}}}" for x in rows)
            cert = sum(x["certified"] for x in rows)
            lines.append(
                f"| {crit} | {len(rows)} | {sets} | {cert}/{len(rows)} | {_f(r['mean'])} "
                f"[{_f(r['ci'][0])}, {_f(r['ci'][1])}] | {_f(r['upper_95'])} | "
                f"{'yes' if r['within_margin'] else 'no'} |"
            )
        lines += ["", "| contract | contrast | d = cost(B) - cost(A) [95% CI] | p (MC s.e.) | "
                  "verdict (+-2 pts) | Holm |", "|---|---|---|---|---|---|"]  # fmt: skip
        for cname, cs in e["contrasts"].items():
            for h, t in cs.items():
                lines.append(
                    f"| {cname} | {h}: {t['a']} vs {t['b']} | {_f(t['d'])} [{_f(t['ci'][0])}, "
                    f"{_f(t['ci'][1])}] | {t['p']:.4f} ({t['p_mc_se']:.4f}) | {t['label']} | "
                    f"{t.get('label_holm') or '-'} |"
                )
        lines.append("")
    lines += [f"Equivalence margin +-{MARGIN} dPPL points; {N_BOOT} resamples.", ""]
    (here / "REPORT.md").write_text("\n".join(lines) + "\n")
