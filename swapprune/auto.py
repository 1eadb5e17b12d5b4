"""``--protocol auto``: measure both swap protocols, call the regime, act on it.

The paper's decision rule (:mod:`swapprune.regime`) turned into an action:

=============  ==============================================================
regime         action
=============  ==============================================================
divergent      interchange-guided selection (the criterion's own strategy)
tie-like       either protocol: interchange-guided, and the record says they
               tie and whether the two protocols' selections agree
both-high      swap scores alone are weak: shortlist the most removable blocks
               of *both* protocols, then verify on the pruned model itself with
               a beam over the shortlist, scored by calibration perplexity (or
               KL) of the actual pruned model, with a cap on oracle calls
=============  ==============================================================

Default shortlist: the ``max(SHORTLIST, budget + 2)`` most removable blocks of
each protocol, merged. Default cap on oracle calls: half of what SLEB-iterative
spends at the same budget (``n C - n (n - 1) / 2`` calls for ``C`` candidate
blocks), so the verified selection stays cheaper than the baseline it has to
beat. The beam allows adjacent removals (the oracle judges the joint set).

Everything the decision rests on goes into ``plan.scores["auto"]`` (and from
there into ``plan.json`` and the model card): the regime and its numbers, the
action, both selections and their bootstrap stability, the shortlist, and the
oracle calls spent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from swapprune import criteria as criteria_mod
from swapprune.errors import SwappruneError
from swapprune.regime import regime_of, summary_line
from swapprune.selection import Constraints

SHORTLIST = 6
WIDTH = 3
ACTIONS = {
    "divergent": "interchange-guided selection",
    "tie-like": "either protocol (they tie): interchange-guided selection",
    "both-high": "verify on the pruned model: beam over the shortlist of both protocols",
}


class Auto(criteria_mod.Criterion):
    """Name-registry entry for ``auto``; the selection itself is :func:`plan_auto`."""

    name = "auto"
    source = "the paper's decision rule (Garcia 2026, section 4), acted on"
    what = (
        "both swap protocols scored, regime called; interchange-guided, or a beam over "
        "both protocols' shortlist verified on the pruned model when both are high"
    )
    protocols = ("replacement", "interchange")
    tiebreak = "residual"

    def importance(self, ctx):
        """Interchange removability: what auto ranks by before any verification."""
        return criteria_mod.get("interchange").importance(ctx)


criteria_mod.CRITERIA.register("auto")(Auto())


def sleb_calls(budget: int, candidates: int) -> int:
    """Oracle calls SLEB-iterative makes: every remaining candidate, once per removal."""
    return budget * candidates - budget * (budget - 1) // 2


def default_cap(budget: int, cons: Constraints) -> int:
    return max(1, sleb_calls(budget, len(cons.candidates())) // 2)


def shortlist(
    importances: Sequence[np.ndarray], budget: int, cons: Constraints, size: int | None = None
) -> list[int]:
    """The ``size`` most removable candidates of each importance vector, merged (sorted)."""
    k = size or max(SHORTLIST, budget + 2)
    out: set[int] = set()
    for imp in importances:
        out |= set(sorted(cons.candidates(), key=lambda b: (float(imp[b]), b))[:k])
    return sorted(out)


def beam_over(
    candidates: Sequence[int],
    budget: int,
    cost: Callable[[tuple[int, ...]], float],
    width: int = WIDTH,
    max_calls: int = 100,
) -> tuple[list[int], dict]:
    """Beam search over removal sets drawn from ``candidates``, scored by ``cost``.

    Step 1 scores each candidate alone; every later step extends each of the
    ``width`` cheapest sets by every other candidate. Each set is scored once.
    When ``max_calls`` is reached the best set so far is completed by the order
    of ``candidates`` (most removable first) and the notes say so.

    Returns:
        The sorted removal set and ``{"calls", "capped", "cost", "width", "cap"}``.
    """
    if budget > len(candidates):
        raise SwappruneError(
            f"shortlist of {len(candidates)} blocks is smaller than the budget {budget}; widen it"
        )
    seen: dict[tuple[int, ...], float] = {}
    capped = False
    beams: list[tuple[float, tuple[int, ...]]] = [(0.0, ())]
    for _ in range(budget):
        step: dict[tuple[int, ...], float] = {}
        for _, removed in beams:
            for b in candidates:
                key = tuple(sorted(removed + (b,)))
                if b in removed or key in step:
                    continue
                if key not in seen:
                    if len(seen) >= max_calls:
                        capped = True
                        continue
                    seen[key] = float(cost(key))
                step[key] = seen[key]
        if not step:
            break
        beams = sorted((c, k) for k, c in step.items())[:width]
    best_cost: float | None
    best_cost, best = beams[0]
    notes: dict[str, Any] = {"calls": len(seen), "capped": capped, "width": width, "cap": max_calls}
    if len(best) < budget:
        fill = [b for b in candidates if b not in best][: budget - len(best)]
        notes["completed_by_order"] = fill
        best = tuple(sorted(best + tuple(fill)))
        best_cost = None
    notes["cost"] = best_cost
    return sorted(best), notes


def plan_auto(
    model,
    tokenizer=None,
    request=None,
    *,
    scores=None,
    calibration=None,
    calib: str | None = None,
    prompts: int = 64,
    tokens: int = 128,
    positions: str = "all",
    batch_size: int = 8,
    model_id: str | None = None,
    progress: bool = True,
    adaptive=None,
    shortlist_size: int | None = None,
    width: int = WIDTH,
    max_calls: int | None = None,
    n_boot: int = 1000,
):
    """Select with ``--protocol auto``; returns ``(plan, scores)`` like ``plan_pruning``.

    Args:
        model, tokenizer: the model (never modified) and its tokenizer.
        request: a :class:`~swapprune.pruning.PruneRequest` (``protocol`` is ignored;
            ``budget``, ``strategy``, ``protect_*``, ``oracle_metric``, ``seed`` are used).
        scores: scores with both swap protocols to reuse instead of probing.
        calibration, calib, prompts, tokens, positions, batch_size: as in ``plan_pruning``.
        adaptive: :class:`~swapprune.adaptive.AdaptiveSettings` to score adaptively
            (``prompts`` is then ignored); ``None``: a fixed ``prompts x tokens`` run.
        shortlist_size, width, max_calls: the both-high verification (defaults: see
            the module docstring; ``request.beam_calls`` caps it too).
        n_boot: bootstrap resamples for the regime confidence and the stability.

    Returns:
        The plan (``plan.scores["auto"]`` holds the decision record) and the scores.
    """
    from swapprune.architectures import decoder_stack
    from swapprune.calibration import load_calibration
    from swapprune.pruning import PruneRequest, plan_pruning
    from swapprune.stability import plan_stability

    request = dataclasses.replace(request or PruneRequest(budget=1), protocol="interchange")
    L = decoder_stack(model).num_layers
    _, strategy, cons = request.validate(L)  # names and budget, before any forward pass
    if request.op != "remove":
        raise SwappruneError("--protocol auto removes blocks; it does not merge")
    needs = ("replacement", "interchange")
    if scores is not None and not all(p in scores.protocols() for p in needs):
        raise SwappruneError("--protocol auto needs scores with replacement and interchange")
    if width < 1 or (max_calls is not None and max_calls < 1):
        raise SwappruneError("auto verification needs width >= 1 and max_calls >= 1")
    if adaptive is not None:
        adaptive.check()
    adaptive_record = None
    if scores is None:
        if adaptive is not None:
            from swapprune.adaptive import adaptive_score

            res = adaptive_score(
                model,
                tokenizer,
                criteria=needs,
                strategy=request.strategy,
                budget=request.budget,
                constraints=cons,
                settings=adaptive,
                calibration=calibration,
                calib=calib,
                tokens=tokens,
                positions=positions,
                batch_size=batch_size,
                model_id=model_id,
            )
            scores, adaptive_record = res.scores, res.to_dict()
            adaptive_record.pop("stability")
        else:
            if calibration is None:
                if tokenizer is None:
                    raise SwappruneError("pruning needs a tokenizer or calibration windows")
                calibration = load_calibration(tokenizer, calib, prompts, tokens, request.seed)
            from swapprune.engine.scoring import score

            scores = score(
                model,
                calibration=calibration,
                protocols=needs,
                pairs="adjacent",
                positions=positions,
                batch_size=batch_size,
                model_id=model_id,
                progress=progress,
                seed=request.seed,
            )
    reg = regime_of(scores, n_boot=n_boot, seed=request.seed)
    if reg is None:
        raise SwappruneError("--protocol auto needs adjacent pairs scored with both protocols")
    plans = {}
    for proto in needs:
        plans[proto], _ = plan_pruning(
            model,
            tokenizer,
            dataclasses.replace(request, protocol=proto),
            scores=scores,
            calibration=calibration,
            calib=calib,
            prompts=prompts,
            tokens=tokens,
            batch_size=batch_size,
            model_id=model_id,
            progress=progress,
        )
    stab = {p: plan_stability(plans[p], scores, cons, n_boot, request.seed) for p in needs}
    selections = {p: list(plans[p].removed) for p in needs}
    decision: dict = {
        "regime": reg,
        "action": ACTIONS[reg["call"]],
        "selections": selections,
        "agree": selections["interchange"] == selections["replacement"],
        "stability": {p: s.to_dict() for p, s in stab.items() if s is not None},
        "oracle_calls": 0,
        "windows": scores.num_windows(),
        "adaptive": adaptive_record,
    }
    if reg["call"] != "both-high":
        plan = plans["interchange"]
    else:
        plan = _verify(
            model,
            tokenizer,
            request,
            scores,
            cons,
            calibration,
            calib,
            prompts,
            tokens,
            batch_size,
            shortlist_size,
            width,
            max_calls,
            decision,
            model_id,
        )
    decision["chosen"] = list(plan.removed)
    plan.protocol = "auto"
    plan.scores["auto"] = decision
    return plan, scores


def _verify(
    model,
    tokenizer,
    request,
    scores,
    cons,
    calibration,
    calib,
    prompts,
    tokens,
    batch_size,
    shortlist_size,
    width,
    max_calls,
    decision,
    model_id,
):
    """The both-high action: a beam over both protocols' shortlist, on the pruned model."""
    from swapprune.calibration import load_calibration
    from swapprune.engine.oracle import CalibrationOracle
    from swapprune.plan import PrunePlan

    L = cons.num_layers
    ctx = criteria_mod.Context(num_layers=L, scores=scores, seed=request.seed)
    imps = [criteria_mod.get(p).importance(ctx) for p in ("interchange", "replacement")]
    short = shortlist(imps, request.budget, cons, shortlist_size)
    # most removable first (by the better of the two ranks), for completion after a cap
    rank = {
        b: min(
            sorted(cons.candidates(), key=lambda c, i=imp: (float(i[c]), c)).index(b)
            for imp in imps
        )
        for b in short
    }
    short = sorted(short, key=lambda b: (rank[b], b))
    cap = max_calls or min(default_cap(request.budget, cons), request.beam_calls)
    if calibration is None:
        if tokenizer is None:
            raise SwappruneError("auto verification needs a tokenizer or calibration windows")
        calibration = load_calibration(tokenizer, calib, prompts, tokens, request.seed)
    oracle = CalibrationOracle(model, calibration.input_ids, batch_size, request.oracle_metric)
    chosen, notes = beam_over(short, request.budget, oracle.cost, width, cap)
    base = oracle.cost([])
    decision.update(
        {
            "shortlist": sorted(short),
            "oracle_calls": oracle.calls,
            "oracle_metric": oracle.metric,
            "beam": notes,
            "base_cost": base,
            "sleb_iterative_calls": sleb_calls(request.budget, len(cons.candidates())),
            "oracle_windows": list(calibration.input_ids.shape),
        }
    )
    return PrunePlan.from_removal(
        L,
        chosen,
        budget=request.budget,
        protocol="auto",
        strategy=f"auto-verify:beam:{width}",
        model=model_id or "",
        scores={"importance": [float(x) for x in imps[0]]},
    )


def decision_lines(decision: dict) -> list[str]:
    """What the run summary prints for an ``auto`` selection."""
    lines = [summary_line(decision["regime"]), f"action: {decision['action']}"]
    sel = decision["selections"]
    if decision["regime"]["call"] == "tie-like":
        lines.append(
            f"the protocols tie: interchange {sel['interchange']}, replacement "
            f"{sel['replacement']} ({'same' if decision['agree'] else 'different'} sets)"
        )
    if decision["regime"]["call"] == "both-high":
        b = decision["beam"]
        lines.append(
            f"verified {decision['chosen']} from shortlist {decision['shortlist']} with "
            f"{decision['oracle_calls']} oracle calls (cap {b['cap']}"
            f"{', reached' if b['capped'] else ''}; SLEB-iterative would use "
            f"{decision['sleb_iterative_calls']})"
        )
    return lines
