"""The ``exhaustive`` strategy: every admissible removal set measured, the cheapest kept (pure).

The exact reference for small budgets. It queries the model like ``beam``, through
the oracle of :class:`~swapprune.select.strategies.SelectionInputs` (one call per
set, each from cached prefix states), and enumerates the sets the constraints
admit (:class:`~swapprune.select.landscape.Admissible`, the in-phase ``--serve``
constraint included). For many sets the shared-prefix walk of
:func:`swapprune.engine.exhaustive.exhaustive_search` is faster; ``swapprune
landscape`` screens before it refines.
"""

from __future__ import annotations

from swapprune.errors import SwappruneError
from swapprune.select.landscape import from_constraints
from swapprune.select.strategies import STRATEGIES, Choice, SelectionInputs, Strategy, int_arg

#: Sets ``exhaustive`` measures at most unless its argument says otherwise.
MAX_SETS = 5000
#: Sets the plan's notes list, cheapest first.
SHOWN = 10


@STRATEGIES.register("exhaustive")
class Exhaustive(Strategy):
    """``exhaustive:MAX``: every admissible set measured on the pruned model; the cheapest.

    Refuses before any model work when more than MAX sets (default 5000) are
    admissible. Ties go to the lexicographically smaller set; the plan's notes list
    the cheapest sets with their costs.
    """

    name = "exhaustive"
    needs = frozenset({"oracle"})

    def __init__(self, arg: str | None = None):
        self.max_sets = int_arg("exhaustive:MAX", arg, MAX_SETS)

    def check(self, budget, cons):
        super().check(budget, cons)
        count = from_constraints(cons, budget).upper_count()
        if count > self.max_sets:
            raise SwappruneError(
                f"exhaustive: {count} removal sets of {budget} blocks, more than {self.max_sets}; "
                f"give exhaustive:{count}, a smaller budget, or use beam"
            )

    def choose(self, inputs: SelectionInputs) -> Choice:
        if inputs.oracle is None:
            raise SwappruneError("exhaustive search needs the model (an oracle)")
        sets = from_constraints(inputs.constraints, inputs.budget).sets()
        if not sets:
            raise SwappruneError(f"no removal set of {inputs.budget} blocks is admissible")
        costs = {s: float(inputs.oracle(s)) for s in sets}
        order = sorted(costs, key=lambda s: (costs[s], s))
        notes = {"sets": len(sets), "top": [[list(s), costs[s]] for s in order[:SHOWN]]}
        return Choice(list(order[0]), oracle_calls=len(sets), notes=notes)
