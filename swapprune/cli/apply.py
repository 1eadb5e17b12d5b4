"""``swapprune apply``: re-apply a saved ``plan.json`` to a model and save the checkpoint."""

from __future__ import annotations

from swapprune.cli.options import add_common, add_section, section_from
from swapprune.cli.prune import add_cost, cost_from, kept_on_interrupt
from swapprune.config import ExportConfig, ModelConfig, RunConfig, SelectConfig

EPILOG = """example:
  swapprune apply --plan pruned/plan.json --model smollm2-135m --output again/"""


__all__ = ["add_arguments", "kept_on_interrupt", "run"]


def add_arguments(p) -> None:
    add_section(p, ModelConfig, "model")
    p.add_argument("--plan", required=True, help="plan.json written by an earlier run")
    add_section(p, ExportConfig, "export", title="output", required=("output",))
    add_cost(p)
    add_common(p)


def run(args) -> int:
    from swapprune.cli import next_steps, say_to_stderr  # imports numpy, tqdm
    from swapprune.cli.summary import print_prune_summary  # imports numpy, tqdm
    from swapprune.pipeline.sequence import run as run_pipeline  # imports numpy

    cfg = RunConfig(
        model=section_from(args, ModelConfig, "model"),
        prune=SelectConfig(plan=args.plan),
        export=section_from(args, ExportConfig, "export"),
        cost=cost_from(args),
    )
    res = run_pipeline(
        cfg, say=say_to_stderr(args), progress=not args.no_progress, wording=next_steps.wording()
    )
    print_prune_summary(res)
    return 0
