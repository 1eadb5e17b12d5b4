"""What a selection records in its plan, typed, and where ``plan.json`` keeps it.

A :class:`~swapprune.plan.PrunePlan` carries two kinds of data from selection:
per-block values (``plan.scores``: importance, the tie-break key, a strategy's
notes, oracle counts) and records (``plan.records``, a :class:`PlanRecords`),
which say how far the cut can be trusted and what it took: the certificate
(:class:`~swapprune.select.certificate.Certificate`, or
:class:`CertificateSkipped`), :class:`Compute`, the in-phase constraint's
:class:`ServeRecord`, an iterative strategy's :class:`RemovalOrder`, and the
policies' records (:mod:`swapprune.records.policy`: stability, the
adaptive tranches, ``auto``'s decision). In ``plan.json`` both kinds sit in one
``"scores"`` object; :meth:`PlanRecords.json_scores` writes them there and
:meth:`PlanRecords.from_scores` reads them back, so a ``plan.json`` reads into
the records it was written from, and writes the same bytes again.

Each record has ``to_dict()`` (its JSON form, keys in the order written) and
``from_dict()``; derived fields (a summary sentence, ``stable``, a total) are
written but recomputed on reading. The sentences the run summary and the model
card share are methods of the records (``summary()``, ``lines()``), so both
say them alike. No numpy here, so that :mod:`swapprune.plan` imports without it
(the certificate's module is imported only to read a measured certificate).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from swapprune.records.policy import AdaptiveRecord, AutoRecord, AutoSearch, Stability
from swapprune.records.selection import (
    BlockWork,
    CertificateSkipped,
    Compute,
    RemovalOrder,
    ServeRecord,
)

if TYPE_CHECKING:
    from swapprune.select.certificate import Certificate

__all__ = [
    "KEYS",
    "AdaptiveRecord",
    "AutoRecord",
    "AutoSearch",
    "BlockWork",
    "CertificateSkipped",
    "Compute",
    "PlanRecords",
    "RemovalOrder",
    "ServeRecord",
    "Stability",
]


def _certificate(d: Mapping[str, Any]) -> Certificate | CertificateSkipped:
    if "skipped" in d:
        return CertificateSkipped(d["skipped"])
    # Lazy: the certificate's module brings numpy, and plan.py imports without it.
    from swapprune.select.certificate import Certificate  # imports numpy

    return Certificate.from_dict(d)


#: The records' keys in ``plan.json``'s ``scores`` object.
KEYS = ("serve", "order", "adaptive", "certificate", "auto", "compute", "stability")


@dataclass
class PlanRecords:
    """Every record a selection leaves in its plan (``None``: not made).

    Attributes:
        serve: the in-phase constraint's effect.
        order: an iterative strategy's removal order.
        adaptive: the tranches of adaptive calibration (fixed criteria; ``auto``
            keeps its own in :attr:`AutoRecord.adaptive`).
        certificate: the regret certificate, or why it was not measured.
        auto: ``--protocol auto``'s decision.
        compute: what the selection computed, by kind.
        stability: the selection's bootstrap stability.
    """

    serve: ServeRecord | None = None
    order: RemovalOrder | None = None
    adaptive: AdaptiveRecord | None = None
    certificate: Certificate | CertificateSkipped | None = None
    auto: AutoRecord | None = None
    compute: Compute | None = None
    stability: Stability | None = None

    def copy(self) -> PlanRecords:
        """A copy that a new plan can extend without touching this one's fields."""
        return replace(self)

    @property
    def measured(self) -> Certificate | None:
        """The certificate, when one was measured."""
        cert = self.certificate
        return None if cert is None or isinstance(cert, CertificateSkipped) else cert

    @property
    def tranches(self) -> AdaptiveRecord | None:
        """The adaptive record of the selection, ``auto``'s or a fixed criterion's."""
        return (self.auto.adaptive if self.auto is not None else None) or self.adaptive

    def stability_warning(self) -> str | None:
        """The stability warning, unless a certificate already vouches for the cut."""
        if self.stability is None or (self.measured is not None and self.measured.certified):
            return None
        return self.stability.warning()

    def to_dict(self, *keys: str) -> dict[str, Any]:
        """The JSON form of the records named (default: all), those made, in that order."""
        out: dict[str, Any] = {}
        for key in keys or KEYS:
            value = getattr(self, key)
            if value is not None:
                out[key] = _json(key, value)
        return out

    def json_scores(self, scores: Mapping[str, Any]) -> dict[str, Any]:
        """``plan.json``'s ``scores`` object: the per-block values with the records among them.

        The order is the one selection writes them in: ``importance``, ``serve``,
        ``tiebreak``, ``order``, the other per-block values, then ``adaptive``, a
        measured ``certificate``, ``auto``, a skipped ``certificate``, ``compute``
        and ``stability``.
        """
        rest = dict(scores)
        out: dict[str, Any] = {}
        if "importance" in rest:
            out["importance"] = rest.pop("importance")
        out |= self.to_dict("serve")
        if "tiebreak" in rest:
            out["tiebreak"] = rest.pop("tiebreak")
        out |= self.to_dict("order")
        out |= rest
        # A measured certificate is made before auto's record; a skipped one after it.
        cert = ("certificate", "auto") if self.measured else ("auto", "certificate")
        return out | self.to_dict("adaptive", *cert, "compute", "stability")

    @classmethod
    def from_scores(cls, scores: Mapping[str, Any]) -> tuple[PlanRecords, dict[str, Any]]:
        """``(records, per-block values)`` of a ``plan.json`` ``scores`` object."""
        rest = dict(scores)
        found = {k: rest.pop(k) for k in KEYS if k in rest}
        return cls(**{k: _PARSE[k](v) for k, v in found.items() if v is not None}), rest


def _json(key: str, record: Any) -> Any:
    if key == "order":
        return record.to_list()
    if key == "certificate" and not isinstance(record, CertificateSkipped):
        return record.to_dict() | {"summary": record.summary()}
    return record.to_dict()


_PARSE: dict[str, Any] = {
    "serve": ServeRecord.from_dict,
    "order": RemovalOrder.from_list,
    "adaptive": AdaptiveRecord.from_dict,
    "certificate": _certificate,
    "auto": AutoRecord.from_dict,
    "compute": Compute.from_dict,
    "stability": Stability.from_dict,
}
