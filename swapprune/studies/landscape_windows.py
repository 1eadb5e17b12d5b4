"""The windows of a landscape: one set per screening round and the held-out ones, all disjoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swapprune.errors import SwappruneError


@dataclass
class LandscapeWindows:
    """The windows of a landscape: one set per screening round, and the held-out ones.

    Each is a :class:`~swapprune.calibration.windows.Calibration` (token ids, source,
    seed, spans); windows passed in from elsewhere may carry no spans.
    """

    rounds: list
    refine: Any
    criteria: Any = None

    def describe(self) -> dict:
        return {
            "criteria": self.criteria.describe() if self.criteria is not None else None,
            "rounds": [w.describe() for w in self.rounds],
            "refine": self.refine.describe(),
        }


def build_windows(tokenizer, settings, calibration, source=None, refine_source=None):
    """Screening and held-out windows of ``source`` (default: the calibration's), all disjoint.

    ``settings``: a :class:`~swapprune.studies.landscape.LandscapeSettings` (its rounds,
    refinement and seed).

    The held-out windows are drawn first, avoiding the calibration windows, so they stay
    the same whatever the screening schedule; round ``r``'s windows avoid the calibration
    windows, the held-out ones and every earlier round's
    (:func:`swapprune.calibration.heldout.heldout_windows`).
    """
    from swapprune.calibration.heldout import heldout_windows  # imports torch

    source = source or calibration.source
    windows, tokens = settings.refine
    refine = heldout_windows(
        tokenizer, refine_source or source, windows, tokens, settings.seed + 997, [calibration]
    )
    rounds: list = []
    for r, (windows, tokens) in enumerate(settings.rounds):
        seed = settings.seed + 101 * (r + 1)
        avoid = [calibration, refine, *rounds]
        rounds.append(heldout_windows(tokenizer, source, windows, tokens, seed, avoid))
    return LandscapeWindows(rounds, refine, calibration)


def check_disjoint(windows: LandscapeWindows, gram: int = 32) -> str:
    """Refuse held-out windows that overlap a screening or calibration window; say how it was checked.

    Windows of one source with positions are compared by their spans of the source's
    token ids (as :mod:`swapprune.calibration.heldout` picks them); windows of different
    sources are disjoint by construction; windows without positions are compared by
    every run of ``gram`` token ids.
    """
    refine = windows.refine
    others = [w for w in [windows.criteria, *windows.rounds] if w is not None]
    how = set()
    for w in others:
        if w.source != refine.source and w.spans is not None and refine.spans is not None:
            how.add("sources")
            continue
        if w.spans is not None and refine.spans is not None:
            how.add("spans")
            if any(a < d and c < b for a, b in w.spans for c, d in refine.spans):
                raise SwappruneError(
                    f"held-out windows overlap the screening windows of {w.source}"
                )
            continue
        how.add(f"{gram}-grams of token ids")
        seen = {
            tuple(r[i : i + gram]) for r in w.input_ids.tolist() for i in range(len(r) - gram + 1)
        }
        for r in refine.input_ids.tolist():
            if any(tuple(r[i : i + gram]) in seen for i in range(len(r) - gram + 1)):
                raise SwappruneError("held-out windows share token ids with the screening windows")
    return ", ".join(sorted(how)) or "nothing to check"
