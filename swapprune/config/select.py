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

from swapprune.config.fields import check_text_file, opt, positive
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
    certify: bool = opt(
        True,
        "certify the cut: its regret against the plausible alternatives, measured on "
        "held-out windows (and keep a challenger that is clearly better)",
    )
    certify_sets: int = opt(
        6, "certificate: at most this many plausible sets, the chosen one included"
    )
    certify_floor: float = opt(
        0.05,
        "certificate: a set is plausible when the selection's bootstrap picks it at least "
        "this often",
    )
    certify_delta: float | None = opt(
        None,
        "certificate: regret tolerance in dPPL points (default: 1 point or 5% of the "
        "cut's cost, whichever is larger)",
    )
    heldout_prompts: int = opt(
        8, "held-out windows of the certificate (auto searches on as many more)"
    )
    heldout_tokens: int | None = opt(
        None, "tokens per held-out window (default: 512, or the model's context if shorter)"
    )
    heldout_calib: str | None = opt(
        None, "source of the held-out windows (default: the calibration source)"
    )
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
        positive("certify_sets", self.certify_sets)
        if not 0 < self.certify_floor <= 1:
            raise SwappruneError(f"certify_floor must be in (0, 1], got {self.certify_floor}")
        if self.certify_delta is not None and not self.certify_delta >= 0:
            raise SwappruneError(
                f"certify_delta must be >= 0 dPPL points, got {self.certify_delta}"
            )
        positive("heldout_prompts", self.heldout_prompts, 2)
        positive("heldout_tokens", self.heldout_tokens, 2)
        check_text_file("heldout_calib", self.heldout_calib)
        if not 0 < self.stability_threshold <= 1:
            raise SwappruneError(
                f"stability_threshold must be in (0, 1], got {self.stability_threshold}"
            )


#: Tokens per held-out window unless the model's context is shorter.
HELDOUT_TOKENS = 512


def heldout_tokens(select: SelectConfig, context: int | None) -> int:
    """Tokens per held-out window: as set, else 512 capped at the model's context."""
    if select.heldout_tokens is not None:
        if context is not None and select.heldout_tokens > context:
            raise SwappruneError(
                f"heldout_tokens {select.heldout_tokens} exceeds the model's context length "
                f"{context}"
            )
        return select.heldout_tokens
    return HELDOUT_TOKENS if context is None else min(HELDOUT_TOKENS, context)
