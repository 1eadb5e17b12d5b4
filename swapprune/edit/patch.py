"""A linear patch for each removed span, fitted on calibration activations and folded in.

Removing blocks ``a..b`` leaves the residual stream after the preceding kept
block ``p = a - 1``, ``h = Y + c B``, where ``B`` is the output of that block's
MLP branch (the module the branch ends in: a down projection, or a post-MLP
norm), ``Y`` everything else on the stream, and ``c`` the family's residual
scale (1 but for Granite). The base model would have gone on to the state
``H`` after block ``b``. The patch is a map ``T`` on the MLP branch alone:

    h' = Y + c B T,    T = argmin ||Y + c B T - H||^2 + lam ||T - I||^2,

fitted by least squares with a ridge towards the identity (so a span the data
barely constrains stays close to plain removal), over every token of the
patch windows: ``(c^2 B'B + lam I) T = c B'(H - Y) + lam I``, with
``lam = ridge * mean(diag(c^2 B'B))``. ReplaceMe (Shopkhoev et al. 2025) fits a
map at the same place; this is our own derivation and code.

**Why folding is exact.** ``B`` is linear in the weights of the module it comes
out of, so ``B T`` is that module with its weights multiplied by ``T``:

* ``nn.Linear`` (``y = x W^T + b``): ``W <- T^T W``, ``b <- b T``; ``T`` is a full map;
* GPT-2's ``Conv1D`` (``y = x W + b``): ``W <- W T``, ``b <- b T``;
* a post-MLP RMSNorm (``y = n(x) * w``, OLMo 2) cannot absorb a full map (it is
  channel-wise), so ``T`` is diagonal, ``diag(s)``, and ``w <- w * s``; Gemma's
  RMSNorm scales by ``1 + w``, so ``1 + w <- (1 + w) * s``.

The folded model computes exactly ``Y + c B T`` where the patched model "remove,
then apply ``T`` to block ``p``'s MLP branch" does: same modules, same shapes,
a checkpoint that loads with plain ``from_pretrained`` (``tests/test_patch.py``
checks folded against unfolded). Spans are fitted in order, each on the model
with the earlier spans already removed and patched, against the base model's
state after the span. A span at the first block has no preceding block to fold
into and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from swapprune.errors import SwappruneError
from swapprune.model.arch import ARCHITECTURES, ArchSpec
from swapprune.model.stack import decoder_stack, get_submodule

#: Ridge strength relative to the mean diagonal of ``B'B``.
RIDGE = 1e-3
KINDS = ("linear",)
FULL = ("linear", "conv1d")


@dataclass
class Patch:
    """One span's map, in the original block numbering.

    Attributes:
        span: first and last removed block of the span.
        block: the kept block ``p`` whose MLP branch carries it.
        module: path of the folded module inside the block.
        kind: ``linear`` / ``conv1d`` (``matrix [H, H]``) or ``norm`` / ``norm1p``
            (``matrix`` is the diagonal ``[H]``).
        matrix: ``T`` (float64, CPU).
        fit: residual error before and after, tokens, ridge.
    """

    span: tuple[int, int]
    block: int
    module: str
    kind: str
    matrix: torch.Tensor
    fit: dict

    def describe(self) -> dict:
        return {
            "span": list(self.span),
            "block": self.block,
            "module": self.module,
            "kind": self.kind,
            "shape": list(self.matrix.shape),
            "fit": self.fit,
        }


def spans(removed: list[int]) -> list[tuple[int, int]]:
    """Contiguous runs of ``removed`` as ``(first, last)``."""
    out: list[tuple[int, int]] = []
    for b in sorted(removed):
        if out and out[-1][1] == b - 1:
            out[-1] = (out[-1][0], b)
        else:
            out.append((b, b))
    return out


def fold_site(model) -> tuple[ArchSpec, float]:
    """The family's fold module spec and residual scale; a one-line error where none exists."""
    config: Any = model.config
    model_type = getattr(config, "model_type", "")
    spec = ARCHITECTURES.get(model_type) or decoder_stack(model).spec
    if spec.mlp_out is None:
        raise SwappruneError(
            f"model_type '{model_type}' has no single module that ends its MLP branch (a mixture "
            "of experts, or unknown): a linear patch cannot be folded; use --patch none"
        )
    if model_type == "opt" and not getattr(config, "do_layer_norm_before", True):
        raise SwappruneError(
            "this OPT normalises the residual stream after the MLP: a linear patch cannot be "
            "folded exactly; use --patch none"
        )
    scale = getattr(config, spec.residual_scale_key, 1.0) if spec.residual_scale_key else 1.0
    return spec, float(scale)


