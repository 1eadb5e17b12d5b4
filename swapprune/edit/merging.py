"""Merge rules: how the parameters of several blocks become one block.

A rule is pure tensor arithmetic over the parameters of blocks of one module
class; :mod:`swapprune.edit.surgery` writes the result into the kept block. Only
parameters are merged: buffers (causal masks, rotary frequencies) are
per-class constants and stay those of the kept block.

Rules are registered in :data:`MERGES` by name; the names are public API.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from swapprune.errors import SwappruneError
from swapprune.registry import Registry

if TYPE_CHECKING:  # torch is imported where a merge runs: `swapprune list` needs only the names
    import torch
    from torch import nn

    StateDict = dict[str, torch.Tensor]
else:
    StateDict = dict


class MergeRule(ABC):
    """Combine one kept ("base") block with the blocks it absorbs."""

    name: str = ""

    @abstractmethod
    def merge_tensor(self, base: torch.Tensor, others: Sequence[torch.Tensor]) -> torch.Tensor:
        """Merge one parameter: ``base`` and ``others`` share shape; returns that shape."""

    def merge_state_dicts(self, base: StateDict, others: Sequence[StateDict]) -> StateDict:
        """Merge parameter dicts with identical keys and shapes, tensor by tensor.

        Arithmetic runs in float32 at least (half-precision sums of several
        blocks lose bits) and the result is cast back to the base dtype.
        """
        for k, other in enumerate(others):
            if other.keys() != base.keys():
                diff = sorted(set(other) ^ set(base))
                raise SwappruneError(f"cannot merge blocks with different parameters: {diff}")
            for name, t in other.items():
                if t.shape != base[name].shape:
                    raise SwappruneError(
                        f"cannot merge '{name}': shape {tuple(t.shape)} of absorbed block {k} "
                        f"differs from {tuple(base[name].shape)}"
                    )
        import torch  # imports torch

        merged: StateDict = {}
        for name, b in base.items():
            wide = torch.promote_types(b.dtype, torch.float32)
            out = self.merge_tensor(b.to(wide), [o[name].to(wide) for o in others])
            merged[name] = out.to(b.dtype)
        return merged

    def merge_blocks(self, base: nn.Module, others: Sequence[nn.Module]) -> StateDict:
        """Merged parameters of ``base`` and ``others`` (blocks are not modified).

        Raises:
            SwappruneError: if a block is of a different class than ``base``.
        """
        for other in others:
            if type(other) is not type(base):
                raise SwappruneError(
                    f"cannot merge a {type(other).__name__} into a {type(base).__name__}: "
                    "merge rules combine blocks of one class only"
                )
        return self.merge_state_dicts(_params(base), [_params(o) for o in others])


def _params(block: nn.Module) -> StateDict:
    return {n: p.detach() for n, p in block.named_parameters()}


MERGES: Registry[type[MergeRule]] = Registry("merge rule")


def register_merge(name: str):
    """Class decorator: file a :class:`MergeRule` subclass in :data:`MERGES` as ``name``."""

    def deco(cls: type[MergeRule]) -> type[MergeRule]:
        cls.name = name
        return MERGES.register(name)(cls)

    return deco


def get_merge(name: str, **kwargs) -> MergeRule:
    """Instantiate the rule registered as ``name`` (unknown names raise with a hint)."""
    return MERGES.get(name)(**kwargs)


@register_merge("average")
class Average(MergeRule):
    """Weighted mean ``sum_i w_i theta_i / sum_i w_i`` over the base and absorbed blocks.

    Args:
        weights: one weight per block, base first; equal weights when ``None``.
    """

    def __init__(self, weights: Sequence[float] | None = None):
        self.weights = None if weights is None else [float(w) for w in weights]
        if self.weights is not None and sum(self.weights) == 0:
            raise SwappruneError("average merge weights sum to zero")

    def merge_tensor(self, base: torch.Tensor, others: Sequence[torch.Tensor]) -> torch.Tensor:
        blocks = [base, *others]
        weights = self.weights or [1.0] * len(blocks)
        if len(weights) != len(blocks):
            raise SwappruneError(
                f"average merge got {len(weights)} weights for {len(blocks)} blocks"
            )
        total = sum(weights)
        import torch  # imports torch

        merged = torch.zeros_like(base)
        for w, t in zip(weights, blocks, strict=True):
            merged = merged + w * t
        return merged / total


@register_merge("laco")
class LaCo(MergeRule):
    """LaCo's reserving-differences merge: ``theta_b + sum_k (theta_k - theta_b)``.

    The base block keeps its weights and adds each absorbed block's difference
    from it (Yang et al., 2024, "LaCo: Large Language Model Pruning via Layer
    Collapse").
    """

    def merge_tensor(self, base: torch.Tensor, others: Sequence[torch.Tensor]) -> torch.Tensor:
        out = base.clone()
        for t in others:
            out += t - base
        return out
