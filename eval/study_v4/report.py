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
    percentile_rank,
    regret_against_best,
    screening_agreement,
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


def screening_costs(state: dict) -> dict[tuple[int, ...], float]:
    """Every set's first-round screening cost (points) in a landscape."""
    return {tuple(r["set"]): r["screening_cost_points"] for r in state["result"]["sets"]}


def landscape_summary(state: dict, ext: Contract, budget_entry: dict | None) -> dict:
    """A landscape's stages (CPU, block-tokens), its refined top and the criteria's places."""
    res = state["result"]
    best_cost = (budget_entry or {}).get("best", {}).get("cost_ext")
    refined = []
    for r in res["refined"]:
        s = tuple(r["set"])
        row = {"set": list(s), "heldout_cost": r["cost_points"]}
        if s in ext.nll:
            row["cost_ext"] = ext.cost(s)
        refined.append(row)
    crit = {}
    for c in res.get("criteria", []):
        s = tuple(c["set"]) if c.get("set") is not None else None
        row = {k: c.get(k) for k in ("set", "rank", "of", "percentile", "screened_out",
                                      "cost_points", "regret_points", "regret_ci",
                                      "heldout_rank")}  # fmt: skip
        if s is not None and s in ext.nll and best_cost is not None:
            row["cost_ext"] = ext.cost(s)
            row["regret_ext"] = ext.cost(s) - best_cost
        crit[c["criterion"]] = row
    return {
        "sets": state["sets"],
        "compute": state.get("compute", {}),
        "refined": refined,
        "criteria": crit,
        "settings": {
            k: state["settings"].get(k) for k in ("rounds", "refine", "bf16_screening", "top_k")
        },  # fmt: skip
        "windows": state.get("windows"),
    }


def study_v3_regret(con: dict[str, Contract], entry: dict | None) -> dict:
    """Study v3's n = 3 picks: regret against the best of five methods (as published) and
    against the best cut there is (this study's S*(3)), extended contract."""
    if entry is None:
        return {}
    ext = con["extended"]
    best = entry["best"]["cost_ext"]
    v3 = json.loads((Path(__file__).resolve().parents[1] / "study_v3" / "study.json")
                    .read_text())["contracts"]["swapprune_wikitext2_ext"]["methods"]  # fmt: skip
    out = {}
    for method, r in v3.items():
        rows = {}
        for seed, x in r["per_seed"].items():
            s = tuple(sorted(x["removed"]))
            rows[seed] = {
                "set": list(s),
                "cost_v3": x["cost"],
                "regret_v3": x["regret"],
                "cost_v4": ext.cost(s) if s in ext.nll else None,
                "regret_true": ext.cost(s) - best if s in ext.nll else None,
            }
        out[method] = rows
    return out


