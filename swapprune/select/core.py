"""The fixed selection: probe (or reuse scores), rank by the criterion, choose by the strategy.

:func:`select_fixed` never edits the model and never decides policy (tranches
of windows, ``auto``): :func:`swapprune.select.select` does, above it. Selection
is data in, data out: the strategy declares what it ``needs``, the criterion
what it ``provides``, and :func:`selection_inputs` builds the one
:class:`~swapprune.select.strategies.SelectionInputs` the strategy reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from swapprune.errors import SwappruneError
from swapprune.plan import PrunePlan
from swapprune.records import PlanRecords, RemovalOrder
from swapprune.select import criteria as criteria_mod
from swapprune.select.constraints import Constraints, enforce
from swapprune.select.constraints import record as serve_record
from swapprune.select.spec import SelectionSpec
from swapprune.select.strategies import SelectionInputs, Strategy

# engine/ imports torch: it is imported where the model is probed or queried, so that
# selecting on given scores imports no torch.

TIEBREAK_RULE = "smaller mean residual update ||h_out - h_in|| first"


def needs_probes(spec: SelectionSpec, scores) -> bool:
    """Whether ``scores`` lack a probe the criterion reads."""
    crit = spec.criterion
    if not crit.probes:
        return False
    if scores is None or not all(p in scores.protocols() for p in crit.probes):
        return True
    return crit.name == "deletion" and not scores.deletion


def probe(model, spec: SelectionSpec, calibration, *, model_id: str = "", progress: bool = True):
    """Probe what ``spec``'s criterion reads, on ``calibration`` (adjacent pairs for swaps)."""
    from swapprune.engine.probing import score  # imports torch

    probes = spec.criterion.probes
    pairs = "adjacent" if set(probes) & {"replacement", "interchange"} else []
    return score(
        model,
        calibration=calibration,
        protocols=probes,
        pairs=pairs,
        positions=spec.positions,
        batch_size=spec.batch_size,
        model_id=model_id,
        progress=progress,
        seed=spec.seed,
    )


