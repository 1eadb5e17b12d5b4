"""``swapprune score``: measure the swap-KL probes and write ``scores.json`` (resumable)."""

from __future__ import annotations

from pathlib import Path

from swapprune.cli import say_to_stderr
from swapprune.cli.options import add_command_sections, add_common, section_from
from swapprune.config import CalibrationConfig, ModelConfig, RunConfig, ScoreConfig

EPILOG = """examples:
  swapprune score --output scores.json                       # adjacent pairs, both protocols
  swapprune score --pairs gap:3 --probes interchange --output s.json
  torchrun --nproc-per-node 4 -m swapprune score --model Qwen/Qwen3-8B --output q3.json
An existing --output file with the same settings is resumed."""


def add_arguments(p) -> None:
    add_command_sections(p, "score", required={"score": ("output",)})
    add_common(p, quick=True)


def kept_on_interrupt(args) -> str | None:
    """The probes flushed so far stay in the output file, which the same command resumes."""
    out = getattr(args, "score.output", None)
    if out and Path(out).is_file():
        return f"partial files removed; the probes finished so far are in {out}, and the same command resumes from them"
    return None


def run(args) -> int:
    from swapprune.cli.summary import print_score_summary  # imports numpy, tqdm
    from swapprune.pipeline.checks import check_config  # imports numpy
    from swapprune.pipeline.sequence import run as run_pipeline  # imports numpy

    cfg = RunConfig(
        model=section_from(args, ModelConfig, "model"),
        calibration=section_from(args, CalibrationConfig, "calibration"),
        score=section_from(args, ScoreConfig, "score"),
    )
    check_config(cfg)  # before the output file is looked at
    assert cfg.score is not None and cfg.score.output is not None
    resumed = Path(cfg.score.output).is_file()
    res = run_pipeline(cfg, say=say_to_stderr(args), progress=not args.no_progress)
    if res.scores is None:  # a non-zero torchrun rank
        return 0
    print_score_summary(res, resumed)
    return 0
