"""Fitting the linear patches of a removal plan on calibration activations (torch side).

One base pass per batch of patch windows caches every slot's state
(:class:`~swapprune.engine.runner.PlanRunner`). Span ``k`` is then fitted on
the model with spans ``1..k-1`` already removed and patched: from the first
patched block on, the kept blocks run with the earlier patches applied to their
MLP branch (explicit, unfolded), and the branch of the block before span ``k``
is tapped. The normal equations are accumulated over batches, so memory is the
cache of one batch set and two ``[H, H]`` matrices. See
:mod:`swapprune.edit.patch` for the map, the ridge and the fold.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from swapprune.edit.patch import (
    FULL,
    RIDGE,
    Patch,
    apply_unfolded,
    check_patchable,
    fold_site,
    solve,
    spans,
)
from swapprune.model.stack import decoder_stack, get_submodule


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
    from swapprune.engine.runner import PlanRunner

    check_patchable(model, removed, int(input_ids.numel()))
    spec, scale = fold_site(model)
    assert spec.mlp_out is not None
    runner = PlanRunner(model)
    blocks = runner.stack.blocks
    caches = [
        runner.capture(input_ids[s : s + batch_size])
        for s in range(0, input_ids.shape[0], batch_size)
    ]
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
                    "tokens": int(input_ids.numel()),
                    "ridge": ridge,
                },
            )
        )
    stats = runner.stats
    return patches, {
        "block_evals": stats.block_evals,
        "block_tokens": stats.block_tokens,
        "solve_s": solve_s,
        "windows": list(input_ids.shape),
        "layers": decoder_stack(model).num_layers,
    }
