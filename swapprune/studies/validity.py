"""Predictor validity: does a criterion's removability predict the real cost of deleting a block?

The paper's check (``docs/method.md`` section 14): the Spearman correlation, over the
``L`` blocks, between each block's removability under a criterion and the
measured cost of deleting that block alone (Pythia-1.4B: interchange 0.72,
replacement 0.68, BI 0.61). Positive = the criterion ranks cheap deletions as
removable.

* Target: ``cost(l) = PPL(model without block l) / PPL(base) - 1`` on the
  target windows (the calibration windows unless ``target`` is given; held-out
  windows avoid scoring SLEB against its own measurements, for which the
  correlation is 1 by construction).
* Per-layer removability: each criterion's single-block importance (angular at
  span 1 on the last token, SLEB's first pass, swap removability as min over
  the scored partners).
* Confidence interval: percentile bootstrap over **windows** (default 1,000
  resamples). One resample draws windows with replacement and recomputes both
  the criterion's removability (from its per-window values) and the deletion
  costs, then the Spearman. When target and calibration windows are the same
  set, both are drawn with the same indices; otherwise independently. Criteria
  without per-window values (``taylor``, ``random``, ``reverse``) stay fixed and
  only the target is resampled, which the report says. Resampling windows keeps
  the layers fixed, so the interval reflects calibration noise, not the choice
  of model: even ``random``'s can exclude 0, so these intervals cannot rank
  criteria.
* Layer bootstrap (:mod:`swapprune.stats.layers`): the blocks are resampled
  instead, with removability and cost at their point values, one draw for every
  criterion; each criterion gets that CI too, and the paired differences of
  :data:`DIFFERENCES` (interchange - BI first) get theirs. These are the
  intervals that can say whether one criterion predicts better than another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from swapprune.config import quick_of
from swapprune.errors import SwappruneError
from swapprune.pipeline import checks, stages
from swapprune.pipeline import forecast as fc
from swapprune.pipeline.record import Steps, Wording
from swapprune.select import criteria as criteria_mod
from swapprune.select.criteria import SWAP
from swapprune.stats import N_BOOT
from swapprune.stats.bootstrap import resample_indices
from swapprune.stats.layers import layer_bootstrap_spearman
from swapprune.studies.validity_report import write_validity_report

# engine/ and calibration.windows import torch: they are imported where the model is
# probed, so that checking a study imports no torch.

SCHEMA = "swapprune.validity/1"
#: Paired Spearman differences reported under the layer bootstrap, when both are checked.
DIFFERENCES = (("interchange", "bi"), ("replacement-directed", "interchange"))
#: Criteria read from the pair probes, and the probe each needs.
PAIR_CRITERIA = {
    "interchange": "interchange",
    "replacement": "replacement",
    "replacement-directed": "replacement",
}


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n along the last axis, ties get their average rank (as scipy's default)."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, axis=-1, kind="stable")
    ranks = np.empty_like(x)
    np.put_along_axis(
        ranks, order, np.arange(1, x.shape[-1] + 1, dtype=float) * np.ones_like(x), axis=-1
    )
    flat_x, flat_r = x.reshape(-1, x.shape[-1]), ranks.reshape(-1, x.shape[-1])
    for row_x, row_r in zip(flat_x, flat_r):
        vals, inv, counts = np.unique(row_x, return_inverse=True, return_counts=True)
        if len(vals) < len(row_x):
            sums = np.bincount(inv, weights=row_r)
            row_r[:] = (sums / counts)[inv]
    return flat_r.reshape(x.shape)


def spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman correlation along the last axis (NaN where either side is constant)."""
    ra, rb = rankdata(a), rankdata(b)
    ra = ra - ra.mean(-1, keepdims=True)
    rb = rb - rb.mean(-1, keepdims=True)
    den = np.sqrt((ra**2).sum(-1) * (rb**2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (ra * rb).sum(-1) / np.where(den > 0, den, 1), np.nan)


# A per-window source: (values, reduce) where reduce(values, idx) -> removability [L].
Source = tuple[Any, Callable[[Any, np.ndarray], np.ndarray]]


def _window_mean(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return values[idx].mean(0)


def _swap_reduce(protocol: str, num_layers: int):
    def reduce(pairs: dict, idx: np.ndarray) -> np.ndarray:
        out = np.full(num_layers, np.inf)
        for (i, j), v in pairs.items():
            if protocol == "interchange":
                d_i = d_j = v["inter"][idx].mean()
            elif protocol == "replacement":
                d_i = d_j = max(v["repl_ij"][idx].mean(), v["repl_ji"][idx].mean())
            else:  # replacement-directed: D(i<-j) for block i, D(j<-i) for block j
                d_i, d_j = v["repl_ij"][idx].mean(), v["repl_ji"][idx].mean()
            out[i], out[j] = min(out[i], d_i), min(out[j], d_j)
        return out

    return reduce


def _sources(names: Sequence[str], oracle, scores, seed: int) -> dict[str, Source | np.ndarray]:
    """Per criterion: a per-window source, or a fixed ``[L]`` vector."""
    L = oracle.L
    out: dict[str, Source | np.ndarray] = {}
    sim: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}

    def similarity(positions: str):
        if (positions, 1) not in sim:
            sim[(positions, 1)] = oracle.similarity_windows([], 1, positions)
        return sim[(positions, 1)]

    single: dict[str, np.ndarray] = {}

    def deletion(metric: str) -> np.ndarray:
        if metric not in single:
            single[metric] = np.stack([oracle.window_costs([b], metric) for b in range(L)], axis=1)
        return single[metric]  # [N, L]

    for name in names:
        crit = criteria_mod.get(name)
        if name in PAIR_CRITERIA:
            pairs = {
                p: v
                for p, v in scores.pairs.items()
                if ("inter" if name == "interchange" else "repl_ij") in v
            }
            out[name] = (pairs, _swap_reduce(name, L))
        elif name == "deletion" and scores is not None and scores.deletion:
            out[name] = (np.stack([scores.deletion[b] for b in range(L)], axis=1), _window_mean)
        elif name in ("deletion", "sleb-kl"):
            out[name] = (deletion("kl"), _window_mean)
        elif name in ("sleb", "sleb-oneshot"):
            out[name] = (deletion("ppl"), _window_mean)
        elif name in ("bi", "bi-greedy"):
            out[name] = (similarity("all")[0], _window_mean)
        elif name in ("angular", "angular-tokens"):
            out[name] = (similarity(getattr(crit, "positions", "all"))[1], _window_mean)
        else:
            ctx = criteria_mod.Context(num_layers=L, scores=scores, oracle=oracle, seed=seed)
            out[name] = np.asarray(crit.importance(ctx), dtype=float)
    return out


def predictor_validity(
    model,
    calibration,
    criteria: Sequence[str],
    scores=None,
    *,
    target=None,
    positions: str = "all",
    batch_size: int = 8,
    n_boot: int = N_BOOT,
    seed: int = 0,
    progress: bool = False,
) -> dict:
    """Spearman between each criterion's per-layer removability and the single-block deletion cost.

    Args:
        model: causal LM (not modified).
        calibration: :class:`~swapprune.calibration.windows.Calibration` the criteria run on.
        criteria: registered criterion names.
        scores: a :class:`~swapprune.engine.scores.ScoreResult` on the same windows, reused
            for the swap criteria (and ``deletion``); probed here when needed and absent.
        target: a Calibration on which the deletion cost is measured (default: ``calibration``).
        positions: positions mode of the swap probes when they are measured here.
        batch_size: windows per forward.
        n_boot: bootstrap resamples; seed: their seed.

    Returns:
        A JSON-ready dict (``schema``, ``deletion_cost``, ``criteria``: per criterion the
        ``removability``, ``spearman``, ``ci`` and what was resampled).
    """
    from swapprune.engine.oracle import CalibrationOracle  # imports torch

    for name in criteria:
        criteria_mod.get(name)  # unknown names fail before any forward pass
    oracle = CalibrationOracle(model, calibration.input_ids, batch_size, "ppl")
    L = oracle.L
    if L < 3:
        raise SwappruneError(f"a rank correlation over {L} blocks means nothing; need >= 3")
    need_pairs = [p for p in SWAP if p in {PAIR_CRITERIA.get(c) for c in criteria}]
    if need_pairs and (scores is None or not set(need_pairs) <= set(scores.protocols())):
        from swapprune.engine.probing import score  # imports torch

        scores = score(
            model,
            calibration=calibration,
            protocols=tuple(need_pairs),
            pairs="adjacent",
            positions=positions,
            batch_size=batch_size,
            progress=progress,
            seed=seed,
        )
    sources = _sources(criteria, oracle, scores, seed)

    t_oracle = (
        oracle if target is None else CalibrationOracle(model, target.input_ids, batch_size, "ppl")
    )
    base_nll = t_oracle.window_costs([], "ppl")  # [N_t]
    del_nll = np.stack([t_oracle.window_costs([b], "ppl") for b in range(L)], axis=1)  # [N_t, L]

    def cost(idx: np.ndarray) -> np.ndarray:
        return np.exp(del_nll[idx].mean(0) - base_nll[idx].mean()) - 1

    n_cal, n_t = calibration.input_ids.shape[0], len(base_nll)
    t_idx = resample_indices(n_t, n_boot, seed)
    joint = target is None
    c_idx = t_idx if joint else resample_indices(n_cal, n_boot, seed + 1)
    full_t, full_c = np.arange(n_t), np.arange(n_cal)
    cost_point = cost(full_t)
    cost_boot = np.stack([cost(i) for i in t_idx])  # [B, L]

    rows: dict[str, dict] = {}
    points: dict[str, np.ndarray] = {}
    for name, src in sources.items():
        if isinstance(src, np.ndarray):
            point = src
            boot = np.broadcast_to(src, cost_boot.shape)
            resampled = "target windows only (no per-window values)"
        else:
            values, reduce = src
            n_src = _num_windows(values)
            idx = c_idx if n_src == n_cal else resample_indices(n_src, n_boot, seed + 2)
            point = reduce(values, np.arange(n_src) if n_src != n_cal else full_c)
            boot = np.stack([reduce(values, i) for i in idx])
            resampled = "windows" + (
                " (same draws as the target)"
                if joint and n_src == n_cal
                else " (drawn independently of the target)"
            )
        points[name] = np.asarray(point, dtype=float)
        rho = float(spearman(point, cost_point))
        reps = spearman(boot, cost_boot)
        reps = reps[np.isfinite(reps)]
        lo, hi = np.percentile(reps, [2.5, 97.5]) if len(reps) else (np.nan, np.nan)
        rows[name] = {
            "source": criteria_mod.get(name).source,
            "removability": [float(x) for x in point],
            "spearman": rho,
            "ci": [float(lo), float(hi)],
            "resampled": resampled,
        }
    return {
        "schema": SCHEMA,
        "num_layers": L,
        "calibration": calibration.describe(),
        "target": (calibration if target is None else target).describe(),
        "target_is_calibration": joint,
        "positions": positions if need_pairs else None,
        "deletion_cost": {
            "definition": "PPL(without block l) / PPL(base) - 1 on the target windows",
            "base_ppl": float(np.exp(base_nll.mean())),
            "per_layer": [float(x) for x in cost_point],
        },
        "bootstrap": {
            "resamples": n_boot,
            "seed": seed,
            "unit": "window",
            "interval": "95% percentile",
        },
        "criteria": rows,
        "layer_bootstrap": _layer_bootstrap(points, cost_point, rows, n_boot, seed),
    }


def _layer_bootstrap(points, cost, rows, n_boot: int, seed: int) -> dict:
    """Each criterion's Spearman CI over resampled blocks, and the paired differences."""
    lb = layer_bootstrap_spearman(points, cost, n_boot=n_boot, seed=seed)
    for name, iv in lb.intervals.items():
        rows[name]["layer_ci"] = [iv.low, iv.high]
    out = lb.to_dict()
    out["differences"] = {}
    for a, b in DIFFERENCES:
        if a in points and b in points:
            iv, p = lb.difference(a, b)
            out["differences"][f"{a} - {b}"] = {
                "estimate": iv.estimate,
                "ci": [iv.low, iv.high],
                "p_value": p,
            }
    return out


def _num_windows(values) -> int:
    if isinstance(values, dict):
        v = next(iter(values.values()))
        return len(next(iter(v.values())))
    return int(values.shape[0])


def run_validity(
    run, validate, progress: bool = True, say=None, quick: str = "--quick"
) -> tuple[dict, Path]:
    """``swapprune validate``: the run's own stages (check, load, calibrate), then the check.

    Args:
        run: a :class:`~swapprune.config.RunConfig` (model and calibration).
        validate: the :class:`~swapprune.config.ValidateConfig`.
        progress: progress bars.
        say: receives the lines of the estimate before the work starts (``None``: silent).
        quick: how the quick settings are asked for, when the estimate names them.

    Returns:
        The result and the directory the report was written to.
    """
    checks.check_validate(validate)
    checked = checks.check(run, study=True)
    loaded = stages.load(run, checked, progress)
    calibration = stages.calibrate(run, loaded)
    c = run.calibration
    target = None
    if validate.target != "calibration":
        from swapprune.calibration.windows import vendored_text, windows_from_text  # imports torch

        text = (
            vendored_text("wiki.test.raw")
            if validate.target == "wikitext2-test"
            else Path(validate.target).read_text(encoding="utf-8")
        )
        target = windows_from_text(
            text, loaded.tokenizer, c.prompts, c.tokens, c.seed, validate.target
        )
    steps = Steps(say, Wording(quick=quick))
    if steps.announces:
        n = target.input_ids.shape[0] if target is not None else 0
        forecast = fc.validity(run, validate, loaded.facts, n)
        quick_run = quick_of(run)  # the target windows follow the calibration's size
        faster = fc.validity(quick_run, validate, loaded.facts, n and quick_run.calibration.prompts)
        steps.forecast("validate", forecast, faster, loaded.model, calibration, c.batch_size)
    result = predictor_validity(
        loaded.model,
        calibration,
        validate.criteria,
        target=target,
        positions=c.positions,
        batch_size=c.batch_size,
        n_boot=validate.bootstrap,
        seed=c.seed,
        progress=progress,
    )
    return result, write_validity_report(result, validate.output)
