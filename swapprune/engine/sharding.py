"""Sharded scoring across processes (``torchrun --nproc-per-node K -m swapprune score ...``).

Every rank loads the model, builds the same calibration windows and probes its
share of the units (``units[rank::world]``, see :func:`swapprune.engine.probing.score`);
the per-pair, per-window values are gathered on rank 0, merged into one
:class:`~swapprune.engine.scores.ScoreResult` and written there, atomically. The
merged JSON is identical to a single-process run's except ``timing``, which
records the world size, the slowest rank's seconds and the summed work.

Sharding is by unit, not by window, so each rank runs the same batches as a
single process would: per-window values are the same numbers.

A sharded run writes ``out`` once, at the end (a single process also flushes
as units finish and resumes from an existing file; a sharded run does not, and
refuses an existing ``out`` before any compute rather than replace it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from swapprune.engine.scores import ScoreResult
from swapprune.errors import SwappruneError


def shard_env() -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` from the torchrun environment; ``(0, 1, 0)`` outside it."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return 0, 1, 0
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
    except ValueError:
        raise SwappruneError("RANK / WORLD_SIZE / LOCAL_RANK must be integers") from None
    if not 0 <= rank < world:
        raise SwappruneError(f"RANK {rank} is outside WORLD_SIZE {world}")
    return rank, world, local


def merge_timing(timings: list[dict]) -> dict:
    """One ``timing`` record from the ranks' records (rank order)."""
    total = {
        k: sum(t.get(k, 0) for t in timings)
        for k in ("block_evals", "block_tokens", "head_rows", "units_probed")
    }
    return {
        "seconds": max(t.get("seconds", 0.0) for t in timings),  # the slowest rank: the job's wall
        **total,
        "window_chunks": max(t.get("window_chunks", 0) for t in timings),
        "world_size": len(timings),
        "rank_seconds": [t.get("seconds", 0.0) for t in timings],
    }


def merge_results(parts: list[ScoreResult]) -> ScoreResult:
    """Merge the ranks' results (rank order) into one; they must share their settings."""
    first = parts[0]
    meta = {k: v for k, v in first.meta.items() if k != "timing"}
    for r, part in enumerate(parts[1:], 1):
        other = {k: v for k, v in part.meta.items() if k != "timing"}
        if other != meta or (part.n_boot, part.seed) != (first.n_boot, first.seed):
            diff = sorted(k for k in set(meta) | set(other) if meta.get(k) != other.get(k))
            raise SwappruneError(
                f"rank {r} scored with different settings than rank 0 ({', '.join(diff) or 'n_boot/seed'}); "
                "every rank must load the same model and calibration"
            )
    merged = ScoreResult(meta=meta, n_boot=first.n_boot, seed=first.seed)
    for part in parts:
        merged.pairs.update(part.pairs)
        merged.deletion.update(part.deletion)
    merged.meta["timing"] = merge_timing([p.meta.get("timing", {}) for p in parts])
    return merged


def _process_group():
    """The group to gather on (gloo), and whether this call created the default group."""
    import torch.distributed as dist  # imports torch

    if not dist.is_available():
        raise SwappruneError("this torch build has no torch.distributed; run a single process")
    created = False
    if not dist.is_initialized():
        # torchrun sets MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE: env:// init.
        dist.init_process_group(backend="gloo")
        created = True
    # gather_object over NCCL needs a CUDA device per rank; the payload is
    # small CPU data, so gather on a gloo group whatever the default backend.
    group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
    return group, created


def score_sharded(model, tokenizer=None, out: str | os.PathLike | None = None, **score_kwargs):
    """Score on this rank's share of the units; rank 0 merges, writes ``out`` and returns the result.

    Outside a torchrun environment (no ``RANK``/``WORLD_SIZE``, or a world of
    one) this is :func:`swapprune.engine.probing.score` with ``out``.

    Args:
        model, tokenizer: as for :func:`swapprune.engine.probing.score`; every rank
            must load the same model and calibration (checked on rank 0).
        out: JSON path written by rank 0 (atomically) after the merge.
        **score_kwargs: passed to :func:`swapprune.engine.probing.score` (``shard``
            and ``out`` are set here; ``progress`` is shown on rank 0 only).

    Returns:
        The merged :class:`ScoreResult` on rank 0, ``None`` on other ranks.
    """
    from swapprune.engine.probing import score  # imports torch

    for key in ("shard", "out"):
        if key in score_kwargs:
            raise TypeError(f"score_sharded sets '{key}' itself")
    rank, world, _ = shard_env()
    if world == 1:
        return score(model, tokenizer, out=out, **score_kwargs)
    import torch.distributed as dist  # imports torch

    progress = bool(score_kwargs.pop("progress", True)) and rank == 0
    group, created = _process_group()
    if dist.get_rank() != rank or dist.get_world_size() != world:
        raise SwappruneError(
            f"process group (rank {dist.get_rank()} of {dist.get_world_size()}) does not match "
            f"RANK={rank} WORLD_SIZE={world}"
        )
    try:
        # Rank 0 decides for every rank (the file may be visible to rank 0 only), so
        # that all raise together and none waits in the gather below.
        existing = [str(out) if rank == 0 and out is not None and Path(out).exists() else None]
        dist.broadcast_object_list(existing, src=0, group=group)
        if existing[0] is not None:
            raise SwappruneError(
                f"{existing[0]} exists and a sharded run does not resume; move it away, choose "
                "another output file, or resume it in a single process"
            )
        part = score(
            model, tokenizer, out=None, shard=(rank, world), progress=progress, **score_kwargs
        )
        payload = {
            "meta": part.meta,
            "pairs": part.pairs,
            "deletion": part.deletion,
            "n_boot": part.n_boot,
            "seed": part.seed,
        }
        gathered: list[Any] | None = [None] * world if rank == 0 else None
        dist.gather_object(payload, gathered, dst=0, group=group)
    finally:
        if created:
            dist.destroy_process_group()
    if rank != 0:
        return None
    assert gathered is not None  # rank 0 allocated the gather list
    merged = merge_results([ScoreResult(**p) for p in gathered])
    if out is not None:
        merged.save(Path(out))
    return merged
