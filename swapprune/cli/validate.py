"""``swapprune validate``: does each criterion predict the real cost of deleting a block?"""

from __future__ import annotations

from pathlib import Path

from swapprune.cli import say_to_stderr
from swapprune.cli.options import add_common, add_section, section_from
from swapprune.config import CalibrationConfig, ModelConfig, RunConfig, ValidateConfig

EPILOG = """examples:
  swapprune validate --output validity/
  swapprune validate --criteria interchange,replacement,bi --prompts 16 --tokens 64 --output v/
For every criterion: the Spearman correlation, over blocks, between its per-block
removability and the measured calibration-perplexity increase of deleting that one block,
with a bootstrap CI over windows (the paper's predictor check)."""


def add_arguments(p) -> None:
    add_section(p, ModelConfig, "model")
    add_section(p, CalibrationConfig, "calibration")
    add_section(p, ValidateConfig, "validate", title="validity", required=("output",))
    add_common(p, quick=True)


def run(args) -> int:
    from swapprune.studies.validity import run_validity  # imports numpy
    from swapprune.studies.validity_report import validity_markdown  # imports numpy

    cfg = RunConfig(
        model=section_from(args, ModelConfig, "model"),
        calibration=section_from(args, CalibrationConfig, "calibration"),
    )
    validate = section_from(args, ValidateConfig, "validate")
    result, out = run_validity(
        cfg, validate, progress=not args.no_progress, say=say_to_stderr(args)
    )
    print(validity_markdown(result), end="")
    print(f"wrote {Path(out) / 'validity.json'}")
    from swapprune.cli.next_steps import prune_after_validate  # imports numpy, tqdm

    print(f"next: {prune_after_validate(cfg, result)}")
    return 0
