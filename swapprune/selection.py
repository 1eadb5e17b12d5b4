"""Selection strategies: layer importance (numbers) -> the blocks to remove.

Pure logic. Every strategy takes one importance value per block (lower = more
removable) and returns sorted 0-based block indices. Strategies that by
definition query the model (``beam``, ``iterative``) receive callables and
never touch torch themselves.

Ties are broken by block index (lower first), so a selection is reproducible.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from swapprune.errors import SwappruneError
from swapprune.registry import Registry

STRATEGIES: Registry[type[Strategy]] = Registry("strategy")

Oracle = Callable[[Sequence[int]], float]  # removed blocks -> cost of the pruned model
Rescorer = Callable[[Sequence[int]], np.ndarray]  # removed blocks -> importance [L]


@dataclass(frozen=True)
class Constraints:
    """Which blocks may be removed.

    Attributes:
        num_layers: ``L``.
        protect_first: the first k blocks are never removed.
        protect_last: the last k blocks are never removed.
    """

    num_layers: int
    protect_first: int = 0
    protect_last: int = 0

    def candidates(self) -> list[int]:
        return list(range(self.protect_first, self.num_layers - self.protect_last))

    def check_budget(self, budget: int) -> None:
        L = self.num_layers
        if budget <= 0:
            raise SwappruneError(f"budget must be >= 1, got {budget}")
        if budget >= L:
            raise SwappruneError(f"budget {budget} would remove every block: the model has {L}")
        free = len(self.candidates())
        if budget > free:
            raise SwappruneError(
                f"budget {budget} exceeds the {free} removable blocks "
                f"({L} blocks, first {self.protect_first} and last {self.protect_last} protected)"
            )


class Strategy(ABC):
    """Turns per-block importance into a removal set."""

    queries_model = False

    def __init__(self, arg: str | None = None):
        if arg is not None:
            raise SwappruneError(f"strategy '{self.name}' takes no argument (got ':{arg}')")

    name = "strategy"

    def check(self, budget: int, cons: Constraints) -> None:
        """Raise before any model work if ``budget`` is impossible."""
        cons.check_budget(budget)

    @abstractmethod
    def select(self, importance: np.ndarray, budget: int, cons: Constraints, **hooks) -> list[int]:
        """Return the sorted blocks to remove."""


def _order(importance: np.ndarray, candidates: Sequence[int]) -> list[int]:
    """Candidates from most to least removable, ties by index."""
    return sorted(candidates, key=lambda i: (float(importance[i]), i))


def _spaced(importance, budget, cons, min_gap: int) -> list[int]:
    chosen: list[int] = []
    for i in _order(importance, cons.candidates()):
        if all(abs(i - c) >= min_gap for c in chosen):
            chosen.append(i)
            if len(chosen) == budget:
                return sorted(chosen)
    raise SwappruneError(
        f"budget {budget} is impossible with removals at least {min_gap} blocks apart "
        f"among blocks {cons.protect_first}..{cons.num_layers - cons.protect_last - 1}"
    )


def max_spaced(cons: Constraints, min_gap: int) -> int:
    """Largest removal count with pairwise index distance >= ``min_gap``."""
    n = len(cons.candidates())
    return (n - 1) // min_gap + 1 if n else 0


@STRATEGIES.register("greedy")
class Greedy(Strategy):
    """The paper's rule: the n most removable blocks, never two adjacent."""

    name = "greedy"

    def check(self, budget, cons):
        super().check(budget, cons)
        if budget > max_spaced(cons, 2):
            raise SwappruneError(
                f"budget {budget} is impossible without removing two adjacent blocks "
                f"(at most {max_spaced(cons, 2)} here); use --strategy contiguous or spaced:1"
            )

    def select(self, importance, budget, cons, **hooks):
        return _spaced(importance, budget, cons, 2)