def select_fixed(
    model,
    spec: SelectionSpec,
    calibration=None,
    scores=None,
    *,
    model_id: str = "",
    progress: bool = True,
    tiebreak=None,
) -> tuple[PrunePlan, Any]:
    """The plan of ``spec``'s criterion and strategy; returns ``(plan, scores)``.

    Args:
        model: causal LM (not modified).
        spec: the checked request.
        calibration: windows (:class:`~swapprune.calibration.windows.Calibration`), needed
            when probes are missing, the criterion or strategy queries the model, or
            equal importances need the residual tie-break.
        scores: probe scores to reuse; probed on ``calibration`` when they lack a probe.
        tiebreak: ``[L]`` residual norms measured already (adaptive calibration's), used
            instead of measuring them on ``calibration``.
    """
    crit, strategy, cons = spec.criterion, spec.strategy, spec.constraints
    wants = strategy.needs | (strategy.wants & crit.provides)
    needs_oracle = crit.needs_model or bool(wants & {"oracle", "rescore", "span_scores"})
    if needs_probes(spec, scores):
        if calibration is None:
            raise SwappruneError(f"criterion '{crit.name}' needs probe scores or windows")
        scores = probe(model, spec, calibration, model_id=model_id, progress=progress)
    oracle = None
    if needs_oracle:
        if calibration is None:
            raise SwappruneError(f"selection by '{crit.name}' needs calibration windows")
        from swapprune.engine.oracle import CalibrationOracle  # imports torch

        oracle = CalibrationOracle(
            model, calibration.input_ids, spec.batch_size, spec.oracle_metric
        )
    ctx = criteria_mod.Context(
        num_layers=cons.num_layers, scores=scores, oracle=oracle, seed=spec.seed
    )
    importance = crit.importance(ctx)
    given = tiebreak is not None
    if not given:
        tiebreak = _tiebreak(crit, importance, cons, model, oracle, calibration, spec.batch_size)
    elif crit.tiebreak != "residual":
        tiebreak = None
    inputs = selection_inputs(crit, strategy, ctx, importance, spec.budget, cons, tiebreak)
    choice = strategy.choose(inputs)
    removed = list(choice.removed)
    record: dict[str, Any] = {"importance": [_num(x) for x in importance]}
    records = PlanRecords()
    if cons.serve is not None:  # the in-phase constraint overrides the strategy's own rule
        removed = enforce(cons, choice.removed, importance, tiebreak)
        records.serve = serve_record(cons, choice.removed, removed, importance)
    if tiebreak is not None:
        record["tiebreak"] = {"rule": TIEBREAK_RULE, "values": [_num(x) for x in tiebreak]}
    if choice.order is not None and strategy.name == "iterative":
        records.order = RemovalOrder(choice.order)
    if choice.notes:
        record["selection"] = choice.notes
    if oracle is not None:
        record["oracle_calls"] = oracle.calls
        record["oracle_metric"] = oracle.metric
        record["oracle_compute"] = oracle.compute()
    if tiebreak is not None and not given and oracle is None and calibration is not None:
        n, t = calibration.input_ids.shape  # one base pass over the windows
        record["tiebreak_compute"] = {
            "block_evals": cons.num_layers * -(-n // spec.batch_size),
            "block_tokens": cons.num_layers * n * t,
        }
    if choice.oracle_calls is not None:
        record["strategy_oracle_calls"] = choice.oracle_calls
    meta = dict(
        budget=spec.budget,
        protocol=spec.name,
        strategy=spec.strategy_name,
        model=model_id or "",
        scores=record,
        records=records,
    )
    if spec.op == "remove":
        return PrunePlan.from_removal(cons.num_layers, removed, **meta), scores
    merges: dict[int, list[int]] = {}
    for b in removed:
        partner = crit.partner(ctx, b)
        if partner in removed:
            raise SwappruneError(
                f"blocks {b} and {partner} are both selected; cannot merge into each other"
            )
        merges.setdefault(partner, [partner]).append(b)
    assert spec.merge is not None  # the spec names a rule for op merge
    return PrunePlan.from_merges(cons.num_layers, merges, merge=spec.merge, **meta), scores


def selection_inputs(
    crit, strategy: Strategy, ctx, importance, budget: int, cons: Constraints, tiebreak=None
) -> SelectionInputs:
    """The one place that turns a strategy's declared ``needs``/``wants`` into its inputs."""
    want = strategy.needs | strategy.wants
    oracle = ctx.oracle
    return SelectionInputs(
        importance=importance,
        budget=budget,
        constraints=cons,
        tiebreak=tiebreak,
        oracle=oracle.cost if "oracle" in want and oracle is not None else None,
        rescore=(
            (lambda removed: crit.rescore(ctx, removed))
            if "rescore" in want and "rescore" in crit.provides
            else None
        ),
        span_scores=(
            (lambda n: crit.span_scores(ctx, n))
            if "span_scores" in want and "span_scores" in crit.provides and oracle is not None
            else None
        ),
        pair_table=crit.pair_table(ctx) if "pair_table" in want else None,
    )


def has_ties(importance, cons: Constraints) -> bool:
    """True when two removable blocks share an importance value."""
    vals = [float(importance[b]) for b in cons.candidates() if np.isfinite(importance[b])]
    return len(set(vals)) < len(vals)


def _tiebreak(crit, importance, cons, model, oracle, calibration, batch_size):
    """The weaker-contributor key (``||g_l||``), measured only when there is a tie to break."""
    if crit.tiebreak != "residual" or not has_ties(importance, cons):
        return None
    if oracle is not None:
        return oracle.residual_norms()
    if calibration is None:
        return None  # scores alone, no windows: ties stay with the lower index
    from swapprune.engine.oracle import residual_norms  # imports torch

    return residual_norms(model, calibration.input_ids, batch_size)


def _num(x) -> float | None:
    x = float(x)
    return None if not np.isfinite(x) else x
