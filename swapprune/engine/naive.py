"""The literal definitions, used as references by tests and benchmarks.

A modified model is built by rebuilding the block list from the base model's
own modules and running the plain Hugging Face forward, exactly as the
definitions read. Where the config has per-layer ``layer_types`` that list is
rebuilt too, so each block keeps its own attention type (some families, such
as Gemma 3 in transformers 5, pick masks and rotary embeddings by
``config.layer_types[slot]``). Slow by design: one full forward per plan.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from swapprune.edit.surgery import pruned_view as rebuilt


@torch.no_grad()
def plan_logits(model: nn.Module, plan: Sequence[int], input_ids: torch.Tensor) -> torch.Tensor:
    """Logits ``[B, T, V]`` of ``model`` modified to run ``plan``, by a plain forward."""
    with rebuilt(model, plan):
        return model(input_ids=input_ids, use_cache=False).logits.float()


def kl_per_window(base_logits: torch.Tensor, logits: torch.Tensor, positions: str) -> torch.Tensor:
    """``KL(p_base || p_mod)`` per window, in nats: last position or mean over positions.

    Args:
        base_logits, logits: ``[B, T, V]``.
        positions: ``"last"`` or ``"all"``.

    Returns:
        ``[B]`` tensor.
    """
    if positions == "last":
        base_logits, logits = base_logits[:, -1:], logits[:, -1:]
    logp = F.log_softmax(base_logits.double(), dim=-1)
    logq = F.log_softmax(logits.double(), dim=-1)
    return (logp.exp() * (logp - logq)).sum(-1).mean(-1)
