"""The main job in one screen: load -> calibrate -> score -> select -> edit -> save -> report.

Each stage is a named library call; :func:`run_prune` only wires them
together, validating everything a user can get wrong before the model loads
(names, output directory) or before the first forward pass (the budget).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ModelOptions:
    model: str = "smollm2-135m"
    dtype: str | None = None
    device: str | None = None
    device_map: str | None = None
    trust_remote_code: bool = False


@dataclass
class CalibOptions:
    calib: str | None = None
    prompts: int = 64
    tokens: int = 128
    seed: int = 0
    positions: str = "all"
    batch_size: int = 8
    progress: bool = True


@dataclass
class PruneJob:
    """Everything ``swapprune prune`` needs."""

    output: str
    request: object  # swapprune.pruning.PruneRequest
    model: ModelOptions = field(default_factory=ModelOptions)
    calib: CalibOptions = field(default_factory=CalibOptions)
    scores: str | None = None
    overwrite: bool = False
    save_dtype: str | None = None
    selfcheck: bool = True
    command: list[str] = field(default_factory=lambda: list(sys.argv))


def load(opts: ModelOptions, progress: bool = True):
    from swapprune.loading import load_model

    return load_model(opts.model, dtype=opts.dtype, device=opts.device,
                      device_map=opts.device_map, trust_remote_code=opts.trust_remote_code,
                      progress=progress)


def save_dtype(name: str | None):
    if name is None:
        return None
    from swapprune.loading import resolve_dtype

    return resolve_dtype(name, "cpu")


def run_prune(job: PruneJob) -> dict:
    """Run the main job; returns a summary (plan, self-check, paths)."""
    from swapprune.architectures import decoder_stack
    from swapprune.artifacts import check_output_dir
    from swapprune.calibration import load_calibration
    from swapprune.checkpoint import save_checkpoint
    from swapprune.engine.scores import ScoreResult
    from swapprune.pruning import plan_pruning
    from swapprune.surgery import apply_plan

    req = job.request
    req.resolve()  # names now; the budget once the layer count is known
    check_output_dir(job.output, job.overwrite)
    scores = ScoreResult.load(job.scores) if job.scores else None
    dtype = save_dtype(job.save_dtype)

    model, tokenizer, source = load(job.model, job.calib.progress)
    L = decoder_stack(model).num_layers
    req.validate(L)
    if scores is not None and scores.num_layers != L:
        raise_scores_mismatch(job.scores, scores.num_layers, L)
    c = job.calib
    ctx = getattr(model.config, "max_position_embeddings", None)
    calibration = load_calibration(tokenizer, c.calib, c.prompts, c.tokens, c.seed, ctx)
    plan, scores = plan_pruning(
        model, tokenizer, req, scores=scores, calibration=calibration, positions=c.positions,
        batch_size=c.batch_size, model_id=source.id, progress=c.progress,
    )
    apply_plan(model, plan)
    check = save_checkpoint(
        model, tokenizer, plan, job.output, save_dtype=dtype, overwrite=job.overwrite,
        provenance={"command": job.command, "calibration": calibration.describe()},
        base_model_id=source.id, selfcheck=job.selfcheck, check_ids=calibration.input_ids[:2],
    )
    if scores is not None:
        scores.save(Path(job.output) / "scores.json")
    return {"output": str(Path(job.output).absolute()), "plan": plan, "selfcheck": check,
            "scores": scores}


def raise_scores_mismatch(path, got: int, want: int):
    from swapprune.errors import SwappruneError

    raise SwappruneError(f"scores file {path} is for a {got}-block model; this model has {want}")
