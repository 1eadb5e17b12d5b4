"""Enforcing the in-phase constraint after a strategy's choice (``--serve``).

:func:`enforce` runs wherever a selection is made
(:func:`swapprune.select.core.select_fixed`, and the bootstrap's
:func:`swapprune.select.stability.select_on`, so the selection's stability and
the certificate's plausible sets see the same sets): a choice in phase stands;
any other is replaced by the eligible set with the lowest summed importance
(ties: the summed tie-break key, then the lexicographically smallest set).
**The constraint overrides the strategy's own rule**: greedy's
never-two-adjacent, spacing, spans, ``ranked-pairs:skip-ends``; only
``--protect-first`` and ``--protect-last`` still hold. :func:`record` says what
happened (``plan.scores["serve"]``).

The cheapest eligible set is found exactly, without listing the eligible sets:
the recursion :func:`~swapprune.model.phase.count_in_phase` counts with
(position ``p``, target slot ``j``), minimising instead of counting, has
``O(L * (L - b))`` states per target pattern whatever ``C(L, b)`` is, so no cap
on an enumeration is needed (tests check it against the minimum over
:func:`~swapprune.model.phase.eligible_removals`). Pure: no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import comb
from typing import TYPE_CHECKING, Any

import numpy as np

from swapprune.errors import SwappruneError
from swapprune.model.phase import PhaseRule, kept_targets

if TYPE_CHECKING:
    from swapprune.select.constraints import Constraints

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


def record(cons: Constraints, proposed: Sequence[int], chosen: Sequence[int], importance) -> dict:
    """What the constraint did to one selection (``plan.scores["serve"]``)."""
    serve = cons.serve
    assert serve is not None
    imp = _cost(importance, cons.num_layers)
    proposed, chosen = sorted(int(b) for b in proposed), sorted(int(b) for b in chosen)
    b, protected = len(chosen), cons.protected()
    eligible = serve.eligible(b, protected)
    sets = comb(cons.num_layers - len(protected), b)
    replaced = proposed != chosen
    out: dict[str, Any] = {
        "runtimes": list(serve.runtimes),
        "default": serve.default,
        "rules": [r.describe() for r in serve.rules],
        "eligible_sets": eligible,
        "removal_sets": sets,
        "strategy_choice": proposed,
        "strategy_in_phase": not replaced,
        "chosen": chosen,
        "replaced": replaced,
        "importance_sum": {
            "strategy_choice": float(sum(imp[i] for i in proposed)),
            "chosen": float(sum(imp[i] for i in chosen)),
        },
    }
    where = f"{eligible} of {sets} removal sets of {b} are"
    if replaced:
        out["summary"] = (
            f"serve: the strategy's choice {proposed} would put {serve.describe()} out of phase; "
            f"replaced by {chosen}, the in-phase set with the lowest summed importance "
            f"({out['importance_sum']['chosen']:.4g} vs {out['importance_sum']['strategy_choice']:.4g}"
            f"; {where} in phase; the constraint overrides the strategy's own rule)"
        )
    else:
        out["summary"] = f"serve: {chosen} keeps {serve.describe()} in phase ({where})"
    return out
