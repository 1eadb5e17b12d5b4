"""The probes as layer plans, and the pair sets they run on (pure logic).

Every probe is a different plan over the same modules (docs/method.md section 1):

=================  ==============================  ====================
protocol           plan (L=5, i=1, j=3)            distance
=================  ==============================  ====================
replacement i<-j   ``[0, 3, 2, 3, 4]``             ``D(i<-j)``
replacement j<-i   ``[0, 1, 2, 1, 4]``             ``D(j<-i)``
interchange i<->j  ``[0, 3, 2, 1, 4]``             ``d_inter(i, j)``
deletion -i        ``[0, 2, 3, 4]``                per layer
=================  ==============================  ====================
"""

from __future__ import annotations

import re

from swapprune.defaults import LAYER_PROBES, PAIR_PROBES, PROBES
from swapprune.errors import SwappruneError, unknown_name

__all__ = ["LAYER_PROBES", "PAIR_PROBES", "PROBES"]

Plan = tuple[int, ...]


def replacement_plan(num_layers: int, slot: int, block: int) -> Plan:
    """Slot ``slot`` runs block ``block``; everything else unchanged (``slot <- block``)."""
    plan = list(range(num_layers))
    plan[slot] = block
    return tuple(plan)


def interchange_plan(num_layers: int, i: int, j: int) -> Plan:
    """Slots ``i`` and ``j`` exchange blocks; each block still runs once."""
    plan = list(range(num_layers))
    plan[i], plan[j] = j, i
    return tuple(plan)


def deletion_plan(num_layers: int, i: int) -> Plan:
    """Block ``i`` skipped."""
    return tuple(b for b in range(num_layers) if b != i)


def pair_probe_plans(
    num_layers: int, i: int, j: int, protocols: tuple[str, ...]
) -> dict[str, Plan]:
    """The plans to run for one pair, keyed ``repl_ij``, ``repl_ji``, ``inter``."""
    plans: dict[str, Plan] = {}
    if "replacement" in protocols:
        plans["repl_ij"] = replacement_plan(num_layers, i, j)
        plans["repl_ji"] = replacement_plan(num_layers, j, i)
    if "interchange" in protocols:
        plans["inter"] = interchange_plan(num_layers, i, j)
    return plans


def parse_protocols(text: str | list[str]) -> tuple[str, ...]:
    """Parse ``"replacement,interchange"``; unknown names are user errors."""
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    if not names:
        raise SwappruneError("no protocol given; choose from " + ", ".join(PROBES))
    for n in names:
        if n not in PROBES:
            raise unknown_name("protocol", n, PROBES)
    return tuple(dict.fromkeys(names))


_PAIR_RE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")


def parse_pairs(spec: str, num_layers: int) -> list[tuple[int, int]]:
    """Resolve a pair-set spec into sorted ``(i, j)`` pairs with ``i < j``.

    Args:
        spec: ``adjacent`` | ``all`` | ``gap:K`` (all pairs with ``|i-j| <= K``) |
            an explicit list ``"3-4,7-9"`` of 0-based block indices.
        num_layers: number of blocks ``L``.
    """
    L = num_layers
    spec = spec.strip()
    if spec == "adjacent":
        return [(i, i + 1) for i in range(L - 1)]
    if spec == "all":
        return [(i, j) for i in range(L) for j in range(i + 1, L)]
    if spec.startswith("gap:"):
        try:
            k = int(spec[4:])
        except ValueError:
            raise SwappruneError(f"bad pair set '{spec}': expected gap:K with integer K") from None
        if k < 1:
            raise SwappruneError(f"bad pair set '{spec}': K must be >= 1")
        return [(i, j) for i in range(L) for j in range(i + 1, min(L, i + k + 1))]
    pairs = []
    for item in spec.split(","):
        m = _PAIR_RE.match(item)
        if not m:
            raise SwappruneError(
                f"bad pair '{item.strip()}' in '{spec}': use adjacent, all, gap:K or a list like 3-4,7-9"
            )
        i, j = int(m.group(1)), int(m.group(2))
        if i == j:
            raise SwappruneError(f"pair {i}-{j} names the same block twice")
        if max(i, j) >= L:
            raise SwappruneError(
                f"pair {i}-{j} is out of range: the model has {L} blocks, indices 0..{L - 1}"
            )
        pairs.append((min(i, j), max(i, j)))
    return sorted(set(pairs))
