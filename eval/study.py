"""Reproduce the paper's findings on SmolLM2-135M (trained) and the same architecture at init.

One command, CPU only, resumable (every stage caches its artifact under --out)::

    python eval/study.py --out eval/study

Stages:
1. probes: replacement and interchange swap-KL on all pairs with |i-j| <= 3, ``last`` and
   ``all`` positions from the same forward passes, on the trained model and a seeded
   random initialisation of the same architecture;
2. analysis: d_inter <= d_repl, I/R and d_repl - d_inter by pair distance, init vs trained,
   ranking stability at N vs 2N windows, bootstrap CI widths;
3. pruning: ``swapprune compare`` under the matched contract at budgets 1-5
   (interchange, replacement, bi, sleb, random seeds);
4. zero-shot tasks for the baseline and the best/worst method at one budget;
5. one LoRA healing run: recovered fraction of the pruning cost.

Writes ``REPORT.md`` (tables), ``study.json`` (all figures) and PNG plots into --out.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from swapprune.calibration import load_calibration
from swapprune.compare import CompareJob, run_compare
from swapprune.compare_report import plot_scores
from swapprune.config import (
    CalibrationConfig,
    CompareConfig,
    EvalConfig,
    ModelConfig,
    RunConfig,
)
from swapprune.engine.scores import ScoreResult
from swapprune.engine.scoring import score_modes
from swapprune.loading import load_model

MODES = ("last", "all")


def spearman(a, b) -> float:
    ra = np.argsort(np.argsort(a))
    rb = np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def timed(log: dict, name: str):
    class _T:
        def __enter__(self):
            self.t = time.perf_counter()

        def __exit__(self, *exc):
            log[name] = round(time.perf_counter() - self.t, 1)
            print(f"[study] {name}: {log[name]:.0f}s", flush=True)

    return _T()


# -- stage 1: probes ------------------------------------------------------------------------
def probes(args, out: Path, model, tok, times) -> dict[str, dict[str, ScoreResult]]:
    cal = load_calibration(tok, None, 2 * args.windows, args.tokens, args.seed)
    res: dict[str, dict[str, ScoreResult]] = {}
    for name in ("trained", "init"):
        files = {m: out / f"scores_{name}_{m}.json" for m in MODES}
        if all(f.exists() for f in files.values()):
            res[name] = {m: ScoreResult.load(f) for m, f in files.items()}
            continue
        if name == "init":
            torch.manual_seed(args.seed)
            m_init = type(model)(model.config).eval()
            subject = m_init
        else:
            subject = model
        with timed(times, f"probes_{name}"):
            res[name] = score_modes(
                subject,
                calibration=cal,
                modes=MODES,
                pairs=f"gap:{args.gap}",
                protocols="replacement,interchange",
                batch_size=args.batch_size,
                model_id="smollm2-135m"
                if name == "trained"
                else f"smollm2-135m (random init, seed {args.seed})",
                seed=args.seed,
            )
        for m, f in files.items():
            res[name][m].save(f)
    return res


# -- stage 2: analysis ----------------------------------------------------------------------
def _distances(s: ScoreResult, proto: str, pairs, windows=None) -> np.ndarray:
    out = []
    for k in pairs:
        v = s.pairs[k]
        sl = slice(None) if windows is None else slice(0, windows)
        if proto == "replacement":
            out.append(max(v["repl_ij"][sl].mean(), v["repl_ji"][sl].mean()))
        else:
            out.append(v["inter"][sl].mean())
    return np.array(out)


def analyse(args, res) -> dict:
    report: dict = {}
    for name, by_mode in res.items():
        for mode, s in by_mode.items():
            d = s.to_dict()
            pairs = sorted(s.pairs)
            rep, inter = _distances(s, "replacement", pairs), _distances(s, "interchange", pairs)
            entry = {
                "fraction_inter_le_repl": float(np.mean(inter <= rep)),
                "by_gap": d["summary"]["by_gap"],
                "regime": d["summary"]["regime"],
                "adjacent_mean_gap_diff": float(
                    np.mean([r - i for (a, b), r, i in zip(pairs, rep, inter) if b - a == 1])
                ),
            }
            stab = {}
            n = s.num_windows() // 2
            for proto in ("replacement", "interchange"):
                half, full = _distances(s, proto, pairs, n), _distances(s, proto, pairs)
                top_h, top_f = set(np.argsort(half)[:5]), set(np.argsort(full)[:5])
                rows = sorted(d["pairs"], key=lambda r: r[proto]["distance"])[:10]
                widths = [
                    (r[proto]["ci"][1] - r[proto]["ci"][0]) / r[proto]["distance"] for r in rows
                ]
                stab[proto] = {
                    "windows": [n, 2 * n],
                    "spearman": spearman(half, full),
                    "top5_same": top_h == top_f,
                    "top5_overlap": len(top_h & top_f),
                    "top10_max_rel_ci_width": float(max(widths)),
                    "top10_median_rel_ci_width": float(np.median(widths)),
                }
            entry["stability"] = stab
            report[f"{name}/{mode}"] = entry
    for mode in MODES:
        t, i = report[f"trained/{mode}"], report[f"init/{mode}"]
        report[f"growth/{mode}"] = {
            "init_adjacent_gap_diff": i["adjacent_mean_gap_diff"],
            "trained_adjacent_gap_diff": t["adjacent_mean_gap_diff"],
            "ratio": t["adjacent_mean_gap_diff"] / i["adjacent_mean_gap_diff"]
            if i["adjacent_mean_gap_diff"]
            else None,
        }
    return report


def plots(out: Path, res, report) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for name in res:
        sub = out / f"plots_{name}"
        sub.mkdir(exist_ok=True)
        plot_scores(res[name]["last"], sub)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, mode in zip(axes, MODES):
        for name, style in (("trained", "-o"), ("init", "--s")):
            gaps = report[f"{name}/{mode}"]["by_gap"]
            ax.plot(
                [g["gap"] for g in gaps],
                [g["median_ir"] for g in gaps],
                style,
                label=f"{name} median I/R",
            )
        ax.axhline(1, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("pair distance |i-j|")
        ax.set_ylabel("median I/R")
        ax.set_title(f"{mode} positions")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "ir_by_gap.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    width = 0.35
    for k, (name, color) in enumerate((("init", "tab:grey"), ("trained", "tab:blue"))):
        gaps = report[f"{name}/last"]["by_gap"]
        ax.bar(
            np.array([g["gap"] for g in gaps]) + (k - 0.5) * width,
            [g["mean_gap_diff"] for g in gaps],
            width,
            label=name,
            color=color,
        )
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_xlabel("pair distance |i-j|")
    ax.set_ylabel("mean d_repl - d_inter (nats, last)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "gap_diff_init_vs_trained.png", dpi=120)
    plt.close(fig)


# -- stages 3-5 -----------------------------------------------------------------------------
def pruning(args, out: Path, times) -> dict:
    job = CompareJob(
        run=RunConfig(
            model=ModelConfig("smollm2-135m"),
            calibration=CalibrationConfig(
                prompts=2 * args.windows,
                tokens=args.tokens,
                seed=args.seed,
                positions="last",
                batch_size=args.batch_size,
            ),
            eval=EvalConfig(tasks=["wikitext2_ppl"], words=args.words),
        ),
        compare=CompareConfig(
            output=str(out / "pruning"),
            budgets=list(range(1, args.max_budget + 1)),
            criteria=["interchange", "replacement", "bi", "sleb", "random"],
            random_seeds=list(range(args.random_seeds)),
        ),
    )
    # The trained model's last-position probes already cover the adjacent pairs compare
    # needs, on the same windows: hand them over so compare resumes instead of re-scoring.
    (out / "pruning").mkdir(exist_ok=True)
    target = out / "pruning" / "scores.json"
    if not target.exists():
        target.write_text((out / "scores_trained_last.json").read_text())
    with timed(times, "pruning_compare"):
        return run_compare(job)


def zero_shot(args, out: Path, model, tok, pruning_res, times) -> dict:
    from swapprune.compare import variant
    from swapprune.evaluation import EvalResult, evaluate
    from swapprune.plan import PrunePlan

    f = out / "zero_shot.json"
    if f.exists():
        return json.loads(f.read_text())
    entry = next(e for e in pruning_res["budgets"] if e["budget"] == args.zs_budget)
    costs = {k: v["cost_pct"] for k, v in entry["methods"].items() if not k.startswith("random")}
    best, worst = min(costs, key=costs.get), max(costs, key=costs.get)
    tasks = ["lambada", "piqa", "winogrande", "arc_easy", "boolq"]
    L = len(entry["methods"][best]["kept"]) + args.zs_budget
    runs = {"baseline": PrunePlan.from_removal(L, [])}
    for label in (best, worst):
        runs[label] = PrunePlan.from_removal(L, entry["methods"][label]["removed"])
    results = {}
    with timed(times, "zero_shot"):
        for label, plan in runs.items():
            with variant(model, plan) as m:
                r: EvalResult = evaluate(m, tok, tasks, limit=args.zs_limit)
            results[label] = {
                "removed": plan.removed,
                "metrics": {
                    t: {k: [v.value, v.low, v.high] for k, v in tr.metrics.items()}
                    for t, tr in r.tasks.items()
                },
            }
    data = {
        "budget": args.zs_budget,
        "limit": args.zs_limit,
        "best": best,
        "worst": worst,
        "runs": results,
    }
    f.write_text(json.dumps(data, indent=1))
    return data


def healing(args, out: Path, model, tok, pruning_res, times) -> dict:
    import copy

    from swapprune.evaluation import evaluate
    from swapprune.healing import HealConfig, heal
    from swapprune.plan import PrunePlan
    from swapprune.surgery import apply_plan

    f = out / "healing.json"
    if f.exists():
        return json.loads(f.read_text())
    entry = next(e for e in pruning_res["budgets"] if e["budget"] == args.heal_budget)
    m = entry["methods"]["interchange"]
    L = len(m["kept"]) + args.heal_budget
    plan = PrunePlan.from_removal(L, m["removed"])
    pruned = apply_plan(copy.deepcopy(model), plan, log=lambda *_: None)
    cfg = HealConfig(
        rank=16,
        steps=args.heal_steps,
        tokens=args.heal_tokens,
        batch_size=4,
        prompts=args.heal_steps * 4 // 2,
        seed=args.seed,
    )
    with timed(times, "healing"):
        healed, rep = heal(pruned, tok, cfg, plan=plan)
        r = evaluate(healed, tok, ["wikitext2_ppl"], words=args.words)
    base_ppl = pruning_res["baseline"]["swapprune_wikitext2_ppl"]["perplexity"]["value"]
    pruned_ppl = m["metrics"]["swapprune_wikitext2_ppl"]["perplexity"]["value"]
    healed_ppl = r.tasks["swapprune_wikitext2_ppl"].metrics["perplexity"].value
    data = {
        "budget": args.heal_budget,
        "removed": plan.removed,
        "config": {
            "rank": cfg.rank,
            "alpha": cfg.alpha,
            "steps": cfg.steps,
            "lr": cfg.lr,
            "batch_size": cfg.batch_size,
            "tokens": cfg.tokens,
        },
        "ppl_base": base_ppl,
        "ppl_pruned": pruned_ppl,
        "ppl_healed": healed_ppl,
        "recovered_fraction": (pruned_ppl - healed_ppl) / (pruned_ppl - base_ppl),
        "report": rep.to_dict(),
    }
    f.write_text(json.dumps(data, indent=1))
    return data


# -- report ---------------------------------------------------------------------------------
def write_report(out: Path, args, report, pruning_res, zs, heal_res, times) -> None:
    L = []
    L.append("# Study: SmolLM2-135M, trained vs random init\n")
    L.append(f"Command: `python eval/study.py --out {out}` (settings: {vars(args)})\n")
    L.append(f"## Probes (pairs with |i-j| <= {args.gap})\n")
    L.append(
        "| model | positions | d_inter <= d_repl | regime | median d_repl (adj) | median d_inter (adj) | median I/R (adj) |"
    )
    L.append("|---|---|---|---|---|---|---|")
    for key, e in report.items():
        if key.startswith("growth"):
            continue
        r = e["regime"]
        L.append(
            f"| {key.split('/')[0]} | {key.split('/')[1]} | {e['fraction_inter_le_repl']:.1%} | {r['call']} | "
            f"{r['median_replacement']:.4g} | {r['median_interchange']:.4g} | {r['median_ir']:.3g} |"
        )
    L.append("\n### By pair distance\n")
    L.append(
        "| model | positions | gap | pairs | median d_repl | median d_inter | median I/R | mean d_repl - d_inter | d_inter <= d_repl |"
    )
    L.append("|---|---|---|---|---|---|---|---|---|")
    for key, e in report.items():
        if key.startswith("growth"):
            continue
        for g in e["by_gap"]:
            L.append(
                f"| {key.split('/')[0]} | {key.split('/')[1]} | {g['gap']} | {g['pairs']} | {g['median_replacement']:.4g} | "
                f"{g['median_interchange']:.4g} | {g['median_ir']:.3g} | {g['mean_gap_diff']:.4g} | {g['fraction_inter_le_repl']:.0%} |"
            )
    L.append("\n### Init -> trained: mean adjacent d_repl - d_inter\n")
    L.append("| positions | init | trained | ratio |")
    L.append("|---|---|---|---|")
    for mode in MODES:
        g = report[f"growth/{mode}"]
        L.append(
            f"| {mode} | {g['init_adjacent_gap_diff']:.4g} | {g['trained_adjacent_gap_diff']:.4g} | "
            f"{g['ratio']:.3g}x |"
        )
    L.append("\n### Ranking stability (N vs 2N windows) and CI widths\n")
    L.append(
        "| model | positions | protocol | windows | Spearman | top-5 same | top-10 rel. CI width (median / max) |"
    )
    L.append("|---|---|---|---|---|---|---|")
    for key, e in report.items():
        if key.startswith("growth"):
            continue
        for proto, s in e["stability"].items():
            L.append(
                f"| {key.split('/')[0]} | {key.split('/')[1]} | {proto} | {s['windows'][0]} vs {s['windows'][1]} | "
                f"{s['spearman']:.3f} | {s['top5_same']} ({s['top5_overlap']}/5) | "
                f"{s['top10_median_rel_ci_width']:.1%} / {s['top10_max_rel_ci_width']:.1%} |"
            )
    L.append("\n## Pruning under the matched contract\n")
    L.append((out / "pruning" / "results.md").read_text())
    if zs:
        L.append(
            f"\n## Zero-shot at budget {zs['budget']} (limit {zs['limit']} examples per task)\n"
        )
        tasks = list(next(iter(zs["runs"].values()))["metrics"])
        L.append(
            "| model | removed | " + " | ".join(t.replace("swapprune_", "") for t in tasks) + " |"
        )
        L.append("|---|---|" + "---|" * len(tasks))
        for label, run in zs["runs"].items():
            cells = []
            for t in tasks:
                name = "acc" if "acc" in run["metrics"][t] else next(iter(run["metrics"][t]))
                v, lo, hi = run["metrics"][t][name]
                cells.append(f"{name} {v:.3f} [{lo:.3f}, {hi:.3f}]")
            tag = " (best)" if label == zs["best"] else " (worst)" if label == zs["worst"] else ""
            L.append(f"| {label}{tag} | {run['removed']} | " + " | ".join(cells) + " |")
    if heal_res:
        h = heal_res
        L.append(
            f"\n## LoRA healing at budget {h['budget']} (interchange-guided, removed {h['removed']})\n"
        )
        L.append(
            f"Config {h['config']}. PPL base {h['ppl_base']:.3f}, pruned {h['ppl_pruned']:.3f}, "
            f"healed {h['ppl_healed']:.3f}: recovered **{h['recovered_fraction']:.1%}** of the "
            f"pruning cost (the paper: 48-60% on Qwen3-8B with rank 16, 200 steps)."
        )
    L.append("\n## Wall time (s)\n")
    L.append(", ".join(f"{k} {v}" for k, v in times.items()))
    (out / "REPORT.md").write_text("\n".join(L) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", default="eval/study")
    p.add_argument(
        "--windows", type=int, default=8, help="N; probes run on 2N windows (N vs 2N check)"
    )
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--gap", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-budget", type=int, default=5)
    p.add_argument("--random-seeds", type=int, default=2)
    p.add_argument("--words", type=int, default=5000)
    p.add_argument("--zs-budget", type=int, default=3)
    p.add_argument("--zs-limit", type=int, default=100)
    p.add_argument("--heal-budget", type=int, default=3)
    p.add_argument("--heal-steps", type=int, default=60)
    p.add_argument("--heal-tokens", type=int, default=128)
    p.add_argument("--skip", default="", help="comma list of stages to skip: zero_shot,healing")
    args = p.parse_args()
    # A randomly initialised model's activations shrink through the stack into subnormal
    # floats, which x86 CPUs process ~100x slower; flushing them to zero changes no
    # reported digit of the trained model and makes the init probes run at normal speed.
    torch.set_flush_denormal(True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # A rerun over cached stages keeps the wall times of the run that computed them.
    prior = (
        json.loads((out / "study.json").read_text())["times"]
        if (out / "study.json").exists()
        else {}
    )
    artifacts = {
        "probes_trained": "scores_trained_last.json",
        "probes_init": "scores_init_last.json",
        "pruning_compare": "pruning/results.json",
        "zero_shot": "zero_shot.json",
        "healing": "healing.json",
    }
    kept = {k: prior[k] for k, f in artifacts.items() if k in prior and (out / f).exists()}
    times: dict = {}
    t0 = time.perf_counter()
    model, tok, _ = load_model("smollm2-135m")
    res = probes(args, out, model, tok, times)
    report = analyse(args, res)
    plots(out, res, report)
    pr = pruning(args, out, times)
    skip = set(args.skip.split(","))
    zs = None if "zero_shot" in skip else zero_shot(args, out, model, tok, pr, times)
    hr = None if "healing" in skip else healing(args, out, model, tok, pr, times)
    times["total"] = round(time.perf_counter() - t0, 1)
    if kept:
        times = {
            **times,
            **kept,
            "total": prior.get("total", times["total"]),
            "this_rerun": times["total"],
        }
    (out / "study.json").write_text(
        json.dumps(
            {
                "settings": vars(args),
                "probes": report,
                "zero_shot": zs,
                "healing": hr,
                "times": times,
            },
            indent=1,
            default=str,
        )
    )
    write_report(out, args, report, pr, zs, hr, times)
    print(f"[study] wrote {out}/REPORT.md in {times['total']:.0f}s")


if __name__ == "__main__":
    main()
