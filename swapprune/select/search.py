"""Strategies that query the pruned model: the paper's beam search, and SLEB's iteration.

Pure logic like the rest of :mod:`swapprune.select.strategies`: the model is
reached only through the callables of :class:`~swapprune.select.strategies.SelectionInputs`
(an oracle ``removed -> cost`` or a rescorer ``removed -> importance``).
:func:`beam_over` is the beam restricted to a shortlist, used by ``auto``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import product
from typing import Any

from swapprune.errors import SwappruneError
from swapprune.select.strategies import STRATEGIES, Choice, SelectionInputs, Strategy, int_arg


@STRATEGIES.register("beam")
class Beam(Strategy):
    """``beam:W``: the paper's beam search over removal sets, scored on the pruned model.

    Step 1 scores the ``seeds`` (default 12) most removable blocks alone and keeps
    the W cheapest; every later step extends each beam by every other candidate
    block (all layers, not a pool), scores each new set once and keeps the W
    cheapest. ``max_calls`` caps oracle calls; when the cap is hit the best beam
    is completed by the criterion's order without further calls, and the plan
    says so (``notes["capped"]``). The paper's Qwen3-8B n=5 beam used 406 calls.
    """

    name = "beam"
    needs = frozenset({"oracle"})

    def __init__(self, arg: str | None = None, max_calls: int = 400, seeds: int = 12):
        self.width = int_arg("beam:W", arg, 3)
        self.max_calls = max_calls
        self.seeds = seeds

    def check(self, budget, cons):
        super().check(budget, cons)
        if self.max_calls < 1 or self.seeds < 1:
            raise SwappruneError("beam search needs max_calls >= 1 and seeds >= 1")

    def choose(self, inputs):
        if inputs.oracle is None:
            raise SwappruneError(
                "beam search needs the model (an oracle); it cannot run from scores alone"
            )
        cache: dict[tuple[int, ...], float] = {}
        capped = False

        def cost(key: tuple[int, ...]) -> float | None:
            nonlocal capped
            if key not in cache:
                if len(cache) >= self.max_calls:
                    capped = True
                    return None
                cache[key] = float(inputs.oracle(key))
            return cache[key]

        order = inputs.order()
        step = [((b,), cost((b,))) for b in order[: self.seeds]]
        beams = sorted((c, k) for k, c in step if c is not None)[: self.width]
        for _ in range(1, inputs.budget):
            if capped or not beams:
                break
            new: dict[tuple[int, ...], float] = {}
            for (_, removed), b in product(beams, inputs.constraints.candidates()):
                key = tuple(sorted(removed + (b,)))
                if b in removed or key in new:
                    continue
                c = cost(key)
                if c is None:
                    break
                new[key] = c
            if not new:
                break
            beams = sorted((c, k) for k, c in new.items())[: self.width]
        best = beams[0][1] if beams else ()
        notes: dict[str, Any] = {
            "width": self.width,
            "seeds": self.seeds,
            "cap": self.max_calls,
            "capped": capped,
        }
        if len(best) < inputs.budget:
            fill = [b for b in order if b not in best][: inputs.budget - len(best)]
            notes["completed_by_criterion"] = fill
            best = tuple(sorted(best + tuple(fill)))
        self.calls = len(cache)
        return Choice(list(best), oracle_calls=len(cache), notes=notes)


@STRATEGIES.register("iterative")
class Iterative(Strategy):
    """Remove the most removable block, rescore the pruned model, repeat (SLEB)."""

    name = "iterative"
    needs = frozenset({"rescore"})

    def choose(self, inputs: SelectionInputs) -> Choice:
        if inputs.rescore is None:
            raise SwappruneError(
                "iterative selection needs a criterion that can rescore a pruned model"
            )
        removed: list[int] = []
        imp = inputs.importance
        for _ in range(inputs.budget):
            left = [i for i in inputs.constraints.candidates() if i not in removed]
            removed.append(inputs.order(left, imp)[0])
            if len(removed) < inputs.budget:
                imp = inputs.rescore(sorted(removed))
        self.order = list(removed)
        return Choice(sorted(removed), order=list(removed))


def beam_over(
    candidates: Sequence[int],
    budget: int,
    cost: Callable[[tuple[int, ...]], float],
    width: int = 3,
    max_calls: int = 100,
) -> tuple[list[int], dict]:
    """Beam search over removal sets drawn from ``candidates``, scored by ``cost``.

    Step 1 scores each candidate alone; every later step extends each of the
    ``width`` cheapest sets by every other candidate. Each set is scored once.
    When ``max_calls`` is reached the best set so far is completed by the order
    of ``candidates`` (most removable first) and the notes say so.

    Returns:
        The sorted removal set and ``{"calls", "capped", "cost", "width", "cap"}``.
    """
    if budget > len(candidates):
        raise SwappruneError(
            f"shortlist of {len(candidates)} blocks is smaller than the budget {budget}; widen it"
        )
    seen: dict[tuple[int, ...], float] = {}
    capped = False
    beams: list[tuple[float, tuple[int, ...]]] = [(0.0, ())]
    for _ in range(budget):
        step: dict[tuple[int, ...], float] = {}
        for _, removed in beams:
            for b in candidates:
                key = tuple(sorted(removed + (b,)))
                if b in removed or key in step:
                    continue
                if key not in seen:
                    if len(seen) >= max_calls:
                        capped = True
                        continue
                    seen[key] = float(cost(key))
                step[key] = seen[key]
        if not step:
            break
        beams = sorted((c, k) for k, c in step.items())[:width]
    best_cost: float | None
    best_cost, best = beams[0]
    notes: dict[str, Any] = {"calls": len(seen), "capped": capped, "width": width, "cap": max_calls}
    if len(best) < budget:
        fill = [b for b in candidates if b not in best][: budget - len(best)]
        notes["completed_by_order"] = fill
        best = tuple(sorted(best + tuple(fill)))
        best_cost = None
    notes["cost"] = best_cost
    return sorted(best), notes
