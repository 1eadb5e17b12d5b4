"""Model queries used by the model-based criteria and strategies (torch side).

:class:`CalibrationOracle` answers, on the calibration windows and for any
removal set, without modifying the model:

* ``cost(removed)``: perplexity (or KL to the base model) of the pruned model,
  and ``window_costs(removed)``, the same per window;
* ``similarity(removed)``: per-block Block Influence and angular distances of
  the hidden states of the pruned model (all tokens or the last one), and
  ``similarity_windows``, the same per window;
* ``residual_norms()``: each block's mean residual update ``||h_out - h_in||``;
* ``taylor()``: first-order Taylor importance per block (one backward pass).

It is built on :class:`~swapprune.engine.runner.PlanRunner`, so a pruned model whose
first removed block is ``s`` reuses the base model's states up to slot ``s``.

An oracle answers each ``(metric, removal set)`` once and remembers it. Inside
:func:`shared_oracles`, every oracle built on the same model, windows and batch
size shares one capture and one memory of answers: a comparison that runs
SLEB, SLEB one-shot and ``auto`` on one calibration set measures the
single-block deletions once, not three times, and ``auto`` at budget 3 reuses
what it measured at budget 2. An answer read from memory is the same float
that computing it again gives (the computation is deterministic on fixed
windows); each oracle still counts every query it was asked in ``calls``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import torch
import torch.nn.functional as F

from swapprune.engine.head import token_nll
from swapprune.engine.probes import kl_rows
from swapprune.engine.runner import PlanRunner

COST_METRICS = ("ppl", "kl")
POSITIONS = ("all", "last")


class _Shared:
    """What oracles on the same model, windows and batch size have in common."""

    def __init__(self, model, input_ids: torch.Tensor, batch_size: int):
        self.runner = PlanRunner(model)
        self.caches = [
            self.runner.capture(input_ids[s : s + batch_size])
            for s in range(0, input_ids.shape[0], batch_size)
        ]
        self.targets = [
            input_ids[s : s + batch_size, 1:] for s in range(0, input_ids.shape[0], batch_size)
        ]
        self.base_logits: list[torch.Tensor] | None = None
        self.answers: dict[tuple, float | np.ndarray] = {}
        self.asked = 0  # queries of every oracle on these windows
        self.computed = 0  # answers actually computed (the rest came from memory)


_REGISTRY: ContextVar[dict | None] = ContextVar("swapprune_shared_oracles", default=None)


class OracleCounts:
    """Queries and computed answers of the oracles of one :func:`shared_oracles` block."""

    def __init__(self, registry: dict):
        self._registry = registry

    @property
    def asked(self) -> int:
        return sum(s.asked for s in self._registry.values())

    @property
    def computed(self) -> int:
        return sum(s.computed for s in self._registry.values())


@contextmanager
def shared_oracles() -> Iterator[OracleCounts]:
    """Within the block, oracles on the same model, windows and batch size share work.

    They share the captured states of the base model and every answer of
    :meth:`CalibrationOracle.cost` and :meth:`CalibrationOracle.window_costs`.
    The model must not change inside the block. Leaving it frees the states;
    the yielded :class:`OracleCounts` keeps its totals.
    """
    registry: dict = {}
    token = _REGISTRY.set(registry)
    try:
        yield OracleCounts(registry)
    finally:
        _REGISTRY.reset(token)
        for shared in registry.values():  # keep the counts, free the states and answers
            shared.caches, shared.targets, shared.base_logits, shared.answers = [], [], None, {}


def _windows_key(model, input_ids: torch.Tensor, batch_size: int) -> tuple:
    # The registered runner holds the model, so its id is not reused inside the block.
    ids = input_ids.detach().cpu().contiguous()
    digest = hashlib.sha256(ids.numpy().tobytes()).hexdigest()
    return (id(model), tuple(ids.shape), str(ids.dtype), digest, batch_size)


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
        registry = _REGISTRY.get()
        key = _windows_key(model, input_ids, batch_size) if registry is not None else None
        shared = registry.get(key) if registry is not None else None
        start = (0, 0)  # a new capture is this oracle's work
        if shared is None:
            shared = _Shared(model, input_ids, batch_size)
            if registry is not None:
                registry[key] = shared
        else:
            start = (shared.runner.stats.block_evals, shared.runner.stats.block_tokens)
        self._start = start
        self._shared = shared
        self.runner = shared.runner
        self.caches = shared.caches
        self.targets = shared.targets
        self.L = self.runner.num_layers
        self.metric = metric
        self.calls = 0  # queries this oracle answered, from memory or not
        self.input_ids = input_ids
        self.batch_size = batch_size

    def compute(self) -> dict:
        """Block evaluations and block-tokens run since this oracle was made (answers
        another oracle already computed cost nothing here)."""
        stats = self.runner.stats
        return {
            "block_evals": stats.block_evals - self._start[0],
            "block_tokens": stats.block_tokens - self._start[1],
        }

    @property
    def computed(self) -> int:
        """Answers computed on the model by this oracle and those sharing its windows."""
        return self._shared.computed

    def kept(self, removed: Sequence[int]) -> tuple[int, ...]:
        gone = set(removed)
        return tuple(b for b in range(self.L) if b not in gone)

    @torch.no_grad()
    def cost(self, removed: Sequence[int], metric: str | None = None) -> float:
        """Calibration perplexity, or KL (nats) to the base model, with ``removed`` skipped.

        ``metric`` overrides the oracle's own (``ppl`` or ``kl``) for this call.
        """
        self.calls += 1
        self._shared.asked += 1
        metric = metric or self.metric
        plan = self.kept(removed)
        key = ("cost", metric, plan)
        if key not in self._shared.answers:
            self._shared.answers[key] = self._cost(plan, metric)
            self._shared.computed += 1
        return float(self._shared.answers[key])

    def _cost(self, plan: tuple[int, ...], metric: str) -> float:
        total, count = 0.0, 0
        for i, (cache, tgt) in enumerate(zip(self.caches, self.targets)):
            final = self.runner.final_hidden(plan, cache)[:, :-1]
            if metric == "ppl":
                nll = self._nll(final, tgt)
                total, count = total + float(nll.double().sum()), count + tgt.numel()
            else:
                logits = self.runner.stack.head(final).float()
                base = self._base(i)
                kl = kl_rows(base.reshape(-1, base.shape[-1]), logits.reshape(-1, logits.shape[-1]))
                total, count = total + float(kl.sum()), count + kl.numel()
        mean = total / count
        return math.exp(mean) if metric == "ppl" else mean

    def _nll(self, final: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """``[B * T]`` next-token NLL of the final states ``[B, T, H]`` (vocabulary-sliced head)."""
        device = self.runner.head_device
        hidden = final.reshape(-1, final.shape[-1]).to(device)
        return token_nll(self.runner.stack, hidden, tgt.reshape(-1).to(device))

    def _base(self, i: int) -> torch.Tensor:
        if self._shared.base_logits is None:
            self._shared.base_logits = [
                self.runner.stack.head(c.hidden[-1])[:, :-1] for c in self.caches
            ]
        return self._shared.base_logits[i]

    def deletion_costs(self, removed: Sequence[int], metric: str | None = None) -> np.ndarray:
        """``[L]``: cost with each further block removed (``inf`` for removed ones)."""
        out = np.full(self.L, np.inf)
        for b in range(self.L):
            if b not in removed:
                out[b] = self.cost(sorted(set(removed) | {b}), metric)
        return out

    @torch.no_grad()
    def window_costs(self, removed: Sequence[int], metric: str | None = None) -> np.ndarray:
        """Per window ``[N]``: mean next-token NLL (``ppl``) or mean KL to the base (``kl``).

        ``exp`` of the token-weighted mean of the ``ppl`` values is :meth:`cost`
        (windows have equal length). Counts as one oracle call.
        """
        return self.window_costs_many([removed], metric)[0]

    def window_costs_many(
        self, sets: Sequence[Sequence[int]], metric: str | None = None
    ) -> list[np.ndarray]:
        """:meth:`window_costs` of every set, those not yet answered walked together.

        The kept plans go through :meth:`~swapprune.engine.runner.PlanRunner.run_plans`
        as one trie, so sets that share their first removed blocks run the blocks
        between once; a set's numbers do not depend on the others walked with it (the same
        blocks on the same tensors). Counts as one oracle call per set.
        """
        metric = metric or self.metric
        plans = [self.kept(s) for s in sets]
        self.calls += len(plans)
        self._shared.asked += len(plans)
        answers = self._shared.answers
        todo = list(dict.fromkeys(p for p in plans if ("windows", metric, p) not in answers))
        if todo:
            for plan, values in zip(todo, self._window_costs_walk(todo, metric)):
                answers[("windows", metric, plan)] = values
            self._shared.computed += len(todo)
        return [np.array(answers[("windows", metric, p)], copy=True) for p in plans]

    @torch.no_grad()
    def _window_costs_walk(self, plans: list[tuple[int, ...]], metric: str) -> list[np.ndarray]:
        parts: list[list[torch.Tensor]] = [[] for _ in plans]
        for i, (cache, tgt) in enumerate(zip(self.caches, self.targets)):
            for k, final in self.runner.run_plans(plans, cache):
                parts[k].append(self._window_piece(final[:, :-1], tgt, metric, i))
        return [torch.cat(p).numpy() for p in parts]

    def _window_piece(self, final: torch.Tensor, tgt: torch.Tensor, metric: str, i: int):
        """``[B]`` mean NLL or KL per window of one batch's final states ``[B, T, H]``."""
        B, T = final.shape[:2]
        if metric == "ppl":
            return self._nll(final, tgt).reshape(B, T).double().mean(-1)
        logits = self.runner.stack.head(final).float()
        V = logits.shape[-1]
        kl = kl_rows(self._base(i).reshape(-1, V), logits.reshape(-1, V)).reshape(B, T)
        return kl.double().mean(-1).cpu()

    @torch.no_grad()
    def similarity_windows(
        self, removed: Sequence[int] = (), span: int = 1, positions: str = "all"
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-window Block Influence ``[N, L]`` and angular distance over ``span`` blocks ``[N, L]``.

        BI of block ``b`` = mean over the window's tokens of ``1 - cos(h_in, h_out)``
        (ShortGPT). Angular distance at ``b`` = ``arccos(cos(h_b, h_{b+span})) / pi``
        between the states entering block ``b`` and ``span`` blocks later (Gromov
        et al.). ``positions``: ``all`` tokens, or the ``last`` one only (Gromov et
        al.'s choice). ``inf`` for removed blocks and where the span overruns.
        """
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
        plan = self.kept(removed)
        n = len(plan)
        bis, angs = [], []
        for cache in self.caches:
            states = self._states(plan, cache)  # n + 1 tensors [B, T, H]
            if positions == "last":
                states = [h[:, -1:] for h in states]  # [B, 1, H]
            B = states[0].shape[0]
            bi = torch.full((B, self.L), math.inf, dtype=torch.float64)
            ang = torch.full((B, self.L), math.inf, dtype=torch.float64)
            for k, b in enumerate(plan):
                bi[:, b] = (1 - _cos(states[k], states[k + 1])).mean(-1).cpu()
                if k + span <= n:
                    c = _cos(states[k], states[k + span]).clamp(-1, 1)
                    ang[:, b] = (torch.arccos(c) / math.pi).mean(-1).cpu()
            bis.append(bi)
            angs.append(ang)
        return torch.cat(bis).numpy(), torch.cat(angs).numpy()

    def similarity(
        self, removed: Sequence[int] = (), span: int = 1, positions: str = "all"
    ) -> tuple[np.ndarray, np.ndarray]:
        """Block Influence ``[L]`` and angular distance over ``span`` blocks ``[L]``:
        :meth:`similarity_windows` averaged over windows (equal lengths, so this is
        the mean over all tokens)."""
        bi, ang = self.similarity_windows(removed, span, positions)
        return bi.mean(0), ang.mean(0)

    @torch.no_grad()
    def residual_norms(self) -> np.ndarray:
        """``[L]``: mean over tokens of ``||h_out - h_in||_2``, each block's residual update."""
        total = torch.zeros(self.L, dtype=torch.float64)
        tokens = 0
        for cache in self.caches:
            h = cache.hidden
            tokens += h[0].shape[0] * h[0].shape[1]
            for b in range(self.L):
                total[b] += (
                    (h[b + 1].double() - h[b].double().to(h[b + 1].device)).norm(dim=-1).sum().cpu()
                )
        return (total / tokens).numpy()

    def taylor(self) -> np.ndarray:
        """First-order Taylor importance per block, see :func:`taylor_importance`."""
        return taylor_importance(self.runner.model, self.input_ids, self.batch_size, self.runner)

    def _states(self, plan, cache) -> list[torch.Tensor]:
        # Slots before the first removed block are the base model's: reuse them.
        s = next((k for k, b in enumerate(plan) if b != k), len(plan))
        states = list(cache.hidden[: s + 1])
        for b in plan[s:]:
            states.append(self.runner.run_block(b, states[-1], cache))
        return states


@torch.no_grad()
def residual_norms(model, input_ids: torch.Tensor, batch_size: int = 8) -> np.ndarray:
    """``[L]``: mean over tokens of ``||h_out - h_in||_2`` per block, without keeping caches."""
    runner = PlanRunner(model)
    total = torch.zeros(runner.num_layers, dtype=torch.float64)
    tokens = 0
    for s in range(0, input_ids.shape[0], batch_size):
        h = runner.capture(input_ids[s : s + batch_size]).hidden
        tokens += h[0].shape[0] * h[0].shape[1]
        for b in range(runner.num_layers):
            total[b] += (
                (h[b + 1].double() - h[b].double().to(h[b + 1].device)).norm(dim=-1).sum().cpu()
            )
    return (total / tokens).numpy()


def taylor_importance(
    model, input_ids: torch.Tensor, batch_size: int = 8, runner: PlanRunner | None = None
) -> np.ndarray:
    """First-order Taylor importance of each block (Kim et al. 2024, "Taylor+").

    ``I(l) = sum over the parameters theta of block l of |dLoss/dtheta * theta|``
    (elementwise product, absolute value, then the sum), where ``Loss`` is the
    mean next-token cross-entropy over every predicted token of all windows.
    The gradient is that of the full calibration loss (accumulated over
    batches) before the absolute value is taken. Gradients are computed for the
    blocks' parameters only; their ``requires_grad`` flags are restored after.
    Memory: one float32 accumulator the size of the blocks. Each parameter's gradient
    of a batch is added to it as soon as autograd has it and is then dropped, so a
    batch's gradients never all exist at once beside the accumulator.

    Returns:
        ``[L]`` float64.
    """
    runner = runner or PlanRunner(model)
    blocks = runner.stack.blocks
    params = [list(b.parameters()) for b in blocks]
    flat = [p for ps in params for p in ps]
    flags = [p.requires_grad for p in flat]
    grads = [torch.zeros_like(p, dtype=torch.float32) for p in flat]
    total_tokens = input_ids.shape[0] * (input_ids.shape[1] - 1)
    device = runner._input_device()
    held = [p.grad for p in flat]  # the caller's gradients, put back after

    def accumulate(k: int):
        def hook(param: torch.Tensor) -> None:
            if param.grad is not None:  # it is: the hook runs after accumulation
                grads[k] += param.grad.float()
                param.grad = None

        return hook

    handles = [p.register_post_accumulate_grad_hook(accumulate(k)) for k, p in enumerate(flat)]
    try:
        for p in flat:
            p.grad = None
            p.requires_grad_(True)
        for s in range(0, input_ids.shape[0], batch_size):
            ids = input_ids[s : s + batch_size].to(device)
            logits = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
            nll = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                ids[:, 1:].reshape(-1).to(logits.device),
                reduction="sum",
            )
            # only the blocks' parameters receive gradients (``inputs``), each one into
            # the accumulator by its hook
            torch.autograd.backward(nll / total_tokens, inputs=flat)
            del logits, nll
    finally:
        for h in handles:
            h.remove()
        for p, f, g in zip(flat, flags, held):
            p.requires_grad_(f)
            p.grad = g
    out = np.zeros(len(blocks))
    k = 0
    for b, ps in enumerate(params):
        for p in ps:
            out[b] += float((grads[k].double() * p.detach().double()).abs().sum())
            k += 1
    return out