@STRATEGIES.register("spaced")
class Spaced(Strategy):
    """``spaced:G``: the most removable blocks with at least G between any two (G=1: no constraint)."""

    name = "spaced"

    def __init__(self, arg: str | None = None):
        try:
            self.gap = int(arg) if arg is not None else 2
        except ValueError:
            raise SwappruneError(f"spaced:G needs an integer G, got '{arg}'") from None
        if self.gap < 1:
            raise SwappruneError("spaced:G needs G >= 1")

    def check(self, budget, cons):
        super().check(budget, cons)
        if budget > max_spaced(cons, self.gap):
            raise SwappruneError(
                f"budget {budget} is impossible with removals {self.gap} apart "
                f"(at most {max_spaced(cons, self.gap)} here)"
            )

    def select(self, importance, budget, cons, **hooks):
        return _spaced(importance, budget, cons, self.gap)


@STRATEGIES.register("contiguous")
class Contiguous(Strategy):
    """The best run of n consecutive blocks (lowest summed importance, or span scores)."""

    name = "contiguous"

    def select(self, importance, budget, cons, span_scores: Callable[[int], np.ndarray] | None = None, **hooks):
        spans = span_scores(budget) if span_scores is not None else None
        best, best_val = None, None
        for s in range(cons.protect_first, cons.num_layers - cons.protect_last - budget + 1):
            val = float(spans[s]) if spans is not None else float(np.sum(importance[s : s + budget]))
            if best_val is None or val < best_val:
                best, best_val = s, val
        return list(range(best, best + budget))


@STRATEGIES.register("beam")
class Beam(Strategy):
    """``beam:W``: beam search over joint removal sets, scored by an oracle on the pruned model.

    Seeds are the ``2W`` most removable blocks; each round extends every beam
    by one of them and keeps the W cheapest sets. ``max_calls`` caps oracle
    calls (the paper's beam used 406 at n=5).
    """

    name = "beam"
    queries_model = True

    def __init__(self, arg: str | None = None, max_calls: int = 400):
        try:
            self.width = int(arg) if arg is not None else 3
        except ValueError:
            raise SwappruneError(f"beam:W needs an integer W, got '{arg}'") from None
        if self.width < 1:
            raise SwappruneError("beam:W needs W >= 1")
        self.max_calls = max_calls

    def select(self, importance, budget, cons, oracle: Oracle | None = None, **hooks):
        if oracle is None:
            raise SwappruneError("beam search needs the model (an oracle); it cannot run from scores alone")
        pool = _order(importance, cons.candidates())[: max(2 * self.width, budget + self.width)]
        beams: list[tuple[float, tuple[int, ...]]] = [(0.0, ())]
        seen: dict[tuple[int, ...], float] = {}
        calls = 0
        for _ in range(budget):
            cands = []
            for _, removed in beams:
                for b in pool:
                    key = tuple(sorted(removed + (b,)))
                    if b in removed or key in seen:
                        if key in seen and b not in removed:
                            cands.append((seen[key], key))
                        continue
                    if calls >= self.max_calls:
                        continue
                    seen[key] = oracle(key)
                    calls += 1
                    cands.append((seen[key], key))
            if not cands:
                raise SwappruneError(f"beam search hit its cap of {self.max_calls} oracle calls")
            beams = sorted(set(cands))[: self.width]
        self.calls = calls
        return list(beams[0][1])


@STRATEGIES.register("iterative")
class Iterative(Strategy):
    """Remove the most removable block, rescore the pruned model, repeat."""

    name = "iterative"
    queries_model = True

    def select(self, importance, budget, cons, rescore: Rescorer | None = None, **hooks):
        if rescore is None:
            raise SwappruneError("iterative selection needs a criterion that can rescore a pruned model")
        removed: list[int] = []
        imp = importance
        for _ in range(budget):
            left = [i for i in cons.candidates() if i not in removed]
            removed.append(_order(imp, left)[0])
            if len(removed) < budget:
                imp = rescore(sorted(removed))
        self.order = list(removed)  # removal order: budget n's set is the first n of it
        return sorted(removed)


def get_strategy(spec: str) -> Strategy:
    """``greedy`` | ``spaced:G`` | ``contiguous`` | ``beam:W`` | ``iterative``."""
    name, _, arg = spec.partition(":")
    return STRATEGIES.get(name)(arg or None)

