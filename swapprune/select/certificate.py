"""The regret certificate of a cut: how much worse than the best cut compared it may be (pure numpy).

What "can I trust this cut?" means here (docs/method.md section 9).

**The reference.** ``S0`` is the set the criterion chose. Its plausible sets ``A``
are ``S0`` plus every set the criterion's bootstrap over calibration windows
selects with frequency at least ``floor``, at most ``max_sets`` of them. ``A``
alone cannot catch a criterion that is wrong in a stable way, so the reference
``R`` adds sets that do not come from the criterion: Block Influence's set, the
other protocol's choice, the kept set's +-1 neighbours, the exact landscape's top
sets (:mod:`swapprune.select.reference` builds ``R``; each set carries its source).

**Costs.** On held-out windows ``H`` (disjoint from the scoring windows) each set
has per-window summed NLL ``l_w(S)`` over ``t_w`` scored tokens, and for any
multiset ``I`` of windows a cost

    c(S; I) = exp(sum_I l_w(S) / sum_I t_w) / exp(sum_I l_w(base) / sum_I t_w) - 1.

**No double use of windows.** ``H`` is split (:func:`split_windows`): the first half
*chooses*, the second half *measures*. Choosing: ``S0`` is kept unless a challenger
beats it on the choosing windows, with a paired bootstrap CI of ``c(S0) - c(S)``
that excludes 0 at level ``1 - alpha / m`` for ``m`` challengers (Bonferroni); among
those that beat it, the cheapest wins. A protocol-guided run may switch only to its
own plausible sets ``A``; ``auto`` may switch to any set of ``R``. Call the kept set
``S^``. Measuring: over paired bootstrap resamples ``I_b`` of the measuring windows,
``r_b = c(S^; I_b) - min_{S in R} c(S; I_b) >= 0``, in dPPL points.

**Verdict.** Reported: ``R95`` (95th percentile of ``r_b``), the quantile the stopping
rule used, ``P(r_b <= delta)`` and the bootstrap mass of the selection outside the
sets measured. ``delta`` is anchored on the best alternative, never on the kept
set's own cost: ``max(1 point, 5% of min_{S in R} c(S))`` on the measuring windows,
so a worse cut does not loosen its own test. The cut is **certified** when the
regret quantile is at most ``delta`` *and* at most :data:`MASS_GATE` of the
selection's bootstrap lies outside the sets measured (a selection that cannot be
resampled has no such mass, and only the regret gates it). A near-tie between
sets gives ``r`` close to 0 and certifies, where the chosen set's frequency would
wander in (0, 1) for ever. The record says which text the windows came from.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from swapprune.stats import LEVEL, N_BOOT
from swapprune.stats.bootstrap import resample_indices

#: Smallest bootstrap frequency that makes a set plausible.
FLOOR = 0.05
#: At most this many plausible sets, the chosen one included.
MAX_SETS = 6
#: Default tolerance: this many dPPL points, or this share of the best cost in R if larger.
DELTA_POINTS = 1.0
DELTA_SHARE = 0.05
#: Not certified when more of the selection's bootstrap than this lies outside the sets measured.
MASS_GATE = 0.10
#: Fewest held-out windows: two to choose on, two to measure on.
MIN_WINDOWS = 4

#: Where a set of the reference comes from, and how a sentence names it.
SOURCES = {
    "chosen": "the criterion's choice",
    "criterion": "a set of the criterion's own bootstrap",
    "bi": "Block Influence's set",
    "other protocol": "the other protocol's choice",
    "neighbour": "a neighbour of the kept set",
    "landscape": "a top set of the exact landscape",
    "beam": "the beam's set",
}
#: The sources of the criterion's own plausible sets ``A``.
OWN = ("chosen", "criterion")

Removal = tuple[int, ...]


def plausible_sets(
    chosen: Sequence[int],
    counts: Mapping[Removal, int] | None,
    floor: float = FLOOR,
    max_sets: int = MAX_SETS,
    extra: Sequence[Sequence[int]] = (),
    eligible: Callable[[Removal], bool] | None = None,
) -> tuple[list[Removal], float | None]:
    """``A`` (chosen first) and the bootstrap mass outside it.

    Args:
        chosen: the criterion's set ``S0``.
        counts: how often each set came out of the selection's bootstrap (``None``
            when the selection cannot be resampled from kept values).
        floor: minimum frequency of a plausible set.
        max_sets: cap on ``|A|``, ``S0`` included.
        extra: further sets to include after the bootstrap's, in order, within the cap.
        eligible: only sets it accepts are plausible, ``chosen`` apart (the in-phase
            constraint: :meth:`swapprune.select.constraints.ServeConstraint.in_phase`).

    Returns:
        ``(A, mass_outside)``; ``mass_outside`` is ``None`` without counts.
    """
    s0 = tuple(sorted(chosen))
    out = [s0]
    mass = None
    ok = eligible or (lambda _s: True)
    if counts:
        total = sum(counts.values())
        for s, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            s = tuple(sorted(s))
            if s not in out and c / total >= floor and len(out) < max_sets and ok(s):
                out.append(s)
        mass = mass_outside(counts, out)
    for e in extra:
        s = tuple(sorted(e))
        if s not in out and len(out) < max_sets and ok(s):
            out.append(s)
    return out, mass


def mass_outside(
    counts: Mapping[Removal, int] | None, measured: Collection[Removal]
) -> float | None:
    """The share of the bootstrap's selections that are none of the ``measured`` sets."""
    if not counts:
        return None
    total = sum(counts.values())
    inside = {tuple(sorted(s)) for s in measured}
    return 1.0 - sum(c for s, c in counts.items() if tuple(sorted(s)) in inside) / total


