"""Measure swap-KL probes over calibration windows (the torch-heavy part of scoring).

For every *unit* (a block pair, or a single block for deletion) and every
window, :class:`ProbeEngine` returns ``KL(p_base || p_modified)`` in nats at
the measured positions (``last``: the final position of each window; ``all``:
the mean over every position). Work is bounded by

* prefix reuse and slot sharing (:class:`~swapprune.engine.runner.PlanRunner`),
* applying the final norm and LM head only at measured positions,
* a cache budget: windows are processed in chunks whose cached hidden states
  and base logits fit in ``cache_bytes``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from swapprune.engine.plans import deletion_plan, pair_probe_plans
from swapprune.engine.runner import BatchCache, PlanRunner

# Rows of [rows, vocab] log-softmax computed at once; bounds the temporaries
# of the KL to ~rows * V * 8 bytes * 5. On CPU the rows are fewer, so that the
# float64 temporaries stay in the last-level cache: the KL is a chain of
# memory-bound passes, and 256 rows of a 49k vocabulary made it ~5x slower
# (eval/BENCHMARKS.md). Rows are independent: the chunking never changes a value.
_KL_ROWS = 256
_KL_BYTES_CPU = 4 << 20


def _kl_chunk(rows: torch.Tensor) -> int:
    if rows.device.type != "cpu":
        return _KL_ROWS
    return max(1, min(_KL_ROWS, _KL_BYTES_CPU // (8 * rows.shape[-1])))


@dataclass(frozen=True)
class Unit:
    """One thing to probe: a pair ``(i, j)`` or a layer ``(i, None)`` for deletion."""

    i: int
    j: int | None = None


def kl_rows(base_logits: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """``KL(softmax(base) || softmax(logits))`` per row: ``[R, V]`` x2 -> ``[R]`` (float64).

    The log-softmaxes and the sum run in float64, in row chunks: near-identical
    distributions make KL a small difference of large terms, and float32 there
    would add ~1e-7 nats of rounding to every value.
    """
    out = []
    step = _kl_chunk(logits)
    for s in range(0, base_logits.shape[0], step):
        logp = F.log_softmax(base_logits[s : s + step].double(), dim=-1)
        logq = F.log_softmax(logits[s : s + step].double(), dim=-1)
        out.append((logp.exp() * (logp - logq)).sum(-1))
    return torch.cat(out)


class ProbeEngine:
    """Run probe plans over windows of token ids.

    Args:
        model: causal LM (unmodified).
        input_ids: ``[N, T]`` calibration windows.
        positions: ``"last"``, ``"all"``, or a tuple of both: each mode's KL comes
            from the same forward passes (only the head rows differ).
        batch_size: windows per forward.
        cache_bytes: memory allowed for cached hidden states + base log-probs.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        input_ids: torch.Tensor,
        positions: str | tuple[str, ...] = "last",
        batch_size: int = 8,
        cache_bytes: float = 4e9,
    ):
        self.runner = PlanRunner(model)
        self.L = self.runner.num_layers
        self.input_ids = input_ids
        self.modes = (positions,) if isinstance(positions, str) else tuple(positions)
        self.batch_size = batch_size
        n, t = input_ids.shape
        cfg = model.config
        hidden = getattr(cfg, "hidden_size", None) or cfg.n_embd
        vocab = model.get_output_embeddings().weight.shape[0]
        itemsize = next(model.parameters()).element_size()
        rows = t if "all" in self.modes else 1
        per_window = (self.L + 1) * t * hidden * itemsize + rows * vocab * 4
        self.bytes_per_window = per_window
        per_chunk = max(batch_size, int(cache_bytes // per_window) // batch_size * batch_size)
        self.chunks = [(s, min(n, s + per_chunk)) for s in range(0, n, per_chunk)]

    def _measured(self, hidden: torch.Tensor) -> torch.Tensor:
        """Rows of ``hidden`` ``[B, T, H]`` where KL is measured -> ``[B, P, H]``."""
        return hidden if "all" in self.modes else hidden[:, -1:]

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        h = self._measured(hidden)
        self.runner.stats.head_rows += h.shape[0] * h.shape[1]
        return self.runner.stack.head(h.to(self.runner.head_device))

    def _window_kl(self, base_logits: torch.Tensor, hidden: torch.Tensor) -> dict[str, np.ndarray]:
        """Per-window KL ``[B]`` for each mode: the last position, or the mean over all."""
        logits = self._logits(hidden)
        b, p, v = logits.shape
        kl = kl_rows(base_logits.reshape(b * p, v), logits.reshape(b * p, v)).reshape(b, p)
        per_mode = {"last": kl[:, -1], "all": kl.mean(-1)}
        return {m: per_mode[m].cpu().numpy() for m in self.modes}

    def unit_plans(self, unit: Unit, protocols: Sequence[str]) -> dict[str, tuple[int, ...]]:
        if unit.j is None:
            return {"delete": deletion_plan(self.L, unit.i)}
        return pair_probe_plans(self.L, unit.i, unit.j, tuple(protocols))

    @torch.no_grad()
    def run(
        self,
        units: Sequence[Unit],
        protocols: Sequence[str],
        on_unit_done: Callable[[Unit, dict[str, dict[str, np.ndarray]]], None],
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """Probe every unit; ``on_unit_done(unit, {mode: {plan_key: kl[N]}})`` fires when complete."""
        n = self.input_ids.shape[0]
        values: dict[Unit, dict[str, dict[str, np.ndarray]]] = {}
        for c, (start, stop) in enumerate(self.chunks):
            caches, base_logits = [], []
            for s in range(start, stop, self.batch_size):
                cache = self.runner.capture(self.input_ids[s : min(stop, s + self.batch_size)])
                caches.append((s, cache))
                base_logits.append(self._logits(cache.hidden[-1]))
            for unit in units:
                plans = self.unit_plans(unit, protocols)
                keys = list(plans)
                store = values.setdefault(
                    unit, {m: {k: np.full(n, math.nan) for k in keys} for m in self.modes})
                for (s, cache), base in zip(caches, base_logits):
                    self._run_unit(plans, keys, cache, base, store, s)
                if c == len(self.chunks) - 1:
                    on_unit_done(unit, values.pop(unit))
                if progress:
                    progress(1)
            del caches, base_logits

    def _run_unit(self, plans, keys, cache: BatchCache, base_logits, store, offset):
        plan_list = [plans[k] for k in keys]
        for idx, final in self.runner.run_plans(plan_list, cache):
            for mode, kl in self._window_kl(base_logits, final).items():
                store[mode][keys[idx]][offset : offset + len(kl)] = kl
