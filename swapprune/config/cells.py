"""The grammar of a ``swapprune compare --criteria`` entry: which selection a cell runs.

An entry is a criterion with optional parts after ``@``: a strategy of its own,
a merge instead of a removal, or for ``auto`` a control shortlist. The cell's
label is the entry as written, so ``bi`` and ``bi@greedy`` are two cells of one
table: the strategy-matched comparisons the criteria's own defaults would
confound (the swap criteria default to greedy, never two adjacent; BI to ranked).
Parsing imports no torch: a bad entry fails with the rest of the configuration.
"""

from __future__ import annotations

from swapprune.config.select import SelectConfig
from swapprune.errors import SwappruneError


def cell_select(entry: str, strategy: str | None = None, **fields) -> SelectConfig:
    """The selection settings a ``--criteria`` entry names.

    ``CRITERION``, ``CRITERION@STRATEGY`` (``interchange@ranked``, ``bi@greedy``,
    ``interchange@spaced:2``), ``CRITERION@merge:RULE`` (``interchange@merge:laco``;
    ``@merge`` alone: average), both (``bi@greedy@merge:average``), and for ``auto``
    ``auto@shortlist:SOURCE`` (``bi`` or ``random``: the both-high beam's controls). A
    strategy in the entry overrides ``strategy`` (the comparison's ``--strategy``).

    Args:
        entry: One entry of :attr:`~swapprune.config.studies.CompareConfig.criteria`.
        strategy: The strategy every cell gets unless the entry names one.
        fields: Further :class:`~swapprune.config.select.SelectConfig` fields.

    Raises:
        SwappruneError: On an empty part, or two strategies or two merges in one entry.
    """
    criterion, *parts = entry.split("@")
    own, op, rule = None, "remove", "average"
    for part in parts:
        if not part or not criterion:
            raise SwappruneError(f"criteria entry '{entry}' has an empty part; e.g. bi@greedy")
        if part == "merge" or part.startswith("merge:"):
            if op == "merge":
                raise SwappruneError(f"criteria entry '{entry}' names two merges")
            op, rule = "merge", part.partition(":")[2] or "average"
        elif part.startswith("shortlist:"):
            fields["auto_shortlist"] = part.partition(":")[2]
        elif own is not None:
            raise SwappruneError(f"criteria entry '{entry}' names two strategies")
        else:
            own = part
    fields.setdefault("budget", 1)
    return SelectConfig(protocol=criterion, strategy=own or strategy, op=op, merge=rule, **fields)
