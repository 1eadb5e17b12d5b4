"""The regret certificate of a cut: how much worse than the alternatives it may be (pure numpy).

What "can I trust this cut?" means here (docs/method.md section 9). Let ``S0`` be the
set the criterion chose and ``A`` the plausible sets: ``S0`` plus every set the
criterion's bootstrap over calibration windows selects with frequency at least
``floor``, at most ``max_sets`` of them (the most frequent first). On held-out
windows ``H`` (disjoint from the scoring windows) each set has per-window
summed NLL ``l_w(S)`` over ``t_w`` scored tokens, and for any multiset ``I`` of
windows a cost

    c(S; I) = exp(sum_I l_w(S) / sum_I t_w) / exp(sum_I l_w(base) / sum_I t_w) - 1.

**Incumbent-challenger.** ``S0`` is kept unless a challenger beats it: the paired
bootstrap CI of ``c(S0) - c(S)`` excludes 0 at level ``1 - alpha / m`` for ``m``
challengers (Bonferroni, so the chance of leaving ``S0`` for noise is at most
``alpha``). Among challengers that beat it, the cheapest (point cost) wins.
Call the kept set ``S^``.

**Regret.** Over paired bootstrap resamples ``I_b`` of ``H``,
``r_b = c(S^; I_b) - min_{S in A} c(S; I_b) >= 0``, in dPPL points (percent).
Reported: ``R95`` (95th percentile), the quantile the stopping rule used,
``P(r_b <= delta)``, and the bootstrap mass of the selection outside ``A``.
The cut is **certified** when the regret quantile is at most ``delta``; the
default ``delta`` is ``max(1 point, 5% of S^'s cost)``. A near-tie between sets
gives ``r`` close to 0 and certifies, where the chosen set's frequency would
wander in (0, 1) for ever.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from swapprune.stats import LEVEL, N_BOOT
from swapprune.stats.bootstrap import resample_indices

#: Smallest bootstrap frequency that makes a set plausible.
FLOOR = 0.05
#: At most this many plausible sets, the chosen one included.
MAX_SETS = 6
#: Default tolerance: this many dPPL points, or this share of the cut's own cost if larger.
DELTA_POINTS = 1.0
DELTA_SHARE = 0.05

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
        extra: further sets to include after the bootstrap's (another protocol's
            choice, a verified set), in order, within the cap.
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
        mass = 1.0 - sum(counts.get(s, 0) for s in out) / total
    for e in extra:
        s = tuple(sorted(e))
        if s not in out and len(out) < max_sets and ok(s):
            out.append(s)
    return out, mass


def cost_samples(nll: np.ndarray, base: np.ndarray, tokens: np.ndarray, idx: np.ndarray):
    """``c(S; I_b)`` for every resample row of ``idx`` ``[B, H]``; returns ``(point, [B])``."""
    t_all = tokens.sum()
    point = float(np.exp((nll.sum() - base.sum()) / t_all) - 1)
    t = tokens[idx].sum(-1)
    boot = np.exp((nll[idx].sum(-1) - base[idx].sum(-1)) / t) - 1
    return point, boot


@dataclass
class Certificate:
    """The regret certificate of one cut (costs and regrets in dPPL points).

    Attributes:
        chosen: the criterion's set ``S0``; ``kept``: ``S^`` after incumbent-challenger.
        switched: whether a challenger won; ``gain``: by how many points (point estimate).
        sets: every set of ``A`` with its point cost and the CI of ``c(S0) - c(S)``.
        r95: 95th percentile of the regret; ``quantile``: the level the stop used and
            ``r_stop`` the regret at it.
        p_within: ``P(r_b <= delta)``.
        delta: the tolerance; ``certified``: ``r_stop <= delta``.
        mass_outside: bootstrap mass of the selection outside ``A`` (``None``: not
            resampled); ``plausible_from``: ``bootstrap`` or ``neighbours``.
        windows, tokens: held-out windows and tokens; ``n_boot``, ``seed``.
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
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for the run summary."""
        verdict = "certified" if self.certified else "NOT certified"
        switch = (
            f"; {self.chosen} -> {self.kept} (challenger better by {self.gain:.2f} points)"
            if self.switched
            else ""
        )
        outside = (
            ""
            if self.mass_outside is None
            else f", {self.mass_outside:.0%} of the bootstrap outside them"
        )
        return (
            f"certificate: {verdict}: regret R95 {self.r95:.2f} dPPL points "
            f"(<= {self.delta:.2f} with P {self.p_within:.2f}) against {len(self.sets)} "
            f"plausible sets{outside}, on {self.windows} held-out windows{switch}"
        )

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
            "mass_outside": self.mass_outside,
            "plausible_from": self.plausible_from,
            "heldout": {"windows": self.windows, "tokens": self.tokens},
            "bootstrap": {"resamples": self.n_boot, "seed": self.seed, "unit": "held-out window"},
            **self.extra,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Certificate:
        """The record :meth:`to_dict` wrote; keys it does not name go back to ``extra``.

        A ``summary`` written beside it (``plan.json``) is dropped: :meth:`summary` makes it.
        """
        held, boot = d["heldout"], d["bootstrap"]
        return cls(
            chosen=list(d["chosen"]),
            kept=list(d["kept"]),
            switched=d["switched"],
            gain=d["gain_points"],
            sets=list(d["sets"]),
            r95=d["r95_points"],
            quantile=d["stop_quantile"],
            r_stop=d["r_stop_points"],
            p_within=d["p_within_delta"],
            delta=d["delta_points"],
            certified=d["certified"],
            mass_outside=d["mass_outside"],
            plausible_from=d["plausible_from"],
            windows=held["windows"],
            tokens=held["tokens"],
            n_boot=boot["resamples"],
            seed=boot["seed"],
            extra={k: v for k, v in d.items() if k not in _WRITTEN},
        )


#: The keys :meth:`Certificate.to_dict` writes itself, and the summary written beside them.
_WRITTEN = frozenset(
    "chosen kept switched gain_points sets r95_points stop_quantile r_stop_points "
    "p_within_delta delta_points certified mass_outside plausible_from heldout bootstrap "
    "summary".split()
)


def certify(
    chosen: Sequence[int],
    nll: Mapping[Removal, np.ndarray],
    base: np.ndarray,
    tokens: np.ndarray,
    *,
    delta: float | None = None,
    quantile: float = LEVEL,
    alpha: float = 1 - LEVEL,
    mass_outside: float | None = None,
    plausible_from: str = "bootstrap",
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> Certificate:
    """The certificate of ``chosen`` against the plausible sets ``nll`` holds.

    Args:
        chosen: ``S0`` (a key of ``nll``).
        nll: plausible set -> summed NLL per held-out window ``[H]``.
        base: the unpruned model's summed NLL per window ``[H]``.
        tokens: scored tokens per window ``[H]``.
        delta: tolerance in dPPL points (default ``max(1, 5% of S^'s cost)``).
        quantile: the regret quantile compared with ``delta`` (0.95; the adaptive
            loop passes a higher one to spend its error over several looks).
        alpha: error rate of the incumbent-challenger switch.
        mass_outside: bootstrap mass outside ``A``, recorded.
        plausible_from: how ``A`` was built, recorded.
        n_boot, seed: the paired bootstrap over held-out windows.
    """
    s0 = tuple(sorted(chosen))
    keys = [s0] + [s for s in nll if tuple(sorted(s)) != s0]
    base = np.asarray(base, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.float64)
    idx = resample_indices(len(base), n_boot, seed)
    point, boot = {}, {}
    for s in keys:
        point[s], boot[s] = cost_samples(np.asarray(nll[s], dtype=np.float64), base, tokens, idx)
    challengers = keys[1:]
    level = alpha / max(1, len(challengers))
    sets, winners = [], []
    for s in keys:
        row: dict[str, Any] = {"set": list(s), "cost_points": 100 * point[s]}
        if s != s0:
            diff = 100 * (boot[s0] - boot[s])
            lo, hi = np.percentile(diff, [100 * level / 2, 100 * (1 - level / 2)])
            row["better_than_chosen_ci"] = [float(lo), float(hi)]
            if lo > 0:
                winners.append(s)
        sets.append(row)
    kept = min(winners, key=lambda s: (point[s], s)) if winners else s0
    best = np.min(np.stack([boot[s] for s in keys]), axis=0)
    regret = 100 * (boot[kept] - best)  # >= 0: kept is one of the sets
    tol = delta if delta is not None else max(DELTA_POINTS, DELTA_SHARE * 100 * point[kept])
    r_stop = float(np.percentile(regret, 100 * quantile))
    return Certificate(
        chosen=list(s0),
        kept=list(kept),
        switched=kept != s0,
        gain=100 * (point[s0] - point[kept]),
        sets=sets,
        r95=float(np.percentile(regret, 95)),
        quantile=quantile,
        r_stop=r_stop,
        p_within=float(np.mean(regret <= tol)),
        delta=float(tol),
        certified=r_stop <= tol,
        mass_outside=mass_outside,
        plausible_from=plausible_from,
        windows=len(base),
        tokens=int(tokens.sum()),
        n_boot=n_boot,
        seed=seed,
    )


def spending_quantile(looks: int, alpha: float = 1 - LEVEL) -> float:
    """The regret quantile each of ``looks`` scheduled looks uses: ``1 - alpha / looks``.

    A fixed schedule of looks with Bonferroni alpha spending: a cut certified at
    any look has regret above ``delta`` with probability at most ``alpha`` over the
    whole schedule (a union bound, whatever the dependence between looks).
    """
    return 1 - alpha / max(1, looks)
