"""Layer-importance criteria: one number per block, lower = more removable.

A registry of named criteria, usable by other pruning tools::

    from swapprune.select import criteria
    imp = criteria.get("interchange").importance(criteria.Context(num_layers=L, scores=s))

Every criterion carries its ``source`` (paper, year) and ``what``, one line
saying exactly what it computes; :func:`describe` lists them. Each names the
strategy its source uses (``default_strategy``) and the inputs it can hand a
strategy (``provides``: ``rescore``, ``span_scores``, ``pair_table``; see
:mod:`swapprune.select.strategies`).

Score-based criteria read a :class:`~swapprune.engine.scores.ScoreResult`;
model-based ones query a :class:`~swapprune.engine.oracle.CalibrationOracle`.

Ties. The paper removes "the weaker contributor" of a low-distance pair. With
removability = min over partners, the two blocks of the best pair share the
same value; the swap criteria (``tiebreak = "residual"``) then put first the
block with the smaller mean residual update ``||h_out - h_in||`` on the
calibration windows (the paper's ``||g_l||``), and the block index only after.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from swapprune.errors import SwappruneError
from swapprune.registry import Registry

CRITERIA: Registry[Criterion] = Registry("criterion")

SWAP_PAPER = "Garcia, No Free Swap (2026)"
#: The swap criteria, interchange first (the gentler probe: ``auto``'s ranking).
SWAP = ("interchange", "replacement")


@dataclass
class Context:
    """What a criterion may use.

    Attributes:
        num_layers: ``L``.
        scores: probe scores (pairs and/or deletion), if measured.
        oracle: a :class:`~swapprune.engine.oracle.CalibrationOracle`, if the model is at hand.
        seed: for ``random``.
    """

    num_layers: int
    scores: Any = None
    oracle: Any = None
    seed: int = 0
    extra: dict = field(default_factory=dict)


class Criterion(ABC):
    """Turns measurements into per-block importance ``[L]`` (lower = more removable)."""

    name = "criterion"
    #: paper and year the definition follows.
    source = ""
    #: one line: exactly what is computed.
    what = ""
    #: probes the criterion reads from scores (drives ``swapprune score``).
    probes: tuple[str, ...] = ()
    #: needs the model (an oracle) rather than scores.
    needs_model = False
    #: the strategy its source uses, when the user names none.
    default_strategy = "greedy"
    #: inputs it can give a strategy beyond importance (see :mod:`swapprune.select.strategies`).
    provides: frozenset[str] = frozenset()
    #: secondary key for equal importance: ``"residual"`` (smaller ``||g_l||`` first) or None.
    tiebreak: str | None = None

    @abstractmethod
    def importance(self, ctx: Context) -> np.ndarray:
        """``[L]`` float array; lower = more removable."""

    def rescore(self, ctx: Context, removed: Sequence[int]) -> np.ndarray:
        """Importance on the model with ``removed`` already gone (``inf`` for those)."""
        raise SwappruneError(
            f"criterion '{self.name}' cannot rescore a pruned model; use iterative with "
            f"one of {', '.join(providers('rescore'))}"
        )

    def span_scores(self, ctx: Context, n: int) -> np.ndarray | None:
        """Cost of removing blocks ``s..s+n-1`` for each start ``s`` (contiguous strategy)."""
        return None

    def pair_table(self, ctx: Context) -> dict[tuple[int, int], float] | None:
        """``{(i, j): distance}`` of every scored pair (``ranked-pairs``)."""
        return None

    def partner(self, ctx: Context, layer: int) -> int:
        """The neighbour a block is merged into: the most redundant one if pair scores exist."""
        L = ctx.num_layers
        nbs = [n for n in (layer - 1, layer + 1) if 0 <= n < L]
        s = ctx.scores
        if s is not None:
            proto = next((p for p in SWAP if p in s.protocols()), None)
            scored = [n for n in nbs if (min(n, layer), max(n, layer)) in s.pairs]
            if proto and scored:
                return min(scored, key=lambda n: (s.distance(proto, layer, n), n))
        return nbs[0]


def _register(cls):
    CRITERIA.register(cls.name)(cls())
    return cls


def get(name: str) -> Criterion:
    """The criterion registered as ``name`` (did-you-mean on a typo)."""
    return CRITERIA.get(name)


def names() -> list[str]:
    return CRITERIA.names()


def providers(what: str) -> list[str]:
    """Names of the criteria that can provide strategy input ``what``."""
    return [n for n in names() if what in get(n).provides]


def describe() -> list[tuple[str, str, str]]:
    """``(name, source, what)`` for every criterion, for ``swapprune list`` and the README."""
    return [(n, get(n).source, get(n).what) for n in names()]


def _need_scores(ctx: Context, protocol: str):
    if ctx.scores is None or protocol not in ctx.scores.protocols():
        raise SwappruneError(f"criterion needs '{protocol}' scores; run swapprune score with it")
    return ctx.scores


class _SwapCriterion(Criterion):
    """The paper's removability: min over every scored partner of the pair distance."""

    provides = frozenset({"pair_table"})
    tiebreak = "residual"

    def pair_table(self, ctx):
        s = _need_scores(ctx, self.name)
        return {p: s.distance(self.name, *p) for p in sorted(s.pairs)}

    def importance(self, ctx: Context) -> np.ndarray:
        out = np.full(ctx.num_layers, np.inf)
        for (i, j), d in self.pair_table(ctx).items():
            for layer in (i, j):
                if 0 <= layer < ctx.num_layers:
                    out[layer] = min(out[layer], d)
        if np.isinf(out).any():
            missing = [i for i in range(ctx.num_layers) if np.isinf(out[i])]
            raise SwappruneError(f"scores lack pairs for blocks {missing}; score --pairs adjacent")
        return out


