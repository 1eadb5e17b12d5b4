"""The LM head's next-token NLL without ``[B, T, V]`` logits (torch side).

:func:`head_nll` runs the final norm, the LM head and the soft-cap
(:meth:`~swapprune.model.stack.DecoderStack.head`) over :data:`VOCAB_CHUNK` vocabulary
entries at a time with a running log-sum-exp, and :func:`token_nll` over
:data:`ROWS` positions at a time: at most ``ROWS x VOCAB_CHUNK`` float32 logits exist at
once, where a full head over eight 512-token windows of a 49k vocabulary holds 1.6 GB
(and its log-softmax as much again). Every evaluation that only needs the NLL of the
next token uses it: the exhaustive landscape, the calibration oracle (SLEB's signal,
``auto``'s search, the certificate's held-out windows).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: Vocabulary entries per slice of the LM head.
VOCAB_CHUNK = 4096
#: Positions per LM-head call.
ROWS = 1024


def head_nll(stack, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token NLL ``[R]`` (float32) of hidden states ``[R, H]`` against ``targets`` ``[R]``.

    Final norm, LM head and soft-cap as :meth:`~swapprune.model.stack.DecoderStack.head`,
    then ``logsumexp(logits) - logits[target]``; for an ``nn.Linear`` head, over slices of
    :data:`VOCAB_CHUNK` entries with a running maximum and sum.
    """
    x = hidden
    for mod in stack.tail:
        x = mod(x)
    lm = stack.model.get_output_embeddings()
    key = stack.spec.softcap_key
    cap = getattr(stack.config, key, None) if key else None
    if not isinstance(lm, nn.Linear):
        logits = lm(x).float()
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return F.cross_entropy(logits, targets, reduction="none")
    weight, bias = lm.weight, lm.bias
    rows = x.shape[0]
    top = torch.full((rows,), -torch.inf, device=x.device)
    total = torch.zeros(rows, device=x.device)
    picked = torch.zeros(rows, device=x.device)
    for j in range(0, weight.shape[0], VOCAB_CHUNK):
        part = F.linear(
            x, weight[j : j + VOCAB_CHUNK], None if bias is None else bias[j : j + VOCAB_CHUNK]
        ).float()  # [R, C]
        if cap:
            part = torch.tanh(part / cap) * cap
        new_top = torch.maximum(top, part.amax(-1))
        total = total * torch.exp(top - new_top) + torch.exp(part - new_top[:, None]).sum(-1)
        top = new_top
        inside = ((targets >= j) & (targets < j + part.shape[1])).nonzero().squeeze(1)
        if inside.numel():
            picked[inside] = part[inside, targets[inside] - j]
    return top + torch.log(total) - picked


def token_nll(stack, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token NLL ``[R]`` (float32, on the CPU) of states ``[R, H]``, :data:`ROWS` at a time."""
    out = torch.empty(hidden.shape[0], dtype=torch.float32)
    for r in range(0, hidden.shape[0], ROWS):
        out[r : r + ROWS] = head_nll(stack, hidden[r : r + ROWS], targets[r : r + ROWS]).cpu()
    return out
