"""Model surgery: apply a :class:`~swapprune.plan.PrunePlan` to a loaded model, in place.

Modules and config change together in :func:`apply_plan`, because a model
whose block list and config disagree loads into something else: the layer
count, the per-layer ``layer_types`` (sliding vs full attention), Qwen's
``max_window_layers`` and every ``layer_idx`` (the KV-cache slot) all follow
the kept blocks. Every config change is logged as ``key: old -> new``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from swapprune.edit.merging import get_merge
from swapprune.edit.patch import fold
from swapprune.errors import SwappruneError
from swapprune.model.arch import (
    INDEX_DEPENDENT_KEYS,
    LAYER_INDEX_KEYS,
    PER_LAYER_KEYS,
    SLIDING_PATTERN_KEYS,
    TYPE_KEY,
)
from swapprune.model.stack import block_layer_idx_modules, decoder_stack, get_submodule
from swapprune.plan import PrunePlan

logger = logging.getLogger(__name__)

Log = Callable[[str], None] | logging.Logger


def apply_plan(
    model: nn.Module, plan: PrunePlan, log: Log | None = None, patches: list | None = None
) -> nn.Module:
    """Merge, drop and renumber blocks of ``model`` as ``plan`` says; edits ``model`` in place.

    Steps, in order: merged weights are written into their kept blocks, or a
    linear patch is folded into the block before each removed span; the
    block list is rebuilt from the kept blocks (removed blocks are released,
    so they are absent from a saved checkpoint); the config's layer count,
    explicit ``layer_types`` of the kept blocks' own types, other per-layer
    fields and ``max_window_layers`` are updated; every ``layer_idx`` in the
    kept blocks is renumbered to its new slot. The identity plan changes nothing.

    Args:
        model: a ``*ForCausalLM`` whose decoder stack :mod:`swapprune.model.arch` finds.
        plan: the plan; ``plan.num_layers`` must equal the model's block count.
        log: ``print``, a :class:`logging.Logger` or any ``str -> None``;
            defaults to this module's logger at INFO.
        patches: the plan's :class:`~swapprune.edit.patch.Patch` matrices, required
            when ``plan.patch`` is set (:func:`swapprune.edit.patch.load_patches`).

    Returns:
        ``model`` itself.

    Raises:
        SwappruneError: the plan does not fit the model, or the model's
            blocks depend on their own index (see ``INDEX_DEPENDENT_KEYS``).
    """
    say = _as_log_fn(log)
    stack = decoder_stack(model)
    config: Any = model.config
    old_n = stack.num_layers
    if plan.num_layers != old_n:
        raise SwappruneError(
            f"plan is for {plan.num_layers} layers but the model has {old_n} "
            f"(model_type '{config.model_type}')"
        )
    if plan.is_identity:
        return model
    kept = plan.kept
    if kept != list(range(len(kept))):
        _refuse_index_dependent(config)
    old_types = stack.layer_types()

    if plan.patch is not None:
        if patches is None:
            raise SwappruneError("the plan carries a linear patch: pass its matrices (patches=)")
        got = sorted(tuple(p.span) for p in patches)
        want = sorted(tuple(s["span"]) for s in plan.patch["spans"])
        if got != want:
            raise SwappruneError(f"the patches cover spans {got}; the plan has {want}")
        for p in patches:
            fold(model, p)
            say(f"block {p.block}: linear patch of span {list(p.span)} folded into {p.module}")
    elif patches:
        raise SwappruneError("patches given for a plan without a patch")

    if plan.merged:
        rule = get_merge(plan.merge or "")
        with torch.no_grad():
            for base, group in plan.merged.items():
                absorbed = [stack.blocks[i] for i in group if i != base]
                new = rule.merge_blocks(stack.blocks[base], absorbed)
                for name, p in stack.blocks[base].named_parameters():
                    p.copy_(new[name])
                say(f"block {base}: merged blocks {group} ({rule.name})")

    # Modules: a fresh ModuleList of the kept blocks, in order.
    parent_path, attr = stack.spec.blocks.rsplit(".", 1)
    parent = get_submodule(model, parent_path) if parent_path else model
    new_blocks = nn.ModuleList([stack.blocks[i] for i in kept])
    setattr(parent, attr, new_blocks)
    say(f"{stack.spec.blocks}: {old_n} blocks -> {len(kept)} (removed {plan.removed})")

    # Config, in the same step: everything that indexes layers follows the kept blocks.
    _set(config, stack.spec.count_key, len(kept), say)
    for key in PER_LAYER_KEYS:
        values = getattr(config, key, None)
        if key == TYPE_KEY and values is not None:
            # Written explicitly from the blocks' own types, never re-derived from a pattern.
            values = old_types
        if isinstance(values, (list, tuple)) and len(values) == old_n:
            _set(config, key, [values[i] for i in kept], say)
    new_slot = {old: new for new, old in enumerate(kept)}
    for key in LAYER_INDEX_KEYS:
        values = getattr(config, key, None)
        if isinstance(values, (list, tuple)):
            _set(config, key, [new_slot[i] for i in values if i in new_slot], say)
    window_key = stack.spec.window_layers_key
    if window_key and isinstance(getattr(config, window_key, None), int):
        old_window = getattr(config, window_key)
        _set(config, window_key, sum(1 for i in kept if i < old_window), say)
    if getattr(config, TYPE_KEY, None) is not None:
        _update_sliding_pattern(config, say)

    renumbered = 0
    for new_idx, block in enumerate(new_blocks):
        for mod in block_layer_idx_modules(block):
            if mod.layer_idx != new_idx:
                setattr(mod, "layer_idx", new_idx)  # noqa: B010 (an nn.Module attribute)
                renumbered += 1
    if renumbered:
        say(f"layer_idx: {kept} -> {list(range(len(kept)))} ({renumbered} modules renumbered)")

    _check_config_round_trip(config, stack.spec.count_key, [old_types[i] for i in kept])
    return model


def _as_log_fn(log: Log | None) -> Callable[[str], None]:
    if log is None:
        return logger.info
    if isinstance(log, logging.Logger):
        return log.info
    return log


def _set(config, key: str, new, say: Callable[[str], None]) -> None:
    old = getattr(config, key, None)
    if old == new:
        return
    setattr(config, key, new)
    say(f"{key}: {old} -> {new}")


def _refuse_index_dependent(config) -> None:
    for key, harmless in INDEX_DEPENDENT_KEYS.items():
        value = getattr(config, key, harmless)
        if value is not None and value != harmless:
            raise SwappruneError(
                f"config {key}={value!r} makes blocks depend on their own index; renumbering "
                f"them would change the model on reload (supported: {key}={harmless!r})"
            )


def _update_sliding_pattern(config, say: Callable[[str], None]) -> None:
    """Keep a sliding/full period consistent with the new ``layer_types`` where one exists.

    Configs read the period only when ``layer_types`` is missing, but other
    tools read it directly: set it to a period that reproduces the kept types,
    and leave it (``layer_types`` stays authoritative) when none does.
    """
    types = list(config.layer_types)
    for key in SLIDING_PATTERN_KEYS:
        period = getattr(config, key, None)
        if not isinstance(period, int) or isinstance(period, bool) or period < 1:
            continue
        if _pattern(period, len(types)) == types:
            continue
        fits = [p for p in range(1, len(types) + 1) if _pattern(p, len(types)) == types]
        if fits:
            _set(config, key, fits[0], say)
        else:
            say(f"{key}: {period} kept (no period reproduces the kept layer_types, which rule)")


def _pattern(period: int, n: int) -> list[str]:
    # The transformers convention: every period-th block (1-based) is full attention.
    return ["sliding_attention" if (i + 1) % period else "full_attention" for i in range(n)]


def _check_config_round_trip(config, count_key: str, kept_types: list[str]) -> None:
    """Serialise and re-read the config: a reload must see the same count and types."""
    reread = type(config).from_dict(config.to_dict())
    if getattr(reread, count_key) != len(kept_types):
        raise SwappruneError(
            f"config round trip changed {count_key}: {getattr(reread, count_key)} "
            f"!= {len(kept_types)}"
        )
    if getattr(config, TYPE_KEY, None) is not None and list(reread.layer_types) != kept_types:
        raise SwappruneError(
            f"config round trip changed layer_types: {list(reread.layer_types)} != {kept_types}"
        )


@contextmanager
def pruned_view(model: nn.Module, plan: Sequence[int]) -> Iterator[nn.Module]:
    """Temporarily make ``model`` run the blocks of ``plan``, in order; restores all on exit.

    A zero-copy view (blocks keep their original ``layer_idx``, so the KV cache is
    switched off for the duration): used to evaluate a removal without a copy,
    and by the reference implementation of the probes.
    """
    stack = decoder_stack(model)
    parent_path, attr = stack.spec.blocks.rsplit(".", 1)
    parent = get_submodule(model, parent_path)
    config: Any = model.config
    old_blocks = getattr(parent, attr)
    old_count = getattr(config, stack.spec.count_key)
    old_types = getattr(config, TYPE_KEY, None)
    types = stack.layer_types()
    old_cache = getattr(config, "use_cache", None)
    setattr(parent, attr, nn.ModuleList([old_blocks[b] for b in plan]))
    setattr(config, stack.spec.count_key, len(plan))
    config.use_cache = False
    if old_types is not None:
        setattr(config, TYPE_KEY, [types[b] for b in plan])
    try:
        yield model
    finally:
        setattr(parent, attr, old_blocks)
        setattr(config, stack.spec.count_key, old_count)
        config.use_cache = old_cache
        if old_types is not None:
            setattr(config, TYPE_KEY, old_types)
