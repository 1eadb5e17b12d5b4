"""``--protocol auto``: measure both swap protocols, call the regime, act on it.

The paper's decision rule (:mod:`swapprune.select.regime`) turned into an action:

=============  ==============================================================
regime         action
=============  ==============================================================
divergent      interchange-guided selection (the criterion's own strategy)
tie-like       either protocol: interchange-guided, and the record says the
               regime is tie-like and whether the two protocols' selections agree
both-high      swap scores alone are weak: shortlist the most removable blocks
               of *both* protocols and search them with a beam scored by the
               perplexity of the pruned model on held-out windows (never the
               scoring windows), with a cap on oracle calls; the beam's set
               then challenges interchange's choice in the certificate, on
               other held-out windows, and replaces it only when it is better
               with a paired CI that excludes 0
=============  ==============================================================

Default shortlist: the ``max(SHORTLIST, budget + 2)`` most removable blocks of
each protocol, merged. Two controls (``SelectConfig.auto_shortlist``) run the same
beam, cap and held-out windows over another shortlist of the same size, so that
a study can tell what the swap probes contribute to the both-high action: ``bi``,
the blocks with the lowest Block Influence on the calibration windows (ShortGPT's
ranking), and ``random``, a draw seeded by the calibration seed from the
middle half of the stack (blocks ``L/4 .. 3L/4``, where every criterion's
shortlist tends to fall), widened to all candidates if that is too few. If the
beam over a control does as well as the beam over the swap shortlist, the
verification, not the probes, is doing the work. Default cap on oracle calls: half of what SLEB-iterative
spends at the same budget (``n C - n (n - 1) / 2`` calls for ``C`` candidate
blocks), so the verified selection stays cheaper than the baseline it has to
beat. The beam allows adjacent removals (the oracle judges the joint set).

Everything the decision rests on goes into ``plan.records.auto`` (an
:class:`~swapprune.records.AutoRecord`; from there into ``plan.json`` and the
model card): the regime and its numbers, the action, both selections and their
bootstrap stability, the shortlist, and the oracle calls spent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from swapprune.engine.orders import PAIR_PROBES
from swapprune.errors import SwappruneError
from swapprune.plan import PrunePlan
from swapprune.records import AutoRecord, AutoSearch
from swapprune.select import adaptive, core
from swapprune.select import criteria as criteria_mod
from swapprune.select.certificate import plausible_sets, spending_quantile
from swapprune.select.constraints import Constraints
from swapprune.select.reference import (
    bi_choice,
    eligible,
    pooled_counts,
    reconcile_stop,
    reference_certificate,
)
from swapprune.select.regime import regime_of
from swapprune.select.search import beam_over
from swapprune.select.spec import AUTO
from swapprune.select.stability import plan_stability

if TYPE_CHECKING:
    from swapprune.select.spec import SelectionSpec

# engine/ imports torch: it is imported where the model is probed or queried, so that
# selecting on given scores imports no torch.

SHORTLIST = 6
WIDTH = 3
ACTIONS = {
    "divergent": "interchange-guided selection",
    "tie-like": "either protocol (tie-like regime): interchange-guided selection",
    "both-high": "verify on the pruned model: beam over the shortlist of both protocols",
}


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


def select_auto(
    model,
    spec: SelectionSpec,
    calibration=None,
    scores=None,
    *,
    heldout=None,
    model_id: str = "",
    progress: bool = True,
    shortlist_size: int | None = None,
    width: int = WIDTH,
    max_calls: int | None = None,
):
    """Select with ``--protocol auto``; returns ``(plan, scores)``.

    Args:
        model: the model (never modified).
        spec: the checked request (``policy == "auto"``); with ``spec.adaptive`` both
            protocols are probed in tranches of ``calibration`` (the pool), stopping on
            the certificate when ``heldout`` windows are given.
        calibration: windows to probe on.
        scores: scores with both swap protocols to reuse instead of probing.
        heldout: :class:`~swapprune.select.reference.Heldout`: the both-high beam searches
            on its ``verify`` windows, and the cut is certified on its ``certify``
            windows with interchange's choice as the incumbent. Never the scoring
            windows. ``None``: no verification (interchange-guided, and the record says so).
        shortlist_size, width, max_calls: the both-high verification (defaults: see
            the module docstring; ``spec.max_oracle_calls`` caps it too).

    Returns:
        The plan (``plan.records.auto`` holds the decision record) and the scores.
    """
    needs = PAIR_PROBES
    if scores is not None and not all(p in scores.protocols() for p in needs):
        raise SwappruneError("--protocol auto needs scores with replacement and interchange")
    if width < 1 or (max_calls is not None and max_calls < 1):
        raise SwappruneError("auto verification needs width >= 1 and max_calls >= 1")
    if calibration is None and scores is None:
        raise SwappruneError("--protocol auto needs calibration windows or scores")
    adaptive_record, quantile = None, None
    if scores is None:
        if spec.adaptive is not None:
            crits = [criteria_mod.get(p) for p in criteria_mod.SWAP]
            res = adaptive.adaptive_score(
                model, spec, calibration, crits, model_id, heldout, progress
            )
            scores, adaptive_record = res.scores, res.record(stability=False)
            if scores.meta["adaptive"]["stop_rule"] == "certificate":
                quantile = spending_quantile(scores.meta["adaptive"]["looks"])
        else:
            from swapprune.engine.probing import score  # imports torch

            scores = score(
                model,
                calibration=calibration,
                protocols=needs,
                pairs="adjacent",
                positions=spec.positions,
                batch_size=spec.batch_size,
                model_id=model_id,
                progress=progress,
                seed=spec.seed,
            )
    reg = regime_of(scores, n_boot=spec.n_boot, seed=spec.seed)
    if reg is None:
        raise SwappruneError("--protocol auto needs adjacent pairs scored with both protocols")
    plans = {}
    for proto in needs:
        plans[proto], _ = core.select_fixed(
            model,
            spec.for_criterion(proto),
            calibration,
            scores,
            model_id=model_id,
            progress=progress,
        )
    cons = spec.constraints
    stab = {p: plan_stability(plans[p], scores, cons, spec.n_boot, spec.seed) for p in needs}
    selections = {p: list(plans[p].removed) for p in needs}
    action, calls, search = ACTIONS[reg["call"]], 0, None
    plan = plans["interchange"]
    verified: list[list[int]] = []
    if reg["call"] == "both-high":
        if heldout is None or heldout.verify is None:
            action += " (not run: no held-out windows to verify on)"
        else:
            search, calls = _verify(
                model, spec, scores, heldout, shortlist_size, width, max_calls, calibration
            )
            verified = [search.verified]
    if spec.certify and heldout is not None:
        plan = _certified(
            model, spec, plan, stab, selections, verified, heldout, quantile, calibration
        )
    if adaptive_record is not None:
        reconcile_stop(adaptive_record, plan.records.certificate)
    plan.protocol = AUTO
    if verified:
        plan.strategy = f"auto-verify:beam:{width}"
    plan.records.auto = AutoRecord(
        regime=reg,
        action=action,
        selections=selections,
        agree=selections["interchange"] == selections["replacement"],
        stability={p: s for p, s in stab.items() if s is not None},
        oracle_calls=calls,
        windows=scores.num_windows(),
        adaptive=adaptive_record,
        chosen=list(plan.removed),
        search=search,
    )
    return plan, scores


def _certified(model, spec, plan, stab, selections, verified, heldout, quantile, calibration):
    """Interchange's choice, certified against the whole reference, which ``auto`` may switch to.

    ``A`` is both protocols' plausible sets (their bootstraps pooled); the independent
    alternatives are the beam's set, replacement's choice, Block Influence's set and the
    landscape's top sets; the kept set's neighbours join them.
    """
    counts = pooled_counts({p: s for p, s in stab.items() if s is not None})
    own, _ = plausible_sets(
        plan.removed, counts, spec.certify_floor, spec.certify_sets, eligible=eligible(spec)
    )
    independents: dict[tuple[int, ...], str] = {}
    for s in verified:
        independents[tuple(sorted(s))] = "beam"
    independents.setdefault(tuple(sorted(selections["replacement"])), "other protocol")
    bi = bi_choice(model, spec, calibration, heldout)
    if bi is not None:
        independents.setdefault(bi, "bi")
    for s in spec.landscape:
        independents.setdefault(tuple(sorted(s)), "landscape")
    cert = reference_certificate(
        model, spec, heldout, plan.removed, own, independents,
        counts=counts or None, switch_to="reference", quantile=quantile,
    )  # fmt: skip
    cert.extra["compute"] = heldout.compute("certify")
    cert.extra["reference_compute"] = heldout.compute("reference")
    if heldout.patch is not None:  # every set was measured after its own patch
        cert.extra["patched"] = heldout.patch_record()
    if cert.switched:
        plan = PrunePlan.from_removal(
            plan.num_layers,
            cert.kept,
            budget=plan.budget,
            protocol=AUTO,
            strategy=plan.strategy,
            model=plan.model,
            scores=dict(plan.scores),
            records=plan.records.copy(),
        )
    plan.records.certificate = cert
    return plan


def _verify(
    model, spec, scores, heldout, shortlist_size, width, max_calls, calibration=None
) -> tuple[AutoSearch, int]:
    """The both-high search: a beam over a shortlist (the swap one, or a control), held out.

    Returns the search's record and the oracle calls it spent.
    """
    cons = spec.constraints
    short = _shortlist(model, spec, scores, shortlist_size, calibration)
    cap = max_calls or min(default_cap(spec.budget, cons), spec.max_oracle_calls)
    oracle = heldout.oracle(model, "verify", spec.batch_size)
    chosen, notes = beam_over(short, spec.budget, oracle.cost, width, cap)
    base = oracle.cost([])
    search = AutoSearch(
        shortlist=sorted(short),
        shortlist_source=spec.auto_shortlist,
        verified=chosen,
        oracle_metric="ppl",
        beam=notes,
        base_cost=base,
        sleb_iterative_calls=sleb_calls(spec.budget, len(cons.candidates())),
        oracle_windows=list(heldout.verify.input_ids.shape),
    )
    return search, oracle.calls


def _shortlist(model, spec, scores, size, calibration) -> list[int]:
    """The beam's candidates, most removable first (the order completes a capped beam)."""
    cons = spec.constraints
    ctx = criteria_mod.Context(num_layers=cons.num_layers, scores=scores, seed=spec.seed)
    imps = [criteria_mod.get(p).importance(ctx) for p in criteria_mod.SWAP]
    short = shortlist(imps, spec.budget, cons, size)
    candidates = cons.candidates()

    def ranked(imp) -> list[int]:
        return sorted(candidates, key=lambda c: (float(imp[c]), c))

    if spec.auto_shortlist == "bi":
        if calibration is None:
            raise SwappruneError("auto_shortlist bi needs the calibration windows")
        from swapprune.engine.oracle import CalibrationOracle  # imports torch

        ctx.oracle = CalibrationOracle(model, calibration.input_ids, spec.batch_size)
        return ranked(criteria_mod.get("bi").importance(ctx))[: len(short)]
    if spec.auto_shortlist == "random":
        return random_midstack(candidates, cons.num_layers, len(short), spec.seed)
    # by the better of the two protocols' ranks
    orders = [ranked(imp) for imp in imps]
    rank = {b: min(o.index(b) for o in orders) for b in short}
    return sorted(short, key=lambda b: (rank[b], b))


def random_midstack(candidates: Sequence[int], num_layers: int, size: int, seed: int) -> list[int]:
    """``size`` candidates drawn (seeded) from blocks ``L/4 .. 3L/4``, or from all if too few."""
    mid = [b for b in candidates if num_layers / 4 <= b < 3 * num_layers / 4]
    pool = mid if len(mid) >= size else list(candidates)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 29]))
    return [int(b) for b in rng.permutation(pool)[:size]]
