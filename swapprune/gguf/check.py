"""Self-check of a pruned GGUF: transformers reloads it and it is the in-memory pruned model.

The reference is the pruned model built from the same de-quantized source
(:func:`pruned_reference`: transformers' own GGUF load of the source, then
:func:`swapprune.edit.surgery.apply_plan`). The pruned GGUF holds the kept tensors'
bytes unchanged, so transformers de-quantizes them to the same values and, in
float32, the logits must be equal exactly. The check also proves that greedy
generation with the KV cache equals generation without it (the helpers of the
Hugging Face checkpoint's self-check, :mod:`swapprune.output.checkpoint`).

transformers reads no per-layer attention types from a GGUF: it derives them
from the layer index (Gemma-2/3). A cut that moves a full-attention layer is
therefore refused here, with the layers that flip, before logits are compared.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from swapprune.edit.surgery import apply_plan
from swapprune.gguf.convert import clear_gguf_marker, parse_once
from swapprune.model.arch import TYPE_KEY
from swapprune.model.stack import decoder_stack
from swapprune.output.checkpoint import (
    TOLERANCE,
    SelfCheckError,
    _check_cached_generation,
    _default_windows,
)
from swapprune.plan import PrunePlan


def load_gguf_model(path: str | Path, dtype: torch.dtype = torch.float32) -> Any:
    """transformers' own load of a GGUF file (de-quantized to ``dtype``), in eval mode."""
    from transformers import AutoModelForCausalLM  # imports transformers

    path = Path(path)
    with parse_once(quiet=True):
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=dtype
        )
    clear_gguf_marker(model)
    return model.eval()


def pruned_reference(
    source: str | Path, plan: PrunePlan, dtype: torch.dtype = torch.float32
) -> nn.Module:
    """The source GGUF de-quantized by transformers, with ``plan`` applied (the in-memory model)."""
    return apply_plan(load_gguf_model(source, dtype), plan, log=lambda _msg: None)


@torch.no_grad()
def check_gguf(
    path: str | Path, reference: nn.Module, check_ids: torch.Tensor | None = None
) -> dict[str, Any]:
    """Reload the pruned GGUF with transformers and prove it is ``reference``.

    Args:
        path: the pruned GGUF (its final or temporary name).
        reference: the in-memory pruned model (de-quantized source + plan).
        check_ids: token windows ``[B, T]``; a seeded sample of the vocabulary when ``None``.

    Returns:
        The results (block count, layer types, max logit difference, timings).

    Raises:
        SelfCheckError: it does not reload, has another depth or other layer
            types, its logits differ (float32: at all), or cached generation
            differs from uncached.
    """
    t0 = time.perf_counter()
    dtype = next(reference.parameters()).dtype
    try:
        loaded = load_gguf_model(path, dtype)
    except Exception as e:  # any reload failure means the file is not usable
        raise SelfCheckError(f"self-check: transformers cannot load the pruned GGUF ({e})") from e
    t_load = time.perf_counter()
    n, expected = decoder_stack(loaded).num_layers, decoder_stack(reference).num_layers
    if n != expected:
        raise SelfCheckError(f"self-check: the pruned GGUF has {n} blocks, expected {expected}")
    types = getattr(loaded.config, TYPE_KEY, None)
    want = getattr(reference.config, TYPE_KEY, None)
    if want is not None and list(types or []) != list(want):
        flips = [i for i, (a, b) in enumerate(zip(types or [], want)) if a != b]
        raise SelfCheckError(
            f"self-check: transformers derives this GGUF's layer types from the index and gets "
            f"other types at pruned layers {flips}; choose a cut that keeps the pattern in "
            "phase (swapprune.serving.phase)"
        )

    ids = (check_ids if check_ids is not None else _default_windows(reference.config)).to(
        next(reference.parameters()).device
    )
    ref = reference(input_ids=ids, use_cache=False).logits.float()
    got = loaded.to(ids.device)(input_ids=ids, use_cache=False).logits.float()
    diff = (got - ref).abs().max().item()
    # Same bytes, same de-quantization, same code: float32 must be exact. Cached and uncached
    # generation sum in another order, so their near-ties get the checkpoint's tolerance.
    near = TOLERANCE.get(dtype, 1e-2) * max(1.0, ref.abs().max().item())
    tol = 0.0 if dtype == torch.float32 else near
    if not diff <= tol:  # written so NaN fails too
        raise SelfCheckError(
            f"self-check: the pruned GGUF's logits differ from the in-memory pruned model by "
            f"{diff:.3g} (tolerance {tol:.3g})"
        )
    t_logits = time.perf_counter()
    gen_gap = _check_cached_generation(loaded, ids[:1, : min(8, ids.shape[1])], near)
    t_end = time.perf_counter()
    return {
        "passed": True,
        "windows": list(ids.shape),
        "num_layers": n,
        "layer_types": list(types) if types is not None else None,
        "logits_max_abs_diff": diff,
        "logits_exact": bool(torch.equal(got, ref)),
        "logits_tolerance": tol,
        "generate_cache_equal": True,
        "generate_logits_max_abs_diff": gen_gap,
        "reload_s": round(t_load - t0, 3),
        "logits_s": round(t_logits - t_load, 3),
        "generate_s": round(t_end - t_logits, 3),
        "check_s": round(t_end - t0, 3),
    }


def gguf_selfcheck(
    reference: nn.Module, check_ids: torch.Tensor | None = None
) -> Callable[[Path], dict[str, Any]]:
    """The ``check`` argument of :func:`~swapprune.gguf.writer.write_pruned_gguf`."""
    return lambda path: check_gguf(path, reference, check_ids)
