"""The save stage's pruned GGUF: ``model.gguf`` beside the checkpoint, checked before it is kept.

When the run writes a GGUF (:func:`swapprune.gguf.decision.gguf_output`),
:func:`save_gguf` copies the kept blocks out of the source GGUF into the staging
directory (:func:`~swapprune.gguf.writer.write_pruned_gguf`) and proves it
(:func:`~swapprune.gguf.check.gguf_selfcheck`): transformers reloads it,
its logits equal the in-memory pruned model's exactly (a GGUF input's model is
its float32 de-quantization), and cached generation equals uncached.

One thing is known only once the cut is: transformers' GGUF loader derives
Gemma's layer types from the index, so a cut that moves a full-attention layer
cannot pass the self-check. ``--gguf auto`` then writes no GGUF and says why;
``--gguf on`` refuses the run (``--serve`` keeps the cut in phase; it is on by
default while a GGUF is written, so this takes ``--serve none``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swapprune.errors import SwappruneError
from swapprune.gguf.decision import gguf_output
from swapprune.gguf.writer import write_pruned_gguf
from swapprune.model.arch import TYPE_KEY, text_config
from swapprune.serving.phase import phase_rule

GGUF_NAME = "model.gguf"


def save_gguf(config, directory: Path, model, plan, check_ids=None) -> dict[str, Any] | None:
    """Write and check ``directory / model.gguf`` when the run writes one.

    Args:
        config: the run's :class:`~swapprune.config.RunConfig`.
        directory: the staging directory (renamed into place later).
        model: the in-memory pruned model (the self-check's reference).
        plan: the applied plan.
        check_ids: token windows ``[B, T]`` of the logit check (default: a seeded sample).

    Returns:
        ``GGUFRecord.to_dict()`` (its ``path`` the final location), or
        ``{"written": False, "reason": ...}`` when a GGUF input gets no GGUF, or
        ``None`` when there is nothing to say (the input is not a GGUF).

    Raises:
        SwappruneError: ``--gguf on`` and the cut cannot be written; the self-check failed.
    """
    out = gguf_output(config)
    if not out.write or out.source is None:
        return {"written": False, "reason": out.reason} if out.reason else None
    why = _cut_refused(model, plan, out.source)
    if why is not None:
        if config.export.gguf == "on":
            raise SwappruneError(f"--gguf on cannot be met: {why}")
        return {"written": False, "reason": why}
    from swapprune.gguf.check import gguf_selfcheck  # imports torch

    check = gguf_selfcheck(model, check_ids) if config.export.selfcheck else None
    record = write_pruned_gguf(out.source.path, plan, directory / GGUF_NAME, check=check)
    # The file was checked under the staging directory; record where it will live.
    record.path = str(Path(config.export.output).expanduser().absolute() / GGUF_NAME)
    return record.to_dict()


def writes_gguf(config) -> bool:
    """Whether the run is set to write ``model.gguf`` (the cut may still refuse it)."""
    return gguf_output(config).write


def _cut_refused(model, plan, source) -> str | None:
    """Why this cut cannot be a pruned GGUF that transformers reloads as checked, or ``None``."""
    if plan.op != "remove" or plan.merged or plan.patch:
        return "the cut changes the kept blocks' weights, so their quantized bytes cannot be copied"
    config = text_config(model.config)
    kept = list(getattr(config, TYPE_KEY, None) or [])
    try:
        rule = phase_rule(getattr(config, "model_type", ""), "transformers-gguf", source.metadata)
    except SwappruneError:  # a family transformers' GGUF loader has no rule for: nothing derived
        return None
    target = rule.target(len(plan.kept)) if kept else None
    if target is not None and kept != target:
        flips = [i for i, (a, b) in enumerate(zip(kept, target)) if a != b]
        return (
            f"transformers' GGUF loader derives {rule.model_type} layer types from the index and "
            f"would give pruned layers {flips} other types (keep the cut in phase: --serve "
            "transformers-gguf, the default while a GGUF is written)"
        )
    return None


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def _sizes(record: dict[str, Any]) -> str:
    types = ", ".join(f"{k} x{v}" for k, v in sorted(record["tensor_types"].items()))
    return (
        f"{_size(record['bytes_before'])} -> {_size(record['bytes_after'])} "
        f"({record['blocks_before']} -> {record['blocks_after']} blocks; kept tensors copied "
        f"byte for byte: {types})"
    )


def _logits(check: dict[str, Any]) -> str:
    if check.get("logits_exact"):
        return "logits equal the in-memory pruned model's exactly"
    return f"logits within {check.get('logits_max_abs_diff', float('nan')):.3g} of it"


def gguf_lines(record: dict[str, Any] | None) -> list[str]:
    """The run summary's line about ``model.gguf`` (none when the input is not a GGUF)."""
    if not record:
        return []
    if record.get("written") is False:
        return [f"gguf: not written: {record['reason']}"]
    check = record.get("selfcheck") or {}
    checked = (
        f"self-check: {_logits(check)}, generation with KV cache == without: "
        f"{check.get('generate_cache_equal')} (write {record['write_s']:.1f}s, check "
        f"{check.get('check_s', 0):.1f}s)"
        if check
        else "self-check: skipped"
    )
    return [f"gguf: {record['path']}: {_sizes(record)}; {checked}"]


def gguf_card_lines(record: dict[str, Any] | None) -> list[str]:
    """The model card's lines about ``model.gguf``."""
    if not record:
        return []
    if record.get("written") is False:
        return [f"- **GGUF**: not written: {record['reason']}."]
    check = record.get("selfcheck") or {}
    lines = [
        f"- **GGUF**: `{GGUF_NAME}`, {_sizes(record)}; for llama.cpp, ollama, or transformers "
        f'with `gguf_file="{GGUF_NAME}"`.'
    ]
    if not check:
        return [*lines, "- **GGUF self-check**: skipped (`--no-selfcheck`)."]
    return [
        *lines,
        f"- **GGUF self-check**: transformers reloads it; {_logits(check)} (max abs diff "
        f"{check.get('logits_max_abs_diff', float('nan')):.3g}); greedy generation with the KV "
        f"cache equals generation without it: {check.get('generate_cache_equal')}.",
    ]
