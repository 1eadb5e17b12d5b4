"""What the policies above a fixed selection record: stability, the tranches, ``auto``.

:class:`Stability` is a selection's bootstrap over its calibration windows
(made by :mod:`swapprune.select.stability`), :class:`AdaptiveRecord` what
adaptive calibration's tranches spent (:mod:`swapprune.select.adaptive`), and
:class:`AutoRecord` what ``--protocol auto`` decided (:mod:`swapprune.select.auto`),
with the regime call's sentence (:func:`summary_line`; the call itself is
:func:`swapprune.select.regime.regime`). Records of
:class:`~swapprune.records.PlanRecords`, each with ``to_dict()`` / ``from_dict()``.
No numpy here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from swapprune.stats import N_BOOT

#: Frequency below which a selection is called unstable.
THRESHOLD = 0.5
# What a user runs to fix an unstable selection (the run command's flags).
FIX_HINT = (
    "add windows (--prompts {more}, or --adaptive on: tranches until the choice settles; "
    "by default they run only for a certified swap-criterion cut) or let the model decide "
    "(--protocol auto)"
)


@dataclass
class Stability:
    """Bootstrap stability of one selection.

    Attributes:
        chosen: the selection on all windows (sorted 0-based blocks).
        frequency: fraction of resamples selecting exactly ``chosen``.
        inclusion: per block, fraction of resamples that select it.
        alternatives: the most frequent other sets, ``[{"set", "frequency"}]``.
        windows: calibration windows resampled.
        n_boot, seed: bootstrap settings.
        criterion, strategy, budget: what was resampled.
        threshold: frequency below which the selection is called unstable.
        counts: every set that came out, with how many resamples chose it (kept in
            memory for the certificate's plausible sets; not written, not compared).
        kept, kept_frequency: the set the run keeps when the certificate replaced the
            criterion's choice, and the share of resamples that select it (``None``
            otherwise): the stability a user of the cut needs is the kept set's.
    """

    chosen: list[int]
    frequency: float
    inclusion: list[float]
    alternatives: list[dict] = field(default_factory=list)
    windows: int = 0
    n_boot: int = N_BOOT
    seed: int = 0
    criterion: str = ""
    strategy: str = ""
    budget: int = 0
    threshold: float = THRESHOLD
    counts: dict[tuple[int, ...], int] = field(default_factory=dict, repr=False, compare=False)
    kept: list[int] | None = None
    kept_frequency: float | None = None

    def keep(self, kept: list[int]) -> None:
        """Record the set the run keeps (after the certificate), with its bootstrap share."""
        if list(kept) == list(self.chosen):
            self.kept, self.kept_frequency = None, None
            return
        total = sum(self.counts.values())
        self.kept = list(kept)
        self.kept_frequency = self.counts.get(tuple(sorted(kept)), 0) / total if total else 0.0

    @property
    def kept_share(self) -> float:
        """The bootstrap share of the set the run keeps."""
        return self.frequency if self.kept_frequency is None else self.kept_frequency

    def is_stable(self, threshold: float | None = None) -> bool:
        """The kept set's share ``>= threshold`` (default: the one it was computed with)."""
        return self.kept_share >= (self.threshold if threshold is None else threshold)

    def summary(self) -> str:
        """One line for the run summary."""
        in_play = [f"{b}:{p:.2f}" for b, p in enumerate(self.inclusion) if 0.05 <= p <= 0.95]
        if self.kept is None:
            line = (
                f"stability: the kept set {self.chosen} comes out in {self.frequency:.0%} of "
                f"{self.n_boot} resamples of {self.windows} windows"
            )
        else:
            line = (
                f"stability: the kept set {self.kept} comes out in {self.kept_share:.0%} of "
                f"{self.n_boot} resamples of {self.windows} windows (the criterion's own "
                f"choice {self.chosen}: {self.frequency:.0%})"
            )
        return line + (f"; blocks in play {', '.join(in_play)}" if in_play else "")

    def warning(self, threshold: float | None = None) -> str | None:
        """A one-line warning naming the fix, or ``None`` when the selection is stable."""
        if self.is_stable(threshold):
            return None
        t = self.threshold if threshold is None else threshold
        return (
            f"warning: selection {self.kept or self.chosen} is unstable: chosen in only "
            f"{self.kept_share:.0%} of bootstrap resamples of the {self.windows} calibration "
            f"windows (threshold {t:.0%}); fix: " + FIX_HINT.format(more=2 * self.windows)
        )

    def to_dict(self) -> dict:
        """JSON record for ``plan.json`` and the model card."""
        return {
            "chosen": list(self.chosen),
            "frequency": self.frequency,
            "stable": self.is_stable(),
            "threshold": self.threshold,
            "inclusion": list(self.inclusion),
            "alternatives": self.alternatives,
            "criterion": self.criterion,
            "strategy": self.strategy,
            "budget": self.budget,
            "bootstrap": {
                "resamples": self.n_boot,
                "seed": self.seed,
                "unit": "window",
                "windows": self.windows,
            },
            **(
                {"kept": self.kept, "kept_frequency": self.kept_frequency}
                if self.kept is not None
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Stability:
        """The record :meth:`to_dict` wrote (``stable`` is recomputed)."""
        boot = d["bootstrap"]
        return cls(
            chosen=list(d["chosen"]),
            frequency=d["frequency"],
            inclusion=list(d["inclusion"]),
            alternatives=list(d["alternatives"]),
            windows=boot["windows"],
            n_boot=boot["resamples"],
            seed=boot["seed"],
            criterion=d["criterion"],
            strategy=d["strategy"],
            budget=d["budget"],
            threshold=d["threshold"],
            kept=d.get("kept"),
            kept_frequency=d.get("kept_frequency"),
        )


def summary_line(r: dict) -> str:
    """The regime call in one line (the run summary and the card say it for ``auto``)."""
    conf = "" if r.get("confidence") is None else f", confidence {r['confidence']:.0%}"
    ir = "n/a" if r["median_ir"] is None else f"{r['median_ir']:.3g}"
    line = (
        f"regime {r['call']}{conf}: median adjacent d_repl {r['median_replacement']:.3g}, "
        f"d_inter {r['median_interchange']:.3g}, I/R {ir} -> {r['advice']}"
    )
    rel = r.get("relative")
    return line + (f"; {relative_line(rel)}" if rel else "")


def relative_line(rel: dict) -> str:
    """The relative band in a few words (recorded, not acted on)."""

    def num(x):
        return "n/a" if x is None else f"{x:.3g}"

    return (
        f"relative to deletion: {rel['call']} (median d_inter/deletion "
        f"{num(rel['median_interchange_over_deletion'])}, d_repl/deletion "
        f"{num(rel['median_replacement_over_deletion'])}; not acted on)"
    )


def _stabilities(d: Mapping[str, Any]) -> dict[str, Stability]:
    return {k: Stability.from_dict(v) for k, v in d.items()}


@dataclass
class AdaptiveRecord:
    """How adaptive calibration spent its windows (``plan.json``'s ``adaptive``).

    Attributes:
        stopped: ``"certified"``, ``"stable"`` (the frequency rule) or ``"max windows"``.
        windows: windows probed in all.
        pair_windows: (pair, window) probes made.
        block_evals: decoder-block evaluations.
        seconds, cpu_seconds: wall and process CPU time of the loop.
        rounds: the loop's log, one entry per tranche (windows, pairs probed, each
            criterion's frequency and choice, the stopping rule's certificate).
        stability: criterion -> the selection's stability at the end (``None`` under
            ``auto``, whose record holds its own).
        final_certified: whether the run's final certificate certified the cut.
        stop_note: why the loop's stop and the final certificate disagree.
    """

    stopped: str
    windows: int
    pair_windows: int
    block_evals: int
    seconds: float
    cpu_seconds: float
    rounds: list[dict[str, Any]] = field(default_factory=list)
    stability: dict[str, Stability] | None = None
    final_certified: bool | None = None
    stop_note: str | None = None

    def summary(self) -> str:
        """One line for the run summary."""
        return (
            f"adaptive calibration: {self.windows} windows, {len(self.rounds)} "
            f"round{'s' if len(self.rounds) != 1 else ''}, "
            f"{self.pair_windows} pair-window probes; stopped: {self.stopped}"
        )

    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "stopped": self.stopped,
            "windows": self.windows,
            "pair_windows": self.pair_windows,
            "block_evals": self.block_evals,
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
            "rounds": self.rounds,
        }
        if self.stability is not None:
            d["stability"] = {k: v.to_dict() for k, v in self.stability.items()}
        if self.final_certified is not None:
            d["final_certified"] = self.final_certified
        if self.stop_note is not None:
            d["stop_note"] = self.stop_note
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AdaptiveRecord:
        stab = d.get("stability")
        return cls(
            stopped=d["stopped"],
            windows=d["windows"],
            pair_windows=d["pair_windows"],
            block_evals=d["block_evals"],
            seconds=d["seconds"],
            cpu_seconds=d["cpu_seconds"],
            rounds=list(d["rounds"]),
            stability=None if stab is None else _stabilities(stab),
            final_certified=d.get("final_certified"),
            stop_note=d.get("stop_note"),
        )


@dataclass
class AutoSearch:
    """``auto``'s both-high search: a beam over a shortlist, on held-out windows.

    Attributes:
        shortlist: the beam's candidates.
        shortlist_source: ``swap`` (both protocols' most removable blocks), or a
            control (``bi``, ``random``).
        verified: the set the beam found.
        oracle_metric: what the beam minimised (``ppl``).
        beam: the beam's own notes (width, cap, calls, whether capped).
        base_cost: the unpruned model's cost on the verify windows.
        sleb_iterative_calls: what SLEB-iterative would spend at this budget.
        oracle_windows: ``[windows, tokens]`` searched on.
    """

    shortlist: list[int]
    shortlist_source: str
    verified: list[int]
    oracle_metric: str
    beam: dict[str, Any]
    base_cost: float
    sleb_iterative_calls: int
    oracle_windows: list[int]

    def to_dict(self) -> dict:
        return {
            "shortlist": self.shortlist,
            "shortlist_source": self.shortlist_source,
            "verified": self.verified,
            "oracle_metric": self.oracle_metric,
            "beam": self.beam,
            "base_cost": self.base_cost,
            "sleb_iterative_calls": self.sleb_iterative_calls,
            "oracle_windows": self.oracle_windows,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AutoSearch:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


@dataclass
class AutoRecord:
    """What ``--protocol auto`` decided and what the decision rests on (``plan.json``'s ``auto``).

    Attributes:
        regime: the regime call and its numbers (:func:`swapprune.select.regime.regime_of`).
        action: what the call led to, in words.
        selections: each swap protocol's own choice.
        agree: whether the two choices are the same set.
        stability: each protocol's selection stability (where it can be resampled).
        oracle_calls: oracle calls spent (the beam's, with the base model's cost).
        windows: calibration windows scored.
        adaptive: the tranches' record, when both protocols were probed in tranches.
        chosen: the set the run removes (after the certificate).
        search: the both-high beam, when it ran.
    """

    regime: dict[str, Any]
    action: str
    selections: dict[str, list[int]]
    agree: bool
    stability: dict[str, Stability]
    oracle_calls: int
    windows: int
    adaptive: AdaptiveRecord | None
    chosen: list[int]
    search: AutoSearch | None = None

    def lines(self) -> list[str]:
        """What the run summary and the model card say about the decision."""
        lines = [summary_line(self.regime), f"action: {self.action}"]
        sel = self.selections
        if self.regime["call"] == "tie-like":
            lines.append(
                f"tie-like regime: interchange {sel['interchange']}, replacement "
                f"{sel['replacement']} ({'same' if self.agree else 'different'} sets)"
            )
        s = self.search
        if self.regime["call"] == "both-high" and s is not None:
            b = s.beam
            what = (
                "shortlist"
                if s.shortlist_source == "swap"
                else f"control shortlist ({s.shortlist_source})"
            )
            lines.append(
                f"beam on held-out windows found {s.verified} from {what} "
                f"{s.shortlist} with {self.oracle_calls} oracle calls (cap "
                f"{b['cap']}{', reached' if b['capped'] else ''}; SLEB-iterative would use "
                f"{s.sleb_iterative_calls}); kept {self.chosen}"
            )
        return lines

    def to_dict(self) -> dict:
        d = {
            "regime": self.regime,
            "action": self.action,
            "selections": self.selections,
            "agree": self.agree,
            "stability": {k: v.to_dict() for k, v in self.stability.items()},
            "oracle_calls": self.oracle_calls,
            "windows": self.windows,
            "adaptive": None if self.adaptive is None else self.adaptive.to_dict(),
        }
        if self.search is not None:
            d |= self.search.to_dict()
        return d | {"chosen": self.chosen}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AutoRecord:
        adaptive = d["adaptive"]
        return cls(
            regime=d["regime"],
            action=d["action"],
            selections={k: list(v) for k, v in d["selections"].items()},
            agree=d["agree"],
            stability=_stabilities(d["stability"]),
            oracle_calls=d["oracle_calls"],
            windows=d["windows"],
            adaptive=None if adaptive is None else AdaptiveRecord.from_dict(adaptive),
            chosen=list(d["chosen"]),
            search=AutoSearch.from_dict(d) if "shortlist" in d else None,
        )
