"""Which blocks a selection may remove, and how many it can (pure logic)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from swapprune.errors import SwappruneError

if TYPE_CHECKING:
    from swapprune.select.serve_constraint import ServeConstraint


@dataclass(frozen=True)
class Constraints:
    """Which blocks may be removed.

    Attributes:
        num_layers: ``L``.
        protect_first: the first k blocks are never removed.
        protect_last: the last k blocks are never removed.
        serve: removal sets must keep these runtimes' layer-type pattern in phase
            (``--serve``); applied after the strategy's choice
            (:func:`swapprune.select.serve.enforce`), so every selection, its bootstrap
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
            raise SwappruneError(f"budget {budget} would remove every block: the model has {L}")
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
