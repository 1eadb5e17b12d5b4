"""Each criterion's removal set for a landscape, all on the same calibration windows.

Every criterion goes through the package's one selection entry point
(:func:`swapprune.api.plan_pruning`) with the certificate off and fixed windows
(no tranches), so its set is what ``swapprune --protocol NAME`` would choose on
these windows. The swap probes are measured once, both protocols on adjacent
pairs, into ``scores.json`` beside the landscape (resumable) and shared by the
criteria that read them (``interchange``, ``replacement``,
``replacement-directed``, ``auto``); the model-measured criteria (SLEB both
ways, BI, angular, Taylor) share one capture and one memory of answers
(:func:`swapprune.engine.oracle.shared_oracles`). ``auto``'s beam, when it
runs, searches on its own held-out windows, disjoint from the landscape's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# api (numpy) and engine/ (torch) are imported where the criteria run: the command
# line reads CRITERIA from here while it checks its flags.

#: The criteria a landscape ranks by default, in this order.
CRITERIA = (
    "interchange",
    "replacement",
    "replacement-directed",
    "bi",
    "angular",
    "sleb-oneshot",
    "sleb",
    "taylor",
    "random",
    "auto",
)
#: Criteria that read the swap probes.
SCORED = frozenset({"interchange", "replacement", "replacement-directed", "auto"})
#: The stage name of the shared swap probes.
PROBES = "probes"


@dataclass
class Pick:
    """One criterion's set (``removed``), or the shared probes (``removed`` is ``None``).

    Attributes:
        name: the criterion, or :data:`PROBES`.
        removed: the sorted set.
        record: what the plan says about the choice (strategy, its notes).
        compute: ``cpu_s``, ``wall_s`` and the block calls / block-tokens spent.
    """

    name: str
    removed: list[int] | None
    record: dict[str, Any] = field(default_factory=dict)
    compute: dict[str, Any] = field(default_factory=dict)


@dataclass
class PickSettings:
    """The selection settings every criterion shares.

    Attributes:
        budget: blocks removed; protect_first, protect_last, serve: the constraints.
        batch_size, positions: how probes and oracles run.
        scores_path: where the swap probes are kept (``None``: not written).
        heldout: ``auto``'s held-out windows (:class:`~swapprune.select.reference.Heldout`).
    """

    budget: int
    protect_first: int = 0
    protect_last: int = 0
    serve: list[str] | None = None
    batch_size: int = 8
    positions: str = "all"
    scores_path: str | Path | None = None
    heldout: Any = None


def run_criteria(
    model,
    tokenizer,
    calibration,
    settings: PickSettings,
    names: Sequence[str] = CRITERIA,
    done: set | frozenset = frozenset(),
    model_id: str = "",
    progress: bool = False,
) -> Iterator[Pick]:
    """Yield the :class:`Pick` of every criterion in ``names`` not in ``done``, in order.

    The shared probes come first (once, when a criterion still to run reads them).
    """
    from swapprune.api import plan_pruning  # imports numpy
    from swapprune.engine.oracle import shared_oracles  # imports torch, numpy

    todo = [n for n in names if n not in done]
    scores = None
    with shared_oracles():
        if SCORED & set(todo):
            clock = _Clock()
            scores = _probe(model, calibration, settings, model_id, progress)
            timing = scores.meta.get("timing") or {}
            work = {k: int(timing.get(k, 0)) for k in ("block_evals", "block_tokens")}
            yield Pick(PROBES, None, compute=clock.read() | work)
        for name in todo:
            clock = _Clock()
            plan, _ = plan_pruning(
                model,
                tokenizer,
                calibration=calibration,
                scores=scores if name in SCORED else None,
                heldout=settings.heldout if name == "auto" else None,
                model_id=model_id,
                progress=False,
                budget=settings.budget,
                protocol=name,
                certify=False,
                adaptive="off",
                protect_first=settings.protect_first,
                protect_last=settings.protect_last,
                serve=settings.serve,
                batch_size=settings.batch_size,
                positions=settings.positions,
                seed=calibration.seed,
            )
            total = (plan.scores.get("compute") or {}).get("total") or {}
            record: dict[str, Any] = {"strategy": plan.strategy}
            if "selection" in plan.scores:
                record["selection"] = plan.scores["selection"]
            if name == "auto" and "auto" in plan.scores:
                auto = plan.scores["auto"]
                record["auto"] = {k: auto.get(k) for k in ("regime", "action", "selections")}
            yield Pick(name, sorted(plan.removed), record, clock.read() | dict(total))


def _probe(model, calibration, settings: PickSettings, model_id: str, progress: bool):
    from swapprune.engine.probing import score  # imports torch, numpy

    return score(
        model,
        calibration=calibration,
        protocols=["interchange", "replacement"],
        pairs="adjacent",
        positions=settings.positions,
        batch_size=settings.batch_size,
        out=settings.scores_path,
        model_id=model_id,
        progress=progress,
        seed=calibration.seed,
    )


class _Clock:
    def __init__(self) -> None:
        self.cpu, self.wall = time.process_time(), time.perf_counter()

    def read(self) -> dict:
        return {
            "cpu_s": time.process_time() - self.cpu,
            "wall_s": time.perf_counter() - self.wall,
        }
