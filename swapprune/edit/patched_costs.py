"""Costs of removal sets after their linear patch: what patch-aware selection compares.

A user who ships the patched model wants the set that is cheapest *after* patching,
and the ranking of sets moves under the patch (a patch recovers much of one set's
loss and little of another's). :class:`PatchedOracle` answers the questions the
certificate and ``auto``'s beam ask of a :class:`~swapprune.engine.oracle.CalibrationOracle`
(per-window NLL of many sets, the perplexity of one) for the patched model of each
set: the set's patch is fitted on the patch windows (:func:`~swapprune.edit.patch.fit_on`),
then the model without the set, the patch applied to its kept blocks' MLP branches, is
evaluated on the oracle's own windows.

One :class:`PatchFitter` serves every oracle of a selection: it captures the patch
windows once, fits each set's patch once per fit size, and keeps the fits in float64
from float32 activations (bfloat16 autocast, which the screening round runs its
evaluations under, is turned off while fitting). The screening round fits on the first
few patch windows (:func:`swapprune.select.reference.patch_screen_windows`); the
finalists are fitted on every patch window, as the cut's own patch is.

The patched model's numbers equal those of :func:`~swapprune.edit.patch.fit_patches`
followed by removal and folding (``tests/test_patched_costs.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from swapprune.edit.patch import FULL, Patch, fit_on, fold_site, patched_final
from swapprune.engine.head import token_nll
from swapprune.engine.runner import PlanRunner
from swapprune.errors import SwappruneError


class PatchFitter:
    """The patch of any removal set, fitted on fixed patch windows and remembered.

    Args:
        model: the unpruned model (not modified).
        patch_ids: patch windows ``[N, T]``.
        batch_size: windows per forward pass.
        ridge: the ridge of :func:`~swapprune.edit.patch.solve`.
    """

    def __init__(self, model, patch_ids: torch.Tensor, batch_size: int, ridge: float):
        spec, _ = fold_site(model)  # a family without a fold site is refused here
        self.full_map = spec.mlp_out_kind in FULL
        config = model.config
        self.hidden = int(getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 0))
        self.runner = PlanRunner(model)
        self.patch_ids = patch_ids
        self.batch_size = batch_size
        self.ridge = ridge
        self._caches: dict[int, list] = {}
        self._fits: dict[tuple[tuple[int, ...], int], list[Patch]] = {}
        self.fits = 0  # patches fitted (the rest came from memory)

    @property
    def windows(self) -> int:
        return int(self.patch_ids.shape[0])

    def compute(self) -> dict:
        s = self.runner.stats
        return {"block_evals": s.block_evals, "block_tokens": s.block_tokens}

    def patches(self, removed: Sequence[int], windows: int | None = None) -> list[Patch]:
        """The patches of ``removed``, fitted on the first ``windows`` patch windows (all)."""
        gone = tuple(sorted(int(b) for b in removed))
        k = self.windows if windows is None else min(int(windows), self.windows)
        if gone and gone[0] == 0:
            raise SwappruneError(
                "patch-aware selection compares sets after their patch, and a set that removes "
                "block 0 has no block to fold its patch into: keep block 0 (--protect-first 1)"
            )
        key = (gone, k)
        if key not in self._fits:
            with _exact(self.runner.model):
                caches = self._caches_of(k)
                tokens = int(self.patch_ids[:k].numel())
                self._fits[key] = fit_on(self.runner, caches, list(gone), self.ridge, tokens)[0]
            self.fits += 1
        return self._fits[key]

    def fitted(self, removed: Sequence[int]) -> list[Patch] | None:
        """The full fit of ``removed`` if one was made (the certificate's finalists), else ``None``."""
        return self._fits.get((tuple(sorted(int(b) for b in removed)), self.windows))

    def _caches_of(self, k: int) -> list:
        if k not in self._caches:
            ids, bs = self.patch_ids[:k], self.batch_size
            self._caches[k] = [self.runner.capture(ids[s : s + bs]) for s in range(0, k, bs)]
        return self._caches[k]


def _exact(model):
    """Autocast off on the model's device: the fits run in the model's own precision."""
    p = next((p for p in model.parameters() if p.is_floating_point()), None)
    device = p.device.type if p is not None else "cpu"
    return torch.autocast(device, enabled=False)


class PatchedOracle:
    """Per-window NLL and perplexity of patched removal sets on fixed windows.

    The interface of :class:`~swapprune.engine.oracle.CalibrationOracle` that selection
    uses (``input_ids``, ``calls``, :meth:`cost`, :meth:`window_costs_many`,
    :meth:`compute`), metric ``ppl`` only.

    Args:
        model: the unpruned model.
        input_ids: evaluation windows ``[N, T]``.
        batch_size: windows per forward pass.
        fitter: the shared :class:`PatchFitter`.
        fit_windows: patch windows each set's fit uses (``None``: all).
    """

    def __init__(
        self, model, input_ids: torch.Tensor, batch_size: int, fitter: PatchFitter,
        fit_windows: int | None = None,
    ):  # fmt: skip
        self.runner = PlanRunner(model)
        self.input_ids = input_ids
        self.batch_size = batch_size
        self.fitter = fitter
        self.fit_windows = fitter.windows if fit_windows is None else fit_windows
        self.caches = [
            self.runner.capture(input_ids[s : s + batch_size])
            for s in range(0, input_ids.shape[0], batch_size)
        ]
        self.targets = [
            input_ids[s : s + batch_size, 1:] for s in range(0, input_ids.shape[0], batch_size)
        ]
        self.L = self.runner.num_layers
        self.calls = 0
        self._answers: dict[tuple[int, ...], np.ndarray] = {}
        self._fit_work = {"block_evals": 0, "block_tokens": 0}

    def compute(self) -> dict:
        """Block evaluations and block-tokens: this oracle's evaluations and the fits it asked for."""
        s = self.runner.stats
        return {
            "block_evals": s.block_evals + self._fit_work["block_evals"],
            "block_tokens": s.block_tokens + self._fit_work["block_tokens"],
        }

    def cost(self, removed: Sequence[int], metric: str | None = None) -> float:
        """Perplexity of the patched model without ``removed`` on these windows."""
        v = self.window_costs_many([removed], metric)[0]
        return math.exp(float(v.mean()))  # windows of equal length: the token mean

    def window_costs(self, removed: Sequence[int], metric: str | None = None) -> np.ndarray:
        return self.window_costs_many([removed], metric)[0]

    def window_costs_many(
        self, sets: Sequence[Sequence[int]], metric: str | None = None
    ) -> list[np.ndarray]:
        """Mean next-token NLL per window ``[N]`` of each set's patched model."""
        if (metric or "ppl") != "ppl":
            raise ValueError("a patched oracle measures perplexity only")
        keys = [tuple(sorted(int(b) for b in s)) for s in sets]
        self.calls += len(keys)
        for key in dict.fromkeys(keys):
            if key not in self._answers:
                self._answers[key] = self._measure(key)
        return [self._answers[k].copy() for k in keys]

    @torch.no_grad()
    def _measure(self, removed: tuple[int, ...]) -> np.ndarray:
        before = self.fitter.compute()
        patches = self.fitter.patches(removed, self.fit_windows) if removed else []
        after = self.fitter.compute()
        for k in self._fit_work:
            self._fit_work[k] += after[k] - before[k]
        parts = []
        device = self.runner.head_device
        for cache, tgt in zip(self.caches, self.targets):
            final = patched_final(self.runner, cache, list(removed), patches)[:, :-1]
            B, T = final.shape[:2]
            hidden = final.reshape(-1, final.shape[-1]).to(device)
            nll = token_nll(self.runner.stack, hidden, tgt.reshape(-1).to(device))
            parts.append(nll.reshape(B, T).double().mean(-1))
        return torch.cat(parts).numpy()
