"""The selection stage's settings: :class:`SelectConfig`, the one schema of a selection.

The CLI's selection flags, a recipe's ``prune:`` section, ``swapprune.prune``'s
keyword arguments, ``compare``'s cells and the llm-compressor modifier's fields
are all this dataclass; :func:`swapprune.pipeline.checks.selection_spec` checks it
against the registries and the model's facts and builds (with
:func:`swapprune.select.spec.build`) the frozen spec selection runs on.
"""

from __future__ import annotations

from dataclasses import dataclass

from swapprune.config.fields import choice, opt, positive
from swapprune.errors import SwappruneError


@dataclass
class SelectConfig:
    """Choose the blocks to remove or merge, at a budget (or apply a saved plan)."""

    budget: int | None = opt(
        None, "number of blocks to remove or merge (unless a plan is applied)", required=True
    )
    protocol: str = opt(
        "interchange",
        "the selection criterion: interchange, replacement, bi, angular, sleb, ..., or the "
        "auto policy over them (swapprune list)",
        metavar="CRITERION",
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
    auto_shortlist: str = opt(
        "swap",
        "auto, both-high: the blocks the verifying beam searches: swap (both protocols' most "
        "removable), or, as controls that credit the swap probes or not, bi (Block "
        "Influence's) or random (a seeded draw from the middle half of the stack), both of the "
        "swap shortlist's size",
    )
    scores: str | None = opt(None, "reuse a scores.json instead of probing")
    patch: str = opt(
        "none",
        "after removal, fold a linear map fitted on calibration activations into the block "
        "before each removed span: none or linear (no training)",
    )
    patch_prompts: int = opt(32, "patch: calibration windows its map is fitted on")
    patch_tokens: int = opt(256, "patch: tokens per patch window (capped at the context)")
    patch_ridge: float = opt(
        1e-3, "patch: ridge towards the identity, relative to the mean diagonal of B'B"
    )
    patch_aware: bool = opt(
        False,
        "patch: compare candidate sets after their own patch (fitted on the patch windows) in "
        "the certificate and auto's held-out search, so the cut is the cheapest patched set "
        "found, not the cheapest unpatched one; needs --patch linear",
    )
    certify: bool = opt(
        True,
        "certify the cut: its regret against the plausible alternatives, measured on "
        "held-out windows (and keep a challenger that is clearly better)",
        off="keep the criterion's own choice without certifying it: no held-out windows are "
        "measured for it (--protocol auto still measures its own search on them)",
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
    landscape: str | None = opt(
        None,
        "a landscape.json of this model and budget (swapprune landscape): its top refined "
        "sets join the certificate's reference",
        metavar="FILE",
    )
    landscape_sets: int = opt(5, "landscape: how many of its top sets join the reference")
    heldout_prompts: int = opt(
        8,
        "held-out windows of the certificate: the first half chooses, the second measures "
        "the regret (auto searches on as many more)",
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
    serve: list[str] | None = opt(
        None,
        "only cuts these serving runtimes give every kept layer its own attention type "
        "(swapprune list): e.g. llama.cpp,transformers-gguf, or none; default: "
        "llama.cpp,transformers-gguf while a GGUF is written, where they derive the types "
        "from the layer index; overrides the strategy's own rule (e.g. no two adjacent)",
        metavar="RUNTIME,...",
    )
    plan: str | None = opt(None, "apply this plan.json instead of selecting", cli=False)

    def check(self) -> None:
        """Ranges and choices among fixed names.

        The names that registries hold (criterion, strategy, merge rule, runtimes), the
        files and the budget against the depth are checked in
        :mod:`swapprune.pipeline.checks`.
        """
        if self.plan is not None:
            return
        if self.budget is None:
            raise SwappruneError("a budget is required: --budget N (blocks to remove or merge)")
        positive("max_oracle_calls", self.max_oracle_calls)
        positive("beam_seeds", self.beam_seeds)
        positive("certify_sets", self.certify_sets)
        positive("landscape_sets", self.landscape_sets)
        if not 0 < self.certify_floor <= 1:
            raise SwappruneError(f"certify_floor must be in (0, 1], got {self.certify_floor}")
        if self.certify_delta is not None and not self.certify_delta >= 0:
            raise SwappruneError(
                f"certify_delta must be >= 0 dPPL points, got {self.certify_delta}"
            )
        choice("auto_shortlist", self.auto_shortlist, AUTO_SHORTLISTS)
        if self.auto_shortlist != "swap" and self.protocol != "auto":
            raise SwappruneError(
                f"auto_shortlist {self.auto_shortlist} is a setting of --protocol auto, "
                f"not of '{self.protocol}'"
            )
        choice("patch", self.patch, PATCHES)
        if self.patch != "none":
            if self.op == "merge":
                raise SwappruneError(
                    "--patch folds a map into kept blocks after a removal; it does not combine "
                    "with --op merge"
                )
            positive("patch_prompts", self.patch_prompts)
            positive("patch_tokens", self.patch_tokens, 2)
            if not self.patch_ridge > 0:
                raise SwappruneError(f"patch_ridge must be > 0, got {self.patch_ridge}")
        if self.patch_aware:
            if self.patch == "none":
                raise SwappruneError(
                    "--patch-aware compares sets after their linear patch: add --patch linear"
                )
            if not (self.certify or self.protocol == "auto"):
                raise SwappruneError(
                    "--patch-aware changes what the certificate and auto's search compare; "
                    "with --no-certify and a fixed protocol there is nothing to compare"
                )
        positive("heldout_prompts", self.heldout_prompts, 4)  # half choose, half measure
        positive("heldout_tokens", self.heldout_tokens, 2)
        if not 0 < self.stability_threshold <= 1:
            raise SwappruneError(
                f"stability_threshold must be in (0, 1], got {self.stability_threshold}"
            )


#: Where ``auto``'s both-high beam takes its shortlist from (:mod:`swapprune.select.auto`).
AUTO_SHORTLISTS = ("swap", "bi", "random")
#: Patch kinds (``--patch``).
PATCHES = ("none", "linear")
#: Tokens per held-out window unless the model's context is shorter.
HELDOUT_TOKENS = 512
