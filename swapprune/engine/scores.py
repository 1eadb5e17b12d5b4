"""The scores artifact: per-window probe values, their summaries and the JSON file.

Pure numpy; no torch. ``ScoreResult.to_dict()`` produces the schema-versioned
JSON written by ``swapprune score`` (distances, bootstrap CIs, directed
replacement values, per-pair ``I/R``, gap-stratified summaries, rank CIs and the
paper's regime call, :mod:`swapprune.select.regime`); ``ScoreResult.from_dict()`` reads
it back, per-window values included, so any later stage (selection, comparison,
resume) can start from the file.

A window a pair was not measured on (adaptive calibration spends windows only
on pairs that can still change the selection) holds ``nan`` (``null`` in the
JSON); every mean here skips it.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from swapprune.errors import SwappruneError
from swapprune.output.artifacts import write_json_atomic
from swapprune.select.regime import regime
from swapprune.stats import N_BOOT
from swapprune.stats.bootstrap import resample_indices

SCHEMA = "swapprune.scores/1"


def _mean(x, axis=None):
    """Mean that skips windows not measured (``nan``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(x, axis=axis)


def _windows(x: np.ndarray) -> list:
    """Per-window values for JSON: ``nan`` (not measured) becomes ``null``."""
    return [None if math.isnan(v) else v for v in np.asarray(x, dtype=float).tolist()]


def _ci(samples: np.ndarray) -> list[float]:
    lo, hi = np.nanpercentile(samples, [2.5, 97.5], axis=0)
    return [float(lo), float(hi)]


def _f(x) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


@dataclass
class ScoreResult:
    """Probe values of one model on one calibration set.

    Attributes:
        pairs: ``(i, j) -> {"repl_ij": kl[N], "repl_ji": kl[N], "inter": kl[N]}``
            (keys present for the protocols scored).
        deletion: ``i -> kl[N]``.
        meta: model, num_layers, positions, calibration, layer_types, ...
    """

    meta: dict
    pairs: dict[tuple[int, int], dict[str, np.ndarray]] = field(default_factory=dict)
    deletion: dict[int, np.ndarray] = field(default_factory=dict)
    n_boot: int = N_BOOT
    seed: int = 0

    @property
    def num_layers(self) -> int:
        return int(self.meta["num_layers"])

    # -- point values ------------------------------------------------------
    def directed(self, i: int, j: int) -> tuple[float, float]:
        """``(D(i<-j), D(j<-i))`` for a scored pair (any order of i, j)."""
        a, b = (i, j) if i < j else (j, i)
        v = self.pairs[(a, b)]
        d = (float(_mean(v["repl_ij"])), float(_mean(v["repl_ji"])))
        return d if i < j else d[::-1]

    def distance(self, protocol: str, i: int, j: int, mode: str = "max") -> float:
        """``d_repl`` (max or mean of directions) or ``d_inter`` of a scored pair."""
        key = (min(i, j), max(i, j))
        if key not in self.pairs:
            raise SwappruneError(f"pair {key[0]}-{key[1]} was not scored")
        v = self.pairs[key]
        if protocol == "replacement":
            if "repl_ij" not in v:
                raise SwappruneError("replacement was not scored")
            a, b = float(_mean(v["repl_ij"])), float(_mean(v["repl_ji"]))
            return max(a, b) if mode == "max" else (a + b) / 2
        if protocol == "interchange":
            if "inter" not in v:
                raise SwappruneError("interchange was not scored")
            return float(_mean(v["inter"]))
        raise SwappruneError(f"'{protocol}' is not a pair protocol")

    def protocols(self) -> list[str]:
        keys = set().union(*(v.keys() for v in self.pairs.values())) if self.pairs else set()
        out = [p for p, k in (("replacement", "repl_ij"), ("interchange", "inter")) if k in keys]
        return out + (["deletion"] if self.deletion else [])

    def num_windows(self) -> int:
        for v in self.pairs.values():
            return len(next(iter(v.values())))
        for d in self.deletion.values():
            return len(d)
        return 0

    # -- serialisation -----------------------------------------------------
    def to_dict(self) -> dict:
        n = self.num_windows()
        idx = resample_indices(n, self.n_boot, self.seed) if n else None
        types = self.meta.get("layer_types") or ["full_attention"] * self.num_layers
        pair_rows = []
        for i, j in sorted(self.pairs):
            pair_rows.append(self._pair_dict(i, j, self.pairs[(i, j)], idx, types))
        deletion_rows = []
        for i in sorted(self.deletion):
            v = self.deletion[i]
            deletion_rows.append(
                {
                    "layer": i,
                    "distance": float(_mean(v)),
                    "ci": _ci(_mean(v[idx], -1)),
                    "per_window": _windows(v),
                }
            )
        out = {
            "schema": SCHEMA,
            **self.meta,
            "kl": "KL(p_base || p_modified), nats",
            "bootstrap": {
                "resamples": self.n_boot,
                "seed": self.seed,
                "unit": "window",
                "interval": "95% percentile",
            },
            "pairs": pair_rows,
            "deletion": deletion_rows,
        }
        out["summary"] = summarize(
            pair_rows, self.pairs, idx, self.meta.get("positions"), self.deletion
        )
        return out

    @staticmethod
    def _pair_dict(i, j, v, idx, types) -> dict:
        row: dict = {
            "i": i,
            "j": j,
            "gap": j - i,
            "types": [types[i], types[j]],
            "crosses_types": types[i] != types[j],
        }
        if "repl_ij" in v:
            a, b = v["repl_ij"], v["repl_ji"]
            ba, bb = _mean(a[idx], -1), _mean(b[idx], -1)
            ma, mb = float(_mean(a)), float(_mean(b))
            row["replacement"] = {
                "distance": max(ma, mb),
                "mean": (ma + mb) / 2,
                "directed": [ma, mb],
                "ci": _ci(np.maximum(ba, bb)),
                "directed_ci": [_ci(ba), _ci(bb)],
                "per_window": [_windows(a), _windows(b)],
            }
        if "inter" in v:
            c = v["inter"]
            row["interchange"] = {
                "distance": float(_mean(c)),
                "ci": _ci(_mean(c[idx], -1)),
                "per_window": _windows(c),
            }
        if "repl_ij" in v and "inter" in v:
            d_r, d_i = row["replacement"]["distance"], row["interchange"]["distance"]
            boot_r = np.maximum(_mean(v["repl_ij"][idx], -1), _mean(v["repl_ji"][idx], -1))
            boot_i = _mean(v["inter"][idx], -1)
            with np.errstate(divide="ignore", invalid="ignore"):
                row["ir_ratio"] = {
                    "value": _f(d_i / d_r) if d_r > 0 else None,
                    "ci": _ci(boot_i / boot_r),
                }
            row["gap_diff"] = d_r - d_i
        return row

    def save(self, path: str | os.PathLike) -> None:
        """Write the JSON atomically (temp file + rename)."""
        write_json_atomic(path, self.to_dict())

    @classmethod
    def from_dict(cls, data: dict, path: str | os.PathLike | None = None) -> ScoreResult:
        """Read the JSON form back; anything malformed is a one-line :class:`SwappruneError`.

        Every value is checked as it is read: per-window values and the written distances
        and CIs are KL divergences (numbers, never negative), each distance is its windows'
        mean, and a recorded fingerprint has the fingerprint's fields. ``path``: the file,
        named first in the message.
        """
        prefix = f"{path}: " if path is not None else ""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            schema = data.get("schema") if isinstance(data, dict) else None
            raise SwappruneError(f"{prefix}not a swapprune scores file (schema {schema!r})")
        try:
            return cls._from_dict(data)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            what = f"missing {e}" if isinstance(e, KeyError) else str(e).splitlines()[0]
            raise SwappruneError(f"{prefix}malformed scores file: {what}") from None

    @classmethod
    def _from_dict(cls, data: dict) -> ScoreResult:
        meta = {
            k: v
            for k, v in data.items()
            if k not in ("schema", "pairs", "deletion", "summary", "bootstrap", "kl")
        }
        layers = _index(meta.get("num_layers"), "num_layers", 1, None)
        _fingerprint(meta.get("fingerprint"), layers)
        boot = data["bootstrap"]
        n_boot = _index(boot["resamples"], "bootstrap resamples", 1, None)
        res = cls(meta=meta, n_boot=n_boot, seed=_index(boot["seed"], "bootstrap seed", 0, None))
        summaries: list[tuple[dict, str, float]] = []
        for row in data["pairs"]:
            i, j = (_index(row[k], f"pair {k}", 0, layers - 1) for k in ("i", "j"))
            if not i < j:
                raise ValueError(f"pair {i}-{j} is not i < j")
            v = {}
            if "replacement" in row:
                a, b = row["replacement"]["per_window"]
                v["repl_ij"], v["repl_ji"] = _array(a), _array(b)
                ma, mb = float(_mean(v["repl_ij"])), float(_mean(v["repl_ji"]))
                summaries.append((row["replacement"], f"pair {i}-{j}'s replacement", max(ma, mb)))
            if "interchange" in row:
                v["inter"] = _array(row["interchange"]["per_window"])
                what = f"pair {i}-{j}'s interchange"
                summaries.append((row["interchange"], what, _mean(v["inter"])))
            res.pairs[(i, j)] = v
        for row in data.get("deletion", []):
            layer = _index(row["layer"], "deletion layer", 0, layers - 1)
            res.deletion[layer] = _array(row["per_window"])
            summaries.append((row, f"block {layer}'s deletion", _mean(res.deletion[layer])))
        lengths = {len(x) for v in res.pairs.values() for x in v.values()}
        lengths |= {len(x) for x in res.deletion.values()}
        if len(lengths) > 1:
            raise ValueError(f"per-window values of different lengths {sorted(lengths)}")
        for row, what, mean in summaries:  # once the windows they summarise are known sound
            _summary(row, what, float(mean))
        return res

    @classmethod
    def load(cls, path: str | os.PathLike) -> ScoreResult:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise SwappruneError(f"cannot read scores file {path}: {e}") from None
        return cls.from_dict(data, path)


#: The most negative value a KL divergence computed in float64 can round to.
KL_FLOOR = -1e-9
#: The fields of a model fingerprint (:func:`swapprune.model.fingerprint.model_fingerprint`).
FINGERPRINT_KEYS = ("config", "weights", "dtype", "num_layers")


def _number(value, what: str) -> float:
    """A finite number from JSON, or a ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} {value!r} is not a number")
    if not math.isfinite(value):
        raise ValueError(f"{what} {value!r} is not finite")
    return float(value)


def _kl(value, what: str) -> float:
    """A KL divergence from JSON: a finite number, never below zero."""
    x = _number(value, what)
    if x < KL_FLOOR:
        raise ValueError(f"{what} {value!r} is negative, which no KL divergence is")
    return x


def _array(values: list) -> np.ndarray:
    """Per-window values from JSON (``null`` -> ``nan``): KL divergences, or refused."""
    if not isinstance(values, list):
        raise ValueError(f"per-window values must be a list, got {type(values).__name__}")
    for v in values:
        if v is not None:
            _kl(v, "per-window value")
    return np.asarray([np.nan if v is None else v for v in values], dtype=float)


def _summary(row: dict, what: str, mean: float) -> None:
    """A probe's written summary: a KL distance equal to its per-window values' mean, and a CI
    of two numbers in order. The selection reads the per-window values; a distance that
    differs from them is a file edited or damaged, which would be used silently otherwise."""
    if not isinstance(row, dict):
        raise ValueError(f"{what} must be an object, got {type(row).__name__}")
    unmeasured = math.isnan(mean)  # no window measured: the summary is nan (NaN in the JSON)

    def value(x, name: str) -> float:
        if unmeasured and isinstance(x, float) and math.isnan(x):
            return x
        return _kl(x, name)

    if "distance" in row:
        d = value(row["distance"], f"{what} distance")
        if unmeasured != math.isnan(d) or (
            not unmeasured and abs(d - mean) > 1e-6 * max(1.0, abs(mean))
        ):
            raise ValueError(
                f"{what} distance {d:.6g} is not the mean of its per-window values ({mean:.6g})"
            )
    if "ci" in row:
        ci = row["ci"]
        if not isinstance(ci, list) or len(ci) != 2:
            raise ValueError(f"{what} ci must be two numbers, got {ci!r}")
        lo, hi = (value(x, f"{what} ci bound") for x in ci)
        if lo > hi:
            raise ValueError(f"{what} ci [{lo:.6g}, {hi:.6g}] is not in order")


def _fingerprint(value, layers: int) -> None:
    """A recorded model fingerprint: absent (an older file), or its four fields in shape."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise ValueError(f"fingerprint must be an object, got {value!r}")
    unknown = sorted(set(value) - set(FINGERPRINT_KEYS))
    missing = [k for k in ("config", "weights") if k not in value]
    if unknown or missing:
        raise ValueError(
            f"fingerprint {json.dumps(value)[:80]} is not a model fingerprint (fields "
            f"{', '.join(FINGERPRINT_KEYS)})"
        )
    for key in ("config", "weights"):
        digest = value[key]
        if (
            not isinstance(digest, str)
            or not digest
            or any(c not in "0123456789abcdef" for c in digest)
        ):
            raise ValueError(f"fingerprint {key} {digest!r} is not a hex digest")
    if "dtype" in value and not isinstance(value["dtype"], str):
        raise ValueError(f"fingerprint dtype {value['dtype']!r} is not a dtype name")
    if "num_layers" in value and value["num_layers"] != layers:
        raise ValueError(
            f"fingerprint num_layers {value['num_layers']!r} is not the file's {layers} blocks"
        )


def _index(value, what: str, low: int, high: int | None) -> int:
    """An integer in ``[low, high]`` from JSON, or a ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{what} {value} is out of range")
    return value


def summarize(
    rows: list[dict], pairs: dict, idx, positions: str | None = None, deletion=None
) -> dict:
    """Gap-stratified protocol gap, rank CIs, and the regime call (:mod:`swapprune.select.regime`).

    With ``deletion`` (``block -> kl[N]``) the call carries its relative band too.
    """
    both = [r for r in rows if "replacement" in r and "interchange" in r]
    summary: dict = {}
    if both:
        by_gap = []
        for g in sorted({r["gap"] for r in both}):
            rs = [r for r in both if r["gap"] == g]
            ir = [r["ir_ratio"]["value"] for r in rs if r["ir_ratio"]["value"] is not None]
            by_gap.append(
                {
                    "gap": g,
                    "pairs": len(rs),
                    "median_replacement": float(
                        np.median([r["replacement"]["distance"] for r in rs])
                    ),
                    "median_interchange": float(
                        np.median([r["interchange"]["distance"] for r in rs])
                    ),
                    "median_ir": float(np.median(ir)) if ir else None,
                    "mean_gap_diff": float(np.mean([r["gap_diff"] for r in rs])),
                    "fraction_inter_le_repl": float(
                        np.mean(
                            [
                                r["interchange"]["distance"] <= r["replacement"]["distance"]
                                for r in rs
                            ]
                        )
                    ),
                }
            )
        summary["by_gap"] = by_gap
        summary["regime"] = regime(pairs, idx, positions, deletion or None)
    if rows and idx is not None:
        summary["ranking"] = _rank_ci(rows, pairs, idx)
    return summary


def _rank_ci(rows, pairs, idx) -> dict:
    """Bootstrap rank (1 = most swap-similar) of each pair under each protocol."""
    out = {}
    keys = [(r["i"], r["j"]) for r in rows]
    for proto, fn in (
        (
            "replacement",
            lambda v: np.maximum(_mean(v["repl_ij"][idx], -1), _mean(v["repl_ji"][idx], -1)),
        ),
        ("interchange", lambda v: _mean(v["inter"][idx], -1)),
    ):
        if not all(("repl_ij" if proto == "replacement" else "inter") in pairs[k] for k in keys):
            continue
        boot = np.stack([fn(pairs[k]) for k in keys], axis=1)  # [n_boot, P]
        ranks = boot.argsort(axis=1).argsort(axis=1) + 1
        point = np.array([r[proto]["distance"] for r in rows])
        order = point.argsort()
        out[proto] = [
            {
                "i": keys[p][0],
                "j": keys[p][1],
                "rank": int(n + 1),
                "distance": float(point[p]),
                "rank_ci": [
                    int(np.percentile(ranks[:, p], 2.5)),
                    int(np.percentile(ranks[:, p], 97.5)),
                ],
            }
            for n, p in enumerate(order[:10])
        ]
    return out
