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
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from swapprune.engine.orders import deletion_plan, pair_probe_plans
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
    """One thing to probe: a pair ``(i, j)`` or a layer ``(i, None)`` for deletion.

    ``protocols``: the pair protocols to run for this unit only (``None``: the
    run's), e.g. a protocol added to pairs scored earlier without it.
    """

    i: int
    j: int | None = None
    protocols: tuple[str, ...] | None = None


@dataclass
class PartialUnit:
    """A unit's values so far: ``values[mode][plan_key]`` ``[N]`` (NaN where not run yet)
    and ``done`` ``[N]``, the windows measured."""

    values: dict[str, dict[str, np.ndarray]]
    done: np.ndarray

    @classmethod
    def empty(cls, n: int, modes: Sequence[str], keys: Sequence[str]) -> PartialUnit:
        return cls(
            {m: {k: np.full(n, math.nan) for k in keys} for m in modes}, np.zeros(n, dtype=bool)
        )

    @property
    def complete(self) -> bool:
        return bool(self.done.all())

    def keys(self, modes: Sequence[str]) -> list[str] | None:
        if set(self.values) != set(modes):
            return None
        return list(self.values[modes[0]])

    def copy(self) -> PartialUnit:
        return PartialUnit(
            {m: {k: v.copy() for k, v in d.items()} for m, d in self.values.items()},
            self.done.copy(),
        )


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
        model: Any,
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
        return pair_probe_plans(self.L, unit.i, unit.j, tuple(unit.protocols or protocols))

    def work(self, units: Sequence[Unit], resume: dict[Unit, PartialUnit] | None = None) -> int:
        """How many (unit, chunk) steps :meth:`run` will take."""
        resume = resume or {}
        total = 0
        for unit in units:
            done = resume[unit].done if unit in resume else None
            total += sum(done is None or not done[a:b].all() for a, b in self.chunks)
        return total

    @torch.no_grad()
    def run(
        self,
        units: Sequence[Unit],
        protocols: Sequence[str],
        on_unit_done: Callable[[Unit, dict[str, dict[str, np.ndarray]]], None],
        progress: Callable[[int], None] | None = None,
        on_chunk_done: Callable[[Unit, PartialUnit, bool], None] | None = None,
        resume: dict[Unit, PartialUnit] | None = None,
        on_batch_done: Callable[[Unit, PartialUnit], None] | None = None,
    ) -> None:
        """Probe every unit; ``on_unit_done(unit, {mode: {plan_key: kl[N]}})`` fires when complete.

        Windows run chunk by chunk (outer loop), every unit within a chunk
        (inner loop), so a unit's values fill in one chunk at a time.

        Args:
            units: what to probe; a unit's own ``protocols`` override ``protocols``.
            protocols: pair protocols for units that name none.
            on_unit_done: called once per unit with all its windows measured.
            progress: called with 1 after each (unit, chunk) run (see :meth:`work`).
            on_chunk_done: ``(unit, values_so_far, chunk_end)`` after each (unit, chunk)
                that did not complete the unit (for flushing to disk); ``chunk_end``
                is true for the chunk's last unit.
            resume: values measured earlier (same windows and batch size): windows
                marked done are not run again, so the result is what one
                uninterrupted run gives, bit for bit.
            on_batch_done: ``(unit, values_so_far)`` after each batch of a unit that is
                not its last (a long unit on a slow machine can then be kept in part).
        """
        n = self.input_ids.shape[0]
        resume = resume or {}
        state: dict[Unit, PartialUnit] = {}
        for unit in units:
            keys = list(self.unit_plans(unit, protocols))
            old = resume.get(unit)
            if old is not None and set(old.keys(self.modes) or ()) == set(keys):
                state[unit] = old.copy()
            else:
                state[unit] = PartialUnit.empty(n, self.modes, keys)
        for unit in units:
            if state[unit].complete:
                on_unit_done(unit, state.pop(unit).values)
        for start, stop in self.chunks:
            todo = [u for u in state if not state[u].done[start:stop].all()]
            if not todo:
                continue
            caches, base_logits = [], []
            for s in range(start, stop, self.batch_size):
                e = min(stop, s + self.batch_size)
                if all(state[u].done[s:e].all() for u in todo):
                    continue  # measured before an interruption: no unit needs this batch
                cache = self.runner.capture(self.input_ids[s:e])
                caches.append((s, cache))
                base_logits.append(self._logits(cache.hidden[-1]))
            for unit in todo:
                plans = self.unit_plans(unit, protocols)
                keys = list(plans)
                part = state[unit]
                for (s, cache), base in zip(caches, base_logits):
                    if not part.done[s : s + cache.batch_size].all():
                        self._run_unit(plans, keys, cache, base, part.values, s)
                        part.done[s : s + cache.batch_size] = True
                        if on_batch_done and not part.complete:
                            on_batch_done(unit, part)
                if part.complete:
                    on_unit_done(unit, state.pop(unit).values)
                elif on_chunk_done:
                    on_chunk_done(unit, part, unit == todo[-1])
                if progress:
                    progress(1)
            del caches, base_logits

    def _run_unit(self, plans, keys, cache: BatchCache, base_logits, store, offset):
        plan_list = [plans[k] for k in keys]
        for idx, final in self.runner.run_plans(plan_list, cache):
            for mode, kl in self._window_kl(base_logits, final).items():
                store[mode][keys[idx]][offset : offset + len(kl)] = kl