def contrasts(con: dict[str, Contract], rows: list[dict], n_boot: int = N_BOOT) -> dict:
    """H1 (interchange vs replacement) and H2 (``auto`` vs the better of BI and SLEB by mean
    cost) on each contract, over the seeds both criteria of a contrast ran (a partial run),
    as PLAN.md defines them; the verdicts are left in, for Holm over the primary family."""
    by = {(r["criterion"], r["seed"]): tuple(r["set"]) for r in rows}

    def paired(a: str, b: str):
        seeds = sorted(x for (c, x) in by if c == a and (b, x) in by)
        return [by[(a, x)] for x in seeds], [by[(b, x)] for x in seeds], seeds

    out: dict = {}
    for name, c in con.items():
        tests = {}
        i_sets, r_sets, seeds = paired("interchange", "replacement")
        if seeds:
            tests["H1"] = contrast(c, "interchange", i_sets, "replacement", r_sets, n_boot, 0)
            tests["H1"]["seeds"] = seeds
        mean = {}
        for b in ("bi", "sleb"):
            sets = [s for (k, _x), s in by.items() if k == b]
            if sets:
                mean[b] = float(np.mean([c.cost(s) for s in sets]))
        if mean:
            baseline = min(mean, key=lambda b: mean[b])
            a_sets, b_sets, seeds = paired("auto", baseline)
            if seeds:
                tests["H2"] = contrast(c, "auto", a_sets, baseline, b_sets, n_boot, 0)
                tests["H2"] |= {"seeds": seeds, "baseline_by_mean_cost": mean}
        out[name] = tests
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

        refined = {tuple(r["set"]) for (t, b), st in lands.items() if t == "eval" and b == n
                   for r in st["result"]["refined"]}  # fmt: skip
        refined_best = min(ext.cost(s) for s in refined) if refined else None
        beaten = [r for r in rows if refined_best is not None and r["cost_ext"] < refined_best]
        entry: dict = {
            "best_source": (
                "no evaluation-text landscape yet: the best of the sets measured"
                if not refined
                else "the evaluation-text landscape's refined best"
                if not beaten
                else f"a cut beats the landscape's refined best ({len(beaten)} cuts): the "
                "screening rule failed"
            ),
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
        entry["contrasts"] = contrasts(con, rows, n_boot)
        out["budgets"][n] = entry
    # the primary family: H1 and H2 at n = 3 on the extended contract
    if 3 in out["budgets"]:
        prim = out["budgets"][3]["contrasts"]["extended"]
        if {"H1", "H2"} <= set(prim):
            holm_primary([prim["H1"], prim["H2"]])
    for (text, n), state in lands.items():
        out["landscapes"][f"{text}-n{n}"] = landscape_summary(state, ext, out["budgets"].get(n))
    for n in (2, 3):
        pair = lands.get(("calib", n)), lands.get(("eval", n))
        if all(pair):
            calib, evaluation = (screening_costs(x) for x in pair)
            agree = screening_agreement(calib, evaluation, top=20)
            # where the criteria's sets (picked on the calibration windows) fall among the
            # evaluation text's screening costs
            ranks = {}
            for name, c in pair[0]["criteria"].items():
                if c.get("set") is not None and tuple(c["set"]) in evaluation:
                    ranks[name] = percentile_rank(
                        evaluation[tuple(c["set"])], list(evaluation.values())
                    )
            agree["criteria_percentile_on_eval_text"] = ranks
            out["landscapes"][f"agreement-n{n}"] = agree
    out["study_v3"] = study_v3_regret(con, out["budgets"].get(3))
    out["seeds"] = sorted({c["seed"] for c in cuts})
    for v in out["budgets"].values():
        for cs in v["contrasts"].values():
            for t in cs.values():
                t.pop("verdict", None)
    return out


def _f(x, d=1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and x != x) else f"{x:+.{d}f}"


def _set(s) -> str:
    return "{" + ",".join(map(str, s)) + "}"


def _cuts_table(data: dict, n: int) -> list[str]:
    lines = ["| seed | criterion | set | certified | delta | true regret (ext) | within delta | "
             "cost ext / matched | why not certified | CPU s |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for x in sorted((x for x in data["cuts"] if x["budget"] == n),
                    key=lambda x: (x["seed"], x["criterion"])):  # fmt: skip
        d = x["delta"]
        within = "-" if d is None else ("yes" if x["true_regret"] <= d + 1e-9 else "**no**")
        why = "; ".join(x["reasons"])[:90] if not x["certified"] else ""
        lines.append(
            f"| {x['seed']} | {x['criterion']} | {_set(x['set'])} | "
            f"{'yes' if x['certified'] else 'no'} | {'-' if d is None else f'{d:.2f}'} | "
            f"{_f(x['true_regret'])} | {within} | {_f(x['cost_ext'])} / "
            f"{_f(x['cost_matched'])} | {why} | {x['cpu_s']:.0f} |"
        )
    return lines


def _landscape_lines(data: dict) -> list[str]:
    lines = ["## The exact landscapes", ""]
    for name, e in sorted(data["landscapes"].items()):
        if name.startswith("agreement"):
            continue
        lines += [f"### {name} ({e['sets'].get('total')} sets, screening "
                  f"{'bf16' if e['settings']['bf16_screening'] else 'float32'})", "",
                  "| stage | CPU s | wall s | block-tokens |", "|---|---|---|---|"]  # fmt: skip
        for stage, c in e["compute"].items():
            if stage.startswith("criterion"):
                continue
            lines.append(f"| {stage} | {c.get('cpu_s', 0):.0f} | {c.get('wall_s', 0):.0f} | "
                         f"{c.get('block_tokens', 0):,} |")  # fmt: skip
        crit_cpu = sum(c.get("cpu_s", 0) for k, c in e["compute"].items() if k.startswith("crit"))
        if crit_cpu:
            lines.append(f"| the criteria's picks (all) | {crit_cpu:.0f} | | |")
        lines += ["", "Refined top 5 (held-out windows of the screening text; extended contract):",
                  ""]  # fmt: skip
        for r in e["refined"][:5]:
            lines.append(f"- {_set(r['set'])}: {_f(r['heldout_cost'])}% held-out, "
                         f"{_f(r.get('cost_ext'))}% extended")  # fmt: skip
        if e["criteria"]:
            lines += ["", "| criterion | set | screening rank | percentile | refined regret "
                      "[95% CI] | regret vs S* (ext) |", "|---|---|---|---|---|---|"]  # fmt: skip
            for c, r in sorted(e["criteria"].items()):
                ci = r.get("regret_ci") or [None, None]
                lines.append(
                    f"| {c} | {_set(r['set'])} | {r.get('rank')} of {r.get('of')} | "
                    f"{r['percentile']:.1f}% | {_f(r.get('regret_points'))} [{_f(ci[0])}, "
                    f"{_f(ci[1])}] | {_f(r.get('regret_ext'))} |"
                )
        lines.append("")
    for name, a in sorted(data["landscapes"].items()):
        if not name.startswith("agreement"):
            continue
        ranks = ", ".join(f"{c} {p:.1f}%" for c, p in sorted(
            a["criteria_percentile_on_eval_text"].items()))  # fmt: skip
        lines += [f"**{name}**: calibration-text vs evaluation-text screening over "
                  f"{a['sets']} sets: Spearman {a['spearman']:.3f}, top-{a['top']} overlap "
                  f"{a['top_overlap']}; best {_set(a['best_a'])} vs {_set(a['best_b'])}. The "
                  f"criteria's sets among the evaluation text's screening costs (share of sets "
                  f"cheaper): {ranks}.", ""]  # fmt: skip
    return lines


def _study_v3_lines(data: dict) -> list[str]:
    v3 = data.get("study_v3") or {}
    if not v3:
        return []
    lines = ["## Study v3's n = 3 regret, against the best of five and against the best", "",
             "| method | seed | set | cost (v3) | regret vs best of 5 (v3) | cost (this run) | "
             "regret vs S*(3) |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for m, rows in sorted(v3.items()):
        for seed, r in sorted(rows.items()):
            lines.append(
                f"| {m} | {seed} | {_set(r['set'])} | {_f(r['cost_v3'])} | "
                f"{_f(r['regret_v3'])} | {_f(r['cost_v4'])} | {_f(r['regret_true'])} |"
            )
    return lines + [""]


def write_report(results: Path, here: Path) -> None:
    data = analyse(results)
    (here / "study.json").write_text(json.dumps(data, indent=1, default=float))
    seeds = data["seeds"]
    partial = seeds != [0, 1, 2, 3, 4]
    lines = ["# Study v4 (confirmatory): report", "",
             "Generated by `eval/study_v4/run.py report` from `results/` (design: `PLAN.md`; "
             "deviations and the commits used: `RUN_NOTES.md`).", "",
             f"Seeds: {seeds}" + (" (**partial**: the run stopped after these seeds, as the "
                                 "plan's stop rule says)" if partial else ""), ""]  # fmt: skip
    pooled = coverage([x for x in data["cuts"] if x["measured"]])
    lines += [f"**Coverage (C1), both budgets pooled:** {pooled['covered']} of "
              f"{pooled['certified']} certified cuts within their delta "
              f"({pooled['coverage']:.0%}, exact 95% CI {pooled['coverage_ci'][0]:.0%}-"
              f"{pooled['coverage_ci'][1]:.0%}); certify rate {pooled['certified']} of "
              f"{pooled['cuts']} ({pooled['certify_rate']:.0%}, "
              f"{pooled['certify_rate_ci'][0]:.0%}-{pooled['certify_rate_ci'][1]:.0%}). "
              f"Target >= 90% with a certify rate >= 20%: "
              f"{'met' if pooled['met'] else 'NOT met'}.", ""]  # fmt: skip
    for n, e in sorted(data["budgets"].items()):
        c = e["coverage"]
        lines += [
            f"## n = {n}",
            "",
            f"Best cut on the extended contract, S*({n}): {_set(e['best']['set'])} at "
            f"{_f(e['best']['cost_ext'])}% (matched {_f(e['best']['cost_matched'])}%); "
            f"{e['best_source']}.",
            "",
            f"**Coverage (C1):** {c['covered']} of {c['certified']} certified cuts within their "
            f"delta ({c['coverage']:.0%}, exact 95% CI {c['coverage_ci'][0]:.0%}-"
            f"{c['coverage_ci'][1]:.0%}); certify rate {c['certified']} of {c['cuts']} "
            f"({c['certify_rate']:.0%}).",
            "",
            *_cuts_table(data, n),
            "",
            "| criterion | seeds | certified | mean regret vs S*, ext [95% CI] | one-sided "
            "upper 95% | within 2 pts |",
            "|---|---|---|---|---|---|",
        ]
        for crit, r in sorted(e["regret"].items()):
            rows = [x for x in data["cuts"] if x["budget"] == n and x["criterion"] == crit]
            cert = sum(x["certified"] for x in rows)
            lines.append(
                f"| {crit} | {len(rows)} | {cert}/{len(rows)} | {_f(r['mean'])} "
                f"[{_f(r['ci'][0])}, {_f(r['ci'][1])}] | {_f(r['upper_95'])} | "
                f"{'yes' if r['within_margin'] else 'no'} |"
            )
        lines += ["", "| contract | contrast | d = cost(B) - cost(A) [95% CI] | p (MC s.e.) | "
                  "verdict (+-2 pts) | Holm |", "|---|---|---|---|---|---|"]  # fmt: skip
        for cname, cs in e["contrasts"].items():
            for h, t in cs.items():
                p = "-" if t["p"] != t["p"] else f"{t['p']:.4f} ({t['p_mc_se']:.4f})"
                lines.append(
                    f"| {cname} | {h}: {t['a']} vs {t['b']} | {_f(t['d'])} [{_f(t['ci'][0])}, "
                    f"{_f(t['ci'][1])}] | {p} | {t['label']} | {t.get('label_holm') or '-'} |"
                )
        lines.append("")
    lines += _landscape_lines(data)
    lines += _study_v3_lines(data)
    lines += [f"Equivalence margin +-{MARGIN} dPPL points; {N_BOOT} resamples; the matched "
              "contract resampled in moving blocks of 3 windows (descriptive).", ""]  # fmt: skip
    (here / "REPORT.md").write_text("\n".join(lines) + "\n")
