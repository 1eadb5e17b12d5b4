"""``swapprune landscape``: every removal set of a small budget, and where each criterion's cut ranks.

The sequence (:func:`run_landscape`), on one loaded model:

1. **criteria**: every criterion's set on the same calibration windows
   (:mod:`swapprune.studies.landscape_picks`);
2. **screening**: every admissible set on the first round's windows, then the
   survivors of each round (:func:`swapprune.select.landscape.survivors`) on
   the next, more and longer windows, in bfloat16 when asked; the final round
   keeps the top-k;
3. **refinement**: the top-k, and every criterion's set (screened out or not),
   in float32 on held-out 512-token windows disjoint from every screening and
   calibration window, with paired bootstrap CIs of each set's cost and of its
   regret against the best refined set;
4. **report**: ``landscape.json`` and ``landscape.png``.

``landscape.json`` is the run's state too: it is written atomically after each
batch of sets (and each criterion), and a run pointed at an existing file with
the same settings, model and windows resumes where it stopped. Every number in
it is a function of per-window NLLs stored in it, so a resumed run ends with
the same file as an uninterrupted one, apart from ``compute`` (CPU time and
block-tokens actually spent, summed over the runs).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from swapprune.errors import SwappruneError
from swapprune.output.artifacts import write_json_atomic
from swapprune.select.landscape import (
    MARGIN,
    TOP_K,
    Admissible,
    ScreeningRule,
    Z,
    parse_key,
    set_key,
    survivors,
)
from swapprune.stats import N_BOOT
from swapprune.studies.landscape_plot import write_picture
from swapprune.studies.landscape_report import arrays, result
from swapprune.studies.landscape_windows import LandscapeWindows, build_windows, check_disjoint

# model.fingerprint and engine.exhaustive import torch: they are imported where the
# model is evaluated, so that checking a landscape imports no torch.

__all__ = ["LandscapeSettings", "LandscapeWindows", "build_windows", "run_landscape"]

FORMAT = "swapprune-landscape/1"
FILE = "landscape.json"
PICTURE = "landscape.png"
#: Keys of ``landscape.json`` a resumed run must find unchanged.
HEADER = ("format", "model", "settings", "constraints", "windows", "sets", "criteria_asked")


@dataclass(frozen=True)
class LandscapeSettings:
    """What a landscape measures and how.

    Attributes:
        budget: blocks removed.
        top_k: sets refined on the held-out windows.
        rounds: ``(windows, tokens)`` of each screening round, in order.
        refine: ``(windows, tokens)`` of the held-out refinement.
        z, margin, min_keep, max_refine: the screening rule (:class:`~swapprune.select.landscape.ScreeningRule`).
        bf16_screening: screening rounds run on a bfloat16 copy (refinement stays float32).
        batch_size: windows per forward; batch_sets: sets per written batch.
        n_boot, seed: the refinement's paired bootstrap; seed also picks the windows.
    """

    budget: int
    top_k: int = TOP_K
    rounds: tuple[tuple[int, int], ...] = ((8, 64), (16, 128))
    refine: tuple[int, int] = (8, 512)
    z: float = Z
    margin: float = MARGIN
    min_keep: int | None = None
    max_refine: int | None = None
    bf16_screening: bool = False
    batch_size: int = 8
    batch_sets: int = 32
    n_boot: int = N_BOOT
    seed: int = 0

    def rule(self) -> ScreeningRule:
        return ScreeningRule(self.z, self.margin, self.top_k, self.min_keep, self.max_refine)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["rounds"] = [list(r) for r in self.rounds]
        out["refine"] = list(self.refine)
        out["rule"] = self.rule().to_dict()
        return out


# -- state -------------------------------------------------------------------------------
class _Meter:
    """CPU time, wall time and an evaluator's counters spent in one stage, added to the state."""

    def __init__(self, state: dict, stage: str, evaluator=None):
        self.state, self.stage, self.ev = state, stage, evaluator
        self._mark()

    def _mark(self) -> None:
        self.cpu, self.wall = time.process_time(), time.perf_counter()
        self.work = self.ev.compute() if self.ev is not None else {}

    def flush(self, extra: dict | None = None) -> None:
        row = self.state["compute"].setdefault(self.stage, {"cpu_s": 0.0, "wall_s": 0.0})
        row["cpu_s"] += time.process_time() - self.cpu
        row["wall_s"] += time.perf_counter() - self.wall
        now = self.ev.compute() if self.ev is not None else {}
        for k, v in (extra or {}).items():
            row[k] = row.get(k, 0) + v
        for k, v in now.items():
            row[k] = row.get(k, 0) + v - self.work.get(k, 0)
        self._mark()


