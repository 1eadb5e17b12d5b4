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

from swapprune.config.fields import check_text_file, choice, opt, positive
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
        from swapprune.select.constraints import NONE, check_names

        check_names(self.serve)
        if self.op == "merge" and self.serve not in (None, [NONE]):
            raise SwappruneError(
                "--serve keeps a removal in phase; it does not combine with --op merge"
            )
        positive("heldout_prompts", self.heldout_prompts, 4)  # half choose, half measure
        positive("heldout_tokens", self.heldout_tokens, 2)
        check_text_file("heldout_calib", self.heldout_calib)
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


def check_patch_windows(select: SelectConfig, facts) -> None:
    """A full linear patch needs at least as many patch tokens as the residual width."""
    from swapprune.model.arch import ARCHITECTURES

    spec = ARCHITECTURES.get(facts.model_type)
    if spec is not None and spec.mlp_out is None:
        raise SwappruneError(
            f"model_type '{facts.model_type}' has no single module that ends its MLP branch "
            "(a mixture of experts): a linear patch cannot be folded; use --patch none"
        )
    full = spec is None or spec.mlp_out_kind in ("linear", "conv1d")
    tokens = select.patch_prompts * (
        select.patch_tokens
        if facts.context_length is None
        else min(select.patch_tokens, facts.context_length)
    )
    if full and facts.hidden_size and tokens < facts.hidden_size:
        raise SwappruneError(
            f"a linear patch needs at least as many patch tokens as the hidden size "
            f"({facts.hidden_size}); {select.patch_prompts} x {select.patch_tokens} windows hold "
            f"{tokens}: raise --patch-prompts or --patch-tokens"
        )
