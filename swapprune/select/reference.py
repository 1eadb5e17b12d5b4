"""The reference set of a certificate and its measurement on held-out windows.

The statistics are :mod:`swapprune.select.certificate` (pure); this module
supplies them. The reference ``R`` of a cut is built here: the criterion's
plausible sets (from its bootstrap over the scoring windows, or, for selections
that cannot be resampled from kept values, the strategy's next choices), and sets
that do not come from the criterion: Block Influence's set (one forward pass over
the calibration windows), the other protocol's choice when both were probed,
``auto``'s beam set, the exact landscape's top sets when a landscape is given, and
the kept set's +-1 neighbours.

Every set but the criterion's choice is first **screened** on two of the choosing
windows (in bfloat16 where that is fast), and only the sets that can still matter are
carried to every held-out window in the model's precision (successive halving,
:func:`carried`): those within :data:`CARRY_NATS` of the best screened set, and, of
the criterion's own sets (the only ones a protocol-guided run may switch to), those
within it of the best own set; of the neighbours, at most :data:`NEIGHBOURS`. The sets
screened out are recorded with their screening cost. Each set's per-window NLL is
measured once and remembered, the sets of one call walked together (shared prefixes
run once), and the plan comes out with its certificate.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from swapprune.plan import PrunePlan
from swapprune.records import AdaptiveRecord, CertificateSkipped
from swapprune.select import core
from swapprune.select import criteria as criteria_mod
from swapprune.select.certificate import (
    OWN,
    Certificate,
    Removal,
    certify,
    mass_outside,
    plausible_sets,
    spending_quantile,
)
from swapprune.select.constraints import Constraints, enforce
from swapprune.select.spec import SelectionSpec
from swapprune.select.stability import plan_stability
from swapprune.select.strategies import SelectionInputs, get_strategy
from swapprune.stats import LEVEL

# engine.oracle imports torch: it is imported where the model is queried.

#: Held-out windows the +-1 neighbours are screened on (the first choosing windows).
SCREEN_WINDOWS = 2
#: Neighbours carried from the screening to every held-out window, at most.
NEIGHBOURS = 2
#: A screened set is carried to every held-out window when its screened NLL is within this
#: many nats per token of the best screened set (a perplexity within about 10.5%).
CARRY_NATS = 0.1
#: Patch tokens per hidden dimension in a screening fit of patch-aware selection (a full
#: map has ``H`` unknowns per output channel; twice as many equations, with the ridge).
PATCH_SCREEN_TOKENS_PER_DIM = 2
#: Sets besides the chosen one the screen carries in a typical run, for the estimate printed
#: before it (SmolLM2-135M at budget 8: 2 in the demo, 3 at the defaults).
CARRIED_TYPICAL = 3


def patch_screen_windows(num_windows: int, tokens: int, hidden: int, full_map: bool) -> int:
    """Patch windows a screening fit uses: enough for ``2 H`` tokens (one window for a
    channel-wise map), at most all of them. Pure."""
    if not full_map:
        return 1
    need = -(-PATCH_SCREEN_TOKENS_PER_DIM * hidden // max(1, tokens))
    return max(1, min(num_windows, need))


@dataclass(frozen=True)
class PatchAware:
    """Patch-aware selection: every set is measured after its own linear patch.

    Attributes:
        windows: the patch windows (those the cut's own patch is fitted on).
        ridge: the patch's ridge.
    """

    windows: Any
    ridge: float


@dataclass
class Heldout:
    """Held-out windows of a selection and the evaluations made on them.

    Attributes:
        certify: windows the certificate is measured on.
        verify: windows ``auto``'s beam searches on (disjoint from ``certify``), or ``None``.
        patch: when set, every set is measured after its own linear patch
            (:class:`~swapprune.edit.patched_costs.PatchedOracle`): fitted on every patch
            window for the certificate's finalists, on the first few for the screen and
            ``auto``'s beam, which compare many sets.
    """

    certify: Any
    verify: Any = None
    scope: str = ""
    patch: PatchAware | None = None
    _fitter: Any = field(default=None, repr=False)
    _oracles: dict = field(default_factory=dict, repr=False)
    _spent: dict = field(default_factory=dict, repr=False)
    _memo: dict = field(default_factory=dict, repr=False)

    def windows(self) -> list:
        """Every held-out window set (others, such as patch windows, keep clear of them)."""
        return [w for w in (self.certify, self.verify) if w is not None]

    def oracle(self, model, which: str, batch_size: int):
        """The :class:`~swapprune.engine.oracle.CalibrationOracle` on ``which`` windows."""
        if which not in self._oracles:
            from swapprune.engine.oracle import CalibrationOracle  # imports torch

            if which == "screen":  # the first two choosing windows
                ids = self.certify.input_ids[:SCREEN_WINDOWS]
            else:
                ids = (self.certify if which == "certify" else self.verify).input_ids
            if self.patch is None:
                self._oracles[which] = CalibrationOracle(model, ids, batch_size, "ppl")
            else:
                self._oracles[which] = self._patched(model, which, ids, batch_size)
        return self._oracles[which]

    def _patched(self, model, which: str, ids, batch_size: int):
        from swapprune.edit.patched_costs import PatchedOracle, PatchFitter  # imports torch

        assert self.patch is not None
        if self._fitter is None:
            ids_p = self.patch.windows.input_ids
            self._fitter = PatchFitter(model, ids_p, batch_size, self.patch.ridge)
        fit = None if which == "certify" else self._screen_fit()
        return PatchedOracle(model, ids, batch_size, self._fitter, fit)

    def _screen_fit(self) -> int:
        f = self._fitter
        n, t = f.patch_ids.shape
        return patch_screen_windows(int(n), int(t), f.hidden, f.full_map)

    def fitted(self, removed: Sequence[int]) -> list | None:
        """The patches of ``removed`` fitted on every patch window during selection, or ``None``."""
        return self._fitter.fitted(removed) if self._fitter is not None else None

    def patch_record(self) -> dict | None:
        """What the patch-aware comparison fitted, for the certificate's record."""
        if self.patch is None:
            return None
        f = self._fitter
        return {
            "patch_windows": list(self.patch.windows.input_ids.shape),
            "ridge": self.patch.ridge,
            "screen_fit_windows": self._screen_fit() if f is not None else None,
            "fits": f.fits if f is not None else 0,
            "fit_compute": f.compute() if f is not None else None,
        }

    def screen(self, model, sets: Sequence[Removal], batch_size: int) -> list[np.ndarray]:
        """Summed NLL per screening window of each set, for ranking only: a float32 model
        runs its products in bfloat16 where that is fast
        (:func:`~swapprune.engine.screening.ranking_precision`)."""
        from swapprune.engine.screening import ranking_precision  # imports torch

        with ranking_precision(model):
            return window_nlls(self.oracle(model, "screen", batch_size), sets)

    def screen_costs(self, model, sets: Sequence[Removal], batch_size: int) -> dict:
        """Mean next-token NLL per token of each set on the screening windows (ranking only),
        the unpruned model's under ``()``."""
        keys = list(dict.fromkeys([(), *(tuple(sorted(s)) for s in sets)]))
        values = self.screen(model, keys, batch_size)
        per = self.oracle(model, "screen", batch_size).input_ids.shape[1] - 1
        return {s: float(v.sum()) / (len(v) * per) for s, v in zip(keys, values)}

    def spend(self, which: str, compute: dict) -> None:
        """Record work done for the reference outside these windows (BI's forward pass)."""
        have = self._spent.setdefault(which, {"block_evals": 0, "block_tokens": 0})
        for k in have:
            have[k] += int(compute.get(k, 0))

    def compute(self, which: str) -> dict:
        """Block evaluations and block-tokens spent on ``which`` windows so far.

        ``reference``: the independent alternatives' extra work (BI's pass over the
        calibration windows, the neighbours' screening).
        """
        zero = {"block_evals": 0, "block_tokens": 0}
        if which == "reference":
            screen = self.compute("screen")
            spent = self._spent.get("reference", zero)
            return {k: screen[k] + spent[k] for k in zero}
        o = self._oracles.get(which)
        return o.compute() if o is not None else zero


def window_nll(oracle, removed: Sequence[int]) -> np.ndarray:
    """Summed next-token NLL per window ``[H]`` of the model without ``removed``."""
    return window_nlls(oracle, [removed])[0]


def window_nlls(oracle, sets: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """:func:`window_nll` of every set, the sets walked together (shared prefixes run once)."""
    tokens = oracle.input_ids.shape[1] - 1
    costs = oracle.window_costs_many([sorted(s) for s in sets], "ppl")
    return [c * tokens for c in costs]


def next_choices(spec: SelectionSpec, plan: PrunePlan, count: int) -> list[tuple[int, ...]]:
    """The strategy's next choices: the selection again with one chosen block ruled out.

    For selections that cannot be resampled from kept values (model-measured
    criteria, strategies that query the model), on the recorded importance; a
    strategy that queries the model is replaced by ``ranked`` here.
    """
    imp = np.array([np.inf if v is None else v for v in plan.scores.get("importance", [])])
    if len(imp) != spec.num_layers:
        return []
    tb = (plan.scores.get("tiebreak") or {}).get("values")
    tiebreak = None if tb is None else np.array([np.inf if v is None else v for v in tb])

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
    """``(A, counts, how)`` for ``plan``'s selection: its plausible sets, the bootstrap's
    counts (``None`` when it cannot be resampled) and how ``A`` was built."""
    stab = plan_stability(plan, scores, spec.constraints, spec.n_boot, spec.seed)
    ok = eligible(spec)
    if stab is not None:
        sets, _ = plausible_sets(
            plan.removed, stab.counts, spec.certify_floor, spec.certify_sets, extra, ok
        )
        return sets, stab.counts, "bootstrap"
    more = next_choices(spec, plan, spec.certify_sets - 1)
    sets, _ = plausible_sets(
        plan.removed, None, max_sets=spec.certify_sets, extra=[*extra, *more], eligible=ok
    )
    return sets, None, "neighbours"


def eligible(spec: SelectionSpec) -> Callable[[Sequence[int]], bool] | None:
    """Which sets may be plausible: those in phase under ``--serve`` (``None``: every set)."""
    return spec.serve.in_phase if spec.serve is not None else None


def shifted_sets(
    removed: Sequence[int], cons: Constraints, ok: Callable[[Removal], bool] | None = None
) -> list[Removal]:
    """The +-1 neighbours of a removal set: one removed block moved to an adjacent block.

    Only moves onto a removable block that is not removed already, and (``ok``) sets
    the in-phase constraint admits. Pure.
    """
    have = set(removed)
    free = set(cons.candidates())
    accept = ok or (lambda _s: True)
    out: list[Removal] = []
    for b in sorted(have):
        for t in (b - 1, b + 1):
            if t in free and t not in have:
                s = tuple(sorted((have - {b}) | {t}))
                if s not in out and accept(s):
                    out.append(s)
    return out


def bi_choice(model, spec: SelectionSpec, calibration, heldout: Heldout) -> Removal | None:
    """Block Influence's set at the same budget and constraints (one pass over ``calibration``).

    Remembered on ``heldout``; its work is recorded there as the reference's.
    """
    if "bi" in heldout._memo:
        return heldout._memo["bi"]
    found = None
    if calibration is not None and spec.op == "remove":
        plan, _ = core.select_fixed(
            model, spec.for_criterion("bi", True), calibration, None, progress=False
        )
        heldout.spend("reference", plan.scores.get("oracle_compute") or {})
        found = tuple(plan.removed)
    heldout._memo["bi"] = found
    return found


def other_choice(model, spec: SelectionSpec, calibration, scores) -> tuple[str, Removal] | None:
    """The other swap protocol's choice, when ``scores`` hold both protocols."""
    name = spec.criterion.name
    if name not in criteria_mod.SWAP or scores is None:
        return None
    if not all(p in scores.protocols() for p in criteria_mod.SWAP):
        return None
    other = next(p for p in criteria_mod.SWAP if p != name)
    plan, _ = core.select_fixed(
        model, spec.for_criterion(other), calibration, scores, progress=False
    )
    return other, tuple(plan.removed)


def independent_sets(
    model, spec: SelectionSpec, calibration, scores, heldout: Heldout
) -> dict[Removal, str]:
    """The reference's sets that do not come from the criterion, by source.

    Block Influence's set; the other protocol's choice when both protocols were probed;
    the landscape's top sets (``spec.landscape``) when a landscape was given.
    """
    out: dict[Removal, str] = {}
    bi = bi_choice(model, spec, calibration, heldout)
    if bi is not None:
        out[bi] = "bi"
    other = other_choice(model, spec, calibration, scores)
    if other is not None:
        out.setdefault(other[1], "other protocol")
    for s in spec.landscape:
        out.setdefault(tuple(sorted(s)), "landscape")
    return out


def carried(
    screened: Mapping[Removal, float],
    own: Collection[Removal] = (),
    margin: float = CARRY_NATS,
) -> set[Removal]:
    """The screened sets that go on to every held-out window (pure).

    ``screened``: set -> screened NLL per token (the criterion's choice among them). A set
    is carried when it is within ``margin`` of the best screened set, or, for a set of
    ``own`` (those a protocol-guided run may switch to), within ``margin`` of the best of
    ``own``. A set further off than that cannot be the cheapest of ``R``, nor beat the
    criterion's choice, unless two windows misjudge it by more than ``margin``.
    """
    out: set[Removal] = set()
    if not screened:
        return out
    best = min(screened.values())
    mine = [v for s, v in screened.items() if s in own]
    best_own = min(mine) if mine else np.inf
    for s, v in screened.items():
        if v <= best + margin or (s in own and v <= best_own + margin):
            out.add(s)
    return out


def _points(screened: Mapping[Removal, float], s: Removal) -> float:
    """A screened set's cost in dPPL points on the screening windows."""
    return 100 * float(np.expm1(screened[s] - screened[()]))


def reference_certificate(
    model,
    spec: SelectionSpec,
    heldout: Heldout,
    chosen: Sequence[int],
    own: Sequence[Sequence[int]],
    independents: Mapping[Removal, str],
    *,
    counts: Mapping[Removal, int] | None = None,
    switch_to: str = "own",
    plausible_from: str = "bootstrap",
    quantile: float | None = None,
    near: bool = True,
) -> Certificate:
    """The certificate of ``chosen`` against ``R = own + independents + neighbours``.

    Every set but ``chosen`` is screened on the first :data:`SCREEN_WINDOWS` choosing
    windows; those :func:`carried` are measured on every held-out window, the rest are
    recorded as screened out (their bootstrap mass counts as measured: their cost is
    known to be far above the best). ``chosen`` is always measured.

    Args:
        own: the criterion's plausible sets ``A`` (``chosen`` first).
        independents: further sets by source (:func:`independent_sets`, ``auto``'s beam).
        counts: the selection's bootstrap counts: the mass outside every set measured.
        switch_to: ``own`` (a protocol-guided run) or ``reference`` (``auto``).
        near: add the kept set's +-1 neighbours, at most :data:`NEIGHBOURS` of those the
            screen carries (the adaptive loop's looks leave them out).
    """
    ok = eligible(spec) or (lambda _s: True)
    s0 = tuple(sorted(chosen))
    sources: dict[Removal, str] = {s0: "chosen"}
    for s in own:
        sources.setdefault(tuple(sorted(s)), "criterion")
    for s, src in independents.items():
        s = tuple(sorted(s))
        # (a patched comparison cannot measure a set that removes block 0)
        foldable = heldout.patch is None or (s and s[0] > 0)
        if s not in sources and ok(s) and len(s) == len(s0) and foldable:
            sources[s] = src
    oracle = heldout.oracle(model, "certify", spec.batch_size)
    bs = spec.batch_size
    # (an infinite margin carries every set: nothing to screen)
    screen = len(sources) > 1 and np.isfinite(CARRY_NATS)
    screened = heldout.screen_costs(model, list(sources), bs) if screen else {}
    mine = {s for s, src in sources.items() if src in OWN} if switch_to == "own" else set()
    pool = {s: screened[s] for s in sources} if screen else {}
    keep = carried(pool, mine, CARRY_NATS) if screen else set(sources)
    out = {s: src for s, src in sources.items() if s not in keep and s != s0}
    for s in out:
        del sources[s]
    nll = dict(zip(sources, window_nlls(oracle, list(sources))))
    tokens = np.full(oracle.input_ids.shape[0], oracle.input_ids.shape[1] - 1, dtype=float)
    base = window_nll(oracle, [])
    rows = [{"set": list(s), "source": src, "screen_cost_points": _points(screened, s)}
            for s, src in out.items()]  # fmt: skip
    # the screened-out sets that would have been challengers still count in the switch's
    # Bonferroni level: the switch tests as many sets as it would have without the screen
    dropped = sum(1 for src in out.values() if switch_to == "reference" or src in OWN)

    def measure() -> Certificate:
        return certify(
            s0,
            nll,
            base,
            tokens,
            sources=sources,
            switch_to=switch_to,
            delta=spec.certify_delta,
            mass_outside=mass_outside(counts, [*sources, *out]),
            plausible_from=plausible_from,
            n_boot=spec.n_boot,
            seed=spec.seed,
            scope=heldout.scope,
            quantile=LEVEL if quantile is None else quantile,
            screened=rows,
            screened_challengers=dropped,
            screen_windows=SCREEN_WINDOWS if screened else 0,
        )

    cert = measure()
    if near:
        moved = [
            s
            for s in shifted_sets(cert.kept, spec.constraints, ok)
            if s not in sources and s not in out
        ]
        if moved:
            screened = heldout.screen_costs(model, [*sources, *out, *moved], bs)
            pool = {s: screened[s] for s in [*sources, *out, *moved]}  # not the unpruned ()
            keep = carried(pool, (), CARRY_NATS)
            ranked = sorted(moved, key=lambda s: (screened[s], s))
            chosen_ones = [s for s in ranked if s in keep][:NEIGHBOURS]
            for s, v in zip(chosen_ones, window_nlls(oracle, chosen_ones)):
                sources[s] = "neighbour"
                nll[s] = v
            rows += [{"set": list(s), "source": "neighbour",
                      "screen_cost_points": _points(screened, s)}
                     for s in ranked if s not in chosen_ones]  # fmt: skip
            cert = measure()
    return cert


def certified_plan(
    model, spec, plan: PrunePlan, scores, heldout: Heldout, extra=(), quantile=None,
    calibration=None,
) -> PrunePlan:  # fmt: skip
    """``plan``, or the challenger that beat it, with the certificate in ``plan.records``."""
    own, counts, how = plausible(spec, plan, scores, extra)
    independents = independent_sets(model, spec, calibration, scores, heldout)
    cert = reference_certificate(
        model, spec, heldout, plan.removed, own, independents,
        counts=counts, plausible_from=how, quantile=quantile,
    )  # fmt: skip
    cert.extra["compute"] = heldout.compute("certify")
    cert.extra["reference_compute"] = heldout.compute("reference")
    if heldout.patch is not None:  # every set was measured after its own patch
        cert.extra["patched"] = heldout.patch_record()
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


def certificate_judge(
    model, spec: SelectionSpec, heldout, crits: Sequence, calibration=None
) -> Callable:
    """The stopping rule: certify the first criterion's choice at the spent quantile.

    Each look compares the choice with the criteria's plausible sets, the other criteria's
    choices and Block Influence's set; the kept set's neighbours wait for the final
    certificate (:func:`reconcile_stop` says when it disagrees with the stop).
    """

    def judge(scores, stability: dict, look: int, looks: int) -> dict:
        q = spending_quantile(looks)
        first = stability[crits[0].name]
        counts = pooled_counts(stability)
        own, _ = plausible_sets(
            first.chosen, counts, spec.certify_floor, spec.certify_sets, (), eligible(spec)
        )
        independents: dict[Removal, str] = {}
        bi = bi_choice(model, spec, calibration, heldout)
        if bi is not None:
            independents[bi] = "bi"
        for c in crits[1:]:
            independents.setdefault(tuple(sorted(stability[c.name].chosen)), "other protocol")
        cert = reference_certificate(
            model, spec, heldout, first.chosen, own, independents,
            counts=counts, quantile=q, near=False,
        )  # fmt: skip
        return {
            "certified": cert.certified,
            "quantile": q,
            "r_stop_points": cert.r_stop,
            "r95_points": cert.r95,
            "delta_points": cert.delta,
            "sets": len(cert.sets),
            "kept": cert.kept,
            "mass_outside": cert.mass_outside,
            "reasons": cert.reasons,
            "futile": cert.futile,
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
            "the loop certified against the sets of its last look; the final certificate, "
            f"over {len(certificate.sets)} sets (the kept set's +-1 neighbours, and for auto "
            "the beam's set, included), does not"
        )
    return record
