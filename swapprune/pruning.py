"""``swapprune.prune``: choose blocks at a budget and remove or merge them, in memory.

:func:`plan_pruning` is score -> select (returns a :class:`PrunePlan` and never
edits the model); :func:`prune` also applies the plan. Everything a user can
get wrong (criterion, strategy, merge rule, budget, a strategy input the
criterion cannot provide) is checked before the first forward pass.

Selection is data in, data out: the strategy declares what it ``needs``, the
criterion what it ``provides``, and :func:`selection_inputs` builds the one
:class:`~swapprune.selection.SelectionInputs` the strategy reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from swapprune import criteria as criteria_mod
from swapprune.architectures import decoder_stack
from swapprune.calibration import Calibration, load_calibration
from swapprune.errors import SwappruneError, unknown_name
from swapprune.selection import Constraints, SelectionInputs, Strategy, get_strategy

OPS = ("remove", "merge")


@dataclass
class PruneRequest:
    """A validated pruning request (see :func:`prune` for the fields)."""

    budget: int
    protocol: str = "interchange"
    strategy: str | None = None
    op: str = "remove"
    merge: str = "average"
    protect_first: int = 0
    protect_last: int = 0
    seed: int = 0
    oracle_metric: str = "ppl"
    beam_calls: int = 400
    beam_seeds: int = 12

    def resolve(self):
        """Resolve every name (no model needed); returns ``(criterion, strategy)``."""
        crit = criteria_mod.get(self.protocol)
        strategy = get_strategy(self.strategy or crit.default_strategy)
        if hasattr(strategy, "max_calls"):
            strategy.max_calls = self.beam_calls
            strategy.seeds = self.beam_seeds
        missing = strategy.needs - crit.provides - {"oracle"}
        if missing:
            what = sorted(missing)[0]
            raise SwappruneError(
                f"strategy '{strategy.name}' needs {what.replace('_', ' ')}, which criterion "
                f"'{crit.name}' cannot provide; criteria that can: "
                f"{', '.join(criteria_mod.providers(what))}"
            )
        if self.op not in OPS:
            raise unknown_name("operation", self.op, OPS)
        if self.op == "merge":
            from swapprune.merging import get_merge

            get_merge(self.merge)
        if self.oracle_metric not in ("ppl", "kl"):
            raise unknown_name("oracle metric", self.oracle_metric, ("ppl", "kl"))
        if self.protect_first < 0 or self.protect_last < 0:
            raise SwappruneError("--protect-first/--protect-last must be >= 0")
        if self.budget <= 0:
            raise SwappruneError(f"budget must be >= 1, got {self.budget}")
        return crit, strategy

    def validate(self, num_layers: int):
        """Resolve names and check the budget; returns ``(criterion, strategy, constraints)``."""
        crit, strategy = self.resolve()
        cons = Constraints(num_layers, self.protect_first, self.protect_last)
        strategy.check(self.budget, cons)
        return crit, strategy, cons


def plan_pruning(
    model,
    tokenizer=None,
    request: PruneRequest | None = None,
    *,
    scores=None,
    calibration: Calibration | None = None,
    calib: str | None = None,
    prompts: int = 64,
    tokens: int = 128,
    positions: str = "all",
    batch_size: int = 8,
    model_id: str | None = None,
    progress: bool = True,
    **request_kwargs,
):
    """Select the blocks to remove or merge; returns ``(plan, scores)``.

    Args:
        model: causal LM (not modified).
        tokenizer: for calibration windows (unless ``calibration`` is given).
        request: a :class:`PruneRequest`, or its fields as keyword arguments.
        scores: a :class:`~swapprune.engine.scores.ScoreResult` to reuse instead of probing.
    """
    from swapprune.plan import PrunePlan

    request = request or PruneRequest(**request_kwargs)
    if request.protocol == "auto":  # measure both protocols, call the regime, act on it
        from swapprune.auto import plan_auto

        return plan_auto(
            model,
            tokenizer,
            request,
            scores=scores,
            calibration=calibration,
            calib=calib,
            prompts=prompts,
            tokens=tokens,
            positions=positions,
            batch_size=batch_size,
            model_id=model_id,
            progress=progress,
        )
    L = decoder_stack(model).num_layers
    crit, strategy, cons = request.validate(L)
    needs_scores = bool(crit.protocols) and not (
        scores is not None and all(p in scores.protocols() for p in crit.protocols)
    )
    if crit.name == "deletion" and scores is not None and not scores.deletion:
        needs_scores = True
    wants = strategy.needs | (strategy.wants & crit.provides)
    needs_oracle = crit.needs_model or bool(wants & {"oracle", "rescore", "span_scores"})
    if (needs_scores or needs_oracle) and calibration is None:
        if tokenizer is None:
            raise SwappruneError("pruning needs a tokenizer or calibration windows")
        calibration = load_calibration(tokenizer, calib, prompts, tokens, request.seed)
    if needs_scores:
        from swapprune.engine.scoring import score

        pairs = "adjacent" if set(crit.protocols) & {"replacement", "interchange"} else []
        scores = score(
            model,
            calibration=calibration,
            protocols=crit.protocols,
            pairs=pairs,
            positions=positions,
            batch_size=batch_size,
            model_id=model_id,
            progress=progress,
            seed=request.seed,
        )
    oracle = None
    if needs_oracle:
        from swapprune.engine.oracle import CalibrationOracle

        assert calibration is not None  # loaded above when an oracle is needed
        oracle = CalibrationOracle(model, calibration.input_ids, batch_size, request.oracle_metric)
    ctx = criteria_mod.Context(num_layers=L, scores=scores, oracle=oracle, seed=request.seed)
    importance = crit.importance(ctx)
    tiebreak = _tiebreak(
        crit,
        importance,
        cons,
        model,
        oracle,
        calibration,
        tokenizer,
        request,
        calib,
        prompts,
        tokens,
        batch_size,
    )
    inputs = selection_inputs(crit, strategy, ctx, importance, request.budget, cons, tiebreak)
    sel = strategy.choose(inputs)
    chosen = sel.removed
    meta = dict(
        budget=request.budget,
        protocol=crit.name,
        strategy=request.strategy or crit.default_strategy,
        model=model_id or "",
        scores={"importance": [_num(x) for x in importance]},
    )
    if tiebreak is not None:
        meta["scores"]["tiebreak"] = {
            "rule": "smaller mean residual update ||h_out - h_in|| first",
            "values": [_num(x) for x in tiebreak],
        }
    if sel.order is not None and strategy.name == "iterative":
        meta["scores"]["order"] = sel.order
    if sel.notes:
        meta["scores"]["selection"] = sel.notes
    if oracle is not None:
        meta["scores"]["oracle_calls"] = oracle.calls
        meta["scores"]["oracle_metric"] = oracle.metric
    if sel.oracle_calls is not None:
        meta["scores"]["strategy_oracle_calls"] = sel.oracle_calls
    if request.op == "remove":
        plan = PrunePlan.from_removal(L, chosen, **meta)
    else:
        merges: dict[int, list[int]] = {}
        for b in chosen:
            partner = crit.partner(ctx, b)
            if partner in chosen:
                raise SwappruneError(
                    f"blocks {b} and {partner} are both selected; cannot merge into each other"
                )
            merges.setdefault(partner, [partner]).append(b)
        plan = PrunePlan.from_merges(L, merges, merge=request.merge, **meta)
    return plan, scores


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


def _tiebreak(
    crit,
    importance,
    cons,
    model,
    oracle,
    calibration,
    tokenizer,
    request,
    calib,
    prompts,
    tokens,
    batch_size,
):
    """The weaker-contributor key (``||g_l||``), measured only when there is a tie to break."""
    if crit.tiebreak != "residual" or not has_ties(importance, cons):
        return None
    if oracle is not None:
        return oracle.residual_norms()
    if calibration is None:
        if tokenizer is None:
            return None  # scores alone, no text: ties stay with the lower index
        calibration = load_calibration(tokenizer, calib, prompts, tokens, request.seed)
    from swapprune.engine.oracle import residual_norms

    return residual_norms(model, calibration.input_ids, batch_size)


def _num(x) -> float | None:
    x = float(x)
    return None if not np.isfinite(x) else x


def prune(model, tokenizer=None, budget: int = 1, protocol: str = "interchange", **kwargs):
    """Prune an in-memory model; returns ``(pruned_model, plan)``.

    The model is edited in place (blocks removed or merged, config updated,
    ``layer_idx`` renumbered). Keyword arguments are those of
    :class:`PruneRequest` and :func:`plan_pruning`.

    Example:
        >>> model, plan = swapprune.prune(model, tok, budget=4, protocol="interchange")
    """
    from swapprune.surgery import apply_plan

    req_fields = set(PruneRequest.__dataclass_fields__)
    request = PruneRequest(
        budget=budget,
        protocol=protocol,
        **{k: kwargs.pop(k) for k in list(kwargs) if k in req_fields},
    )
    plan, _ = plan_pruning(model, tokenizer, request, **kwargs)
    apply_plan(model, plan)
    return model, plan
