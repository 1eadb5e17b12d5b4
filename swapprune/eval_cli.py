"""``swapprune eval`` and ``swapprune compare`` sub-commands (thin: parse, call, print)."""

from __future__ import annotations

import json
from pathlib import Path


def _ints(text: str) -> list[int]:
    from swapprune.errors import SwappruneError

    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SwappruneError(f"expected comma-separated integers, got '{text}'") from None


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _eval_args(p) -> None:
    g = p.add_argument_group("evaluation")
    g.add_argument("--tasks", default="wikitext2_ppl",
                   help="comma list (first = primary metric): wikitext2_ppl, wikitext, lambada, "
                        "piqa, winogrande, arc_easy, boolq, or any lm-eval task")
    g.add_argument("--limit", type=int, default=None, help="examples (windows) per task, for quick runs")
    g.add_argument("--words", type=int, default=5000, help="WikiText-2 test words (matched contract: 5000)")
    g.add_argument("--max-length", type=int, default=512, help="window / context length (stride = half)")
    g.add_argument("--eval-batch-size", type=int, default=8, help="sequences per forward pass")


def add_parsers(sub) -> None:
    from swapprune.cli import _calib_args, _model_args

    p = sub.add_parser("eval", help="evaluate a model with lm-eval (offline task pack)")
    _model_args(p)
    _eval_args(p)
    p.add_argument("--out", required=True, help="eval.json to write")
    p.set_defaults(handler=cmd_eval)

    p = sub.add_parser("compare", help="pruning cost per protocol and budget, with paired verdicts")
    _model_args(p), _calib_args(p)
    p.add_argument("--budgets", default="1,3,5", help="comma list of budgets (default: %(default)s)")
    p.add_argument("--protocols", default="interchange,replacement",
                   help="criteria to compare, e.g. interchange,replacement,bi,sleb,random")
    p.add_argument("--strategy", default=None, help="selection strategy for every method")
    p.add_argument("--random-seeds", default="0,1,2", help="seeds for the random baseline")
    p.add_argument("--pairs", default="adjacent", help="pairs to score (heatmaps show what is scored)")
    _eval_args(p)
    p.add_argument("--out", required=True, help="directory for results.json, results.md, plots, cache")
    p.set_defaults(handler=cmd_compare)


def cmd_eval(a) -> int:
    from swapprune.artifacts import write_json_atomic
    from swapprune.evaluation import evaluate, resolve_tasks
    from swapprune.pipeline import load

    tasks = resolve_tasks(_names(a.tasks))
    from swapprune.cli import model_opts_from

    model, tok, src = load(model_opts_from(a))
    res = evaluate(model, tok, tasks, limit=a.limit, words=a.words, max_length=a.max_length,
                   batch_size=a.eval_batch_size)
    data = json.loads(res.to_json())
    data["model"] = src.id
    write_json_atomic(Path(a.out), data)
    for name, t in res.tasks.items():
        for metric, m in t.metrics.items():
            ci = f" [{m.low:.4g}, {m.high:.4g}]" if m.low is not None else ""
            print(f"{name} {metric}: {m.value:.4g}{ci}")
    print(f"wrote {a.out}")
    return 0


def cmd_compare(a) -> int:
    from swapprune.cli import calib_opts_from, model_opts_from
    from swapprune.compare import CompareJob, run_compare

    job = CompareJob(
        out=a.out, budgets=_ints(a.budgets), methods=_names(a.protocols), strategy=a.strategy,
        random_seeds=_ints(a.random_seeds), tasks=_names(a.tasks), limit=a.limit, words=a.words,
        max_length=a.max_length, eval_batch_size=a.eval_batch_size, pairs=a.pairs,
        model=model_opts_from(a), calib=calib_opts_from(a),
    )
    res = run_compare(job)
    print(Path(a.out, "results.md").read_text())
    t = res["timing"]
    print(f"scoring {t['score_s']:.0f}s, total {t['total_s']:.0f}s; wrote {a.out}/results.json")
    return 0
