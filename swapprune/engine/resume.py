"""Resuming a scores file: what an interrupted run left, and whether a rerun may adopt it.

A run with ``out`` flushes an ``incomplete`` record (the units in flight, with
the windows already measured); :func:`resume` reads it back. A file from
other settings, or one that is damaged, is refused with one line and never
overwritten (see :mod:`swapprune.engine.probing`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from swapprune.engine.orders import PROBES
from swapprune.engine.probes import PartialUnit, Unit
from swapprune.engine.scores import ScoreResult
from swapprune.errors import SwappruneError
from swapprune.model.fingerprint import fingerprint_difference

# Meta fields that must match for a rerun to resume from an existing file (besides the model).
_RESUME_KEYS = ("model_type", "num_layers", "dtype", "positions")
_CALIBRATION_KEYS = ("source", "prompts", "tokens", "seed", "sha256")


def incomplete_record(
    in_flight: dict[Unit, PartialUnit], left: int, mode: str, batch_size: int
) -> dict:
    """The ``incomplete`` meta record of a file written before the run finished."""
    partial = []
    for unit, part in in_flight.items():
        values = part.values[mode]
        partial.append(
            {
                "i": unit.i,
                "j": unit.j,
                "protocols": list(unit.protocols) if unit.protocols else None,
                "done": _ranges(part.done),
                "values": {
                    k: [float(x) if d else None for x, d in zip(v, part.done)]
                    for k, v in values.items()
                },
            }
        )
    return {
        "note": "written by an unfinished run; rerun the same command to finish it",
        "units_left": left,
        "batch_size": batch_size,
        "partial_units": partial,
    }


def _ranges(mask: np.ndarray) -> list[list[int]]:
    """``[[start, stop), ...]`` of the True runs of ``mask``."""
    out: list[list[int]] = []
    for k in np.flatnonzero(mask).tolist():
        if out and out[-1][1] == k:
            out[-1][1] = k + 1
        else:
            out.append([k, k + 1])
    return out


def settings_difference(old: dict, new: dict) -> str | None:
    """The first setting that differs between two scores files' meta, in words (``None``: same)."""
    if old.get("fingerprint") and new.get("fingerprint"):
        diff = fingerprint_difference(old["fingerprint"], new["fingerprint"])
        if diff:
            return f"model: {diff}"
    elif old.get("model") != new.get("model"):
        return f"model {old.get('model')!r} vs {new.get('model')!r}"
    for key in _RESUME_KEYS:
        if old.get(key) != new.get(key):
            return f"{key} {old.get(key)!r} vs {new.get(key)!r}"
    oc, nc = old.get("calibration") or {}, new.get("calibration") or {}
    for key in _CALIBRATION_KEYS:
        if oc.get(key) != nc.get(key):
            return f"calibration {key} {oc.get(key)!r} vs {nc.get(key)!r}"
    return None


def resume(result: ScoreResult, path: Path, batch_size: int) -> dict[Unit, PartialUnit]:
    """Adopt what ``path`` holds, or refuse it; returns the units it left in flight.

    Raises:
        SwappruneError: the file cannot be read, is not a scores file, is
            inconsistent, or comes from different settings (nothing is written).
    """
    hint = "move it away or choose another output file"
    try:
        old = ScoreResult.load(path)
    except SwappruneError as e:
        raise SwappruneError(f"cannot resume: {e}; {hint}") from None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise SwappruneError(
            f"cannot resume: {path} is not a complete scores file ({type(e).__name__}: {e}); {hint}"
        ) from None
    diff = settings_difference(old.meta, result.meta)
    if diff:
        raise SwappruneError(
            f"cannot resume: {path} was scored with different settings ({diff}); "
            "rerun with its settings, or " + hint
        )
    n, L = result.meta["calibration"]["prompts"], result.num_layers
    try:
        _check_values(old, n, L)
        in_flight = _in_flight(old.meta.get("incomplete"), n, batch_size, result.meta["positions"])
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise SwappruneError(f"cannot resume: {path} is inconsistent ({e}); {hint}") from None
    result.pairs.update(old.pairs)
    result.deletion.update(old.deletion)
    claimed = set(old.meta.get("protocols") or old.protocols()) | set(result.meta["protocols"])
    result.meta["protocols"] = [p for p in PROBES if p in claimed]
    return in_flight


def _check_values(old: ScoreResult, n: int, num_layers: int) -> None:
    for (i, j), v in old.pairs.items():
        if not 0 <= i < j < num_layers:
            raise ValueError(f"pair {i}-{j} is out of range")
        for key, arr in v.items():
            if len(arr) != n:
                raise ValueError(f"pair {i}-{j} {key} has {len(arr)} windows, not {n}")
    for i, arr in old.deletion.items():
        if not 0 <= i < num_layers or len(arr) != n:
            raise ValueError(f"deletion row {i} is malformed")


def _in_flight(record: dict | None, n: int, batch_size: int, mode: str) -> dict[Unit, PartialUnit]:
    """Units an interrupted run left half-measured; dropped (restarted) when the batch size differs."""
    if not record or record.get("batch_size") != batch_size:
        return {}
    out = {}
    for row in record["partial_units"]:
        protocols = tuple(row["protocols"]) if row.get("protocols") else None
        unit = Unit(int(row["i"]), None if row["j"] is None else int(row["j"]), protocols)
        done = np.zeros(n, dtype=bool)
        for a, b in row["done"]:
            done[int(a) : int(b)] = True
        values = {}
        for key, vals in row["values"].items():
            arr = np.array([math.nan if x is None else float(x) for x in vals])
            if len(arr) != n:
                raise ValueError(f"partial unit {unit.i}-{unit.j} has {len(arr)} windows, not {n}")
            values[key] = arr
        out[unit] = PartialUnit({mode: values}, done)
    return out
