"""Scores from an earlier run (``--scores``), checked against the selection that will read them.

A scores file that lacks a probe the criterion reads is refused, in one line,
before any weights load: probing the missing protocol from scratch behind the
user's back would turn a reuse that takes seconds into a run that takes hours.
The error carries the run that fills the gap (:class:`~swapprune.errors.Fix`, data
that the command line writes as a command): a ``swapprune score`` that resumes the
file and adds the protocol (for files that ``swapprune score`` wrote), or the same
run without ``--scores`` (for the scores a selection wrote, whose windows are a
subset of a pool and cannot be resumed).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from swapprune.config import CalibrationConfig, ScoreConfig
from swapprune.defaults import CALIBRATION_SOURCE
from swapprune.errors import Fix, SwappruneError

if TYPE_CHECKING:
    from swapprune.config import RunConfig
    from swapprune.select.spec import SelectionSpec


def missing_probes(scores, spec: SelectionSpec) -> list[str]:
    """The probes ``spec`` reads that ``scores`` has no values for."""
    have = set(scores.protocols())
    return [p for p in spec.probes if p not in have]


def _resumable(scores) -> bool:
    """Whether ``swapprune score --output FILE`` can resume ``scores`` (same windows)."""
    cal = scores.meta.get("calibration") or {}
    return "pool" not in cal and "adaptive" not in scores.meta and cal.get("source") != "tensor"


def fill(scores, missing: list[str], cfg: RunConfig, path: str) -> Fix:
    """The run that adds ``missing`` to the file (a ``score`` run that resumes it, on the
    windows it was measured on), or the same run without ``--scores``."""
    if not _resumable(scores):
        assert cfg.prune is not None
        run = dataclasses.replace(cfg, prune=dataclasses.replace(cfg.prune, scores=None))
        return Fix(run, None, "probe them without --scores")
    cal = scores.meta.get("calibration") or {}
    source = cal.get("source")
    calibration = dataclasses.replace(
        CalibrationConfig(),
        calib=None if source == CALIBRATION_SOURCE else source,
        prompts=cal.get("prompts", 64),
        tokens=cal.get("tokens", 128),
        seed=cal.get("seed", 0),
        positions=scores.meta.get("positions", "all"),
    )
    run = dataclasses.replace(
        cfg,
        calibration=calibration,
        score=ScoreConfig(probes=missing, output=path),
        prune=None,
        export=None,
        cost=None,
    )
    return Fix(run, "score", "add them to the file")


def check_reused(
    scores, spec: SelectionSpec, path: str, cfg: RunConfig | None = None, flag: str = "--protocol"
) -> None:
    """Refuse ``scores`` when they lack a probe ``spec`` reads.

    Raises:
        SwappruneError: one line naming what is missing; with the run's configuration
            ``cfg``, its ``fix`` is the run that adds it (:func:`fill`), which the command
            line writes into the line as a command.
    """
    missing = missing_probes(scores, spec)
    if not missing:
        return
    have = scores.protocols()
    held = f"it holds {', '.join(have)}" if have else "it holds no probe values"
    line = (
        f"scores file {path} has no {', '.join(missing)} values, which {flag} {spec.name} "
        f"reads ({held})"
    )
    fix = fill(scores, missing, cfg, path) if cfg is not None else None
    then = f"; or choose {flag} {have[0]}" if have and spec.name != have[0] else ""
    raise SwappruneError(line, fix=fix, then=then)
