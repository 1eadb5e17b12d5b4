"""``swapprune eval``: evaluate a model on the offline lm-eval task pack."""

from __future__ import annotations

from swapprune.cli.options import add_common, add_section, section_from
from swapprune.config import EvalConfig, ModelConfig, RunConfig

EPILOG = """examples:
  swapprune eval --model pruned/ --output pruned/eval.json
  swapprune eval --model pruned/ --tasks wikitext2_ppl,lambada,piqa --baseline base.json --output e.json
  swapprune eval --model pruned/ --tasks wikitext2_ppl,wikitext2_ext --output e.json
wikitext2_ppl is the paper's matched contract (WikiText-2 test, first 5000 words, windows of
512 tokens, stride 256); wikitext2_ext the extended one (one 512-token window from each of the
59 later articles, article-clustered CI; about 164 CPU-s per SmolLM2-135M model, one thread)."""


def add_arguments(p) -> None:
    add_section(p, ModelConfig, "model")
    add_section(p, EvalConfig, "eval", title="evaluation", required=("output",))
    p.add_argument(
        "--baseline",
        default=None,
        metavar="EVAL_JSON",
        help="an earlier eval JSON of the unpruned model: print the change against it",
    )
    add_common(p)


def run(args) -> int:
    from swapprune.cli import say_to_stderr
    from swapprune.cli.summary import print_eval_summary
    from swapprune.errors import SwappruneError
    from swapprune.pipeline import run as run_pipeline

    baseline = None
    if args.baseline is not None:
        from pathlib import Path

        from swapprune.evaluation import EvalResult

        try:
            baseline = EvalResult.from_json(Path(args.baseline).read_text())
        except OSError as e:
            raise SwappruneError(f"cannot read --baseline {args.baseline}: {e}") from None
        except (KeyError, TypeError, ValueError) as e:
            raise SwappruneError(f"--baseline {args.baseline} is not an eval JSON ({e})") from None
    cfg = RunConfig(
        model=section_from(args, ModelConfig, "model"), eval=section_from(args, EvalConfig, "eval")
    )
    res = run_pipeline(cfg, say=say_to_stderr(args), progress=not args.no_progress)
    print_eval_summary(res, baseline)
    return 0
