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

Fitting the linear patches of a removal plan on calibration activations (torch side).

One base pass per batch of patch windows caches every slot's state
(:class:`~swapprune.engine.runner.PlanRunner`). Span ``k`` is then fitted on
the model with spans ``1..k-1`` already removed and patched: from the first
patched block on, the kept blocks run with the earlier patches applied to their
MLP branch (explicit, unfolded), and the branch of the block before span ``k``
is tapped. The normal equations are accumulated over batches, so memory is the
cache of one batch set and two ``[H, H]`` matrices. See
:mod:`swapprune.edit.patch` for the map, the ridge and the fold.

The matrices of a linear patch on disk: ``patch.safetensors`` beside ``plan.json``.

A plan records the patch's kind, spans and fits, the file's name and its sha256;
the matrices (``[H, H]`` per span, or ``[H]`` for a channel-wise patch) live in
the file, stored in float64 exactly as fitted, so ``swapprune apply`` folds the
same numbers and rebuilds the checkpoint bit for bit.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from swapprune.engine.runner import PlanRunner
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


def _patched(patch: Patch) -> Callable[[torch.Tensor], torch.Tensor | None]:
    return lambda out: apply_unfolded(out, patch)


def _tap(into: list) -> Callable[[torch.Tensor], torch.Tensor | None]:
    def record(out: torch.Tensor) -> None:
        into.append(out)

    return record


@torch.no_grad()
def fit_patches(
    model, removed: list[int], input_ids: torch.Tensor, batch_size: int = 8, ridge: float = RIDGE
) -> tuple[list[Patch], dict]:
    """The patch of every contiguous span of ``removed``, and what fitting them cost.

    Args:
        model: the unpruned model (not modified).
        removed: the blocks the plan removes (original indices).
        input_ids: patch windows ``[N, T]``.
        batch_size: windows per forward pass.
        ridge: ridge strength relative to the mean diagonal of ``B'B``.

    Returns:
        ``(patches, record)``: the record holds block evaluations, block-tokens, the
        solve's seconds and the windows.
    """
    check_patchable(model, removed, int(input_ids.numel()))
    runner = PlanRunner(model)
    caches = [
        runner.capture(input_ids[s : s + batch_size])
        for s in range(0, input_ids.shape[0], batch_size)
    ]
    patches, solve_s = fit_on(runner, caches, removed, ridge, int(input_ids.numel()))
    stats = runner.stats
    return patches, {
        "block_evals": stats.block_evals,
        "block_tokens": stats.block_tokens,
        "solve_s": solve_s,
        "windows": list(input_ids.shape),
        "layers": decoder_stack(model).num_layers,
    }


@torch.no_grad()
def fit_on(
    runner: PlanRunner, caches: list, removed: list[int], ridge: float, tokens: int
) -> tuple[list[Patch], float]:
    """:func:`fit_patches` on base states already captured (``caches`` of ``runner``).

    Returns the patches and the seconds the solves took. ``tokens``: the patch windows'
    token count, recorded in each fit. The same caches serve any number of removal sets
    (patch-aware selection fits one patch per candidate set).
    """
    spec, scale = fold_site(runner.model)
    assert spec.mlp_out is not None
    blocks = runner.stack.blocks
    gone = set(removed)
    diagonal = spec.mlp_out_kind not in FULL
    patches: list[Patch] = []
    solve_s = 0.0
    for first, last in spans(removed):
        p = first - 1
        start = patches[0].block if patches else p
        plan = [b for b in range(start, p + 1) if b not in gone]
        hidden = caches[0].hidden[0].shape[-1]
        g = torch.zeros(hidden, hidden, dtype=torch.float64)
        c = torch.zeros(hidden, hidden, dtype=torch.float64)
        before = after_r = 0.0
        tapped: list[torch.Tensor] = []
        edits: dict[int, tuple[Any, Callable[[torch.Tensor], torch.Tensor | None]]] = {
            q.block: (get_submodule(blocks[q.block], q.module), _patched(q)) for q in patches
        }
        edits[p] = (get_submodule(blocks[p], spec.mlp_out), _tap(tapped))
        for cache in caches:
            tapped.clear()
            h = runner.run_edited(plan, cache.hidden[start], cache, edits)
            branch = scale * tapped[-1].double().reshape(-1, hidden).cpu()
            target = cache.hidden[last + 1].double().reshape(-1, hidden).cpu()
            rest = target - h.double().reshape(-1, hidden).cpu() + branch  # H - Y
            g += branch.T @ branch
            c += branch.T @ rest
            before += float(((target - h.double().reshape(-1, hidden).cpu()) ** 2).sum())
            after_r += float((rest**2).sum())
        t0 = time.perf_counter()
        m = solve(g, c, ridge, diagonal)
        solve_s += time.perf_counter() - t0
        full = m if not diagonal else torch.diag(m)
        # ||R - B T||^2 from the accumulated sums: ||R||^2 - 2 tr(T' B'R) + tr(T' B'B T)
        after = after_r - 2 * float(torch.trace(full.T @ c)) + float(torch.trace(full.T @ g @ full))
        patches.append(
            Patch(
                span=(first, last),
                block=p,
                module=spec.mlp_out,
                kind=spec.mlp_out_kind,
                matrix=m,
                fit={
                    "unexplained_before": 1.0,
                    "unexplained_after": max(0.0, after) / before if before > 0 else 0.0,
                    "tokens": tokens,
                    "ridge": ridge,
                },
            )
        )
    return patches, solve_s


