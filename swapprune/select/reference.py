"""Certifying a cut on held-out windows: plausible sets, their NLL, the certificate.

The statistics are :mod:`swapprune.select.certificate` (pure); this module
supplies them: the plausible sets of a selection (from its bootstrap over the
scoring windows, or, for selections that cannot be resampled from kept values,
the strategy's next choices), each set's per-window NLL on the held-out windows
(one evaluation per set, remembered), and the plan that comes out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from swapprune.plan import PrunePlan
from swapprune.records import AdaptiveRecord, CertificateSkipped
from swapprune.select import criteria as criteria_mod
from swapprune.select.certificate import Certificate, certify, plausible_sets
from swapprune.select.spec import SelectionSpec


@dataclass
class Heldout:
    """Held-out windows of a selection and the evaluations made on them.

    Attributes:
        certify: windows the certificate is measured on.
        verify: windows ``auto``'s beam searches on (disjoint from ``certify``), or ``None``.
    """

    certify: Any
    verify: Any = None
    _oracles: dict = field(default_factory=dict, repr=False)

    def windows(self) -> list:
        """Every held-out window set (others, such as patch windows, keep clear of them)."""
        return [w for w in (self.certify, self.verify) if w is not None]

    def oracle(self, model, which: str, batch_size: int):
        """The :class:`~swapprune.engine.oracle.CalibrationOracle` on ``which`` windows."""
        if which not in self._oracles:
            from swapprune.engine.oracle import CalibrationOracle

            windows = self.certify if which == "certify" else self.verify
            self._oracles[which] = CalibrationOracle(model, windows.input_ids, batch_size, "ppl")
        return self._oracles[which]

    def compute(self, which: str) -> dict:
        """Block evaluations and block-tokens spent on ``which`` windows so far."""
        o = self._oracles.get(which)
        return o.compute() if o is not None else {"block_evals": 0, "block_tokens": 0}


def window_nll(oracle, removed: Sequence[int]) -> np.ndarray:
    """Summed next-token NLL per window ``[H]`` of the model without ``removed``."""
    tokens = oracle.input_ids.shape[1] - 1
    return oracle.window_costs(sorted(removed), "ppl") * tokens


def neighbours(spec: SelectionSpec, plan: PrunePlan, count: int) -> list[tuple[int, ...]]:
    """The strategy's next choices: the selection again with one chosen block ruled out.

    For selections that cannot be resampled from kept values (model-measured
    criteria, strategies that query the model), on the recorded importance; a
    strategy that queries the model is replaced by ``ranked`` here.
    """
    from swapprune.select.strategies import SelectionInputs, get_strategy

    imp = np.array([np.inf if v is None else v for v in plan.scores.get("importance", [])])
    if len(imp) != spec.num_layers:
        return []
    tb = (plan.scores.get("tiebreak") or {}).get("values")
    tiebreak = None if tb is None else np.array([np.inf if v is None else v for v in tb])
    from swapprune.select.constraints import enforce

    strategy = get_strategy("ranked") if spec.strategy.queries_model else spec.strategy
    out: list[tuple[int, ...]] = []
    for b in sorted(plan.removed, key=lambda b: -imp[b]):  # least removable first
        banned = imp.copy()
        banned[b] = np.inf
        try:
            choice = strategy.choose(
                SelectionInputs(banned, spec.budget, spec.constraints, tiebreak=tiebreak)
            )
        except Exception:  # the strategy cannot choose without that block: no neighbour
            continue
        s = tuple(enforce(spec.constraints, choice.removed, banned, tiebreak))
        if s != tuple(plan.removed) and s not in out and np.isfinite(banned[list(s)]).all():
            out.append(s)
        if len(out) >= count:
            break
    return out


def plausible(spec, plan, scores, extra: Sequence[Sequence[int]] = ()):
    """``(A, mass_outside, how)`` for ``plan``'s selection."""
    from swapprune.select.stability import plan_stability

    stab = plan_stability(plan, scores, spec.constraints, spec.n_boot, spec.seed)
    ok = eligible(spec)
    if stab is not None:
        sets, mass = plausible_sets(
            plan.removed, stab.counts, spec.certify_floor, spec.certify_sets, extra, ok
        )
        return sets, mass, "bootstrap"
    more = neighbours(spec, plan, spec.certify_sets - 1)
    sets, _ = plausible_sets(
        plan.removed, None, max_sets=spec.certify_sets, extra=[*extra, *more], eligible=ok
    )
    return sets, None, "neighbours"