@_register
class Interchange(_SwapCriterion):
    name = "interchange"
    probes = ("interchange",)
    source = SWAP_PAPER
    what = (
        "min over every scored partner j of d_inter(l, j) = KL(p_base || p_{l<->j}); "
        "ties: smaller residual update ||g_l|| first"
    )


@_register
class Replacement(_SwapCriterion):
    name = "replacement"
    probes = ("replacement",)
    source = SWAP_PAPER
    what = (
        "min over every scored partner j of d_repl(l, j) = max(D(l<-j), D(j<-l)); "
        "ties: smaller residual update ||g_l|| first"
    )


PROJECT = "swapprune's own (exploratory: found post hoc on SmolLM2-135M)"


@_register
class ReplacementDirected(Criterion):
    """Block l's own computation lost: the cheapest partner that can run in its slot.

    ``d_repl`` takes the worse of the two directions, so a pair is only as
    removable as its less replaceable block; here block ``l`` is judged by the
    direction that removes *its* computation, ``D(l <- j)`` (slot ``l`` runs
    block ``j``, block ``l`` never runs), which is what deleting ``l`` and letting
    a neighbour stand in for it costs.
    """

    name = "replacement-directed"
    probes = ("replacement",)
    tiebreak = "residual"
    source = PROJECT
    what = (
        "min over every scored partner j of D(l<-j) = KL(p_base || p_{slot l runs block j}): "
        "block l's own computation lost; ties: smaller residual update ||g_l|| first"
    )

    def importance(self, ctx: Context) -> np.ndarray:
        s = _need_scores(ctx, "replacement")
        out = np.full(ctx.num_layers, np.inf)
        for i, j in sorted(s.pairs):
            d_ij, d_ji = s.directed(i, j)  # D(i<-j), D(j<-i)
            for layer, d in ((i, d_ij), (j, d_ji)):
                if 0 <= layer < ctx.num_layers:
                    out[layer] = min(out[layer], d)
        if np.isinf(out).any():
            missing = [i for i in range(ctx.num_layers) if np.isinf(out[i])]
            raise SwappruneError(f"scores lack pairs for blocks {missing}; score --pairs adjacent")
        return out


@_register
class Deletion(Criterion):
    """KL of skipping the block (from scores, or measured on the model)."""

    name = "deletion"
    probes = ("deletion",)
    provides = frozenset({"rescore"})
    source = SWAP_PAPER + ", deletion probe"
    what = "KL(p_base || p_{-l}) of the model with block l skipped (probe or oracle positions)"

    def importance(self, ctx):
        if ctx.scores is not None and ctx.scores.deletion:
            return np.array([float(np.mean(ctx.scores.deletion[i])) for i in range(ctx.num_layers)])
        return self.rescore(ctx, [])

    def rescore(self, ctx, removed):
        if ctx.oracle is None:
            raise SwappruneError("deletion needs deletion scores or the model")
        return ctx.oracle.deletion_costs(removed, "kl")