def check_patchable(model, removed: list[int], windows_tokens: int) -> None:
    """Refuse, in one line and before any forward pass, a patch that cannot be fitted or folded."""
    spec, _ = fold_site(model)
    if removed and min(removed) == 0:
        raise SwappruneError(
            "a removed span starts at block 0: no preceding block to fold its patch into; "
            "keep block 0 (--protect-first 1) or use --patch none"
        )
    hidden = int(getattr(model.config, "hidden_size", 0) or getattr(model.config, "n_embd", 0))
    if spec.mlp_out_kind in FULL and windows_tokens < hidden:
        raise SwappruneError(
            f"a linear patch needs at least as many patch tokens as the hidden size ({hidden}); "
            f"the patch windows hold {windows_tokens}: raise --patch-prompts or --patch-tokens"
        )


def fold(model, patch: Patch) -> None:
    """Multiply the weights of block ``patch.block``'s MLP-branch module by the patch (in place)."""
    block = decoder_stack(model).blocks[patch.block]
    _fold_module(get_submodule(block, patch.module), patch.kind, patch.matrix)


def fold_into(block: torch.nn.Module, patch: Patch) -> None:
    """:func:`fold` on a block already taken out of its model (surgery's kept blocks)."""
    _fold_module(get_submodule(block, patch.module), patch.kind, patch.matrix)


@torch.no_grad()
def _fold_module(mod, kind: str, m: torch.Tensor) -> None:
    if mod is None:
        raise SwappruneError("the patch's module is missing from its block")
    w = mod.weight
    m = m.to(torch.float64)
    if kind == "linear":  # y = x W^T + b; y T = x (T^T W)^T + b T
        w.copy_((m.T @ w.double().cpu()).to(w))
    elif kind == "conv1d":  # y = x W + b
        w.copy_((w.double().cpu() @ m).to(w))
    elif kind == "norm":
        w.copy_((w.double().cpu() * m).to(w))
    elif kind == "norm1p":
        w.copy_(((1 + w.double().cpu()) * m - 1).to(w))
    else:
        raise ValueError(f"unknown fold kind {kind!r}")
    bias = getattr(mod, "bias", None)
    if bias is not None and kind in FULL:
        bias.copy_((bias.double().cpu() @ m).to(bias))


def apply_unfolded(branch: torch.Tensor, patch: Patch) -> torch.Tensor:
    """``B T``: the patch as an explicit map on the branch output ``[..., H]`` (the reference)."""
    m = patch.matrix.to(branch.device)
    if patch.kind in FULL:
        return (branch.double() @ m).to(branch.dtype)
    return (branch.double() * m).to(branch.dtype)


def solve(g: torch.Tensor, c: torch.Tensor, ridge: float, diagonal: bool) -> torch.Tensor:
    """The ridge solution towards the identity from ``g = B'B`` and ``c = B'(H - Y)`` (float64).

    Full: ``(g + lam I) T = c + lam I``. Diagonal: per channel, on the diagonals of ``g``, ``c``.
    """
    lam = ridge * float(torch.diagonal(g).mean())
    if diagonal:
        return (torch.diagonal(c) + lam) / (torch.diagonal(g) + lam)
    eye = torch.eye(g.shape[0], dtype=torch.float64)
    return torch.linalg.solve(g + lam * eye, c + lam * eye)
