"""The analysis of study v3 (``PLAN.md``, section "Analysis"): pure numpy over cached units.

:func:`analyse` takes a constructed input (no model, no files) and returns every
figure of the report; :func:`analyse_dir` builds that input from the seeds that
finished under ``results/`` and writes ``REPORT.md`` and ``study.json``.

Input of :func:`analyse` (``S`` finished seeds, ``n`` windows of a contract)::

    {"contracts": {task: {"base": [n, k] units, "clusters": [n] labels or None,
                          "statistic": "ppl", "resampled": "seeds x articles"}},
     "seeds": {seed: {method: {"key": cut key, "removed": [...],
                               "units": {task: [n, k]}, "generative": {...} or None}}}}

For every contract:

* each method's cost per seed and its mean over seeds, with a two-level
  (seed x article; seed x window where the contract records no article)
  percentile CI;
* every pair of methods: :func:`swapprune.stats.clustered.two_level_cost_difference`
  (paired, crossed seeds x articles), judged by
  :func:`swapprune.stats.verdicts.verdict_from_replicates` at the TOST margin;
  two methods that chose the same set on every seed are "identical" and not
  tested; Holm over the distinct pairs of the contract
  (:func:`swapprune.stats.multiplicity.holm_distinct`);
* the primary contrasts (:func:`swapprune.stats.multiplicity.primary_contrasts`:
  interchange vs replacement; auto vs the best of BI and SLEB by mean cost on
  that contract), Holm-adjusted as one family over both contracts;
* regret per method: its cost minus the lowest cost of any method on the same
  seed, averaged over seeds, with a two-level CI.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np

from swapprune.stats.clustered import (
    percentile_interval,
    resample_weights,
    two_level_cost_difference,
    weighted_statistic,
)
from swapprune.stats.multiplicity import holm_distinct, primary_contrasts
from swapprune.stats.verdicts import Margin, cut_key, verdict_from_replicates

PRIMARY_FAMILY = "primary (both contracts)"


def _seed_draws(n_seeds: int, n_boot: int, seed: int) -> np.ndarray:
    """``[B, S]`` seed multiplicities, the stream of ``two_level_cost_difference``."""
    idx = np.random.default_rng(np.random.SeedSequence([seed, 1])).integers(
        0, n_seeds, size=(n_boot, n_seeds)
    )
    out = np.zeros((n_boot, n_seeds))
    for s in range(n_seeds):
        out[:, s] = (idx == s).sum(axis=1)
    return out


def _costs_and_regret(base, cuts, clusters, statistic, n_boot, seed):
    """Point costs ``[S, M]`` and two-level replicates of mean cost and regret ``[M, B]``."""
    stat = weighted_statistic(statistic)
    u0 = np.asarray(base, dtype=np.float64)
    n = u0.shape[0]
    S, M = len(cuts), len(cuts[0])
    w = resample_weights(n, clusters, n_boot, seed)
    ones = np.ones((1, n))
    cnt = _seed_draws(S, n_boot, seed)  # [B, S]
    s0, r0 = stat(u0, ones)[0], stat(u0, w)
    point = np.empty((S, M))
    reps = np.empty((S, M, n_boot))
    for s in range(S):
        for m in range(M):
            u = np.asarray(cuts[s][m], dtype=np.float64)
            point[s, m] = 100 * (stat(u, ones)[0] / s0 - 1)
            reps[s, m] = 100 * (stat(u, w) / r0 - 1)
    regret_reps = reps - reps.min(axis=1, keepdims=True)
    mean_cost = np.einsum("bs,smb->mb", cnt, reps) / S
    mean_regret = np.einsum("bs,smb->mb", cnt, regret_reps) / S
    return point, mean_cost, mean_regret


def analyse(data: dict, margin: float = 2.0, n_boot: int = 2000, seed: int = 0) -> dict:
    """Every figure of the report from constructed units (see the module docstring)."""
    seeds = sorted(data["seeds"])
    methods = [m for m in data["seeds"][seeds[0]] if all(m in data["seeds"][s] for s in seeds)]
    mg = Margin(margin, "points")
    out: dict = {
        "seeds": seeds,
        "methods": methods,
        "margin": margin,
        "n_boot": n_boot,
        "contracts": {},
    }
    primary_rows = []
    for task, c in data["contracts"].items():
        clusters = c.get("clusters")
        resampled = c.get("resampled") or (
            "seeds x articles" if clusters is not None else "seeds x windows"
        )
        if clusters is None:  # every window its own cluster: the seed x window bootstrap
            clusters = list(range(len(c["base"])))
        cuts = [[data["seeds"][s][m]["units"][task] for m in methods] for s in seeds]
        point, cost_reps, regret_reps = _costs_and_regret(
            c["base"], cuts, clusters, c.get("statistic", "ppl"), n_boot, seed
        )
        per_method = {}
        for j, m in enumerate(methods):
            mean_c = float(point[:, j].mean())
            regret = point[:, j] - point.min(axis=1)
            ci_c = percentile_interval(mean_c, cost_reps[j])
            ci_r = percentile_interval(float(regret.mean()), regret_reps[j])
            per_method[m] = {
                "per_seed": {
                    str(s): {
                        "removed": data["seeds"][s][m]["removed"],
                        "cost": float(point[i, j]),
                        "regret": float(regret[i]),
                    }
                    for i, s in enumerate(seeds)
                },
                "distinct_sets": len({data["seeds"][s][m]["key"] for s in seeds}),
                "cost_mean": mean_c,
                "cost_ci": [ci_c.low, ci_c.high],
                "regret_mean": float(regret.mean()),
                "regret_ci": [ci_r.low, ci_r.high],
                "best_on_seeds": [
                    s for i, s in enumerate(seeds) if math.isclose(regret[i], 0.0, abs_tol=1e-12)
                ],
            }
        verdicts, diffs = [], {}
        base = np.asarray(c["base"], dtype=np.float64)

        def contrast(
            a: str, b: str, task=task, base=base, clusters=clusters, c=c, resampled=resampled
        ):
            ua = np.stack([np.asarray(data["seeds"][s][a]["units"][task], float) for s in seeds])
            ub = np.stack([np.asarray(data["seeds"][s][b]["units"][task], float) for s in seeds])
            ka = ";".join(data["seeds"][s][a]["key"] for s in seeds)
            kb = ";".join(data["seeds"][s][b]["key"] for s in seeds)
            same = [s for s in seeds if data["seeds"][s][a]["key"] == data["seeds"][s][b]["key"]]
            d = two_level_cost_difference(
                base, ua, ub, clusters, c.get("statistic", "ppl"), 100.0, n_boot, seed=seed
            )
            v = verdict_from_replicates(
                d.estimate,
                d.replicates,
                a=a,
                b=b,
                a_key=ka,
                b_key=kb,
                higher_is_better=False,
                margin=mg,
                scope=task,
                resampled=resampled,
                n_units=len(base),
                n_clusters=d.n_clusters,
            )
            return v, {**d.to_dict(), "resampled": resampled, "same_set_on_seeds": same}

        for a, b in itertools.combinations(methods, 2):
            v, d = contrast(a, b)
            verdicts.append(v)
            diffs[f"{a} vs {b}"] = d
        verdicts = holm_distinct(verdicts, family=f"all distinct pairs ({task})")
        mean_costs = {m: per_method[m]["cost_mean"] for m in methods}
        prim = primary_contrasts(mean_costs)
        for a, b in prim:
            v, d = contrast(a, b)
            primary_rows.append((task, a, b, v, d))
        out["contracts"][task] = {
            "resampled": resampled,
            "n_units": len(base),
            "n_clusters": len(set(clusters)),
            "methods": per_method,
            "pairs": {
                f"{v.a} vs {v.b}": {**v.to_dict(), "difference": diffs[f"{v.a} vs {v.b}"]}
                for v in verdicts
            },
            "primary": [],
        }
    adjusted = holm_distinct([r[3] for r in primary_rows], family=PRIMARY_FAMILY)
    for (task, a, b, _, d), v in zip(primary_rows, adjusted, strict=True):
        out["contracts"][task]["primary"].append(
            {"contrast": f"{a} vs {b}", **v.to_dict(), "difference": d}
        )
    out["generative"] = {
        m: {
            "agreement_mean": _mean([_gen(data, s, m, "agreement") for s in seeds]),
            "first_divergence_mean": _mean([_gen(data, s, m, "first_divergence") for s in seeds]),
            "per_seed": {str(s): data["seeds"][s][m].get("generative") for s in seeds},
        }
        for m in methods
    }
    return out


def _gen(data, s, m, key):
    g = data["seeds"][s][m].get("generative")
    return None if not g else g[key]["mean"]


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


# -- from the run's files ---------------------------------------------------------------
def _eval_file(cache: Path, res: dict, kept, merged) -> Path:
    from swapprune.studies.cache import content_key

    c = res["contract"]
    cfg = {
        "model": res["model"],
        "tasks": res["tasks"],
        "limit": c["limit"],
        "words": c["words"],
        "max_length": c["max_length"],
        "dtype": "torch.float32",
    }
    plain = cache / f"eval-{content_key({**cfg, 'kept': kept, 'merged': merged})}.json"
    cfg["per_article"] = c["per_article"]  # in the key when the extended contract ran
    ext = cache / f"eval-{content_key({**cfg, 'kept': kept, 'merged': merged})}.json"
    return ext if ext.exists() or not plain.exists() else plain


def load_input(results_dir: Path, budget: int) -> tuple[dict, dict]:
    """The input of :func:`analyse` from the finished seeds, and the raw per-seed records."""
    from swapprune.evaluation import EvalResult

    cache = results_dir / "cache"
    raw, seeds = {}, {}
    contracts: dict = {}
    for d in sorted(results_dir.glob("seed*")):
        f = d / "results.json"
        if not f.exists():
            continue
        k = int(d.name[4:])
        res = json.loads(f.read_text())
        raw[k] = res
        L = res["num_layers"]
        if not contracts:
            base = EvalResult.from_json(_eval_file(cache, res, list(range(L)), {}).read_text())
            for task, t in base.tasks.items():
                metric = (
                    res["primary"]["metric"]
                    if task == res["primary"]["task"]
                    else next(iter(t.metrics))
                )
                contracts[task] = {
                    "base": t.matrix(metric).tolist(),
                    "clusters": t.units.get("article"),
                    "statistic": t.metrics[metric].statistic,
                    "metric": metric,
                }
        entry = next(e for e in res["budgets"] if e["budget"] == budget)
        seeds[k] = {}
        for m, x in entry["methods"].items():
            merged = {} if not x["merged"] else {"groups": x["merged"], "rule": x["merge"]}
            ev = EvalResult.from_json(_eval_file(cache, res, x["kept"], merged).read_text())
            seeds[k][m] = {
                "key": cut_key(x["kept"], {int(a): b for a, b in x["merged"].items()}),
                "removed": x["removed"],
                "units": {
                    t: ev.tasks[t].matrix(contracts[t]["metric"]).tolist() for t in contracts
                },
                "generative": x.get("generative"),
            }
    return {"contracts": contracts, "seeds": seeds}, raw


def auto_certificate(cache: Path, res: dict) -> dict | None:
    """The certificate of a seed's ``auto`` cell, from its cached plan.

    The plan is found by its protocol and its regime call, which carries the seed's own
    probe medians (two seeds never share them).
    """
    want = (res.get("regime") or {}).get("median_replacement")
    for f in sorted(cache.glob("plan-*.json")):
        p = json.loads(f.read_text())
        auto = (p.get("scores") or {}).get("auto") or {}
        got = (auto.get("regime") or {}).get("median_replacement")
        if p.get("protocol") != "auto" or got is None or want is None or got != want:
            continue
        c = p["scores"].get("certificate") or {}
        keep = (
            "certified",
            "r95_points",
            "delta_points",
            "p_within_delta",
            "mass_outside",
            "chosen",
            "kept",
            "switched",
            "gain_points",
            "summary",
        )
        out = {k: c.get(k) for k in keep}
        out["plausible_sets"] = len(c.get("sets") or [])
        out["beam_inputs"] = auto.get("selections")
        out["compute"] = p["scores"].get("compute")
        return out
    return None


def analyse_dir(results_dir: Path, out_dir: Path) -> dict:
    import run as design  # eval/study_v3/run.py: the design constants

    data, raw = load_input(results_dir, design.BUDGETS[0])
    if not data["seeds"]:
        raise SystemExit("[study3] no seed has finished; nothing to analyse")
    res = analyse(data, design.MARGIN, design.N_BOOT, design.BOOT_SEED)
    times = {}
    for k in res["seeds"]:
        f = results_dir / f"seed{k}" / "times.json"
        times[k] = json.loads(f.read_text()) if f.exists() else None
    res["times"] = times
    res["baseline"] = raw[res["seeds"][0]]["baseline"]
    res["regime"] = {k: raw[k].get("regime") for k in res["seeds"]}
    res["selection_s"] = {
        k: {m: x["select_s"] for m, x in raw[k]["budgets"][0]["methods"].items()}
        for k in res["seeds"]
    }
    res["timing"] = {k: raw[k].get("timing") for k in res["seeds"]}
    res["auto_certificate"] = {
        k: auto_certificate(results_dir / "cache", raw[k]) for k in res["seeds"]
    }
    res["design"] = {
        "seeds_planned": design.SEEDS,
        "budgets": design.BUDGETS,
        "criteria": design.CRITERIA,
        "windows": design.WINDOWS,
        "tokens": design.TOKENS,
        "tasks": design.TASKS,
        "margin_points": design.MARGIN,
        "n_boot": design.N_BOOT,
    }
    (out_dir / "study.json").write_text(json.dumps(res, indent=1, default=_json) + "\n")
    from report import write_report

    write_report(res, out_dir / "REPORT.md")
    print(f"[study3] wrote {out_dir}/REPORT.md and study.json ({len(res['seeds'])} seeds)")
    return res


def _json(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)
