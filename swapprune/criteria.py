"""Layer-importance criteria: one number per block, lower = more removable.

A registry of named criteria, usable by other pruning tools::

    from swapprune import criteria
    imp = criteria.get("interchange").importance(criteria.Context(num_layers=L, scores=s))

Score-based criteria read a :class:`~swapprune.engine.scores.ScoreResult`; model-based
ones (``bi``, ``angular``, ``sleb``, and ``deletion`` without scores) query a
:class:`~swapprune.engine.oracle.CalibrationOracle`. Criteria with ``rescore`` can
re-measure a pruned model, which the ``iterative`` strategy uses.
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
    #: probes the criterion reads from scores (drives ``swapprune score``).
    protocols: tuple[str, ...] = ()
    #: needs the model (an oracle) rather than scores.
    needs_model = False
    #: the strategy it implies when the user names none (SLEB is iterative by definition).
    default_strategy = "greedy"

    @abstractmethod
    def importance(self, ctx: Context) -> np.ndarray:
        """``[L]`` float array; lower = more removable."""

    def rescore(self, ctx: Context, removed: Sequence[int]) -> np.ndarray:
        """Importance on the model with ``removed`` already gone (``inf`` for those)."""
        raise SwappruneError(
            f"criterion '{self.name}' cannot rescore a pruned model; use iterative with "
            "sleb, deletion, bi or angular"
        )

    def span_scores(self, ctx: Context, n: int) -> np.ndarray | None:
        """Cost of removing blocks ``s..s+n-1`` for each start ``s`` (contiguous strategy)."""
        return None

    def partner(self, ctx: Context, layer: int) -> int:
        """The neighbour a block is merged into: the most redundant one if pair scores exist."""
        L = ctx.num_layers
        nbs = [n for n in (layer - 1, layer + 1) if 0 <= n < L]
        s = ctx.scores
        if s is not None:
            proto = next((p for p in ("interchange", "replacement") if p in s.protocols()), None)
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


def _need_scores(ctx: Context, protocol: str):
    if ctx.scores is None or protocol not in ctx.scores.protocols():
        raise SwappruneError(f"criterion needs '{protocol}' scores; run swapprune score with it")
    return ctx.scores


class _SwapCriterion(Criterion):
    """The paper's removability: min over adjacent neighbours of the pair distance."""

    def importance(self, ctx: Context) -> np.ndarray:
        s = _need_scores(ctx, self.name)
        L = ctx.num_layers
        out = np.full(L, np.inf)
        for layer in range(L):
            for nb in (layer - 1, layer + 1):
                if 0 <= nb < L and (min(layer, nb), max(layer, nb)) in s.pairs:
                    out[layer] = min(out[layer], s.distance(self.name, layer, nb))
        if np.isinf(out).any():
            missing = [i for i in range(L) if np.isinf(out[i])]
            raise SwappruneError(f"scores lack adjacent pairs for blocks {missing}; score --pairs adjacent")
        return out


@_register
class Interchange(_SwapCriterion):
    name = "interchange"
    protocols = ("interchange",)


@_register
class Replacement(_SwapCriterion):
    name = "replacement"
    protocols = ("replacement",)


@_register
class Deletion(Criterion):
    """KL of skipping the block (from scores, or measured on the model)."""

    name = "deletion"
    protocols = ("deletion",)

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

    def importance(self, ctx):
        return self.rescore(ctx, [])

    def oracle(self, ctx: Context):
        if ctx.oracle is None:
            raise SwappruneError(f"{self.name} needs the model")
        return ctx.oracle


@_register
class Sleb(_ModelCriterion):
    """SLEB: calibration perplexity with the block removed; rescored after each removal."""

    name = "sleb"
    default_strategy = "iterative"

    def rescore(self, ctx, removed):
        return self.oracle(ctx).deletion_costs(removed, "ppl")


@_register
class BlockInfluence(_ModelCriterion):
    """ShortGPT's Block Influence: ``1 - cos(h_in, h_out)`` averaged over tokens."""

    name = "bi"

    def rescore(self, ctx, removed):
        return self.oracle(ctx).similarity(removed)[0]


@_register
class Angular(_ModelCriterion):
    """Angular distance between the states entering block l and block l+n (Gromov et al.)."""

    name = "angular"

    def rescore(self, ctx, removed):
        return self.oracle(ctx).similarity(removed, span=1)[1]

    def span_scores(self, ctx, n):
        return self.oracle(ctx).similarity([], span=n)[1][: ctx.num_layers - n + 1]


@_register
class Random(Criterion):
    """Seeded random importance (the field's sanity baseline)."""

    name = "random"

    def importance(self, ctx):
        return np.random.default_rng(ctx.seed).random(ctx.num_layers)


@_register
class Reverse(Criterion):
    """Last blocks first."""

    name = "reverse"

    def importance(self, ctx):
        return -np.arange(ctx.num_layers, dtype=float)
