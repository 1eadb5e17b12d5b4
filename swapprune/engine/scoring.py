"""``swapprune.score``: measure swap-KL probes on an in-memory model.

Calibrate -> probe every pair (and layer, for deletion) -> :class:`ScoreResult`.
With ``out`` the JSON is flushed atomically as units finish, and a rerun with
the same settings resumes from it instead of starting over.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from swapprune import __version__
from swapprune.architectures import decoder_stack
from swapprune.calibration import Calibration, load_calibration
from swapprune.engine.plans import PAIR_PROTOCOLS, parse_pairs, parse_protocols
from swapprune.engine.probes import ProbeEngine, Unit
from swapprune.engine.scores import ScoreResult
from swapprune.errors import SwappruneError, unknown_name

POSITIONS = ("last", "all")
# Meta fields that must match for a rerun to resume from an existing file.
_RESUME_KEYS = ("model", "num_layers", "positions", "calibration", "dtype")


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="unit", disable=not enabled, dynamic_ncols=True)


def score(
    model: torch.nn.Module,
    tokenizer=None,
    *,
    positions: str = "all",
    out: str | Path | None = None,
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
    return score_modes(model, tokenizer, modes=(positions,), out=out, shard=shard, **kwargs)[positions]


def score_modes(
    model: torch.nn.Module,
    tokenizer=None,
    *,
    modes: Sequence[str] = ("last", "all"),
    calibration: Calibration | torch.Tensor | None = None,
    calib: str | None = None,
    prompts: int = 64,
    tokens: int = 128,
    seed: int = 0,
    protocols: Sequence[str] | str = ("replacement", "interchange"),
    pairs: str | Sequence[tuple[int, int]] = "adjacent",
    batch_size: int = 8,
    cache_gb: float = 4.0,
    n_boot: int = 1000,
    out: str | Path | None = None,
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
            :func:`swapprune.calibration.load_calibration`).
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
    protocols = parse_protocols(protocols)
    modes = tuple(modes)
    for m in modes:
        if m not in POSITIONS:
            raise unknown_name("positions mode", m, POSITIONS)
    if out is not None and len(modes) != 1:
        raise ValueError("out= needs exactly one positions mode")
    stack = decoder_stack(model)
    L = stack.num_layers
    pair_list = parse_pairs(pairs, L) if isinstance(pairs, str) else [tuple(sorted(p)) for p in pairs]
    for i, j in pair_list:
        if not (0 <= i < L and 0 <= j < L) or i == j:
            raise SwappruneError(f"pair {i}-{j} is out of range for {L} blocks")
        stack.check_swappable(i, j)
    calibration = _calibration(model, tokenizer, calibration, calib, prompts, tokens, seed)
    param = next(model.parameters())
    meta = {
        "model": model_id or getattr(model.config, "_name_or_path", "") or type(model).__name__,
        "model_type": model.config.model_type,
        "num_layers": L,
        "calibration": calibration.describe(),
        "dtype": str(param.dtype).replace("torch.", ""),
        "protocols": list(protocols),
        "layer_types": stack.layer_types(),
        "block_classes": sorted(set(stack.block_classes())),
        "swapprune_version": __version__,
    }
    results = {m: ScoreResult(meta={**meta, "positions": m}, n_boot=n_boot, seed=seed) for m in modes}
    if out is not None and Path(out).exists():
        _resume(results[modes[0]], Path(out))
    first = results[modes[0]]

    pair_protocols = tuple(p for p in protocols if p in PAIR_PROTOCOLS)
    units = [Unit(i, j) for i, j in pair_list if pair_protocols and (i, j) not in first.pairs]
    if "deletion" in protocols:
        units += [Unit(i) for i in range(L) if i not in first.deletion]
    rank, world = shard
    units = units[rank::world]

    engine = ProbeEngine(model, calibration.input_ids, modes, batch_size, cache_gb * 1e9)
    start = time.perf_counter()

    def done(unit: Unit, values: dict[str, dict[str, np.ndarray]]) -> None:
        for mode, v in values.items():
            if unit.j is None:
                results[mode].deletion[unit.i] = v["delete"]
            else:
                results[mode].pairs[(unit.i, unit.j)] = v
        if out is not None and world == 1:
            first.save(out)

    if units:
        bar = _progress(len(units) * len(engine.chunks), "probing", progress)
        try:
            engine.run(units, pair_protocols, done, progress=bar.update)
        finally:
            bar.close()
    timing = {
        "seconds": time.perf_counter() - start,
        "block_evals": engine.runner.stats.block_evals,
        "head_rows": engine.runner.stats.head_rows,
        "window_chunks": len(engine.chunks),
        "units_probed": len(units),
    }
    for r in results.values():
        r.meta["timing"] = timing
    if out is not None and world == 1:
        first.save(out)
    return results


def _calibration(model, tokenizer, calibration, calib, prompts, tokens, seed) -> Calibration:
    if isinstance(calibration, Calibration):
        return calibration
    if isinstance(calibration, torch.Tensor):
        return Calibration(calibration.long(), "tensor", seed)
    if tokenizer is None:
        raise SwappruneError("scoring needs a tokenizer or precomputed calibration windows")
    ctx = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    return load_calibration(tokenizer, calib, prompts, tokens, seed, ctx)


def _resume(result: ScoreResult, path: Path) -> None:
    """Adopt finished units from ``path`` if it was made with the same settings."""
    try:
        old = ScoreResult.load(path)
    except SwappruneError:
        return
    if any(old.meta.get(k) != result.meta.get(k) for k in _RESUME_KEYS):
        return
    result.pairs.update(old.pairs)
    result.deletion.update(old.deletion)