class _ModelCriterion(Criterion):
    """A criterion measured on the (possibly pruned) model through the oracle."""

    needs_model = True
    provides = frozenset({"rescore"})

    def importance(self, ctx):
        return self.rescore(ctx, [])

    def oracle(self, ctx: Context):
        if ctx.oracle is None:
            raise SwappruneError(f"{self.name} needs the model")
        return ctx.oracle


@_register
class Sleb(_ModelCriterion):
    name = "sleb"
    default_strategy = "iterative"
    source = "Song et al., SLEB (ICML 2024)"
    what = (
        "calibration perplexity of the model with block l removed; iterative: the "
        "cheapest goes, the rest are re-measured, repeat"
    )

    def rescore(self, ctx, removed):
        return self.oracle(ctx).deletion_costs(removed, "ppl")


@_register
class SlebOneShot(Sleb):
    name = "sleb-oneshot"
    default_strategy = "ranked"
    source = "Song et al., SLEB (ICML 2024), one-shot variant"
    what = (
        "calibration perplexity with block l removed, measured once; the n lowest, no re-measuring"
    )


@_register
class SlebKL(_ModelCriterion):
    name = "sleb-kl"
    default_strategy = "iterative"
    source = SWAP_PAPER + ", calibration-free SLEB"
    what = (
        "mean all-position KL(p_base || p_pruned) with block l removed (no labels); "
        "iterative like SLEB"
    )

    def rescore(self, ctx, removed):
        return self.oracle(ctx).deletion_costs(removed, "kl")


@_register
class BlockInfluence(_ModelCriterion):
    name = "bi"
    default_strategy = "ranked"
    source = "Men et al., ShortGPT (2024)"
    what = "Block Influence 1 - cos(h_in, h_out) averaged over all tokens; the n lowest"

    def rescore(self, ctx, removed):
        return self.oracle(ctx).similarity(removed)[0]


@_register
class BlockInfluenceGreedy(BlockInfluence):
    name = "bi-greedy"
    default_strategy = "greedy"
    source = "Men et al., ShortGPT (2024), with the no-adjacent rule"
    what = "Block Influence as in bi; the n lowest, never two adjacent"


@_register
class Angular(_ModelCriterion):
    name = "angular"
    default_strategy = "contiguous"
    provides = frozenset({"rescore", "span_scores"})
    source = "Gromov et al., The Unreasonable Ineffectiveness of the Deeper Layers (2024)"
    what = (
        "arccos(cos(h_l, h_{l+n}))/pi at the last token, averaged over windows; "
        "removes the n-block span l..l+n-1 that minimises it"
    )
    positions = "last"

    def rescore(self, ctx, removed):
        return self.oracle(ctx).similarity(removed, span=1, positions=self.positions)[1]

    def span_scores(self, ctx, n):
        ang = self.oracle(ctx).similarity([], span=n, positions=self.positions)[1]
        return ang[: ctx.num_layers - n + 1]


@_register
class AngularTokens(Angular):
    name = "angular-tokens"
    default_strategy = "greedy"
    source = "after Gromov et al. (2024), per block over all tokens"
    what = "arccos(cos(h_l, h_{l+1}))/pi averaged over all tokens, per block; never two adjacent"
    positions = "all"


@_register
class Taylor(_ModelCriterion):
    name = "taylor"
    default_strategy = "ranked"
    provides = frozenset()
    source = "Kim et al., Shortened LLaMA (2024), Taylor+"
    what = (
        "sum over block l's parameters of |dLoss/dtheta * theta|, Loss = mean next-token "
        "cross-entropy on the calibration windows; the n lowest"
    )

    def importance(self, ctx):
        return self.oracle(ctx).taylor()


@_register
class Random(Criterion):
    name = "random"
    default_strategy = "ranked"
    source = "the field's sanity baseline (the paper: seeds 0-9)"
    what = "seeded uniform random importance; the n lowest, so a uniform random n-subset"

    def importance(self, ctx):
        return np.random.default_rng(ctx.seed).random(ctx.num_layers)


@_register
class Reverse(Criterion):
    name = "reverse"
    default_strategy = "ranked"
    source = "reverse-order baseline (as in Gromov et al. 2024, ShortGPT 2024)"
    what = "importance -l; the n lowest are the last n blocks"

    def importance(self, ctx):
        return -np.arange(ctx.num_layers, dtype=float)