def eligible(spec: SelectionSpec) -> Callable[[Sequence[int]], bool] | None:
    """Which sets may be plausible: those in phase under ``--serve`` (``None``: every set)."""
    return spec.serve.in_phase if spec.serve is not None else None


def certify_sets(
    model,
    spec: SelectionSpec,
    heldout: Heldout,
    chosen: Sequence[int],
    sets: Sequence[Sequence[int]],
    *,
    mass_outside: float | None = None,
    plausible_from: str = "bootstrap",
    quantile: float | None = None,
) -> Certificate:
    """The certificate of ``chosen`` against ``sets``, measured on the certify windows."""
    oracle = heldout.oracle(model, "certify", spec.batch_size)
    nll = {tuple(sorted(s)): window_nll(oracle, s) for s in sets}
    tokens = np.full(oracle.input_ids.shape[0], oracle.input_ids.shape[1] - 1, dtype=float)
    kw = {} if quantile is None else {"quantile": quantile}
    return certify(
        chosen,
        nll,
        window_nll(oracle, []),
        tokens,
        delta=spec.certify_delta,
        mass_outside=mass_outside,
        plausible_from=plausible_from,
        n_boot=spec.n_boot,
        seed=spec.seed,
        **kw,
    )


def certified_plan(
    model, spec, plan: PrunePlan, scores, heldout: Heldout, extra=(), quantile=None
) -> PrunePlan:
    """``plan``, or the challenger that beat it, with the certificate in ``plan.records``."""
    sets, mass, how = plausible(spec, plan, scores, extra)
    cert = certify_sets(
        model,
        spec,
        heldout,
        plan.removed,
        sets,
        mass_outside=mass,
        plausible_from=how,
        quantile=quantile,
    )
    cert.extra["compute"] = heldout.compute("certify")
    out = plan
    if cert.switched:
        out = PrunePlan.from_removal(
            plan.num_layers,
            cert.kept,
            budget=plan.budget,
            protocol=plan.protocol,
            strategy=plan.strategy,
            model=plan.model,
            scores=dict(plan.scores),
            fingerprint=plan.fingerprint,
            records=plan.records.copy(),
        )
    out.records.certificate = cert
    return out


def swap_criteria() -> list:
    """Both swap criteria, interchange first (``auto`` takes plausible sets from both)."""
    return [criteria_mod.get(p) for p in criteria_mod.SWAP]


def pooled_counts(stability: dict) -> dict:
    """The bootstrap counts of several criteria's selections, added up."""
    out: dict = {}
    for s in stability.values():
        for k, c in s.counts.items():
            out[k] = out.get(k, 0) + c
    return out


def certificate_judge(model, spec: SelectionSpec, heldout, crits: Sequence) -> Callable:
    """The stopping rule: certify the first criterion's choice at the spent quantile."""
    from swapprune.select.certificate import spending_quantile

    def judge(scores, stability: dict, look: int, looks: int) -> dict:
        q = spending_quantile(looks)
        first = stability[crits[0].name]
        others = [stability[c.name].chosen for c in crits[1:]]
        sets, mass = plausible_sets(
            first.chosen,
            pooled_counts(stability),
            spec.certify_floor,
            spec.certify_sets,
            others,
            eligible(spec),
        )
        cert = certify_sets(model, spec, heldout, first.chosen, sets, mass_outside=mass, quantile=q)
        return {
            "certified": cert.certified,
            "quantile": q,
            "r_stop_points": cert.r_stop,
            "r95_points": cert.r95,
            "delta_points": cert.delta,
            "sets": len(sets),
            "kept": cert.kept,
            "mass_outside": mass,
        }

    return judge


def reconcile_stop(
    record: AdaptiveRecord | None, certificate: Certificate | CertificateSkipped | None
) -> AdaptiveRecord | None:
    """Say in the adaptive record whether the final certificate agrees with the stop.

    The loop's stopping rule certifies the criterion's choice against the plausible sets
    of the probes. The run's final certificate can see more sets (``auto``'s beam set,
    replacement's choice), so a loop that stopped "certified" can end with a cut that is
    not. ``final_certified`` records the final answer, and ``stop_note`` says why the two
    differ, so that no summary prints "certified" beside "NOT certified" unexplained.
    """
    if record is None or not isinstance(certificate, Certificate):
        return record  # no certificate measured: nothing to reconcile
    record.final_certified = bool(certificate.certified)
    if record.stopped == "certified" and not certificate.certified:
        record.stop_note = (
            "the loop certified the probes' plausible sets; the final certificate, "
            f"over {len(certificate.sets)} sets (the beam's and the other "
            "protocol's choices included), does not"
        )
    return record
