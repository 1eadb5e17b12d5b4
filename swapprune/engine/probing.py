"""``swapprune.score``: measure swap-KL probes on an in-memory model.

Calibrate -> probe every pair (and layer, for deletion) -> :class:`ScoreResult`.

With ``out`` the JSON is written atomically (temp file + rename) as work
finishes: before the first probe, after every unit (a pair, or a layer for
deletion), after every window chunk, after a unit's batch when ``FLUSH_S``
seconds have passed since the last write, and when the run is interrupted by an
exception. A run killed after ``k`` pairs therefore resumes with those ``k``
pairs done (and the batches of the pair in flight, up to ``FLUSH_S`` seconds of
work lost), and its file carries an ``incomplete`` record (the units in flight,
with the windows already measured) until the run is finished.

A rerun with ``out`` pointing at an existing file resumes from it:

* the file must come from the same model (fingerprint; the ``model`` string
  for files without one), model type, block count, dtype, positions mode and
  calibration windows (source, prompts, tokens, seed and the windows' hash);
  anything else is refused with one line naming the difference, and so is a
  file that cannot be read; the file is never overwritten in either case;
* pairs in the file that this run does not ask for are kept (the file's pair
  set grows; it never shrinks);
* the result covers the union of the file's and this run's protocols: a
  protocol added on resume is probed for every pair in the file, so the file
  never claims a protocol it has no values for;
* units in flight resume at the windows where they stopped when the batch
  size is the same (batches are then identical, so the values equal an
  uninterrupted run's bit for bit); otherwise they restart.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from swapprune import __version__, defaults
from swapprune.calibration.windows import Calibration, load_calibration
from swapprune.engine.orders import PAIR_PROBES, parse_pairs, parse_protocols
from swapprune.engine.probes import PartialUnit, ProbeEngine, Unit
from swapprune.engine.resume import incomplete_record, resume
from swapprune.engine.scores import ScoreResult
from swapprune.entry import entry_point
from swapprune.errors import SwappruneError, unknown_name
from swapprune.model.arch import context_length
from swapprune.model.fingerprint import model_fingerprint
from swapprune.model.stack import decoder_stack
from swapprune.output.placement import sole_writer
from swapprune.stats import N_BOOT

POSITIONS = ("last", "all")
# Within a window chunk, flush a unit's partial values at most this often (seconds):
# each flush rewrites the whole file, including the summaries of finished pairs.
FLUSH_S = 30.0
# Plan keys each pair protocol stores.
_PLAN_KEYS = {"replacement": ("repl_ij", "repl_ji"), "interchange": ("inter",)}


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm  # imports tqdm

    return tqdm(total=total, desc=desc, unit="unit", disable=not enabled, dynamic_ncols=True)


def _kept(*args, out=None, **kwargs) -> str | None:
    """What a stopped scoring keeps: the units flushed to ``out``, which the same call resumes."""
    if out is not None and Path(out).is_file():
        return f"the probes finished so far are in {out}, and the same call resumes from them"
    return None


@entry_point(kept=_kept)
def score(
    model: torch.nn.Module,
    tokenizer=None,
    *,
    positions: str = "all",
    out: str | os.PathLike | None = None,
    shard: tuple[int, int] = (0, 1),
    **kwargs,
) -> ScoreResult:
    """Probe ``model`` and return its scores.

    Args:
        model: a causal LM (left unmodified).
        tokenizer: needed unless ``calibration`` is given.
        positions: ``all`` (default: mean KL over every position; the ranking settles with
            fewer windows, see eval/BENCHMARKS.md) or ``last`` (the paper's convention).
        out: JSON path, flushed as units finish; an existing compatible file is resumed.
        shard: ``(rank, world)``: probe only this rank's share of the units.
        **kwargs: see :func:`score_modes` (calibration, protocols, pairs, ...).
    """
    if positions not in POSITIONS:
        raise unknown_name("positions mode", positions, POSITIONS)
    return score_modes(model, tokenizer, modes=(positions,), out=out, shard=shard, **kwargs)[
        positions
    ]


def score_modes(
    model: torch.nn.Module,
    tokenizer=None,
    *,
    modes: Sequence[str] = ("last", "all"),
    calibration: Calibration | torch.Tensor | None = None,
    calib: str | None = None,
    prompts: int | None = None,
    tokens: int | None = None,
    seed: int = 0,
    protocols: Sequence[str] | str = PAIR_PROBES,
    pairs: str | Sequence[tuple[int, int]] = "adjacent",
    batch_size: int = 8,
    cache_gb: float = 4.0,
    n_boot: int = N_BOOT,
    out: str | os.PathLike | None = None,
    model_id: str | None = None,
    progress: bool = True,
    shard: tuple[int, int] = (0, 1),
) -> dict[str, ScoreResult]:
    """Probe ``model`` once and return one :class:`ScoreResult` per positions mode.

    Both modes come from the same forward passes: only the LM-head rows differ.

    Args:
        model: a causal LM (left unmodified).
        tokenizer: needed unless ``calibration`` is given.
        modes: positions modes to measure (``last``, ``all``).
        calibration: precomputed windows (a :class:`Calibration` or ``[N, T]`` ids).
        calib, prompts, tokens, seed: calibration source and size (see
            :func:`swapprune.calibration.windows.load_calibration`; ``None``:
            :class:`~swapprune.config.CalibrationConfig`'s defaults).
        protocols: any of ``replacement``, ``interchange``, ``deletion``.
        pairs: ``adjacent`` | ``all`` | ``gap:K`` | ``"3-4,7-9"`` or explicit pairs.
        batch_size: windows per forward pass.
        cache_gb: memory for cached hidden states; more windows are chunked.
        n_boot: bootstrap resamples for the CIs.
        out: JSON path (single mode only), flushed as units finish and resumed.
        model_id: recorded as ``model`` in the output.
        progress: show a progress bar with an ETA.
        shard: ``(rank, world)``: probe only this rank's share of the units.
    """
    with _sole_writer(out, shard):
        # parse_protocols takes str | list[str]; a list of the same names parses identically.
        protocols = parse_protocols(protocols if isinstance(protocols, str) else list(protocols))
        modes = tuple(modes)
        for m in modes:
            if m not in POSITIONS:
                raise unknown_name("positions mode", m, POSITIONS)
        if out is not None and len(modes) != 1:
            raise ValueError("out= needs exactly one positions mode")
        stack = decoder_stack(model)
        L = stack.num_layers
        pair_list = (
            parse_pairs(pairs, L)
            if isinstance(pairs, str)
            else [(i, j) for i, j in map(sorted, pairs)]
        )
        for i, j in pair_list:
            if not (0 <= i < L and 0 <= j < L) or i == j:
                raise SwappruneError(f"pair {i}-{j} is out of range for {L} blocks")
            stack.check_swappable(i, j)
        calibration = _calibration(model, tokenizer, calibration, calib, prompts, tokens, seed)
        param = next(model.parameters())
        config: Any = model.config
        meta = {
            "model": model_id or getattr(config, "_name_or_path", "") or type(model).__name__,
            "model_type": config.model_type,
            "num_layers": L,
            "fingerprint": model_fingerprint(model),
            "calibration": calibration.describe(),
            "dtype": str(param.dtype).replace("torch.", ""),
            "protocols": list(protocols),
            "layer_types": stack.layer_types(),
            "block_classes": sorted(set(stack.block_classes())),
            "swapprune_version": __version__,
        }
        results = {
            m: ScoreResult(meta={**meta, "positions": m}, n_boot=n_boot, seed=seed) for m in modes
        }
        first = results[modes[0]]
        in_flight: dict[Unit, PartialUnit] = {}
        if out is not None and Path(out).exists():
            in_flight = resume(first, Path(out), batch_size)
        units = _units(first, pair_list, L)
        pair_protocols = tuple(p for p in first.meta["protocols"] if p in PAIR_PROBES)
        rank, world = shard
        units = units[rank::world]
        in_flight = {u: p for u, p in in_flight.items() if u in units}
        remaining = set(units)

        engine = ProbeEngine(model, calibration.input_ids, modes, batch_size, cache_gb * 1e9)
        start = time.perf_counter()
        flushed = [start]
        writes = out is not None and world == 1

        def flush(force: bool) -> None:
            if not writes or not (force or time.perf_counter() - flushed[0] >= FLUSH_S):
                return
            assert out is not None  # writes implies out
            first.meta["incomplete"] = incomplete_record(
                in_flight, len(remaining), modes[0], batch_size
            )
            first.save(out)
            flushed[0] = time.perf_counter()

        def done(unit: Unit, values: dict[str, dict[str, np.ndarray]]) -> None:
            in_flight.pop(unit, None)
            remaining.discard(unit)
            for mode, v in values.items():
                if unit.j is None:
                    results[mode].deletion[unit.i] = v["delete"]
                else:
                    results[mode].pairs.setdefault((unit.i, unit.j), {}).update(v)
            flush(force=True)

        def chunk_done(unit: Unit, part: PartialUnit, chunk_end: bool) -> None:
            in_flight[unit] = part
            flush(force=chunk_end)

        def batch_done(unit: Unit, part: PartialUnit) -> None:
            in_flight[unit] = part
            flush(force=False)

        if units:
            # The file exists from the start: an early kill leaves a file that resumes.
            flush(force=True)
            bar = _progress(engine.work(units, in_flight), "probing", progress)
            try:
                engine.run(
                    units,
                    pair_protocols,
                    done,
                    progress=bar.update,
                    on_chunk_done=chunk_done,
                    resume=in_flight,
                    on_batch_done=batch_done,
                )
            except BaseException:
                # Keep what was measured (Ctrl-C, out of memory, a failing callback...).
                if in_flight:
                    flush(force=True)
                raise
            finally:
                bar.close()
        timing = {
            "seconds": time.perf_counter() - start,
            "block_evals": engine.runner.stats.block_evals,
            "block_tokens": engine.runner.stats.block_tokens,
            "head_rows": engine.runner.stats.head_rows,
            "window_chunks": len(engine.chunks),
            "units_probed": len(units),
        }
        for r in results.values():
            r.meta["timing"] = timing
        for r in results.values():
            r.meta.pop("incomplete", None)
        if writes:
            assert out is not None  # writes implies out
            first.save(out)
        return results


def _sole_writer(out, shard: tuple[int, int]):
    """One run at a time on a file it resumes and rewrites for a long time (none for shards)."""
    if out is None or shard[1] != 1:
        return contextlib.nullcontext()
    return sole_writer(Path(out).expanduser().absolute())


def _calibration(model, tokenizer, calibration, calib, prompts, tokens, seed) -> Calibration:
    if isinstance(calibration, Calibration):
        return calibration
    if isinstance(calibration, torch.Tensor):
        return Calibration(calibration.long(), "tensor", seed)
    if tokenizer is None:
        raise SwappruneError("scoring needs a tokenizer or precomputed calibration windows")
    return load_calibration(
        tokenizer,
        calib,
        prompts or defaults.CALIBRATION_PROMPTS,
        tokens or defaults.CALIBRATION_TOKENS,
        seed,
        context_length(model.config),
    )


def _units(result: ScoreResult, pair_list: list[tuple[int, int]], num_layers: int) -> list[Unit]:
    """What is left to probe for ``result`` to cover its protocols on every pair and layer.

    A pair scored earlier without one of the protocols gets a unit for just the missing ones.
    """
    protocols = result.meta["protocols"]
    pair_protocols = tuple(p for p in protocols if p in PAIR_PROBES)
    units = []
    if pair_protocols:
        for i, j in list(dict.fromkeys([*pair_list, *sorted(result.pairs)])):
            have = result.pairs.get((i, j))
            if have is None:
                units.append(Unit(i, j))
                continue
            missing = tuple(p for p in pair_protocols if not set(_PLAN_KEYS[p]) <= set(have))
            if missing:
                units.append(Unit(i, j, missing))
    if "deletion" in protocols:
        units += [Unit(i) for i in range(num_layers) if i not in result.deletion]
    return units
