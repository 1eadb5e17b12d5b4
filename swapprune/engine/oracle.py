"""Model queries used by the model-based criteria and strategies (torch side).

:class:`CalibrationOracle` answers, on the calibration windows and for any
removal set, without modifying the model:

* ``cost(removed)``: perplexity (or KL to the base model) of the pruned model;
* ``similarity(removed)``: per-block Block Influence and angular distances of
  the hidden states of the pruned model.

It is built on :class:`~swapprune.engine.runner.PlanRunner`, so a pruned model whose
first removed block is ``s`` reuses the base model's states up to slot ``s``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from swapprune.engine.probes import kl_rows
from swapprune.engine.runner import PlanRunner

COST_METRICS = ("ppl", "kl")


def _cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine over the hidden dim, ``[B, T, H]`` x2 -> ``[B, T]`` (float64)."""
    return F.cosine_similarity(a.double(), b.double(), dim=-1)


class CalibrationOracle:
    """Cost and hidden-state similarity of pruned variants on fixed windows.

    Args:
        model: causal LM (unmodified).
        input_ids: ``[N, T]`` calibration windows.
        batch_size: windows per forward.
        metric: ``ppl`` (calibration perplexity, SLEB's signal) or ``kl``
            (mean all-position KL to the base model).
    """

    def __init__(self, model, input_ids: torch.Tensor, batch_size: int = 8, metric: str = "ppl"):
        self.runner = PlanRunner(model)
        self.L = self.runner.num_layers
        self.metric = metric
        self.calls = 0
        self.caches = [
            self.runner.capture(input_ids[s : s + batch_size])
            for s in range(0, input_ids.shape[0], batch_size)
        ]
        self.targets = [input_ids[s : s + batch_size, 1:] for s in range(0, input_ids.shape[0], batch_size)]
        self._base_logits = None

    def kept(self, removed: Sequence[int]) -> tuple[int, ...]:
        gone = set(removed)
        return tuple(b for b in range(self.L) if b not in gone)

    @torch.no_grad()
    def cost(self, removed: Sequence[int], metric: str | None = None) -> float:
        """Calibration perplexity, or KL (nats) to the base model, with ``removed`` skipped.

        ``metric`` overrides the oracle's own (``ppl`` or ``kl``) for this call.
        """
        self.calls += 1
        metric = metric or self.metric
        plan = self.kept(removed)
        total, count = 0.0, 0
        for i, (cache, tgt) in enumerate(zip(self.caches, self.targets)):
            logits = self.runner.stack.head(self.runner.final_hidden(plan, cache))[:, :-1].float()
            if metric == "ppl":
                nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1).to(logits.device), reduction="sum")
                total, count = total + float(nll), count + tgt.numel()
            else:
                base = self._base(i)
                kl = kl_rows(base.reshape(-1, base.shape[-1]), logits.reshape(-1, logits.shape[-1]))
                total, count = total + float(kl.sum()), count + kl.numel()
        mean = total / count
        return math.exp(mean) if metric == "ppl" else mean

    def _base(self, i: int) -> torch.Tensor:
        if self._base_logits is None:
            self._base_logits = [self.runner.stack.head(c.hidden[-1])[:, :-1] for c in self.caches]
        return self._base_logits[i]

    def deletion_costs(self, removed: Sequence[int], metric: str | None = None) -> np.ndarray:
        """``[L]``: cost with each further block removed (``inf`` for removed ones)."""
        out = np.full(self.L, np.inf)
        for b in range(self.L):
            if b not in removed:
                out[b] = self.cost(sorted(set(removed) | {b}), metric)
        return out

    @torch.no_grad()
    def similarity(self, removed: Sequence[int] = (), span: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Block Influence ``[L]`` and angular distance over ``span`` blocks ``[L]``.

        BI of block ``b`` = mean over tokens of ``1 - cos(h_in, h_out)`` (ShortGPT).
        Angular distance at block ``b`` = mean over tokens of
        ``arccos(cos(h_b, h_{b+span})) / pi`` between the states entering block ``b``
        and ``span`` blocks later (Gromov et al.); ``inf`` where the span overruns.
        Values of removed blocks are ``inf``.
        """
        plan = self.kept(removed)
        n = len(plan)
        bi_sum = torch.zeros(n, dtype=torch.float64)
        ang_sum = torch.zeros(n, dtype=torch.float64)
        tokens = 0
        for cache in self.caches:
            states = self._states(plan, cache)  # n + 1 tensors [B, T, H]
            tokens += states[0].shape[0] * states[0].shape[1]
            for k in range(n):
                bi_sum[k] += (1 - _cos(states[k], states[k + 1])).sum().cpu()
                if k + span <= n:
                    c = _cos(states[k], states[k + span]).clamp(-1, 1)
                    ang_sum[k] += (torch.arccos(c) / math.pi).sum().cpu()
        bi, ang = np.full(self.L, np.inf), np.full(self.L, np.inf)
        for k, b in enumerate(plan):
            bi[b] = float(bi_sum[k]) / tokens
            if k + span <= n:
                ang[b] = float(ang_sum[k]) / tokens
        return bi, ang

    def _states(self, plan, cache) -> list[torch.Tensor]:
        # Slots before the first removed block are the base model's: reuse them.
        s = next((k for k, b in enumerate(plan) if b != k), len(plan))
        states = list(cache.hidden[: s + 1])
        for b in plan[s:]:
            states.append(self.runner.run_block(b, states[-1], cache))
        return states
