"""Which blocks a selection may remove: protected blocks, the budget, and ``--serve``.

:class:`Constraints` holds the protected blocks and checks a budget against them.
:class:`ServeConstraint` is the in-phase constraint of ``--serve RUNTIME,...``: a
runtime that derives each layer's attention type from its index (llama.cpp and
transformers' GGUF loader for Gemma-2/3, vLLM for GPT-OSS, ...) serves a cut
correctly only when every kept layer lands on a slot whose derived type is its
own (:mod:`swapprune.serving.phase`). It is the default while a GGUF is written
and its runtimes constrain the family (:data:`GGUF_RUNTIMES`); ``--serve none``
drops it. :func:`resolve` turns the setting and the model's facts into a
:class:`ServeConstraint` (or ``None``); :meth:`ServeConstraint.check` refuses, in
one line, a budget no eligible set meets.

:func:`enforce` runs wherever a selection is made
(:func:`swapprune.select.core.select_fixed`, and the bootstrap's
:func:`swapprune.select.stability.select_on`, so the selection's stability and
the certificate's plausible sets see the same sets): a choice in phase stands;
any other is replaced by the eligible set with the lowest summed importance
(ties: the summed tie-break key, then the lexicographically smallest set).
**The constraint overrides the strategy's own rule**: greedy's
never-two-adjacent, spacing, spans, ``ranked-pairs:skip-ends``; only
``--protect-first`` and ``--protect-last`` still hold. :func:`record` says what
happened (``plan.records.serve``). The cheapest eligible set is found exactly,
without listing the eligible sets: the recursion of
:func:`~swapprune.serving.phase.count_in_phase` over (position ``p``, target
slot ``j``), minimising instead of counting, has ``O(L * (L - b))`` states per
target pattern whatever ``C(L, b)`` is (tests check it against the minimum over
:func:`~swapprune.serving.phase.eligible_removals`). Pure: no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from math import comb
from typing import TYPE_CHECKING

import numpy as np

from swapprune.errors import SwappruneError, unknown_name
from swapprune.records import ServeRecord
from swapprune.serving.phase import (
    PhaseRule,
    check_feasible,
    constrained_runtimes,
    count_in_phase,
    in_phase,
    kept_targets,
)
from swapprune.serving.rules import FULL, RUNTIMES, rule_for
from swapprune.serving.view import artifact_facts, derived_types

if TYPE_CHECKING:
    from swapprune.gguf.decision import GGUFOutput
    from swapprune.model.facts import ModelFacts


@dataclass(frozen=True)
class Constraints:
    """Which blocks may be removed.

    Attributes:
        num_layers: ``L``.
        protect_first: the first k blocks are never removed.
        protect_last: the last k blocks are never removed.
        serve: removal sets must keep these runtimes' layer-type pattern in phase
            (``--serve``); applied after the strategy's choice
            (:func:`swapprune.select.constraints.enforce`), so every selection, its bootstrap
            and the certificate's plausible sets obey it.
    """

    num_layers: int
    protect_first: int = 0
    protect_last: int = 0
    serve: ServeConstraint | None = None

    def protected(self) -> list[int]:
        """The blocks no selection may remove."""
        keep = set(range(self.num_layers)) - set(self.candidates())
        return sorted(keep)

    def candidates(self) -> list[int]:
        return list(range(self.protect_first, self.num_layers - self.protect_last))

    def check_budget(self, budget: int) -> None:
        L = self.num_layers
        if budget <= 0:
            raise SwappruneError(f"budget must be >= 1, got {budget}")
        if budget >= L:
            article = "an" if str(L).startswith("8") or L in (11, 18) else "a"
            raise SwappruneError(
                f"budget {budget} is more than the {L - 1} blocks that can be removed from "
                f"{article} {L}-block model (at least one block stays)"
            )
        free = len(self.candidates())
        if budget > free:
            raise SwappruneError(
                f"budget {budget} exceeds the {free} removable blocks "
                f"({L} blocks, first {self.protect_first} and last {self.protect_last} protected)"
            )


def max_spaced(cons: Constraints, min_gap: int) -> int:
    """Largest removal count with pairwise index distance >= ``min_gap``."""
    n = len(cons.candidates())
    return (n - 1) // min_gap + 1 if n else 0


NONE = "none"
#: The default ``--serve`` while a GGUF is written: the runtimes that read it.
GGUF_RUNTIMES = ("llama.cpp", "transformers-gguf")


@dataclass(frozen=True)
class ServeConstraint:
    """Removal sets must keep every rule in phase.

    Attributes:
        runtimes: the runtimes that constrain this family (the requested ones that
            derive types from the index).
        types: the model's own per-layer types (``L`` entries).
        default: set by default because a GGUF is written (not by ``--serve``).
        rules: the runtimes' :class:`~swapprune.serving.phase.PhaseRule`.
    """

    runtimes: tuple[str, ...]
    types: tuple[str, ...]
    default: bool = False
    rules: tuple[PhaseRule, ...] = field(default=(), compare=False, repr=False)

    def in_phase(self, removed: Iterable[int]) -> bool:
        """Whether removing ``removed`` keeps every rule in phase."""
        return in_phase(self.types, removed, list(self.rules))

    def eligible(self, budget: int, protected: Iterable[int] = ()) -> int:
        """How many removal sets of ``budget`` keep every rule in phase (exact)."""
        return count_in_phase(self.types, budget, list(self.rules), protected)

    def check(self, budget: int, cons: Constraints) -> int:
        """The number of eligible sets; one line when there is none (before any forward pass)."""
        try:
            return check_feasible(self.types, budget, list(self.rules), cons.protected())
        except SwappruneError as e:
            if not self.default:
                raise
            raise SwappruneError(
                f"{e}; the constraint is on because a GGUF is written: --serve none drops it"
            ) from None

    def describe(self) -> str:
        return ", ".join(self.runtimes)


def check_names(names: Sequence[str] | None) -> None:
    """``--serve``: known runtime names, or ``none`` alone."""
    if names is None:
        return
    if not names:
        raise SwappruneError(f"--serve needs runtime names ({', '.join(RUNTIMES)}) or none")
    for name in names:
        if name != NONE and name not in RUNTIMES:
            raise unknown_name("serving runtime", name, [*RUNTIMES, NONE])
    if NONE in names and len(names) > 1:
        raise SwappruneError("--serve none drops the constraint; it takes no other runtime")


def own_types(facts: ModelFacts) -> list[str]:
    """The model's own per-layer types: as its config lists them, else as its loader derives them.

    A GGUF states no types; transformers' GGUF loader gives the config class's
    default pattern for the depth, which is what the loaded model will have.
    """
    if facts.layer_types:
        return list(facts.layer_types)
    config = facts.config or {}
    gguf = "general.architecture" in config
    rule = rule_for(facts.model_type, "transformers-gguf" if gguf else "transformers")
    if rule is None:
        return [FULL] * facts.num_layers
    return derived_types(rule, facts.num_layers, artifact_facts(config) if config else None)


def resolve(
    names: Sequence[str] | None, facts: ModelFacts, gguf: GGUFOutput | None = None
) -> ServeConstraint | None:
    """The constraint of ``--serve names`` on this model, or ``None`` when nothing constrains it.

    Args:
        names: ``--serve`` (``None``: the default, :data:`GGUF_RUNTIMES` while a GGUF
            is written, else nothing; ``["none"]``: nothing).
        facts: the model's facts (``model_type``, depth, ``layer_types``, ``config``).
        gguf: the run's resolved ``--gguf``: when it writes the GGUF, the rules read the
            source GGUF's metadata (a per-layer list in it is trimmed, not lost).

    Raises:
        SwappruneError: a named runtime that does not serve this family.
    """
    check_names(names)
    source, default = gguf.source if gguf is not None and gguf.write else None, names is None
    if names is None:
        if source is None:
            return None
        names = [rt for rt in GGUF_RUNTIMES if rule_for(facts.model_type, rt) is not None]
    elif list(names) == [NONE]:
        return None
    config = source.metadata if source is not None else facts.config
    rules = constrained_runtimes(facts.model_type, list(dict.fromkeys(names)), config)
    if not rules:
        return None
    runtimes = tuple(r.runtime for r in rules)
    return ServeConstraint(runtimes, tuple(own_types(facts)), default, tuple(rules))


Key = tuple[float, float, tuple[int, ...]]


def _cost(values, n: int) -> list[float]:
    """Per-block costs as floats; NaN and infinities become ``+inf`` (never preferred)."""
    if values is None:
        return [0.0] * n
    arr = np.asarray(values, dtype=float)
    return [float(v) if np.isfinite(v) else float("inf") for v in arr]


def cheapest(
    types: Sequence[str],
    budget: int,
    rules: Sequence[PhaseRule],
    importance,
    tiebreak=None,
    protected: Iterable[int] = (),
) -> tuple[int, ...] | None:
    """The eligible removal set of ``budget`` blocks with the lowest summed importance.

    Ties: the lower summed ``tiebreak``, then the lexicographically smallest set.
    ``None`` when no set is eligible.
    """
    n, keep = len(types), frozenset(protected)
    m = n - budget
    imp, tb = _cost(importance, n), _cost(tiebreak, n)
    targets = kept_targets(list(rules), m)
    if targets is None:  # any set is eligible: the cheapest removable blocks
        free = sorted((b for b in range(n) if b not in keep), key=lambda b: (imp[b], tb[b], b))
        return tuple(sorted(free[:budget])) if len(free) >= budget else None
    found: list[Key] = []
    for target in targets:
        # after[j]: the best way to spell target[j:] with positions p+1.. (None: impossible).
        after: list[Key | None] = [None] * m + [(0.0, 0.0, ())]
        for p in range(n - 1, -1, -1):
            here: list[Key | None] = [None] * (m + 1)
            for j in range(m + 1):
                options: list[Key] = []
                rest = after[j]
                if p not in keep and rest is not None:  # remove p
                    options.append((imp[p] + rest[0], tb[p] + rest[1], (p, *rest[2])))
                if j < m and types[p] == target[j] and after[j + 1] is not None:  # keep p
                    options.append(after[j + 1])  # type: ignore[arg-type]
                here[j] = min(options) if options else None
            after = here
        if after[0] is not None:
            found.append(after[0])
    return min(found)[2] if found else None


def enforce(cons: Constraints, removed: Iterable[int], importance, tiebreak=None) -> list[int]:
    """``removed`` when it keeps ``cons.serve`` in phase, else the cheapest eligible set."""
    chosen = sorted(int(b) for b in removed)
    serve = cons.serve
    if serve is None or serve.in_phase(chosen):
        return chosen
    best = cheapest(serve.types, len(chosen), serve.rules, importance, tiebreak, cons.protected())
    if best is None:  # refused when the spec was built; reaching here is a bug
        raise SwappruneError(
            f"no removal of {len(chosen)} blocks keeps {serve.describe()} in phase"
        )
    return list(best)


def record(
    cons: Constraints, proposed: Sequence[int], chosen: Sequence[int], importance
) -> ServeRecord:
    """What the constraint did to one selection (``plan.records.serve``)."""
    serve = cons.serve
    assert serve is not None
    imp = _cost(importance, cons.num_layers)
    proposed, chosen = sorted(int(b) for b in proposed), sorted(int(b) for b in chosen)
    b, protected = len(chosen), cons.protected()
    return ServeRecord(
        runtimes=list(serve.runtimes),
        default=serve.default,
        rules=[r.describe() for r in serve.rules],
        eligible_sets=serve.eligible(b, protected),
        removal_sets=comb(cons.num_layers - len(protected), b),
        strategy_choice=proposed,
        chosen=chosen,
        strategy_importance=float(sum(imp[i] for i in proposed)),
        chosen_importance=float(sum(imp[i] for i in chosen)),
    )
