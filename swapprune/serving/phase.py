"""Removal sets that keep a runtime's layer-type pattern in phase (``--serve llama.cpp``).

A runtime that derives each layer's attention type from its index (llama.cpp
for Gemma-2/3, Cohere2, GPT-OSS; transformers reading a Gemma GGUF; vLLM for
GPT-OSS) serves a pruned model correctly only when every kept layer lands on a
slot whose derived type is its own. For ``L`` layers of types ``t`` and a
removal of ``b`` blocks, the kept types must spell exactly the runtime's target
pattern for ``L - b`` layers. That is a subsequence match, so the eligible sets
are counted exactly by a small dynamic programme (``O(L * (L - b))``) and
listed without trying all ``C(L, b)`` subsets.

Selection strategies filter candidates with :func:`phase_predicate` (a plain
``removed -> bool``); :func:`check_feasible` refuses, in one line and before
any forward pass, a budget that no eligible set meets. Pure: no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from math import comb
from typing import Any

from swapprune.errors import SwappruneError, unknown_name
from swapprune.serving.rules import (
    FULL,
    GGUF_SWA_LIST,
    LAYER_TYPES,
    RUNTIMES,
    SERVING,
    SLIDING,
    Rule,
)
from swapprune.serving.view import artifact_facts, derived_types


@dataclass(frozen=True)
class PhaseRule:
    """What a runtime gives each slot of an ``n``-layer cut, or ``None`` when it reads the types.

    Attributes:
        runtime: the runtime (a key of :data:`~swapprune.serving.rules.RUNTIMES`).
        model_type: the family.
        rule: the table's rule (``None``: the runtime reads the kept layers' own types).
        facts_config: the config or GGUF metadata the rule reads a window from.
    """

    runtime: str
    model_type: str
    rule: Rule | None
    facts_config: Mapping[str, Any]

    def target(self, n: int) -> list[str] | None:
        """The types the runtime assigns to ``n`` layers, or ``None`` if any kept types pass."""
        if self.rule is None:
            return None
        facts = artifact_facts(self.facts_config) if self.facts_config else None
        return derived_types(self.rule, n, facts)

    @property
    def constrains(self) -> bool:
        """Whether this runtime re-derives types from the index at all."""
        return self.rule is not None

    def describe(self) -> str:
        if self.rule is None:
            return f"{self.runtime} reads each kept layer's own type ({self.model_type})"
        if self.rule.derive == "period":
            return (
                f"{self.runtime} derives {self.model_type} layer types from the index "
                f"(every {self.rule.period}th layer full)"
            )
        return (
            f"{self.runtime} gives {self.model_type} layers one type by index ({self.rule.derive})"
        )


def phase_rule(model_type: str, runtime: str, config: Mapping[str, Any] | None = None) -> PhaseRule:
    """The index rule ``runtime`` applies to a cut of ``model_type``.

    Args:
        model_type: the family (``config.model_type``).
        runtime: ``llama.cpp``, ``transformers-gguf``, ``vllm`` or ``transformers``.
        config: the source model's ``config.json`` dict or GGUF metadata. It says
            whether llama.cpp will find a per-layer list in the GGUF (a list in the
            source GGUF is trimmed by the writer; llama.cpp's converter writes one
            for some families) and whether the model has a window at all.

    Raises:
        SwappruneError: an unknown runtime, or a family the runtime does not serve.
    """
    if runtime not in RUNTIMES:
        raise unknown_name("serving runtime", runtime, RUNTIMES)
    family = SERVING.get(model_type)
    config = dict(config or {})
    if family is None:
        # No known pattern: nothing to keep in phase, and the serving view says so.
        return PhaseRule(runtime, model_type, None, config)
    rule = family.rules.get(runtime)
    if rule is None:
        raise SwappruneError(
            f"{runtime} does not serve model_type '{model_type}' "
            f"(known for it: {', '.join(family.rules)})"
        )
    facts = artifact_facts(config) if config else None
    if rule.honours == LAYER_TYPES and runtime != "llama.cpp":
        return PhaseRule(runtime, model_type, None, config)  # swapprune writes layer_types
    if rule.honours == GGUF_SWA_LIST:
        from_gguf = facts is not None and facts.artifact == "gguf"
        if facts is not None and from_gguf and GGUF_SWA_LIST in facts.lists:
            return PhaseRule(runtime, model_type, None, config)  # trimmed, still per layer
        if not from_gguf and rule.converter_writes_list:
            return PhaseRule(runtime, model_type, None, config)
    if rule.derive in ("uniform", "none") and not rule.refuses_mixed:
        return PhaseRule(runtime, model_type, None, config)  # one type everywhere, any cut
    return PhaseRule(runtime, model_type, rule, config)


Rules = PhaseRule | Sequence[PhaseRule]


def _as_list(rules: Rules) -> list[PhaseRule]:
    return [rules] if isinstance(rules, PhaseRule) else list(rules)


def kept_targets(rules: Rules, m: int) -> list[list[str]] | None:
    """Kept-type sequences of length ``m`` every rule accepts; ``None`` when any sequence is.

    One target per index rule; a runtime refusing mixed types accepts two (all
    full, all sliding). Several runtimes accept only what all of them accept.
    """
    allowed: list[list[str]] | None = None
    for rule in _as_list(rules):
        if rule.rule is not None and rule.rule.refuses_mixed:
            mine = [[FULL] * m, [SLIDING] * m]
        else:
            target = rule.target(m)
            if target is None:
                continue
            mine = [target]
        allowed = mine if allowed is None else [t for t in allowed if t in mine]
    return allowed


def _name(rules: Rules) -> str:
    return ", ".join(r.runtime for r in _as_list(rules) if r.constrains) or "any runtime"


def _describe(rules: Rules) -> str:
    return "; ".join(r.describe() for r in _as_list(rules))


def in_phase(types: Sequence[str], removed: Iterable[int], rule: Rules) -> bool:
    """Whether every kept layer gets its own type back under ``rule`` (every rule, if several).

    Args:
        types: the original layers' own types (``L`` entries).
        removed: original indices removed.
        rule: from :func:`phase_rule`.
    """
    gone = set(removed)
    kept = [t for i, t in enumerate(types) if i not in gone]
    targets = kept_targets(rule, len(kept))
    return targets is None or any(kept == t for t in targets)


def phase_predicate(types: Sequence[str], rule: Rules) -> Callable[[Iterable[int]], bool]:
    """``removed -> bool`` for selection strategies that filter candidate sets."""
    types = list(types)
    return lambda removed: in_phase(types, removed, rule)


def _suffix_counts(
    types: Sequence[str], target: Sequence[str], protected: frozenset[int]
) -> list[list[int]]:
    """``f[p][j]``: ways to spell ``target[j:]`` with positions ``p..`` (protected ones kept)."""
    n, m = len(types), len(target)
    f = [[0] * (m + 1) for _ in range(n + 1)]
    f[n][m] = 1
    for p in range(n - 1, -1, -1):
        for j in range(m, -1, -1):
            ways = 0 if p in protected else f[p + 1][j]  # remove p
            if j < m and types[p] == target[j]:
                ways += f[p + 1][j + 1]  # keep p as slot j
            f[p][j] = ways
    return f


def count_in_phase(
    types: Sequence[str], budget: int, rule: Rules, protected: Iterable[int] = ()
) -> int:
    """Number of removal sets of ``budget`` blocks that keep ``rule`` in phase (exact)."""
    n, keep = len(types), frozenset(protected)
    if not 0 <= budget <= n - len(keep):
        return 0
    targets = kept_targets(rule, n - budget)
    if targets is None:
        return comb(n - len(keep), budget)
    return sum(_suffix_counts(types, t, keep)[0][0] for t in targets)


def eligible_removals(
    types: Sequence[str],
    budget: int,
    rule: Rules,
    protected: Iterable[int] = (),
    limit: int | None = None,
) -> Iterator[tuple[int, ...]]:
    """The eligible removal sets (sorted index tuples), in lexicographic order of the kept set.

    Walks only branches that can still complete, so listing the first ``k`` sets
    costs ``O(L * (L - b) + k * L)`` whatever ``C(L, b)`` is.
    """
    n, keep = len(types), frozenset(protected)
    if not 0 <= budget <= n - len(keep):
        return
    targets = kept_targets(rule, n - budget)
    if targets is None:
        free = [i for i in range(n) if i not in keep]
        for count, gone in enumerate(combinations(free, budget)):
            if limit is not None and count >= limit:
                return
            yield gone
        return
    emitted = 0
    for target in targets:
        f = _suffix_counts(types, target, keep)
        stack: list[tuple[int, int, tuple[int, ...]]] = [(0, 0, ())]
        while stack:
            p, j, gone = stack.pop()
            if p == n:
                yield gone
                emitted += 1
                if limit is not None and emitted >= limit:
                    return
                continue
            # Push "remove p" first so "keep p" (the lexicographically smaller kept set) pops first.
            if p not in keep and f[p + 1][j]:
                stack.append((p + 1, j, (*gone, p)))
            if j < len(target) and types[p] == target[j] and f[p + 1][j + 1]:
                stack.append((p + 1, j + 1, gone))


def feasible_budgets(types: Sequence[str], rule: Rules, protected: Iterable[int] = ()) -> list[int]:
    """Every budget ``b >= 1`` that at least one eligible removal set meets."""
    keep = tuple(protected)
    return [
        b for b in range(1, len(types) - len(set(keep))) if count_in_phase(types, b, rule, keep)
    ]


def describe_eligible(
    types: Sequence[str],
    budget: int,
    rule: Rules,
    protected: Iterable[int] = (),
    show: int = 3,
) -> str:
    """One line: how many removal sets of ``budget`` are eligible, with a few examples."""
    keep = tuple(protected)
    total = count_in_phase(types, budget, rule, keep)
    if kept_targets(rule, len(types) - budget) is None:
        return f"{_describe(rule)}: all {total} removal sets of {budget} are eligible"
    examples = [list(s) for s in eligible_removals(types, budget, rule, keep, limit=show)]
    more = f", e.g. {', '.join(map(str, examples))}" if examples else ""
    return (
        f"{_describe(rule)}: {total} of {comb(len(types), budget)} removal sets of "
        f"{budget} keep it in phase{more}"
    )


def check_feasible(
    types: Sequence[str], budget: int, rule: Rules, protected: Iterable[int] = ()
) -> int:
    """Refuse, in one line, a budget that no in-phase removal set meets; else return the count.

    Call it where the budget is validated, before any forward pass.

    Raises:
        SwappruneError: no eligible set; the message lists the budgets that work.
    """
    keep = tuple(protected)
    total = count_in_phase(types, budget, rule, keep)
    if total:
        return total
    ok = feasible_budgets(types, rule, keep)
    shown = ", ".join(map(str, ok[:12])) + (" ..." if len(ok) > 12 else "") if ok else "none"
    guard = f" with blocks {sorted(set(keep))} protected" if keep else ""
    raise SwappruneError(
        f"no removal of {budget} of {len(types)} blocks{guard} keeps the layer pattern in phase "
        f"for {_name(rule)}: {_describe(rule)}; budgets that can: {shown} "
        f"(or serve with a runtime that reads layer types, or drop the constraint)"
    )


def constrained_runtimes(
    model_type: str, runtimes: Iterable[str], config: Mapping[str, Any] | None = None
) -> list[PhaseRule]:
    """The rules among ``runtimes`` that actually constrain a cut of ``model_type``."""
    rules = [phase_rule(model_type, rt, config) for rt in runtimes]
    return [r for r in rules if r.constrains]
