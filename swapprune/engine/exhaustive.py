"""Per-window NLL of many removal sets at once, from cached base states (torch side).

:class:`SetEvaluator` answers, on fixed windows, the summed next-token NLL of
every window for the model with each given removal set skipped. The model is
never modified. Per batch of windows one base pass is captured
(:meth:`~swapprune.engine.runner.PlanRunner.capture`); a set whose first
removed block is ``a`` starts from the cached state entering slot ``a``, and
sets that share their first removed blocks share the blocks they run (the kept
plans are walked as a trie by :meth:`~swapprune.engine.runner.PlanRunner.run_plans`,
which holds one path's states at a time). A set's numbers do not depend on
which other sets are walked with it: the same blocks run on the same tensors.

The LM head runs at the scored positions only (every position but the last of a
window predicts the next token), a slice of the vocabulary at a time with a
running log-sum-exp, so it never holds ``[B, T, V]`` logits: at most
``ROWS x VOCAB_CHUNK`` float32 values. Work is counted in the runner's
:class:`~swapprune.engine.runner.RunStats` as the certificate counts it
(decoder-block calls, block-tokens, head rows).

:func:`low_precision_copy` makes the bfloat16 twin a screening round may run
on (float32 stays the reference for reported numbers); :func:`exhaustive_search`
is the reference strategy: every admissible set on the given windows, the best
and the top ones.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from swapprune.engine.head import ROWS, head_nll
from swapprune.engine.runner import BatchCache, PlanRunner, RunStats
from swapprune.select.landscape import Admissible, Removal, costs_points

#: Cached base states kept between calls, at most (beyond it a batch is captured again).
CACHE_BYTES = 128 * 2**20
#: Tokens per forward, at most: long windows go in smaller batches (memory, not speed).
BATCH_TOKENS = 2048


def low_precision_copy(model: nn.Module, dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    """A copy of ``model`` whose floating-point parameters are ``dtype``; buffers stay as they are.

    Built without a full-precision copy in between (each parameter is cast once;
    tied ones stay tied). Buffers such as rotary frequencies keep their dtype, as
    loading a model in ``dtype`` would compute them.
    """
    memo: dict[int, object] = {}
    for p in model.parameters():
        if id(p) not in memo and p.is_floating_point():
            memo[id(p)] = nn.Parameter(p.detach().to(dtype), requires_grad=False)
    return copy.deepcopy(model, memo)


def kept_plan(num_layers: int, removed: Iterable[int]) -> tuple[int, ...]:
    gone = set(removed)
    return tuple(b for b in range(num_layers) if b not in gone)


class SetEvaluator:
    """Summed NLL per window of the model with each removal set skipped.

    Args:
        model: causal LM (unmodified); a :func:`low_precision_copy` to screen in bf16.
        input_ids: ``[N, T]`` windows; every position after the first is scored.
        batch_size: windows per forward, at most; fewer when ``batch_size`` windows would
            hold more than ``batch_tokens`` tokens (at least one).
        slots: the first removed blocks of the sets this evaluator will see (the cached
            states it keeps); ``None``: every slot.
        cache_bytes: keep captured states between calls up to this size; above it each
            call captures its batches again (same numbers, one more base pass per call).
        score_from: per window, the first token scored (a perplexity contract's windows
            score only what follows their context, e.g. the second half); default 1:
            every token after the first.
    """

    def __init__(
        self,
        model,
        input_ids: torch.Tensor,
        batch_size: int = 8,
        slots: Iterable[int] | None = None,
        cache_bytes: int = CACHE_BYTES,
        batch_tokens: int = BATCH_TOKENS,
        score_from: Sequence[int] | None = None,
    ):
        self.runner = PlanRunner(model)
        self.L = self.runner.num_layers
        self.input_ids = input_ids
        self.batch_size = max(1, min(batch_size, batch_tokens // input_ids.shape[1]))
        self.starts = list(range(0, input_ids.shape[0], self.batch_size))
        self.slots = set(range(self.L + 1)) if slots is None else set(slots)
        self.cache_bytes = cache_bytes
        self._caches: dict[int, BatchCache] = {}
        self._base: dict[int, np.ndarray] = {}
        n, t = input_ids.shape
        first = np.ones(n, dtype=np.int64) if score_from is None else np.asarray(score_from)
        if first.shape != (n,) or (first < 1).any() or (first >= t).any():
            raise ValueError(f"score_from needs {n} positions in [1, {t - 1}]")
        self.score_from = torch.as_tensor(first)
        self.tokens = (t - first).astype(np.float64)

    @property
    def stats(self) -> RunStats:
        return self.runner.stats

    def compute(self) -> dict:
        """Block calls, block-tokens and head rows run so far."""
        s = self.stats
        return {
            "block_evals": s.block_evals,
            "block_tokens": s.block_tokens,
            "head_rows": s.head_rows,
        }

    # -- windows -------------------------------------------------------------------------
    def _batch(self, start: int) -> torch.Tensor:
        return self.input_ids[start : start + self.batch_size]

    @torch.no_grad()
    def _window_nll(self, final: torch.Tensor, ids: torch.Tensor, start: int) -> np.ndarray:
        """``[B]`` summed NLL of each window's scored tokens from the final states ``[B, T, H]``.

        ``start``: the batch's first window (for its ``score_from``).
        """
        b, t = ids.shape
        head_device = self.runner.head_device
        # position p predicts token p + 1; it counts when that token is scored
        first = self.score_from[start : start + b]
        scored = torch.arange(1, t)[None, :] >= first[:, None]  # [B, T - 1]
        hidden = final[:, :-1][scored].to(head_device)  # [R, H], scored positions only
        targets = ids[:, 1:][scored].to(head_device)
        out = torch.empty(hidden.shape[0], dtype=torch.float32)
        for r in range(0, hidden.shape[0], ROWS):
            out[r : r + ROWS] = head_nll(
                self.runner.stack, hidden[r : r + ROWS], targets[r : r + ROWS]
            ).cpu()
        self.stats.head_rows += hidden.shape[0]
        per_window = torch.zeros(b, dtype=torch.float64)
        rows = scored.nonzero()[:, 0]
        per_window.index_add_(0, rows, out.double())
        return per_window.numpy()

    def _cache(self, start: int) -> BatchCache:
        hit = self._caches.get(start)
        if hit is not None:
            return hit
        ids = self._batch(start)
        cache = self.runner.capture(ids)
        if start not in self._base:
            self._base[start] = self._window_nll(cache.hidden[self.L], ids, start)
        # Only the states a walk starts from are read (BatchCache.hidden[a] for a set whose
        # first removed block is a); the others are dropped at once.
        cache.hidden = [h if k in self.slots else None for k, h in enumerate(cache.hidden)]  # type: ignore[misc]
        kept = sum(h.numel() * h.element_size() for h in cache.hidden if h is not None)
        held = sum(
            h.numel() * h.element_size()
            for c in self._caches.values()
            for h in c.hidden
            if h is not None
        )
        if held + kept <= self.cache_bytes:
            self._caches[start] = cache
        return cache

    def base(self) -> np.ndarray:
        """``[N]`` summed NLL of the unpruned model per window."""
        for s in self.starts:
            if s not in self._base:
                self._cache(s)
        return np.concatenate([self._base[s] for s in self.starts])

    # -- sets ----------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(
        self,
        sets: Sequence[Sequence[int]],
        on_set: Callable[[Removal], None] | None = None,
    ) -> dict[Removal, np.ndarray]:
        """``{set: [N] summed NLL per window}`` of every set (the empty set is the base model).

        ``on_set`` is called once per set, when its last batch is done (a progress bar).
        """
        keys = [tuple(sorted(int(b) for b in s)) for s in sets]
        missing = {min(k) if k else self.L for k in keys} - self.slots
        if missing:
            raise ValueError(f"sets start at slots {sorted(missing)} this evaluator does not keep")
        plans = [kept_plan(self.L, k) for k in keys]
        parts: list[list[np.ndarray]] = [[] for _ in keys]
        for n, start in enumerate(self.starts):
            cache = self._cache(start)
            ids = self._batch(start)
            last = n == len(self.starts) - 1
            for i, final in self.runner.run_plans(plans, cache):
                parts[i].append(self._window_nll(final, ids, start))
                if last and on_set is not None:
                    on_set(keys[i])
        return {k: np.concatenate(p) for k, p in zip(keys, parts)}


@dataclass
class ExhaustiveResult:
    """Every admissible set on one set of windows.

    Attributes:
        best: the cheapest set; ``top``: the cheapest ``k`` with their costs (dPPL points).
        costs: every set's cost; ``compute``: block calls, block-tokens, head rows.
    """

    best: Removal
    top: list[tuple[Removal, float]]
    costs: dict[Removal, float]
    compute: dict = field(default_factory=dict)


def exhaustive_search(
    model,
    input_ids: torch.Tensor,
    admissible: Admissible,
    *,
    batch_size: int = 8,
    top: int = 20,
    chunk: int = 64,
    progress: bool = False,
) -> ExhaustiveResult:
    """The reference strategy: every admissible set evaluated on ``input_ids``, the best first.

    Cost is the landscape's (:func:`swapprune.select.landscape.costs_points`) on all the
    windows; ties go to the lexicographically smaller set.
    """
    from tqdm.auto import tqdm  # imports tqdm

    sets = admissible.sets()
    if not sets:
        raise ValueError(f"no removal set of {admissible.budget} is admissible")
    ev = SetEvaluator(model, input_ids, batch_size, slots={s[0] for s in sets})
    nll: dict[Removal, np.ndarray] = {}
    with tqdm(total=len(sets), desc="exhaustive", disable=not progress, dynamic_ncols=True) as bar:
        for i in range(0, len(sets), chunk):
            nll.update(ev.evaluate(sets[i : i + chunk], on_set=lambda _s: bar.update()))
    costs = costs_points(nll, ev.base(), ev.tokens)
    order = sorted(costs, key=lambda s: (costs[s], s))
    return ExhaustiveResult(order[0], [(s, costs[s]) for s in order[:top]], costs, ev.compute())