def split_windows(n: int) -> tuple[list[int], list[int]]:
    """Held-out window indices ``(choose, measure)``: the first ``n // 2`` choose, the rest measure.

    The windows are drawn at random positions of the held-out text, so their order
    carries no information; the two parts are disjoint by construction.
    """
    if n < MIN_WINDOWS:
        raise ValueError(f"the certificate needs at least {MIN_WINDOWS} held-out windows, got {n}")
    k = n // 2
    return list(range(k)), list(range(k, n))


def cost_samples(nll: np.ndarray, base: np.ndarray, tokens: np.ndarray, idx: np.ndarray):
    """``c(S; I_b)`` for every resample row of ``idx`` ``[B, H]``; returns ``(point, [B])``."""
    t_all = tokens.sum()
    point = float(np.exp((nll.sum() - base.sum()) / t_all) - 1)
    t = tokens[idx].sum(-1)
    boot = np.exp((nll[idx].sum(-1) - base[idx].sum(-1)) / t) - 1
    return point, boot


def anchored_delta(costs: Sequence[float]) -> float:
    """The default tolerance in dPPL points: ``max(1, 5% of the best cost)`` (costs in points)."""
    return max(DELTA_POINTS, DELTA_SHARE * min(costs))


@dataclass
class Certificate:
    """The regret certificate of one cut (costs and regrets in dPPL points).

    Attributes:
        chosen: the criterion's set ``S0``; ``kept``: ``S^`` after incumbent-challenger.
        switched: whether a challenger won; ``gain``: by how many points (choosing windows).
        sets: every set of ``R``: its source, its cost on the measuring and on the choosing
            windows, and (for the sets the run may switch to) the CI of ``c(S0) - c(S)``.
        r95: 95th percentile of the regret; ``quantile``: the level the stop used and
            ``r_stop`` the regret at it.
        p_within: ``P(r_b <= delta)``.
        delta: the tolerance; ``certified``: ``r_stop <= delta`` and the mass gate passed.
        mass_outside: bootstrap mass of the selection outside the sets measured (``None``:
            not resampled); ``plausible_from``: ``bootstrap`` or ``neighbours``.
        windows, tokens: held-out windows and tokens, both parts; ``n_boot``, ``seed``.
        choose_windows, measure_windows: the split of the held-out windows.
        switch_among: ``own`` (the criterion's plausible sets) or ``reference`` (all of R).
        mass_gate: the largest ``mass_outside`` that certifies.
        reasons: why it is not certified (``regret``, ``mass``), empty when certified.
        best: the cheapest set of ``R`` other than the kept one on the measuring windows
            (its set, source, cost and how much cheaper than the kept set), or ``None``.
        scope: what text the held-out windows came from, in words.
        futile: an independent alternative beats the kept set by more than ``delta`` even
            at the regret's 5th percentile: more calibration windows refine the criterion's
            own choice, not that gap (the adaptive loop stops on it).
        screened: the sets screened out before the full measurement (set, source, cost in
            points on the ``screen_windows`` screening windows); not in ``sets``.
    """

    chosen: list[int]
    kept: list[int]
    switched: bool
    gain: float
    sets: list[dict]
    r95: float
    quantile: float
    r_stop: float
    p_within: float
    delta: float
    certified: bool
    mass_outside: float | None
    plausible_from: str
    windows: int
    tokens: int
    n_boot: int
    seed: int
    choose_windows: int = 0
    measure_windows: int = 0
    switch_among: str = "own"
    mass_gate: float = MASS_GATE
    reasons: list[str] = field(default_factory=list)
    best: dict | None = None
    scope: str = ""
    futile: bool = False
    screened: list[dict] = field(default_factory=list)
    screen_windows: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def kept_cost(self) -> float:
        """The kept set's cost on the measuring windows (points)."""
        return next(r["cost_points"] for r in self.sets if r["set"] == self.kept)

    def composition(self, others: bool = False) -> str:
        """What was compared, by source: ``"3 of the criterion's own sets, BI's set, ..."``
        (``others``: the sets other than the kept one)."""
        counts: dict[str, int] = {}
        for r in self.sets:
            if others and r["set"] == self.kept:
                continue
            src = r.get("source", "criterion")
            key = "criterion" if src in OWN else src
            counts[key] = counts.get(key, 0) + 1
        words = {
            "criterion": ("the criterion's own set", "of the criterion's own sets"),
            "bi": ("Block Influence's set", "Block Influence's sets"),
            "other protocol": ("the other protocol's choice", "the other protocol's choices"),
            "neighbour": ("a +-1 neighbour", "+-1 neighbours"),
            "landscape": ("a top set of the landscape", "top sets of the landscape"),
            "beam": ("the beam's set", "the beam's sets"),
        }
        parts = []
        for key, n in counts.items():
            one, many = words.get(key, (key, key))
            parts.append(one if n == 1 else f"{n} {many}")
        return ", ".join(parts)

    def summary(self) -> str:
        """One line a newcomer reads: what was compared, on what text, and the verdict."""
        where = f"{self.measure_windows or self.windows} held-out windows"
        if self.scope:
            where += f" of {self.scope}"
        n = len(self.sets)
        compared = f"{n} cut{'s' if n != 1 else ''} compared ({self.composition()})"
        if self.screened:
            compared += f", {len(self.screened)} more screened out on {self.screen_windows} windows"
        switch = (
            f"; the criterion chose {self.chosen}, {self.kept} was cheaper by {self.gain:.2f} "
            f"points on {self.choose_windows} other windows and was kept"
            if self.switched
            else ""
        )
        if self.certified:
            return (
                f"certificate: certified: within {self.delta:.2f} dPPL points of the cheapest of "
                f"{compared} with 95% confidence (regret R95 {self.r95:.2f}), on {where}{switch}"
            )
        why = []
        if "regret" in self.reasons:
            b = self.best
            better = (
                f"{SOURCES.get(b['source'], b['source'])} {b['set']} costs "
                f"{b['cost_points']:+.1f}% against this cut's {self.kept_cost:+.1f}%; "
                if b is not None and b["gain_points"] > 0
                else ""
            )
            why.append(
                f"{better}the cut may be {self.r95:.2f} dPPL points worse than the cheapest of "
                f"{compared}, above the tolerance {self.delta:.2f}"
            )
        if "mass" in self.reasons:
            assert self.mass_outside is not None
            why.append(
                f"{self.mass_outside:.0%} of the selection's bootstrap fell outside the sets "
                f"measured (at most {self.mass_gate:.0%} certifies)"
            )
        return f"certificate: NOT certified: {'; '.join(why)}, on {where}{switch}"

    def paragraph(self) -> str:
        """The model card's paragraph: the summary's facts in sentences."""
        verdict = "is certified" if self.certified else "is **not** certified"
        where = f"{self.measure_windows or self.windows} held-out windows"
        if self.scope:
            where += f" of {self.scope}"
        others = len(self.sets) - 1
        compared = (
            f"It was compared with {others} other cut{'s' if others != 1 else ''} "
            f"({self.composition(others=True)})"
            if others
            else "No other cut was compared"
        )
        text = (
            f"Can it be trusted? The cut {verdict}. {compared} on {where}, which the scoring "
            f"never saw: it may be worse than the cheapest of them by at most {self.r95:.2f} "
            "dPPL points (95% bootstrap quantile of the regret), against a tolerance of "
            f"{self.delta:.2f} points."
        )
        if self.screened:
            k = len(self.screened)
            text += (
                f" {k} more cut{'s were' if k != 1 else ' was'} screened out on "
                f"{self.screen_windows} of the choosing windows, too far above the cheapest "
                "to matter."
            )
        if self.switched:
            on = (
                f"{self.choose_windows} other held-out windows"
                if self.choose_windows
                else "the held-out windows"
            )
            text += (
                f" The criterion chose {self.chosen}; {self.kept} was cheaper on {on} by "
                f"{self.gain:.2f} points and was kept."
            )
        if self.mass_outside is not None:
            text += (
                f" {self.mass_outside:.0%} of the selection's bootstrap fell outside the cuts "
                f"compared (at most {self.mass_gate:.0%} certifies)."
            )
        b = self.best
        if not self.certified and b is not None and b["gain_points"] > 0:
            text += (
                f" {SOURCES.get(b['source'], b['source'])[:1].upper()}"
                f"{SOURCES.get(b['source'], b['source'])[1:]} {b['set']} costs "
                f"{b['cost_points']:+.1f}% against this cut's {self.kept_cost:+.1f}%."
            )
        return text

    def to_dict(self) -> dict:
        return {
            "chosen": self.chosen,
            "kept": self.kept,
            "switched": self.switched,
            "gain_points": self.gain,
            "sets": self.sets,
            "r95_points": self.r95,
            "stop_quantile": self.quantile,
            "r_stop_points": self.r_stop,
            "p_within_delta": self.p_within,
            "delta_points": self.delta,
            "certified": self.certified,
            "reasons": self.reasons,
            "mass_outside": self.mass_outside,
            "mass_gate": self.mass_gate,
            "plausible_from": self.plausible_from,
            "switch_among": self.switch_among,
            "best_alternative": self.best,
            "futile": self.futile,
            "screened_out": self.screened,
            "screen_windows": self.screen_windows,
            "heldout": {
                "windows": self.windows,
                "tokens": self.tokens,
                "choose": self.choose_windows,
                "measure": self.measure_windows,
                "split": "the first half of the held-out windows chooses, the second measures",
                "scope": self.scope,
            },
            "bootstrap": {"resamples": self.n_boot, "seed": self.seed, "unit": "held-out window"},
            **self.extra,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Certificate:
        """The certificate of :meth:`to_dict` (records written before the split read too)."""
        known = {
            "chosen", "kept", "switched", "gain_points", "sets", "r95_points", "stop_quantile",
            "r_stop_points", "p_within_delta", "delta_points", "certified", "reasons",
            "mass_outside", "mass_gate", "plausible_from", "switch_among", "best_alternative",
            "heldout", "bootstrap", "summary", "futile", "screened_out", "screen_windows",
        }  # fmt: skip
        held, boot = d.get("heldout") or {}, d.get("bootstrap") or {}
        return cls(
            chosen=list(d["chosen"]),
            kept=list(d["kept"]),
            switched=d["switched"],
            gain=d["gain_points"],
            sets=list(d["sets"]),
            r95=d["r95_points"],
            quantile=d.get("stop_quantile", LEVEL),
            r_stop=d.get("r_stop_points", d["r95_points"]),
            p_within=d["p_within_delta"],
            delta=d["delta_points"],
            certified=d["certified"],
            mass_outside=d.get("mass_outside"),
            plausible_from=d.get("plausible_from", "bootstrap"),
            windows=held.get("windows", 0),
            tokens=held.get("tokens", 0),
            n_boot=boot.get("resamples", N_BOOT),
            seed=boot.get("seed", 0),
            choose_windows=held.get("choose", 0),
            measure_windows=held.get("measure", held.get("windows", 0)),
            switch_among=d.get("switch_among", "own"),
            mass_gate=d.get("mass_gate", MASS_GATE),
            reasons=list(d.get("reasons", [])),
            best=d.get("best_alternative"),
            scope=held.get("scope", ""),
            futile=d.get("futile", False),
            screened=list(d.get("screened_out", [])),
            screen_windows=d.get("screen_windows", 0),
            extra={k: v for k, v in d.items() if k not in known},
        )


def certify(
    chosen: Sequence[int],
    nll: Mapping[Removal, np.ndarray],
    base: np.ndarray,
    tokens: np.ndarray,
    *,
    sources: Mapping[Removal, str] | None = None,
    switch_to: str = "own",
    choose: Sequence[int] | None = None,
    measure: Sequence[int] | None = None,
    delta: float | None = None,
    quantile: float = LEVEL,
    alpha: float = 1 - LEVEL,
    mass_outside: float | None = None,
    mass_gate: float = MASS_GATE,
    plausible_from: str = "bootstrap",
    n_boot: int = N_BOOT,
    seed: int = 0,
    scope: str = "",
    screened: Sequence[dict] = (),
    screened_challengers: int = 0,
    screen_windows: int = 0,
) -> Certificate:
    """The certificate of ``chosen`` against the reference ``nll`` holds.

    Args:
        chosen: ``S0`` (a key of ``nll``).
        nll: every set of ``R`` -> summed NLL per held-out window ``[H]``.
        base: the unpruned model's summed NLL per window ``[H]``.
        tokens: scored tokens per window ``[H]``.
        sources: set -> where it came from (a key of :data:`SOURCES`); sets not named
            are the criterion's own (``criterion``), ``chosen`` is ``chosen``.
        switch_to: ``own``: the incumbent may be replaced only by the criterion's own
            plausible sets (a protocol-guided run); ``reference``: by any set of ``R``.
        choose, measure: disjoint window indices for the switch and for the regret
            (default :func:`split_windows`).
        delta: tolerance in dPPL points (default :func:`anchored_delta` of ``R``'s costs).
        quantile: the regret quantile compared with ``delta`` (0.95; the adaptive
            loop passes a higher one to spend its error over several looks).
        alpha: error rate of the incumbent-challenger switch.
        mass_outside: bootstrap mass outside the sets measured: recorded, and it gates.
        mass_gate: the largest ``mass_outside`` that certifies.
        plausible_from: how ``A`` was built, recorded.
        n_boot, seed: the paired bootstraps (the measuring part uses ``seed + 1``).
        scope: what text the held-out windows came from, in words.
        screened, screen_windows: the sets screened out before the measurement, recorded.
        screened_challengers: how many of them the switch would have tested: they count in
            its Bonferroni level, which stays what it would be without the screen.
    """
    if switch_to not in ("own", "reference"):
        raise ValueError(f"switch_to must be 'own' or 'reference', got {switch_to!r}")
    s0 = tuple(sorted(chosen))
    keys = [s0] + [tuple(sorted(s)) for s in nll if tuple(sorted(s)) != s0]
    table = {tuple(sorted(s)): np.asarray(v, dtype=np.float64) for s, v in nll.items()}
    src = {s: "criterion" for s in keys} | {tuple(sorted(s)): v for s, v in (sources or {}).items()}
    src[s0] = "chosen"
    base = np.asarray(base, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.float64)
    if choose is None or measure is None:
        choose, measure = split_windows(len(base))
    ci, mi = np.asarray(choose, dtype=int), np.asarray(measure, dtype=int)
    if set(ci.tolist()) & set(mi.tolist()):
        raise ValueError("the choosing and the measuring windows must be disjoint")

    def part(ix):
        return lambda s: table[s][ix]

    # Choosing: incumbent-challenger on the choosing windows only.
    idx_c = resample_indices(len(ci), n_boot, seed)
    at_c = part(ci)
    point_c, boot_c = {}, {}
    for s in keys:
        point_c[s], boot_c[s] = cost_samples(at_c(s), base[ci], tokens[ci], idx_c)
    challengers = [s for s in keys[1:] if switch_to == "reference" or src[s] in OWN]
    level = alpha / max(1, len(challengers) + screened_challengers)
    winners, ci_of = [], {}
    for s in challengers:
        diff = 100 * (boot_c[s0] - boot_c[s])
        lo, hi = np.percentile(diff, [100 * level / 2, 100 * (1 - level / 2)])
        ci_of[s] = [float(lo), float(hi)]
        if lo > 0:
            winners.append(s)
    kept = min(winners, key=lambda s: (point_c[s], s)) if winners else s0

    # Measuring: the regret against every set of R on the other windows.
    idx_m = resample_indices(len(mi), n_boot, seed + 1)
    at_m = part(mi)
    point_m, boot_m = {}, {}
    for s in keys:
        point_m[s], boot_m[s] = cost_samples(at_m(s), base[mi], tokens[mi], idx_m)
    best_b = np.min(np.stack([boot_m[s] for s in keys]), axis=0)
    regret = 100 * (boot_m[kept] - best_b)  # >= 0: kept is one of the sets
    tol = delta if delta is not None else anchored_delta([100 * point_m[s] for s in keys])
    r_stop = float(np.percentile(regret, 100 * quantile))
    reasons = []
    if r_stop > tol:
        reasons.append("regret")
    if mass_outside is not None and mass_outside > mass_gate:
        reasons.append("mass")
    sets = []
    for s in keys:
        row: dict[str, Any] = {
            "set": list(s),
            "source": src[s],
            "cost_points": 100 * point_m[s],
            "choose_cost_points": 100 * point_c[s],
        }
        if s in ci_of:
            row["better_than_chosen_ci"] = ci_of[s]
        sets.append(row)
    others = [s for s in keys if s != kept]
    best, futile = None, False
    if others:
        b = min(others, key=lambda s: (point_m[s], s))
        best = {
            "set": list(b),
            "source": src[b],
            "cost_points": 100 * point_m[b],
            "gain_points": 100 * (point_m[kept] - point_m[b]),
        }
        futile = src[b] not in OWN and float(np.percentile(regret, 5)) > tol
    return Certificate(
        chosen=list(s0),
        kept=list(kept),
        switched=kept != s0,
        gain=100 * (point_c[s0] - point_c[kept]),
        sets=sets,
        r95=float(np.percentile(regret, 95)),
        quantile=quantile,
        r_stop=r_stop,
        p_within=float(np.mean(regret <= tol)),
        delta=float(tol),
        certified=not reasons,
        mass_outside=mass_outside,
        plausible_from=plausible_from,
        windows=len(base),
        tokens=int(tokens.sum()),
        n_boot=n_boot,
        seed=seed,
        choose_windows=len(ci),
        measure_windows=len(mi),
        switch_among=switch_to,
        mass_gate=mass_gate,
        reasons=reasons,
        best=best,
        scope=scope,
        futile=futile,
        screened=[dict(r) for r in screened],
        screen_windows=screen_windows,
    )


def spending_quantile(looks: int, alpha: float = 1 - LEVEL) -> float:
    """The regret quantile each of ``looks`` scheduled looks uses: ``1 - alpha / looks``.

    A fixed schedule of looks with Bonferroni alpha spending: a cut certified at
    any look has regret above ``delta`` with probability at most ``alpha`` over the
    whole schedule (a union bound, whatever the dependence between looks).
    """
    return 1 - alpha / max(1, looks)
