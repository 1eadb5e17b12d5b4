"""Scores from an earlier run (``--scores``), checked against the selection that will read them.

A scores file that lacks a probe the criterion reads is refused, in one line,
before any weights load: probing the missing protocol from scratch behind the
user's back would turn a reuse that takes seconds into a run that takes hours.
The line names the command that fills the gap: a ``swapprune score`` that
resumes the file and adds the protocol (for files that ``swapprune score``
wrote), or the same run without ``--scores`` (for the scores a selection wrote,
whose windows are a subset of a pool and cannot be resumed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swapprune.errors import SwappruneError

if TYPE_CHECKING:
    from swapprune.config import RunConfig
    from swapprune.select.spec import SelectionSpec

#: The calibration source recorded for the default text.
DEFAULT_SOURCE = "wikitext2-valid"


def missing_probes(scores, spec: SelectionSpec) -> list[str]:
    """The probes ``spec`` reads that ``scores`` has no values for."""
    have = set(scores.protocols())
    return [p for p in spec.probes if p not in have]


def _resumable(scores) -> bool:
    """Whether ``swapprune score --output FILE`` can resume ``scores`` (same windows)."""
    cal = scores.meta.get("calibration") or {}
    return "pool" not in cal and "adaptive" not in scores.meta and cal.get("source") != "tensor"


def fill_command(scores, missing: list[str], cfg: RunConfig, path: str) -> str:
    """The command that adds ``missing`` to the file, or the run without ``--scores``."""
    import dataclasses

    from swapprune.cli.argv import changed, command_line
    from swapprune.config import CalibrationConfig, ScoreConfig

    if not _resumable(scores):
        assert cfg.prune is not None
        return command_line(changed(cfg, prune={"scores": None}))
    cal = scores.meta.get("calibration") or {}
    source = cal.get("source")
    calibration = dataclasses.replace(
        CalibrationConfig(),
        calib=None if source == DEFAULT_SOURCE else source,
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
    return command_line(run, "score")


def check_reused(
    scores, spec: SelectionSpec, path: str, cfg: RunConfig | None = None, flag: str = "--protocol"
) -> None:
    """Refuse ``scores`` when they lack a probe ``spec`` reads; the message says what to run.

    Raises:
        SwappruneError: one line naming what is missing and the command that adds it.
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
    if cfg is not None:
        what = "add them to the file" if _resumable(scores) else "probe them without --scores"
        line += f"; {what}: {fill_command(scores, missing, cfg, path)}"
    if have and spec.name != have[0]:
        line += f"; or choose {flag} {have[0]}"
    raise SwappruneError(line)
