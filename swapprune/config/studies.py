"""Settings of the studies over many runs: ``swapprune compare`` and ``swapprune validate``.

Each study is a :class:`~swapprune.config.run.RunConfig` (model, calibration,
probes, evaluation) plus one of these sections; both go through the run's own
stage functions. Each ``check`` reads the section alone; the criteria's names, the
files and the output directory are checked in :mod:`swapprune.pipeline.checks`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from swapprune.config.cells import cell_select
from swapprune.config.fields import choice, opt, positive
from swapprune.config.select import SelectConfig
from swapprune.defaults import N_BOOT
from swapprune.errors import SwappruneError

#: Units of ``CompareConfig.margin`` (see :class:`swapprune.stats.verdicts.Margin`).
MARGIN_UNITS = ("points", "metric")

#: Criteria ``swapprune validate`` checks unless told otherwise.
VALIDITY_CRITERIA = (
    "interchange",
    "replacement",
    "deletion",
    "bi",
    "angular",
    "angular-tokens",
    "sleb",
    "sleb-kl",
    "taylor",
    "random",
)


@dataclass(kw_only=True)
class CompareConfig:
    """``swapprune compare``: the cost of each criterion at each budget, with paired verdicts."""

    budgets: list[int] = opt(help="budgets to compare", factory=lambda: [1, 3, 5])
    criteria: list[str] = opt(
        help="cells to compare: criteria (swapprune list), e.g. interchange,replacement,bi,sleb,"
        "random; CRITERION@STRATEGY runs one with another strategy (interchange@ranked, "
        "bi@greedy), CRITERION@merge:RULE merges instead of removing (interchange@merge:laco), "
        "auto@shortlist:bi or auto@shortlist:random runs auto's both-high beam over a control "
        "shortlist; each cell is labelled as written",
        factory=lambda: ["interchange", "replacement"],
    )
    strategy: str | None = opt(
        None, "selection strategy for every criterion (default: each criterion's own)"
    )
    random_seeds: list[int] = opt(
        help="seeds of the random baseline", factory=lambda: list(range(10))
    )
    patches: list[str] = opt(
        help="patch kinds each cut is also measured with (its own cells, criterion+kind): "
        "none, linear; a cut that removes block 0 gets no patched cell (--protect-first 1)",
        factory=lambda: ["none"],
    )
    margin: float = opt(
        2.0,
        "equivalence margin m of every verdict: two cuts whose difference is within +-m by both "
        "one-sided tests (TOST, a 90% CI inside +-m) are 'tie (equivalent within +-m)'",
    )
    margin_unit: str = opt(
        "points",
        "unit of --margin: points (percentage points of the unpruned model's value: dPPL points "
        "for perplexity) or metric (the metric's own units)",
    )
    generative: bool = opt(
        True,
        "greedy-continuation agreement with the unpruned model for every cell (32 LAMBADA "
        "prompts x 32 tokens; SmolLM2-135M, one CPU thread: 27 s once, then about 10 s a cell)",
    )
    pairs: str = opt("adjacent", "pairs to probe")
    scores: str | None = opt(None, "reuse a scores.json instead of probing")
    output: str = opt(
        help="directory for results.json, results.md, plots and cache (a rerun reuses its cache)",
        flag="--output",
    )

    def check(self) -> None:
        if not self.budgets or min(self.budgets) < 1:
            raise SwappruneError("budgets must be positive integers, e.g. 1,3,5")
        if not self.criteria:
            raise SwappruneError("give at least one criterion to compare")
        if any(c.split("@")[0] == "random" for c in self.criteria) and not self.random_seeds:
            raise SwappruneError("the random baseline needs at least one seed")
        choice("margin_unit", self.margin_unit, MARGIN_UNITS)
        if not (math.isfinite(self.margin) and self.margin > 0):
            raise SwappruneError(f"the equivalence margin must be > 0, got {self.margin}")
        for c in self.criteria:
            cell_select(c, self.strategy).check()
        for kind in self.patches:
            SelectConfig(budget=1, patch=kind).check()


@dataclass(kw_only=True)
class ValidateConfig:
    """``swapprune validate``: does each criterion predict the real cost of deleting a block?"""

    criteria: list[str] = opt(
        help="criteria to check (swapprune list)", factory=lambda: list(VALIDITY_CRITERIA)
    )
    bootstrap: int = opt(N_BOOT, "bootstrap resamples")
    target: str = opt(
        "wikitext2-test",
        "text the deletion cost is measured on: wikitext2-test (held out from the criteria's "
        "calibration text), 'calibration' (the same windows: SLEB then scores 1 by "
        "construction), or a .txt file",
    )
    output: str = opt(help="directory for validity.json/.md/.png", flag="--output")

    def check(self) -> None:
        positive("bootstrap", self.bootstrap)
        if not self.criteria:
            raise SwappruneError("give at least one criterion to validate")
