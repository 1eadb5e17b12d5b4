"""``swapprune [prune]``: score, select, remove or merge, and save a self-checked checkpoint."""

from __future__ import annotations

from swapprune.cli.argv import default_output
from swapprune.cli.options import add_command_sections, add_common, add_section, section_from
from swapprune.config import (
    CalibrationConfig,
    CostConfig,
    ExportConfig,
    ModelConfig,
    RunConfig,
    SelectConfig,
)

EPILOG = """examples:
  swapprune --budget 8 --protocol interchange
  swapprune --budget 4 --protocol auto --output smol-26L/
  swapprune --model Qwen/Qwen3-8B --budget 5 --protocol interchange --device-map auto --output q3/
  swapprune --scores scores.json --budget 4 --protocol replacement --output r4/
Without --output the checkpoint goes to ./MODEL-PROTOCOL-BUDGET/."""


def add_arguments(p) -> None:
    add_command_sections(
        p, None, required={"prune": ("budget",)}, defaults={"export": {"output": None}}
    )
    add_no_eval(p)
    add_common(p, quick=True)


def add_cost(p) -> None:
    """The cost check every pruning command runs after selection, unless ``--no-eval``."""
    add_section(
        p,
        CostConfig,
        "cost",
        title="cost check (base vs pruned WikiText-2 perplexity)",
        prefix="cost",
    )
    add_no_eval(p)


def add_no_eval(p) -> None:
    p.add_argument(
        "--no-eval",
        action="store_true",
        help="skip the cost check (the self-check of the checkpoint still runs)",
    )


def cost_from(args):
    return None if args.no_eval else section_from(args, CostConfig, "cost")


def config_from(args) -> RunConfig:
    select = section_from(args, SelectConfig, "prune")
    model = section_from(args, ModelConfig, "model")
    output = getattr(args, "export.output") or default_output(
        model.name, select.protocol, select.budget
    )
    return RunConfig(
        model=model,
        calibration=section_from(args, CalibrationConfig, "calibration"),
        prune=select,
        export=section_from(args, ExportConfig, "export", output=output),
        cost=cost_from(args),
    )


def kept_on_interrupt(args) -> str:
    """A stopped prune writes no checkpoint: its output directory is as the run found it."""
    out = getattr(args, "export.output") or default_output(
        getattr(args, "model.name"), getattr(args, "prune.protocol"), getattr(args, "prune.budget")
    )
    return f"partial files removed; no checkpoint written, {out} is as it was"


def run(args) -> int:
    from swapprune.cli import next_steps, say_to_stderr  # imports numpy, tqdm
    from swapprune.cli.summary import print_prune_summary  # imports numpy, tqdm
    from swapprune.pipeline.sequence import run as run_pipeline  # imports numpy

    res = run_pipeline(
        config_from(args),
        say=say_to_stderr(args),
        progress=not args.no_progress,
        wording=next_steps.wording(),
    )
    print_prune_summary(res)
    return 0