def _add(state: dict, stage: str, compute: dict) -> None:
    """Add one stage's counters to ``state["compute"]`` (a resumed run adds to the last)."""
    row = state["compute"].setdefault(stage, {})
    for k, v in compute.items():
        row[k] = row.get(k, 0) + v


def _load(path: Path, header: dict) -> dict:
    """The state in ``path`` if its header matches, a new one if there is none."""
    if not path.is_file():
        return {**header, "criteria": {}, "rounds": [], "refine": None, "compute": {},
                "result": None, "complete": False}  # fmt: skip
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SwappruneError(
            f"cannot read {path}: {e}; remove it or give another --output"
        ) from None
    for k in HEADER:
        if json.dumps(state.get(k), sort_keys=True) != json.dumps(header[k], sort_keys=True):
            raise SwappruneError(
                f"{path} was written with other {k}; give another --output or remove it"
            )
    return state


# -- the sequence ------------------------------------------------------------------------
def run_landscape(
    model,
    settings: LandscapeSettings,
    windows: LandscapeWindows,
    admissible: Admissible,
    output: str | Path,
    *,
    criteria: Callable[[set], Iterator] | None = None,
    criteria_names: Sequence[str] = (),
    model_id: str = "",
    constraints: dict | None = None,
    progress: bool = True,
    say: Callable[[str], None] | None = None,
    on_batch: Callable[[str, int], None] | None = None,
    picture: bool = True,
) -> dict:
    """Run (or resume) a landscape into ``output``; returns the final state.

    Args:
        model: causal LM (float32; left unmodified).
        settings, windows, admissible: what to measure, on which windows, which sets.
        output: directory of ``landscape.json`` and ``landscape.png``.
        criteria: ``done -> iterator of Pick``: runs every criterion not in ``done``
            (:func:`swapprune.studies.landscape_picks.run_criteria`); ``None``: no criteria.
        criteria_names: the criteria ``criteria`` runs (recorded: a resumed run must ask
            for the same).
        model_id: recorded; constraints: recorded (``--serve`` and the like).
        say: receives stage lines; on_batch: ``(stage, sets done)`` after each written batch.
        picture: draw ``landscape.png`` at the end.
    """
    from swapprune.model.fingerprint import model_fingerprint  # imports torch

    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    path = out / FILE
    sets = admissible.sets()
    if not sets:
        raise SwappruneError(f"no removal set of {admissible.budget} blocks is admissible")
    header = {
        "format": FORMAT,
        "model": {"id": model_id, "fingerprint": model_fingerprint(model)},
        "settings": settings.to_dict(),
        "constraints": {
            "describe": admissible.describe(),
            "protect_first": admissible.protect_first,
            "protect_last": admissible.protect_last,
            "never_adjacent": admissible.never_adjacent,
            "in_phase": admissible.in_phase is not None,
            **(constraints or {}),
        },
        "windows": {**windows.describe(), "disjoint": check_disjoint(windows)},
        "sets": {"total": admissible.total(), "admissible": len(sets)},
        "criteria_asked": list(criteria_names),
    }
    state = _load(path, header)
    saved = lambda: write_json_atomic(path, state)  # noqa: E731
    tell = say or (lambda _line: None)
    if state["complete"]:
        tell(f"[landscape] {path} is complete; nothing to do")
        return state

    # 1. criteria
    if criteria is not None:
        for pick in criteria(set(state["criteria"])):
            if pick.removed is None:  # shared work (the swap probes), counted on its own
                _add(state, pick.name, pick.compute)
            else:
                state["criteria"][pick.name] = {"set": list(pick.removed), **pick.record}
                _add(state, f"criterion {pick.name}", pick.compute)
            saved()
    picks = {n: tuple(c["set"]) for n, c in state["criteria"].items() if c.get("set") is not None}

    # 2. screening
    rule = settings.rule()
    current = list(sets)
    admitted = set(sets)
    extras = sorted({p for p in picks.values() if p not in admitted})
    screen_model = None
    for r, cal in enumerate(windows.rounds):
        if r > 0 and len(current) <= rule.top_k:
            break  # every set left is refined
        if len(state["rounds"]) <= r:
            state["rounds"].append(
                {"dtype": None, "tokens": None, "base": None, "nll": {}, "kept": None}
            )
        rec = state["rounds"][r]
        final = r == len(windows.rounds) - 1
        todo = [s for s in current + (extras if r == 0 else []) if set_key(s) not in rec["nll"]]
        if todo:
            if screen_model is None:
                screen_model = _screening_model(model, settings.bf16_screening)
            shape = tuple(cal.input_ids.shape)
            tell(
                f"[landscape] round {r}: {len(todo)} of {len(current)} sets to evaluate on "
                f"{shape[0]} windows x {shape[1]} tokens ({_dtype_name(screen_model)})"
            )
            _evaluate(state, rec, f"round {r}", screen_model, cal.input_ids, todo, settings,
                      saved, progress, on_batch)  # fmt: skip
        if rec["kept"] is None:
            nll = arrays(rec)
            nxt = survivors({s: nll[s] for s in current}, np.asarray(rec["tokens"]), rule, final)
            rec["kept"] = [set_key(s) for s in nxt]
            saved()
        current = [parse_key(k) for k in rec["kept"]]
        if final:
            break
    del screen_model

    # 3. refinement, float32
    refined = sorted(set(current) | set(picks.values()))
    if state["refine"] is None:
        state["refine"] = {"dtype": None, "tokens": None, "base": None, "nll": {}}
    rec = state["refine"]
    todo = [s for s in refined if set_key(s) not in rec["nll"]]
    if todo:
        shape = tuple(windows.refine.input_ids.shape)
        tell(
            f"[landscape] refinement: {len(todo)} sets on {shape[0]} held-out windows x "
            f"{shape[1]} tokens ({_dtype_name(model)})"
        )
        _evaluate(state, rec, "refine", model, windows.refine.input_ids, todo, settings, saved,
                  progress, on_batch)  # fmt: skip

    # 4. report
    state["result"] = result(state, sets, current, picks, settings)
    state["complete"] = True
    saved()
    if not picture:
        return state
    try:
        write_picture(state, out / PICTURE)
    except ImportError:  # matplotlib is optional: the JSON is the result
        tell("[landscape] matplotlib is missing: no picture")
    return state


