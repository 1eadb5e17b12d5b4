"""Selection strategies: layer importance (numbers) -> the blocks to remove.

Pure logic, data in and data out. A strategy declares in ``needs`` what it
requires beyond one importance value per block (lower = more removable), and
may list in ``wants`` what it uses when available:

* ``oracle``: ``removed -> cost`` of the pruned model (``beam``);
* ``rescore``: ``removed -> importance [L]`` on the pruned model (``iterative``);
* ``span_scores``: ``n -> [L - n + 1]`` cost of removing each run of n blocks
  (``contiguous``);
* ``pair_table``: ``{(i, j): distance}`` of every scored pair (``ranked-pairs``).

The caller builds one :class:`SelectionInputs` and calls
:meth:`Strategy.choose`, which returns a :class:`Choice`. Strategies never
touch torch: model queries arrive as callables. Adding a strategy is one
registered class.

Ties are broken by ``tiebreak`` when given (the criterion's weaker-contributor
rule), then by block index (lower first), so a selection is reproducible.

Which table of the paper each strategy reproduces (``docs/method.md`` section 6):

============== =========================================================
``greedy``      the stated score-to-removal rule (GPT-2 sweeps)
``ranked``      ShortGPT's n lowest Block Influence; SLEB one-shot; random
``ranked-pairs`` Llama-3.1-8B headline rows (pairs ranked, lower index)
``clustered``   Qwen3-8B interchange row at n=3 (I/R 0.21)
``distributed`` Qwen3-8B "distributed" set (I/R about 0.32)
``contiguous``  Gromov et al.'s angular-distance span
``beam``        Qwen3-8B n=5 beam (406 oracle calls)
``iterative``   SLEB
============== =========================================================

The two that query the model (``beam``, ``iterative``) live in
:mod:`swapprune.select.search`; importing :mod:`swapprune.select` registers both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from swapprune.errors import SwappruneError
from swapprune.registry import Registry
from swapprune.select.constraints import Constraints, max_spaced

STRATEGIES: Registry[type[Strategy]] = Registry("strategy")

Oracle = Callable[[Sequence[int]], float]  # removed blocks -> cost of the pruned model
Rescorer = Callable[[Sequence[int]], np.ndarray]  # removed blocks -> importance [L]
SpanScores = Callable[[int], np.ndarray]  # n -> cost of removing s..s+n-1, per start s
PairTable = Mapping[tuple[int, int], float]  # (i, j), i < j -> distance

#: everything a strategy may declare in ``needs`` / ``wants``.
INPUTS = ("oracle", "rescore", "span_scores", "pair_table")


@dataclass(frozen=True)
class SelectionInputs:
    """Everything a strategy may read, built once by the caller.

    Attributes:
        importance: ``[L]``, lower = more removable.
        budget: blocks to remove.
        constraints: which blocks may go.
        tiebreak: ``[L]`` secondary key for equal importance (lower goes first).
        oracle / rescore / span_scores / pair_table: see the module docstring;
            ``None`` where the criterion or the caller cannot provide them.
    """

    importance: np.ndarray
    budget: int
    constraints: Constraints
    tiebreak: np.ndarray | None = None
    oracle: Oracle | None = None
    rescore: Rescorer | None = None
    span_scores: SpanScores | None = None
    pair_table: PairTable | None = None

    def order(
        self, candidates: Sequence[int] | None = None, importance: np.ndarray | None = None
    ) -> list[int]:
        """Candidates from most to least removable: importance, tiebreak, index."""
        imp = self.importance if importance is None else importance
        tb = self.tiebreak
        cands = self.constraints.candidates() if candidates is None else candidates
        return sorted(
            cands, key=lambda i: (float(imp[i]), float(tb[i]) if tb is not None else 0.0, i)
        )


@dataclass
class Choice:
    """A strategy's answer.

    Attributes:
        removed: sorted blocks to remove.
        order: removal order, when the strategy has one (budget k's set is its first k).
        oracle_calls: model queries the strategy made, when it made any.
        notes: anything else worth recording in the plan (JSON-ready).
    """

    removed: list[int]
    order: list[int] | None = None
    oracle_calls: int | None = None
    notes: dict[str, Any] = field(default_factory=dict)


class Strategy(ABC):
    """Turns per-block importance (and what it declares in ``needs``) into a removal set."""

    name = "strategy"
    #: inputs it cannot run without.
    needs: frozenset[str] = frozenset()
    #: inputs it uses when present.
    wants: frozenset[str] = frozenset()

    def __init__(self, arg: str | None = None):
        if arg is not None:
            raise SwappruneError(f"strategy '{self.name}' takes no argument (got ':{arg}')")

    @property
    def queries_model(self) -> bool:
        """True when it calls back into the model (an oracle or a rescorer)."""
        return bool(self.needs & {"oracle", "rescore"})

    def check(self, budget: int, cons: Constraints) -> None:
        """Raise before any model work if ``budget`` is impossible."""
        cons.check_budget(budget)

    @abstractmethod
    def choose(self, inputs: SelectionInputs) -> Choice:
        """The selection for ``inputs``."""

    def select(self, importance: np.ndarray, budget: int, cons: Constraints, **inputs) -> list[int]:
        """Shorthand: ``choose(SelectionInputs(importance, budget, cons, **inputs)).removed``."""
        sel = self.choose(SelectionInputs(np.asarray(importance, float), budget, cons, **inputs))
        self.last = sel
        return sel.removed


def int_arg(name: str, arg: str | None, default: int, low: int = 1) -> int:
    try:
        value = int(arg) if arg is not None else default
    except ValueError:
        raise SwappruneError(f"{name} needs an integer, got '{arg}'") from None
    if value < low:
        raise SwappruneError(f"{name} needs a value >= {low}, got {value}")
    return value


def _spaced(
    inputs: SelectionInputs, min_gap: int, candidates: Sequence[int] | None = None
) -> list[int]:
    chosen: list[int] = []
    for i in inputs.order(candidates):
        if all(abs(i - c) >= min_gap for c in chosen):
            chosen.append(i)
            if len(chosen) == inputs.budget:
                return sorted(chosen)
    cons = inputs.constraints
    raise SwappruneError(
        f"budget {inputs.budget} is impossible with removals at least {min_gap} blocks apart "
        f"among blocks {cons.protect_first}..{cons.num_layers - cons.protect_last - 1}"
    )


@STRATEGIES.register("greedy")
class Greedy(Strategy):
    """The paper's stated rule: the n most removable blocks, never two adjacent."""

    name = "greedy"

    def check(self, budget, cons):
        super().check(budget, cons)
        if budget > max_spaced(cons, 2):
            raise SwappruneError(
                f"budget {budget} is impossible without removing two adjacent blocks "
                f"(at most {max_spaced(cons, 2)} here); use --strategy contiguous or ranked"
            )

    def choose(self, inputs):
        return Choice(_spaced(inputs, 2))


@STRATEGIES.register("spaced")
class Spaced(Strategy):
    """``spaced:G``: the most removable blocks, any two at least G apart (G=1: unconstrained)."""

    name = "spaced"
    default_gap = 2

    def __init__(self, arg: str | None = None):
        self.gap = int_arg(f"{self.name}:G", arg, self.default_gap)

    def check(self, budget, cons):
        super().check(budget, cons)
        if budget > max_spaced(cons, self.gap):
            raise SwappruneError(
                f"budget {budget} is impossible with removals {self.gap} apart "
                f"(at most {max_spaced(cons, self.gap)} here)"
            )

    def choose(self, inputs):
        return Choice(_spaced(inputs, self.gap))


@STRATEGIES.register("distributed")
class Distributed(Spaced):
    """``distributed:G``: the paper's "distributed" variant, a minimum gap G between removals.

    The Qwen3-8B rule-like set (interchange I/R about 0.32 at n=3); same
    selection as ``spaced:G``, under the paper's name. G defaults to 2.
    """

    name = "distributed"


@STRATEGIES.register("ranked")
class Ranked(Strategy):
    """The n most removable blocks, no adjacency constraint (ShortGPT, SLEB one-shot)."""

    name = "ranked"

    def choose(self, inputs):
        return Choice(sorted(inputs.order()[: inputs.budget]))


@STRATEGIES.register("ranked-pairs")
class RankedPairs(Strategy):
    """The paper's Llama-3.1-8B procedure: rank scored pairs by distance, take the lower index.

    Walk the pairs from the smallest distance up; each contributes its lower
    block unless that block is already taken or protected; stop at n blocks.
    No adjacency constraint, so runs like {24, 25, 26} come out. Every scored
    pair counts (adjacent or not). ``ranked-pairs:skip-ends`` never removes
    the first or the last block (the paper's boundary skip); it is the same as
    ``--protect-first 1 --protect-last 1``. Equal distances go by lower index.
    """

    name = "ranked-pairs"
    needs = frozenset({"pair_table"})

    def __init__(self, arg: str | None = None):
        if arg not in (None, "skip-ends"):
            raise SwappruneError(f"ranked-pairs takes no argument or ':skip-ends' (got ':{arg}')")
        self.skip_ends = arg == "skip-ends"

    def _cons(self, cons: Constraints) -> Constraints:
        if not self.skip_ends:
            return cons
        return Constraints(cons.num_layers, max(cons.protect_first, 1), max(cons.protect_last, 1))

    def check(self, budget, cons):
        super().check(budget, self._cons(cons))

    def choose(self, inputs: SelectionInputs) -> Choice:
        if inputs.pair_table is None:
            raise SwappruneError(
                "ranked-pairs needs pair scores (criterion interchange or replacement)"
            )
        allowed = set(self._cons(inputs.constraints).candidates())
        chosen: list[int] = []
        for (i, j), _ in sorted(
            inputs.pair_table.items(), key=lambda kv: (kv[1], min(kv[0]), max(kv[0]))
        ):
            low = min(i, j)
            if low in allowed and low not in chosen:
                chosen.append(low)
                if len(chosen) == inputs.budget:
                    return Choice(sorted(chosen), order=chosen)
        raise SwappruneError(
            f"ranked-pairs found only {len(chosen)} removable lower blocks in the scored pairs; "
            f"budget {inputs.budget} needs more pairs (score --pairs gap:K) or a smaller budget"
        )


@STRATEGIES.register("clustered")
class Clustered(Strategy):
    """``clustered:REGION``: the n most removable blocks inside the swap-similar region.

    REGION is either ``A-B`` (blocks A..B inclusive, 0-based) or a threshold
    ``T`` (a number with a decimal point, e.g. ``0.10``): the longest run of
    consecutive candidate blocks whose importance is <= T (the earlier run on a
    tie in length). No adjacency constraint inside the region. Reproduces the
    paper's hand-restricted Qwen3-8B interchange set (I/R 0.21 at n=3).
    """

    name = "clustered"

    def __init__(self, arg: str | None = None):
        if not arg:
            raise SwappruneError(
                "clustered needs a region: clustered:A-B or clustered:T (e.g. 0.10)"
            )
        self.span: tuple[int, int] | None = None
        self.threshold: float | None = None
        try:
            if "." in arg:
                self.threshold = float(arg)
            else:
                a, _, b = arg.partition("-")
                self.span = (int(a), int(b))
        except ValueError:
            raise SwappruneError(
                f"clustered:REGION is A-B or a threshold like 0.10, got '{arg}'"
            ) from None
        if self.span is not None and not 0 <= self.span[0] <= self.span[1]:
            raise SwappruneError(f"clustered:A-B needs 0 <= A <= B, got '{arg}'")

    def check(self, budget, cons):
        super().check(budget, cons)
        if self.span is not None:
            region = [b for b in cons.candidates() if self.span[0] <= b <= self.span[1]]
            if budget > len(region):
                raise SwappruneError(
                    f"budget {budget} exceeds the {len(region)} removable blocks in "
                    f"clustered:{self.span[0]}-{self.span[1]}"
                )

    def region(self, inputs: SelectionInputs) -> list[int]:
        cands = inputs.constraints.candidates()
        if self.span is not None:
            return [b for b in cands if self.span[0] <= b <= self.span[1]]
        threshold = self.threshold
        assert threshold is not None  # __init__ sets exactly one of span / threshold
        best: list[int] = []
        run: list[int] = []
        for b in cands:  # consecutive blocks: a run only breaks on a block above T
            run = [*run, b] if float(inputs.importance[b]) <= threshold else []
            if len(run) > len(best):
                best = run
        return best

    def choose(self, inputs):
        region = self.region(inputs)
        if len(region) < inputs.budget:
            raise SwappruneError(
                f"the clustered region {region[:1] + region[-1:]} holds {len(region)} blocks; "
                f"budget {inputs.budget} needs more (widen the region or raise the threshold)"
            )
        chosen = sorted(inputs.order(region)[: inputs.budget])
        return Choice(chosen, notes={"region": [region[0], region[-1]]})


@STRATEGIES.register("contiguous")
class Contiguous(Strategy):
    """The best run of n consecutive blocks: lowest span score when given, else summed importance."""

    name = "contiguous"
    wants = frozenset({"span_scores"})

    def choose(self, inputs):
        cons, n = inputs.constraints, inputs.budget
        spans = inputs.span_scores(n) if inputs.span_scores is not None else None
        best, best_val = cons.protect_first, None
        for s in range(cons.protect_first, cons.num_layers - cons.protect_last - n + 1):
            val = (
                float(spans[s])
                if spans is not None
                else float(np.sum(inputs.importance[s : s + n]))
            )
            if best_val is None or val < best_val:
                best, best_val = s, val
        return Choice(list(range(best, best + n)))


def get_strategy(spec: str) -> Strategy:
    """``greedy`` | ``ranked`` | ``ranked-pairs[:skip-ends]`` | ``spaced:G`` | ``distributed:G``
    | ``clustered:A-B`` | ``clustered:T`` | ``contiguous`` | ``beam:W`` | ``iterative``."""
    name, _, arg = spec.partition(":")
    return STRATEGIES.get(name)(arg or None)


def describe() -> list[tuple[str, str]]:
    """``(spec, one line)`` for every strategy, for ``swapprune list``."""
    out = []
    for name in STRATEGIES.names():
        cls = STRATEGIES.get(name)
        arg = {"spaced": ":G", "distributed": ":G", "beam": ":W", "clustered": ":REGION"}.get(
            name, ""
        )
        out.append((name + arg, (cls.__doc__ or "").strip().splitlines()[0]))
    return out
