"""The selection stage's settings: :class:`SelectConfig`, the one schema of a selection.

The CLI's selection flags, a recipe's ``prune:`` section, ``swapprune.prune``'s
keyword arguments, ``compare``'s cells and the llm-compressor modifier's fields
are all this dataclass; :func:`swapprune.select.spec.build` turns it (with the
calibration settings and the model's depth) into the frozen spec selection runs on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from swapprune.config.fields import opt, positive
from swapprune.errors import SwappruneError

if TYPE_CHECKING:
    from swapprune.config.sections import CalibrationConfig


@dataclass
class SelectConfig:
    """Choose the blocks to remove or merge, at a budget (or apply a saved plan)."""

    budget: int | None = opt(
        None, "number of blocks to remove or merge (unless a plan is applied)", required=True
    )
    protocol: str = opt(
        "interchange",
        "selection criterion: interchange, replacement, bi, angular, sleb, ..., or the auto "
        "policy (swapprune list)",
    )
    strategy: str | None = opt(
        None, "selection strategy (default: the criterion's own; swapprune list)"
    )
    op: str = opt("remove", "remove or merge")
    merge: str = opt("average", "merge rule for op merge: average or laco")
    protect_first: int = opt(0, "never remove the first k blocks")
    protect_last: int = opt(0, "never remove the last k blocks")
    oracle: str = opt("ppl", "metric of oracle queries (beam, sleb): ppl or kl")
    max_oracle_calls: int = opt(400, "cap on oracle calls of beam search")
    beam_seeds: int = opt(
        12,
        "beam search: seed candidates taken from the criterion (the paper: "
        "top 12 interchange candidates)",
    )
    scores: str | None = opt(None, "reuse a scores.json instead of probing")
    stability_threshold: float = opt(
        0.5,
        "warn when the chosen set comes out in fewer bootstrap "
        "resamples of the calibration windows than this",
    )
    plan: str | None = opt(None, "apply this plan.json instead of selecting", cli=False)

    def check(self, calibration: CalibrationConfig | None = None) -> None:
        """Names, ranges and files; the budget against the depth waits for the model's facts."""
        if self.plan is not None:
            if not Path(self.plan).is_file():
                raise SwappruneError(f"plan file {self.plan} not found")
            return
        if self.budget is None:
            raise SwappruneError("a budget is required: --budget N (blocks to remove or merge)")
        from swapprune.config.sections import CalibrationConfig
        from swapprune.select.spec import resolve

        resolve(self, calibration or CalibrationConfig())
        if self.scores is not None and not Path(self.scores).is_file():
            raise SwappruneError(f"scores file {self.scores} not found")
        positive("max_oracle_calls", self.max_oracle_calls)
        positive("beam_seeds", self.beam_seeds)
        if not 0 < self.stability_threshold <= 1:
            raise SwappruneError(
                f"stability_threshold must be in (0, 1], got {self.stability_threshold}"
            )