def _dtype_name(model) -> str:
    return str(next(model.parameters()).dtype).replace("torch.", "")


def _screening_model(model, bf16: bool):
    if not bf16:
        return model
    import torch  # imports torch

    from swapprune.engine.exhaustive import low_precision_copy  # imports torch

    return low_precision_copy(model, torch.bfloat16)


def _evaluate(
    state, rec, stage, model, input_ids, todo, settings, saved, progress, on_batch
) -> None:
    """Evaluate ``todo`` in batches of sets, writing the state after each."""
    from tqdm.auto import tqdm  # imports tqdm

    from swapprune.engine.exhaustive import SetEvaluator  # imports torch

    # Sets are non-empty: each walk starts from the state entering its first removed block.
    ev = SetEvaluator(model, input_ids, settings.batch_size, slots={min(s) for s in todo})
    meter = _Meter(state, stage, ev)
    if rec["base"] is None:
        rec["dtype"] = _dtype_name(model)
        rec["tokens"] = ev.tokens.tolist()
        rec["base"] = ev.base().tolist()
        meter.flush()
        saved()
    done = len(rec["nll"])
    with tqdm(total=len(todo), desc=stage, disable=not progress, dynamic_ncols=True) as bar:
        for i in range(0, len(todo), settings.batch_sets):
            chunk = todo[i : i + settings.batch_sets]
            for s, v in ev.evaluate(chunk, on_set=lambda _s: bar.update()).items():
                rec["nll"][set_key(s)] = v.tolist()
            done += len(chunk)
            meter.flush()
            saved()
            if on_batch is not None:
                on_batch(stage, done)
