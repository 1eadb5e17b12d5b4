"""Selection: which blocks to remove or merge, and how much the choice can be trusted.

:func:`select` is the one entry point. The CLI, recipes, ``swapprune.prune``,
``compare`` and the llm-compressor modifier all build a
:class:`~swapprune.select.spec.SelectionSpec` from the same configuration and
call it. Below it, in the order data flows:

* :mod:`~swapprune.select.criteria`: per-block importance (lower = more removable);
* :mod:`~swapprune.select.strategies` and :mod:`~swapprune.select.search`: importance
  -> a removal set (pure; model queries arrive as callables);
* :mod:`~swapprune.select.core`: the fixed selection (probe, rank, choose);
* :mod:`~swapprune.select.stability`, :mod:`~swapprune.select.adaptive`,
  :mod:`~swapprune.select.regime`: the bootstrap of a selection, probing in
  tranches, the paper's regime call;
* :mod:`~swapprune.select.auto`: the ``auto`` policy, which drives the others.

Nothing below :func:`select` imports :mod:`~swapprune.select.auto`. Importing this
package registers every criterion and strategy (it imports the modules that
define them); it imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swapprune.records import BlockWork, CertificateSkipped, Compute
from swapprune.select import (  # noqa: F401 (criteria, exhaustive, search, strategies: they register)
    adaptive,
    core,
    criteria,
    exhaustive,
    search,
    strategies,
)
from swapprune.select.auto import select_auto
from swapprune.select.certificate import spending_quantile
from swapprune.select.reference import certified_plan, reconcile_stop

if TYPE_CHECKING:
    from swapprune.plan import PrunePlan
    from swapprune.select.spec import SelectionSpec


def select(
    model,
    spec: SelectionSpec,
    calibration=None,
    scores=None,
    *,
    heldout=None,
    model_id: str = "",
    progress: bool = True,
) -> tuple[PrunePlan, Any]:
    """Choose the blocks ``spec`` asks for; returns ``(plan, scores)``. Never edits ``model``.

    Args:
        model: causal LM.
        spec: the checked request (:func:`swapprune.select.spec.build`).
        calibration: the windows to probe and query on (for the ``adaptive`` and
            ``auto`` policies with tranches: the whole pool).
        scores: probe scores to reuse (``--scores``, a ``score`` stage, ``compare``'s
            shared probes); no tranches are then probed.
        heldout: :class:`~swapprune.select.reference.Heldout` windows, disjoint from
            ``calibration``: the cut is certified on them (``spec.certify``), tranches
            stop on the certificate, and ``auto`` verifies on them.
        model_id: recorded in the plan and the scores.
        progress: progress bars while probing.

    Returns:
        The plan, with ``plan.records.certificate`` (when certified) and
        ``plan.records.compute`` (block evaluations by kind), and the scores.
    """
    given = scores
    if spec.policy == "auto":
        plan, scores = select_auto(
            model,
            spec,
            calibration,
            scores,
            heldout=heldout,
            model_id=model_id,
            progress=progress,
        )
    else:
        record, quantile, tiebreak = None, None, None
        if spec.policy == "adaptive" and scores is None:
            result = adaptive.adaptive_score(
                model, spec, calibration, model_id=model_id, heldout=heldout, progress=progress
            )
            scores, record, tiebreak = result.scores, result.record(), result.tiebreak
            meta = scores.meta["adaptive"]
            if meta["stop_rule"] == "certificate":
                quantile = spending_quantile(meta["looks"])
        plan, scores = core.select_fixed(
            model,
            spec,
            calibration,
            scores,
            model_id=model_id,
            progress=progress,
            tiebreak=tiebreak,
        )
        plan.records.adaptive = record
        if spec.certify and heldout is not None:
            plan = certified_plan(
                model, spec, plan, scores, heldout, quantile=quantile, calibration=calibration
            )
            reconcile_stop(plan.records.adaptive, plan.records.certificate)
    if spec.certify and heldout is None:
        plan.records.certificate = CertificateSkipped("no held-out windows")
    plan.records.compute = compute_record(plan, scores if given is None else None, heldout)
    return plan, scores


def compute_record(plan, probed, heldout) -> Compute:
    """Block evaluations and block-tokens the selection spent, by kind."""
    timing = (probed.meta.get("timing") or {}) if probed is not None else {}
    zero = {"block_evals": 0, "block_tokens": 0}

    def held(which: str) -> BlockWork:
        return BlockWork.from_dict(heldout.compute(which) if heldout is not None else zero)

    return Compute(
        probes=BlockWork(int(timing.get("block_evals", 0)), int(timing.get("block_tokens", 0))),
        tiebreak=BlockWork.from_dict(plan.scores.get("tiebreak_compute", zero)),
        oracle=BlockWork.from_dict(plan.scores.get("oracle_compute", zero)),
        verify=held("verify"),
        certificate=held("certify"),
        reference=held("reference"),
    )
