"""``auto`` against SLEB-iterative and BI, paired, on both evaluation contracts.

The certificate benchmark (``eval/bench_certificate.py``) records each arm's cut
and its matched dPPL with a CI of its own. This script asks the question the
quality target needs: is ``auto``'s cut worse than the better of BI and SLEB?
For every budget it evaluates each distinct cut of the three arms on the
matched contract (WikiText-2 test, first 5,000 words, 23 windows of 512 tokens:
window bootstrap) and the extended one (one 512-token window from each of the 59
later articles: article bootstrap), and gives each pair the four-outcome verdict
(``swapprune.stats.comparison.compare_cuts``; TOST margin 2 dPPL points, 2,000
paired resamples, seed 0). Two arms that removed the same blocks are identical
and not tested.

Each evaluation is cached under ``--out``/paired-cache (keyed by the kept
blocks), so a rerun only evaluates cuts it has not seen. The unpruned model's
evaluation is read from Study v3's cache when it is there (the same model,
tasks and contract settings).

    PYTHONPATH=. OMP_NUM_THREADS=1 python eval/certificate_paired.py --budgets 2,4,8
"""

from __future__ import annotations

import argparse
import json
from itertools import combinations
from pathlib import Path

ARMS = ("adaptive-auto", "bi", "sleb")
TASKS = ["wikitext2_ppl", "wikitext2_ext"]
MARGIN = 2.0
STUDY_CACHE = Path(__file__).resolve().parent / "study_v3" / "results" / "cache"


def _study_key(kept: list[int]) -> dict:
    """Study v3's cache key for an evaluation of ``kept`` under these tasks."""
    seed0 = STUDY_CACHE.parent / "seed0" / "results.json"
    model = json.loads(seed0.read_text())["model"] if seed0.is_file() else "smollm2-135m"
    return {
        "model": model,
        "tasks": [f"swapprune_{t}" for t in TASKS],
        "limit": None,
        "words": 5000,
        "max_length": 512,
        "dtype": "torch.float32",
        "per_article": 1,
        "kept": kept,
        "merged": {},
    }


def evaluated(model, tok, kept: list[int], cache: Path):
    """The EvalResult of the cut that keeps ``kept`` (cached)."""
    from swapprune.edit.surgery import pruned_view
    from swapprune.evaluation import EvalResult, evaluate
    from swapprune.output.artifacts import write_json_atomic
    from swapprune.studies.cache import content_key

    key = content_key(_study_key(kept))
    for f in (cache / f"eval-{key}.json", STUDY_CACHE / f"eval-{key}.json"):
        if f.is_file():
            return EvalResult.from_json(f.read_text())
    with pruned_view(model, kept) as view:
        res = evaluate(view, tok, TASKS, per_article=1)
    write_json_atomic(cache / f"eval-{key}.json", json.loads(res.to_json()))
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budgets", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4, 8])
    p.add_argument("--out", default="eval/certificate")
    args = p.parse_args()

    import torch

    import swapprune
    from swapprune.stats.comparison import compare_cuts
    from swapprune.stats.verdicts import Margin, cut_key

    torch.set_num_threads(1)
    out = Path(args.out)
    cache = out / "paired-cache"
    cache.mkdir(parents=True, exist_ok=True)
    arms = {a: json.loads((out / f"{a}.json").read_text()) for a in ARMS}
    model, tok, _ = swapprune.load_model("smollm2-135m", progress=False)
    L = model.config.num_hidden_layers
    base = evaluated(model, tok, list(range(L)), cache)
    rows, record = [], {"margin_points": MARGIN, "budgets": {}}
    for b in map(str, args.budgets):
        cuts = {a: r["budgets"][b]["removed"] for a, r in arms.items() if b in r["budgets"]}
        if len(cuts) < 2:
            continue
        kept = {a: [i for i in range(L) if i not in s] for a, s in cuts.items()}
        res = {a: evaluated(model, tok, k, cache) for a, k in kept.items()}
        record["budgets"][b] = {"removed": cuts, "verdicts": []}
        for task in TASKS:
            task = f"swapprune_{task}"
            t = base.tasks[task]
            clusters = t.units.get("article") if task.endswith("_ext") else None
            for x, y in combinations(cuts, 2):
                v = compare_cuts(
                    res[x].tasks[task].matrix("perplexity"),
                    res[y].tasks[task].matrix("perplexity"),
                    "ppl",
                    a=x,
                    b=y,
                    a_key=cut_key(kept[x]),
                    b_key=cut_key(kept[y]),
                    higher_is_better=False,
                    base_units=t.matrix("perplexity"),
                    clusters=clusters,
                    margin=Margin(MARGIN),
                    scope=f"{task} n={b}",
                    n_boot=2000,
                    seed=0,
                )
                d = v.to_dict()
                record["budgets"][b]["verdicts"].append({"task": task, **d})
                rows.append((b, task, x, y, cuts[x], cuts[y], d))
    (out / "paired.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    lines = [
        "| n | contract | A | B | A removed | B removed | d = cost(B) - cost(A), pts [95% CI] | p | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for b, task, x, y, sx, sy, d in rows:
        ci = d.get("ci") or [None, None]
        est = d.get("estimate")
        diff = "-" if est is None or ci[0] is None else f"{est:+.1f} [{ci[0]:+.1f}, {ci[1]:+.1f}]"
        p_value = d.get("p_value")
        pv = "-" if p_value is None else f"{p_value:.3f}"
        lines.append(f"| {b} | {task} | {x} | {y} | {sx} | {sy} | {diff} | {pv} | {d['label']} |")
    (out / "paired.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
