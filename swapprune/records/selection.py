"""What a fixed selection records besides per-block values: compute, serve, order.

:class:`Compute` is what the selection computed, by kind; :class:`ServeRecord`
what the in-phase constraint (``--serve``) did to the strategy's choice;
:class:`RemovalOrder` an iterative strategy's removals in order; and
:class:`CertificateSkipped` a certificate asked for and not measured (the
measured one is :class:`~swapprune.select.certificate.Certificate`). Records of
:class:`~swapprune.records.PlanRecords`. No numpy here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class BlockWork:
    """Decoder-block evaluations and the tokens they ran on."""

    block_evals: int = 0
    block_tokens: int = 0

    def to_dict(self) -> dict:
        return {"block_evals": self.block_evals, "block_tokens": self.block_tokens}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BlockWork:
        return cls(d["block_evals"], d["block_tokens"])


#: The kinds of work a selection spends, in the order they are written.
WORK = ("probes", "tiebreak", "oracle", "verify", "certificate", "reference")


@dataclass
class Compute:
    """What a selection computed, by kind (``plan.json``'s ``compute``).

    Attributes:
        probes: the swap and deletion probes measured for this selection.
        tiebreak: the residual norms that break equal importances.
        oracle: a model-measured criterion's or strategy's queries.
        verify: ``auto``'s beam on its held-out windows.
        certificate: the certificate's evaluations of its reference sets.
        reference: the reference's extra work: Block Influence's pass over the calibration
            windows and the neighbours' screening.
    """

    probes: BlockWork = field(default_factory=BlockWork)
    tiebreak: BlockWork = field(default_factory=BlockWork)
    oracle: BlockWork = field(default_factory=BlockWork)
    verify: BlockWork = field(default_factory=BlockWork)
    certificate: BlockWork = field(default_factory=BlockWork)
    reference: BlockWork = field(default_factory=BlockWork)

    def parts(self) -> dict[str, BlockWork]:
        return {k: getattr(self, k) for k in WORK}

    @property
    def total(self) -> BlockWork:
        parts = self.parts().values()
        return BlockWork(sum(p.block_evals for p in parts), sum(p.block_tokens for p in parts))

    def summary(self) -> str:
        """Block evaluations by kind, block-tokens in brackets (one line)."""
        parts = [
            f"{k} {v.block_evals} [{v.block_tokens:,}]"
            for k, v in self.parts().items()
            if v.block_evals
        ]
        total = self.total
        return (
            f"compute: {total.block_evals} block evaluations [{total.block_tokens:,} "
            f"block-tokens]" + (f": {', '.join(parts)}" if parts else "")
        )

    def to_dict(self) -> dict:
        return {k: v.to_dict() for k, v in self.parts().items()} | {"total": self.total.to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Compute:
        """The record :meth:`to_dict` wrote (``total`` is recomputed; a record written before
        the reference was counted has no ``reference``)."""
        return cls(**{k: BlockWork.from_dict(d[k]) for k in WORK if k in d})


@dataclass
class ServeRecord:
    """What the in-phase constraint (``--serve``) did to a selection (``plan.json``'s ``serve``).

    Attributes:
        runtimes: the runtimes whose layer-type pattern the cut keeps in phase.
        default: on by default because a GGUF is written (not by ``--serve``).
        rules: each runtime's rule, in words.
        eligible_sets: removal sets of this size that keep every rule in phase.
        removal_sets: removal sets of this size in all (protected blocks aside).
        strategy_choice: the strategy's own set.
        chosen: the set kept: the strategy's if in phase, else the cheapest eligible set.
        strategy_importance, chosen_importance: the two sets' summed importance.
    """

    runtimes: list[str]
    default: bool
    rules: list[str]
    eligible_sets: int
    removal_sets: int
    strategy_choice: list[int]
    chosen: list[int]
    strategy_importance: float
    chosen_importance: float

    @property
    def replaced(self) -> bool:
        """Whether the strategy's choice was out of phase (and replaced)."""
        return self.strategy_choice != self.chosen

    def summary(self) -> str:
        """One line for the run summary (the card quotes it too)."""
        runtimes = ", ".join(self.runtimes)
        where = (
            f"{self.eligible_sets} of {self.removal_sets} removal sets of {len(self.chosen)} are"
        )
        if not self.replaced:
            return f"serve: {self.chosen} keeps {runtimes} in phase ({where})"
        return (
            f"serve: the strategy's choice {self.strategy_choice} would put {runtimes} out of "
            f"phase; replaced by {self.chosen}, the in-phase set with the lowest summed "
            f"importance ({self.chosen_importance:.4g} vs {self.strategy_importance:.4g}"
            f"; {where} in phase; the constraint overrides the strategy's own rule)"
        )

    def to_dict(self) -> dict:
        return {
            "runtimes": self.runtimes,
            "default": self.default,
            "rules": self.rules,
            "eligible_sets": self.eligible_sets,
            "removal_sets": self.removal_sets,
            "strategy_choice": self.strategy_choice,
            "strategy_in_phase": not self.replaced,
            "chosen": self.chosen,
            "replaced": self.replaced,
            "importance_sum": {
                "strategy_choice": self.strategy_importance,
                "chosen": self.chosen_importance,
            },
            "summary": self.summary(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ServeRecord:
        """The record :meth:`to_dict` wrote (the summary and the flags are recomputed)."""
        return cls(
            runtimes=list(d["runtimes"]),
            default=d["default"],
            rules=list(d["rules"]),
            eligible_sets=d["eligible_sets"],
            removal_sets=d["removal_sets"],
            strategy_choice=list(d["strategy_choice"]),
            chosen=list(d["chosen"]),
            strategy_importance=d["importance_sum"]["strategy_choice"],
            chosen_importance=d["importance_sum"]["chosen"],
        )


@dataclass
class RemovalOrder:
    """An iterative selection's removals in the order made (``plan.json``'s ``order``).

    Budget ``n``'s set is the first ``n`` of them, so one selection at the largest
    budget answers every smaller one.
    """

    blocks: list[int]

    def first(self, n: int) -> list[int]:
        """The set of budget ``n``."""
        return self.blocks[:n]

    def to_list(self) -> list[int]:
        """Its JSON form: the blocks, in removal order."""
        return list(self.blocks)

    @classmethod
    def from_list(cls, blocks: list[int]) -> RemovalOrder:
        return cls(list(blocks))


@dataclass(frozen=True)
class CertificateSkipped:
    """The certificate was asked for but not measured, and why."""

    reason: str

    #: Neither certified nor refused.
    certified = None

    def to_dict(self) -> dict:
        return {"certified": None, "skipped": self.reason}