@torch.no_grad()
def patched_final(
    runner: PlanRunner, cache, removed: list[int], patches: list[Patch]
) -> torch.Tensor:
    """The final state ``[B, T, H]`` (before the final norm) of the model without
    ``removed`` and with ``patches`` applied (unfolded), on one captured batch.

    The blocks before the first patched one are the base model's: the walk starts from
    the cached state there. With no patches it is the plain removal.
    """
    if not patches:
        return runner.final_hidden([b for b in range(runner.num_layers) if b not in removed], cache)
    gone = set(removed)
    start = min(q.block for q in patches)
    plan = [b for b in range(start, runner.num_layers) if b not in gone]
    blocks = runner.stack.blocks
    edits: dict[int, tuple[Any, Callable[[torch.Tensor], torch.Tensor | None]]] = {
        q.block: (get_submodule(blocks[q.block], q.module), _patched(q)) for q in patches
    }
    return runner.run_edited(plan, cache.hidden[start], cache, edits)


FILE = "patch.safetensors"


def patch_record(patches: list[Patch], ridge: float, windows: dict, compute: dict) -> dict:
    """The plan's ``patch`` entry (without the file digest, added when saved)."""
    return {
        "kind": "linear",
        "file": FILE,
        "ridge": ridge,
        "windows": windows,
        "spans": [p.describe() for p in patches],
        "compute": compute,
    }


def save_patches(patches: list[Patch], directory: Path) -> str:
    """Write the matrices into ``directory / FILE``; returns their sha256."""
    from safetensors.torch import save_file  # imports safetensors

    path = Path(directory) / FILE
    save_file({f"span.{i}": p.matrix.contiguous() for i, p in enumerate(patches)}, str(path))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_patches(plan, directory: str | Path) -> list[Patch]:
    """The patches of ``plan`` from the file beside it, checked against the recorded digest."""
    from safetensors.torch import load_file  # imports safetensors

    rec = plan.patch
    path = Path(directory) / rec["file"]
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SwappruneError(
            f"the plan's patch file {path} cannot be read: {e.strerror or e}"
        ) from None
    if rec.get("sha256") and hashlib.sha256(data).hexdigest() != rec["sha256"]:
        raise SwappruneError(f"patch file {path} does not match the plan's sha256")
    tensors = load_file(str(path))
    out = []
    for i, span in enumerate(rec["spans"]):
        key = f"span.{i}"
        if key not in tensors:
            raise SwappruneError(f"patch file {path} lacks {key}")
        out.append(
            Patch(
                span=(int(span["span"][0]), int(span["span"][1])),
                block=int(span["block"]),
                module=str(span["module"]),
                kind=str(span["kind"]),
                matrix=tensors[key],
                fit=dict(span.get("fit") or {}),
            )
        )
    return out
