"""Study v4 at n = 3 on the full contracts: the best cut measured, Study v3's regret against
it, the criteria's picks and the seeds' certified cuts (C1 at n = 3).

    PYTHONPATH=. python eval/study_v4/contracts_n3.py   # -> results/contracts-n3.json, .md

Reads ``results/contracts.json`` (the ``contracts --budgets 3`` step): every n = 3 set of
the evaluation-text landscape's refined top 20, each criterion's pick on that landscape,
each cut of seeds 0-1 and each Study v3 pick, on all windows of both contracts in float32.
The best is the cheapest of these on the extended contract; as the landscape screened
all 4,060 sets on the evaluation text, it is the best cut there is up to the screening
rule (a cut or pick cheaper than every refined set would say the rule failed; it is
reported).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from analysis import (  # noqa: E402
    N_BOOT,
    coverage,
    holm_primary,
    percentile_rank,
    regret_against_best,
    screening_agreement,
)
from report import (  # noqa: E402
    contrasts,
    load_contracts,
    load_cuts,
    screening_costs,
    study_v3_regret,
)

RESULTS = HERE / "results"


def main() -> int:
    con = load_contracts(RESULTS)
    ext, mat = con["extended"], con["matched"]
    land = json.loads((RESULTS / "landscape-eval-n3" / "landscape.json").read_text())
    refined = [tuple(sorted(r["set"])) for r in land["result"]["refined"]]
    picks = {c: tuple(sorted(v["set"])) for c, v in land["criteria"].items() if v.get("set")}
    calib_file = RESULTS / "landscape-calib-n3" / "landscape.json"
    calib = json.loads(calib_file.read_text()) if calib_file.is_file() else None
    picks_from = "evaluation-text landscape"
    if not picks and calib is not None and calib.get("criteria"):
        # the criteria pick on seed 0's calibration windows before the calibration-text
        # landscape screens (a stopped one has them too)
        picks = {c: tuple(sorted(v["set"])) for c, v in calib["criteria"].items() if v.get("set")}
        picks_from = "calibration-text landscape's criteria (seed 0's calibration windows)"
    screened = {"eval": screening_costs(land)}
    if calib is not None and not calib.get("complete"):
        calib = None  # its screening did not finish: no ranks on it
    if calib is not None:
        screened["calib"] = screening_costs(calib)
    best, best_cost = ext.best(3)
    measured = [s for s in refined if s in ext.nll]
    refined_best = min(measured, key=ext.cost)
    out: dict = {
        "best": {"set": list(best), "extended": best_cost, "matched": mat.cost(best)},
        "best_is_refined": best in refined,
        "refined_measured": f"{len(measured)} of {len(refined)}",
        "refined_best": {"set": list(refined_best), "extended": ext.cost(refined_best)},
        "matched_best": dict(zip(("set", "matched"), (list(mat.best(3)[0]), mat.best(3)[1]))),
        "sets_measured": sum(1 for s in ext.nll if len(s) == 3),
        "landscape_screening_best": land["result"]["refined"][0]["set"],
    }
    ranked = sorted((s for s in ext.nll if len(s) == 3), key=ext.cost)
    m_best, m_best_cost = mat.best(3)
    out["picks_from"] = picks_from
    out["picks"] = {}
    for c, s in sorted(picks.items()):
        row = {"set": list(s)}
        for text, costs in screened.items():  # percentile rank among all screened sets
            if s in costs:
                row[f"percentile_{text}_screening"] = percentile_rank(
                    costs[s], list(costs.values())
                )
        if s in ext.nll:
            r = regret_against_best(ext, [s], best, N_BOOT, 0)
            # the matched contract against its own cheapest set (moving blocks of windows:
            # 23 windows from 2 articles, descriptive)
            rm = regret_against_best(mat, [s], m_best, N_BOOT, 0)
            row |= {"extended": ext.cost(s), "matched": mat.cost(s),
                    "regret": ext.cost(s) - best_cost, "regret_ci": r["ci"],
                    "regret_matched": mat.cost(s) - m_best_cost, "regret_matched_ci": rm["ci"],
                    "rank_among_measured": ranked.index(s) + 1}  # fmt: skip
        out["picks"][c] = row
    if calib is not None:
        cbest = tuple(sorted(calib["result"]["refined"][0]["set"]))
        out["calibration_landscape"] = {
            "refined_best": list(cbest),
            "compute": calib.get("compute", {}),
        }
        if cbest in ext.nll:  # what a user's landscape calls best, on the contracts
            r = regret_against_best(ext, [cbest], best, N_BOOT, 0)
            out["calibration_landscape"] |= {
                "extended": ext.cost(cbest), "matched": mat.cost(cbest),
                "regret": ext.cost(cbest) - best_cost, "regret_ci": r["ci"],
            }  # fmt: skip
        out["screenings_agree"] = screening_agreement(screened["calib"], screened["eval"], top=20)
    cuts = [
        c for c in load_cuts(RESULTS) if c["budget"] == 3 and tuple(sorted(c["set"])) in ext.nll
    ]
    rows = []
    for c in cuts:
        s = tuple(sorted(c["set"]))
        rows.append({**c, "set": list(s), "true_regret": ext.cost(s) - best_cost,
                     "cost_ext": ext.cost(s), "cost_matched": mat.cost(s)})  # fmt: skip
    out["cuts"] = rows
    out["coverage"] = coverage([r for r in rows if r["measured"]])
    out["regret"] = {}
    for crit in sorted({r["criterion"] for r in rows}):
        sets = [tuple(r["set"]) for r in rows if r["criterion"] == crit]
        out["regret"][crit] = regret_against_best(ext, sets, best, N_BOOT, 0)
    out["contrasts"] = contrasts(con, rows)
    prim = out["contrasts"].get("extended", {})
    if {"H1", "H2"} <= set(prim):  # Holm over the primary family, on the extended contract
        holm_primary([prim["H1"], prim["H2"]])
    for tests in out["contrasts"].values():
        for t in tests.values():
            t.pop("verdict", None)
    out["study_v3"] = study_v3_regret(con, {"best": {"cost_ext": best_cost}})
    (RESULTS / "contracts-n3.json").write_text(json.dumps(out, indent=1, default=list) + "\n")
    (RESULTS / "contracts-n3.md").write_text(markdown(out))
    print(markdown(out))
    return 0


def markdown(out: dict) -> str:
    b = out["best"]
    lines = [
        "# Study v4 at n = 3 on the full contracts",
        "",
        f"Best of {out['sets_measured']} sets measured (extended contract): {b['set']} "
        f"+{b['extended']:.1f} points (matched {b['matched']:+.1f}); among the landscape's "
        f"refined sets: {out['best_is_refined']} ({out['refined_measured']} refined sets measured). "
        f"Cheapest on the matched contract: "
        f"{out['matched_best']['set']} {out['matched_best']['matched']:+.1f}.",
        "",
        "## Each criterion's pick",
        "",
        f"Picked on the {out.get('picks_from', 'evaluation-text landscape')}; percentile rank "
        "= share of the 4,060 sets strictly cheaper in each landscape's first screening round "
        "(0: the best); regret against the best measured on the extended contract, with its "
        "article-bootstrap 95% CI, and on the matched contract against its own cheapest set "
        f"({out['matched_best']['set']}), moving blocks of 3 windows (descriptive).",
        "",
        "| criterion | set | percentile, calibration-text screening | percentile, evaluation-text "
        "screening | extended | matched | regret, extended [CI] | regret, matched [CI] | "
        "rank among measured |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    if not out["picks"]:
        lines = lines[:-4] + ["(No criterion picks: the calibration-text landscape at n = 3, whose picks",
                              "the evaluation-text one ranks, was not run. The seeds' cuts below are the",
                              "criteria's picks.)"]  # fmt: skip

    def pct(p, text):
        v = p.get(f"percentile_{text}_screening")
        return f"{v:.1f}%" if v is not None else "-"

    for c, p in out["picks"].items():
        if "extended" in p:
            lo, hi = p["regret_ci"]
            mlo, mhi = p["regret_matched_ci"]
            cost = (f"{p['extended']:+.1f} | {p['matched']:+.1f} | {p['regret']:+.1f} "
                    f"[{lo:+.1f}, {hi:+.1f}] | {p['regret_matched']:+.1f} [{mlo:+.1f}, {mhi:+.1f}] | "
                    f"{p['rank_among_measured']}")  # fmt: skip
        else:
            cost = "not measured | | | | "
        lines.append(f"| {c} | {p['set']} | {pct(p, 'calib')} | {pct(p, 'eval')} | {cost} |")
    if "screenings_agree" in out:
        a, c = out["screenings_agree"], out["calibration_landscape"]
        lines += ["", "## The two screenings", "",
                  f"Every one of the {a['sets']:,} sets screened on the calibration text (seed 0's "
                  "part) and on the evaluation text (the extended contract's articles), 8 windows "
                  f"x 64 tokens each: Spearman {a['spearman']:.3f}; {a['top_overlap']} of the top "
                  f"{a['top']} in common; best {a['best_a']} against {a['best_b']}."]  # fmt: skip
        if "extended" in c:
            lo, hi = c["regret_ci"]
            lines += ["", f"The calibration-text landscape's refined best {c['refined_best']} "
                      f"costs {c['extended']:+.1f} points on the extended contract (matched "
                      f"{c['matched']:+.1f}): regret {c['regret']:+.1f} [{lo:+.1f}, {hi:+.1f}] "
                      "against the best measured."]  # fmt: skip
    lines += ["", "## Seeds' cuts (calibration text parts, certificate on)", "",
              "| seed | criterion | set | certified | delta | true regret | extended | matched |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in sorted(out["cuts"], key=lambda r: (r["seed"], r["criterion"])):
        d = f"{r['delta']:.1f}" if r["delta"] is not None else "-"
        lines.append(f"| {r['seed']} | {r['criterion']} | {r['set']} | {r['certified']} | {d} | "
                     f"{r['true_regret']:+.1f} | {r['cost_ext']:+.1f} | {r['cost_matched']:+.1f} |")  # fmt: skip
    cov = out["coverage"]
    lines += ["", f"Coverage (C1 at n = 3): {cov['covered']} of {cov['certified']} certified cuts "
              f"within their delta; {cov['certified']} of {cov['cuts']} certified.", ""]  # fmt: skip
    lines += ["## Regret against the best measured, by criterion (extended contract)", "",
              "Mean over the seeds' cuts, two-level bootstrap (seed x article), "
              f"{N_BOOT:,} resamples; 'within 2' when the one-sided 95% upper bound is below "
              "2 points.", "",
              "| criterion | seeds | mean regret [95% CI] | upper 95% | within 2 points |",
              "|---|---|---|---|---|"]  # fmt: skip
    for crit, r in out["regret"].items():
        lo, hi = r["ci"]
        lines.append(f"| {crit} | {len(r['per_seed'])} | {r['mean']:+.1f} [{lo:+.1f}, {hi:+.1f}] | "
                     f"{r['upper_95']:+.1f} | {r['within_margin']} |")  # fmt: skip
    lines += ["", "## H1 and H2 over the seeds both criteria ran", "",
              "d = cost(b) - cost(a) in dPPL points (positive: a cheaper); extended: two-level "
              "bootstrap (seed x article); matched: moving blocks of 3 windows within seeds "
              "(descriptive); p with its Monte Carlo standard error; Holm over {H1, H2} on the "
              "extended contract.", "",
              "| test | contract | a vs b | seeds | d [95% CI] | outcome | p (MC s.e.) | Holm p |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for cname, tests in out.get("contrasts", {}).items():
        for tname, t in tests.items():
            holm = f"{t['p_holm']:.3f}" if "p_holm" in t else "-"
            lines.append(f"| {tname} | {cname} | {t['a']} vs {t['b']} | {t['seeds']} | "
                         f"{t['d']:+.1f} [{t['ci'][0]:+.1f}, {t['ci'][1]:+.1f}] | {t['label']} | "
                         f"{t['p']:.3f} ({t['p_mc_se']:.3f}) | {holm} |")  # fmt: skip
    lines += ["",
              "## Study v3's n = 3 picks: regret against the best of five methods and against "
              "the best measured here (extended contract)", "",
              "| method | seed | set | v3 cost | v3 regret | cost here | regret vs best |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for m, rows in out["study_v3"].items():
        for seed, r in sorted(rows.items()):
            here = f"{r['cost_v4']:+.1f}" if r["cost_v4"] is not None else "-"
            true = f"{r['regret_true']:+.1f}" if r["regret_true"] is not None else "-"
            lines.append(f"| {m} | {seed} | {r['set']} | {r['cost_v3']:+.1f} | {r['regret_v3']:+.1f} "
                         f"| {here} | {true} |")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
