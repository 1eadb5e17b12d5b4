"""Which blocks a selection may remove, and how many it can (pure logic)."""

from __future__ import annotations

from dataclasses import dataclass

from swapprune.errors import SwappruneError


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


def max_spaced(cons: Constraints, min_gap: int) -> int:
    """Largest removal count with pairwise index distance >= ``min_gap``."""
    n = len(cons.candidates())
    return (n - 1) // min_gap + 1 if n else 0
