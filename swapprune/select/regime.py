"""The paper's regime call: which protocol's swap scores to trust on this model.

Pure numpy. The call is made on the median adjacent pair (all scored pairs if
no adjacent pair was scored), in this order of precedence:

1. ``both-high``: median adjacent ``d_inter >= HIGH``. Swap scores alone are
   weak; verify candidates on the pruned model (``--protocol auto``) or add
   another signal. This is checked first: a model whose interchange distances
   are themselves high is not in the divergent regime, however small I/R is.
2. ``divergent``: median adjacent ``I/R < DIVERGENT_IR`` and replacement not
   small (median ``d_repl >= REPL_FLOOR``): prefer interchange-guided selection.
3. ``tie-like``: everything else (both low, or I/R near 1): either protocol.

Thresholds, in one place:

* ``HIGH = 0.10`` and ``REPL_FLOOR = 0.05`` are the paper's bands (strongly
  swap-similar ``< 0.05``, non-swap-similar ``>= 0.10``), set on
  **last-position** KL in nats. swapprune's default is ``positions=all``; on
  SmolLM2-135M the two modes' median adjacent distances differ by about 12%
  (``eval/study``: d_inter 0.190 last vs 0.168 all), so the same bands are
  applied to both and the positions mode is recorded with the call.
* ``DIVERGENT_IR = 0.7`` is ours: the paper's divergent models sit at median
  I/R 0.21-0.55 and its tie model at about 1.0.

The confidence of a call is the fraction of bootstrap resamples of the
calibration windows that give the same call.

**Relative band** (recorded beside the call, never acted on). Fixed KL bands do
not carry across vocabulary sizes, positions modes or window lengths, and the
paper states no basis for them. When deletion was probed on the same windows,
each adjacent pair's distances are also divided by what deleting the cheaper of
its two blocks costs, ``min(KL(-i), KL(-j))``, and the same precedence is applied
to the medians of those ratios with bands of our own: ``REL_HIGH = 0.5`` (an
interchange costs at least half a deletion: the pair does not commute) and
``REL_FLOOR = 0.25`` (replacement well below a deletion is "small"), keeping
``DIVERGENT_IR``. These are this project's, set by reasoning and not yet
calibrated on any model; the record says whether the two calls agree.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from swapprune.stats.bootstrap import resample_indices

HIGH = 0.10
REPL_FLOOR = 0.05
DIVERGENT_IR = 0.7
BANDS_POSITIONS = "last"
REL_HIGH = 0.5
REL_FLOOR = 0.25

ADVICE = {
    "both-high": "swap scores alone are weak; verify candidates on the pruned model "
    "(--protocol auto) or add calibration data",
    "divergent": "prefer interchange-guided selection",
    "tie-like": "either protocol; a calibrated iterative method (sleb) may win at larger budgets",
}
ACTIONS = {"both-high": "verify", "divergent": "interchange", "tie-like": "either"}


def call(
    d_repl: float, d_inter: float, ir: float, high: float = HIGH, floor: float = REPL_FLOOR
) -> str:
    """Regime of medians ``d_repl``, ``d_inter`` and I/R (``nan`` I/R never reads as divergent).

    ``high`` and ``floor`` are the bands on ``d_inter`` and ``d_repl`` (the paper's by
    default; the relative band passes its own on ratios to deletion).
    """
    if d_inter >= high:
        return "both-high"
    if ir < DIVERGENT_IR and d_repl >= floor:
        return "divergent"
    return "tie-like"


def _adjacent_keys(pairs) -> list[tuple[int, int]]:
    keys = [k for k, v in pairs.items() if "inter" in v and "repl_ij" in v]
    adj = [k for k in keys if k[1] - k[0] == 1]
    return sorted(adj or keys)


def _nanmean(x: np.ndarray) -> np.ndarray:
    """Mean over the last axis, ignoring windows a pair was not measured on (``nan``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(x, axis=-1)


def medians(pairs, keys, idx=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Median over ``keys`` of ``d_repl``, ``d_inter`` and I/R, per resample row of ``idx``.

    Args:
        pairs: ``(i, j) -> {"repl_ij", "repl_ji", "inter": kl[N]}`` (``nan`` = not measured).
        keys: pairs to take the median over.
        idx: ``[B, N]`` resampled window indices, or ``None`` for the point values.

    Returns:
        Three arrays ``[B]`` (``[1]`` without ``idx``).
    """

    repl, inter = _distances(pairs, keys, idx)  # [B, P]
    with np.errstate(divide="ignore", invalid="ignore"):
        ir = np.where(repl > 0, inter / repl, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.median(repl, -1), np.median(inter, -1), np.nanmedian(ir, -1)


def relative_band(pairs, deletion, keys, idx=None) -> dict | None:
    """The call on distances relative to deletion (see the module docstring); recorded only.

    Args:
        pairs: per-window values of the scored pairs.
        deletion: ``block -> kl[N]`` of the deletion probe on the same windows.
        keys: the pairs the fixed call used.
        idx: ``[B, N]`` bootstrap window indices, for the confidence.

    Returns:
        The relative call and its medians; ``None`` when no pair has both blocks' deletion.
    """
    used = [k for k in keys if k[0] in deletion and k[1] in deletion]
    if not used:
        return None

    def ratios(rows):  # [B, P] each
        with np.errstate(divide="ignore", invalid="ignore"):
            den = np.stack(
                [np.minimum(_boot(deletion[i], rows), _boot(deletion[j], rows)) for i, j in used],
                axis=-1,
            )
            den = np.where(den > 0, den, np.nan)
            repl, inter = _distances(pairs, used, rows)
            return repl / den, inter / den, np.where(repl > 0, inter / repl, np.nan)

    def medians_of(rows):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return [np.nanmedian(x, -1) for x in ratios(rows)]

    rr, ri, ir = (float(x[0]) for x in medians_of(None))
    name = call(rr, ri, ir, REL_HIGH, REL_FLOOR)
    confidence = None
    if idx is not None:
        br, bi, bir = medians_of(idx)
        calls = [call(a, b, c, REL_HIGH, REL_FLOOR) for a, b, c in zip(br, bi, bir)]
        confidence = float(np.mean([c == name for c in calls]))
    return {
        "call": name,
        "confidence": confidence,
        "pairs_used": len(used),
        "median_interchange_over_deletion": None if math.isnan(ri) else ri,
        "median_replacement_over_deletion": None if math.isnan(rr) else rr,
        "deletion": "min(KL(-i), KL(-j)) of each pair's two blocks, same windows",
        "thresholds": {"high": REL_HIGH, "repl_floor": REL_FLOOR, "divergent_ir": DIVERGENT_IR},
        "note": "this project's relative bands, not calibrated on any model; recorded, not acted on",
    }


def _boot(x: np.ndarray, idx) -> np.ndarray:
    return _nanmean(x[idx]) if idx is not None else _nanmean(x[None])


def _distances(pairs, keys, idx) -> tuple[np.ndarray, np.ndarray]:
    """``d_repl`` and ``d_inter`` of ``keys``, ``[B, P]`` each."""
    repl = np.stack(
        [
            np.maximum(_boot(pairs[k]["repl_ij"], idx), _boot(pairs[k]["repl_ji"], idx))
            for k in keys
        ],
        axis=-1,
    )
    inter = np.stack([_boot(pairs[k]["inter"], idx) for k in keys], axis=-1)
    return repl, inter


def regime(pairs, idx=None, positions: str | None = None, deletion=None) -> dict | None:
    """The regime call with its numbers and, given resample indices, its bootstrap confidence.

    Args:
        pairs: per-window values of the scored pairs (both protocols needed).
        idx: ``[B, N]`` bootstrap window indices (``swapprune.stats.bootstrap.resample_indices``).
        positions: positions mode the values were measured in (recorded).
        deletion: ``block -> kl[N]`` of the deletion probe on the same windows, when it
            was probed: the relative band is then recorded beside the call.

    Returns:
        ``{"call", "advice", "action", "confidence", "median_replacement",
        "median_interchange", "median_ir", "pairs_used", "thresholds", "note",
        "relative"}`` (``relative``: :func:`relative_band`, or None); ``None`` when no pair
        has both protocols.
    """
    keys = _adjacent_keys(pairs)
    if not keys:
        return None
    d_r, d_i, ir = (float(x[0]) for x in medians(pairs, keys))
    name = call(d_r, d_i, ir)
    confidence = None
    if idx is not None:
        br, bi, bir = medians(pairs, keys, idx)
        calls = [call(a, b, c) for a, b, c in zip(br, bi, bir)]
        confidence = float(np.mean([c == name for c in calls]))
    note = f"bands set by the paper on {BANDS_POSITIONS}-position KL"
    if positions and positions != BANDS_POSITIONS:
        note += f"; these scores use positions={positions}"
    return {
        "call": name,
        "advice": ADVICE[name],
        "action": ACTIONS[name],
        "confidence": confidence,
        "pairs_used": len(keys),
        "median_replacement": d_r,
        "median_interchange": d_i,
        "median_ir": None if math.isnan(ir) else ir,
        "thresholds": {
            "high": HIGH,
            "repl_floor": REPL_FLOOR,
            "divergent_ir": DIVERGENT_IR,
            "positions": BANDS_POSITIONS,
        },
        "positions": positions,
        "note": note,
        "relative": relative_band(pairs, deletion, keys, idx) if deletion else None,
    }


def regime_of(scores, n_boot: int | None = None, seed: int | None = None) -> dict | None:
    """:func:`regime` of a :class:`~swapprune.engine.scores.ScoreResult`, with confidence."""
    n = scores.num_windows()
    idx = resample_indices(n, n_boot or scores.n_boot, scores.seed if seed is None else seed)
    return regime(
        scores.pairs, idx if n else None, scores.meta.get("positions"), scores.deletion or None
    )
