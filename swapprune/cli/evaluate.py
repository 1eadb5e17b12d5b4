"""``swapprune eval``: evaluate a model on the offline lm-eval task pack."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from swapprune.cli import say_to_stderr
from swapprune.cli.options import add_command_sections, add_common, section_from
from swapprune.config import EvalConfig, ModelConfig, RunConfig
from swapprune.errors import SwappruneError
from swapprune.model.load import resolve_source

EPILOG = """examples:
  swapprune eval --model pruned/ --output pruned/eval.json
  swapprune eval --model pruned/ --tasks wikitext2_ppl,lambada,piqa --baseline base.json --output e.json
  swapprune eval --model pruned/ --tasks wikitext2_ppl,wikitext2_ext --output e.json
wikitext2_ppl is the paper's matched contract (WikiText-2 test, first 5000 words, windows of
512 tokens, stride 256); wikitext2_ext the extended one (one 512-token window from each of the
59 later articles, article-clustered CI; about 164 CPU-s per SmolLM2-135M model, one thread)."""


def add_arguments(p) -> None:
    add_command_sections(p, "eval", required={"eval": ("output",)})
    p.add_argument(
        "--baseline",
        default=None,
        metavar="EVAL_JSON|MODEL",
        help="the unpruned model to compare against: an earlier eval JSON of it, or the model "
        "itself (evaluated the same way first, into OUTPUT's name + .baseline.json)",
    )
    add_common(p)


def run(args) -> int:
    from swapprune.cli.summary import print_eval_summary  # imports numpy, tqdm
    from swapprune.pipeline.checks import check_config  # imports numpy
    from swapprune.pipeline.sequence import run as run_pipeline  # imports numpy

    cfg = RunConfig(
        model=section_from(args, ModelConfig, "model"), eval=section_from(args, EvalConfig, "eval")
    )
    check_config(cfg)  # before the baseline is evaluated
    say = say_to_stderr(args)
    baseline = None
    if args.baseline is not None:
        baseline = _baseline(args.baseline, cfg, say, not args.no_progress)
    res = run_pipeline(cfg, say=say, progress=not args.no_progress)
    print_eval_summary(res, baseline, baseline_given=args.baseline is not None)
    return 0


def _baseline(given: str, cfg: RunConfig, say, progress: bool):
    """The baseline's results: an eval JSON as it is, or a model evaluated the same way first
    (its JSON written beside ``--output`` as ``NAME.baseline.json``)."""
    path = Path(given)
    if path.is_file() and path.suffix == ".json":
        from swapprune.evaluation import EvalResult  # imports numpy

        try:
            return EvalResult.from_json(path.read_text())
        except OSError as e:
            raise SwappruneError(f"cannot read --baseline {given}: {e}") from None
        except (KeyError, TypeError, ValueError) as e:
            raise SwappruneError(f"--baseline {given} is not an eval JSON ({e})") from None
    from swapprune.pipeline.sequence import run as run_pipeline  # imports numpy

    resolve_source(given)  # a typo fails here, before the evaluated model loads
    assert cfg.eval is not None and cfg.eval.output is not None
    out = Path(cfg.eval.output)
    base = dataclasses.replace(
        cfg,
        model=dataclasses.replace(cfg.model, name=given),
        eval=dataclasses.replace(cfg.eval, output=str(out.with_suffix(".baseline.json"))),
    )
    return run_pipeline(base, say=say, progress=progress).eval["base"]
