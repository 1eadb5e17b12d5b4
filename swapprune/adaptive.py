"""Adaptive calibration: score in tranches of windows until the selection is stable.

The paper's prompt-budget check (rank on a tranche, add an equal tranche,
re-rank; if the top moves, add more) made into a loop:

1. probe every pair on the first tranche of windows;
2. bootstrap the selection (:mod:`swapprune.stability`); stop when the chosen
   set's frequency reaches ``target`` for every criterion asked, or when the
   next tranche would exceed ``max_windows``;
3. otherwise probe the next tranche, but only on pairs that can still change
   the selection, and go to 2.

A pair *can still change the selection* when moving its distance to either end
of its 95% bootstrap CI, all other pairs held at their point values, changes
the selected set. A pair whose CI is clear of the selection boundary fails
that test and gets no more windows. Interactions between pairs escape a
one-at-a-time test, so when the selection is unstable and no pair passes it,
the pairs that touch a block still in play (inclusion probability between
``IN_PLAY`` and ``1 - IN_PLAY``) are probed instead.

Windows a pair did not get are ``nan`` in the resulting
:class:`~swapprune.engine.scores.ScoreResult`; its means and bootstraps skip
them. The decision logic (:func:`calibrate`) takes a ``measure`` callable, so
it is tested without a model; :func:`adaptive_score` supplies one built on
:func:`swapprune.engine.scoring.score`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np

from swapprune.bootstrap import resample_indices
from swapprune.errors import SwappruneError
from swapprune.selection import Constraints
from swapprune.stability import Stability, _resolve, select_on, selection_stability

if TYPE_CHECKING:
    from swapprune.engine.scores import ScoreResult

TARGET = 0.9
TRANCHE = 16
MAX_WINDOWS = 128
IN_PLAY = 0.02
PAIR_PROTOCOLS = ("replacement", "interchange")

Pair = tuple[int, int]
# (pairs, window rows into the pool) -> {pair: {"repl_ij"|"repl_ji"|"inter": kl[len(rows)]}}
Measure = Callable[[list[Pair], np.ndarray], dict[Pair, dict[str, np.ndarray]]]


@dataclass(frozen=True)
class AdaptiveSettings:
    """How adaptive calibration spends windows.

    Attributes:
        target: stop when the chosen set's bootstrap frequency is at least this.
        tranche: windows added per round (the first round probes every pair).
        max_windows: never probe more windows than this.
        n_boot: bootstrap resamples per round.
        seed: seed of the window order and of the bootstrap.
    """

    target: float = TARGET
    tranche: int = TRANCHE
    max_windows: int = MAX_WINDOWS
    n_boot: int = 1000
    seed: int = 0

    def check(self) -> None:
        """Raise a one-line :class:`SwappruneError` for settings that cannot work."""
        if not 0 < self.target <= 1:
            raise SwappruneError(f"stability target must be in (0, 1], got {self.target}")
        if self.tranche < 2:
            raise SwappruneError(f"a tranche needs at least 2 windows, got {self.tranche}")
        if self.max_windows < self.tranche:
            raise SwappruneError(
                f"maximum of {self.max_windows} windows is smaller than one tranche of "
                f"{self.tranche}; raise the maximum or lower the tranche"
            )
        if self.n_boot < 10:
            raise SwappruneError(f"need at least 10 bootstrap resamples, got {self.n_boot}")


@dataclass
class AdaptiveResult:
    """Scores from adaptive calibration and how they were reached.

    Attributes:
        scores: the :class:`~swapprune.engine.scores.ScoreResult` (``nan`` where a
            pair was not probed).
        stability: criterion name -> :class:`~swapprune.stability.Stability` at the end.
        rounds: one record per tranche (windows, pairs probed, frequencies).
        stopped: ``"stable"`` or ``"max windows"``.
        pair_windows: (pair, window) probes made; a fixed run makes pairs x windows.
        block_evals: decoder-block evaluations (from the runner's counters).
        seconds, cpu_seconds: wall and process CPU time of the loop.
    """

    scores: ScoreResult
    stability: dict[str, Stability]
    rounds: list[dict] = field(default_factory=list)
    stopped: str = ""
    pair_windows: int = 0
    block_evals: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    def to_dict(self) -> dict:
        return {
            "stopped": self.stopped,
            "windows": self.scores.num_windows(),
            "pair_windows": self.pair_windows,
            "block_evals": self.block_evals,
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
            "rounds": self.rounds,
            "stability": {k: v.to_dict() for k, v in self.stability.items()},
        }

    def summary(self) -> str:
        freqs = ", ".join(f"{k} {v.frequency:.0%}" for k, v in self.stability.items())
        return (
            f"adaptive calibration: {self.scores.num_windows()} windows in "
            f"{len(self.rounds)} rounds, {self.pair_windows} pair-window probes; "
            f"stopped ({self.stopped}): chosen-set frequency {freqs}"
        )


def _pair_ci(scores, protocol: str, pair: Pair, idx: np.ndarray) -> tuple[float, float]:
    v = scores.pairs[pair]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if protocol == "interchange":
            boot = np.nanmean(v["inter"][idx], -1)
        else:
            boot = np.maximum(np.nanmean(v["repl_ij"][idx], -1), np.nanmean(v["repl_ji"][idx], -1))
    lo, hi = np.nanpercentile(boot, [2.5, 97.5])
    return float(lo), float(hi)


def _with_pair_scaled(scores, pair: Pair, keys: Sequence[str], factor: float):
    from swapprune.engine.scores import ScoreResult

    pairs = dict(scores.pairs)
    pairs[pair] = {k: (x * factor if k in keys else x) for k, x in scores.pairs[pair].items()}
    return ScoreResult(meta=scores.meta, pairs=pairs, deletion=scores.deletion)


def decisive_pairs(
    scores, crits, strat, budget: int, cons: Constraints, idx, tiebreak=None
) -> set[Pair]:
    """Pairs whose distance, moved to either end of its CI, changes some criterion's selection."""
    out: set[Pair] = set()
    for crit in crits:
        chosen = select_on(scores, crit, strat, budget, cons, tiebreak=tiebreak)
        keys = ("inter",) if crit.name == "interchange" else ("repl_ij", "repl_ji")
        for pair in scores.pairs:
            if pair in out:
                continue
            point = scores.distance(crit.name, *pair)
            if not point > 0:
                continue
            for bound in _pair_ci(scores, crit.name, pair, idx):
                moved = _with_pair_scaled(scores, pair, keys, bound / point)
                if select_on(moved, crit, strat, budget, cons, tiebreak=tiebreak) != chosen:
                    out.add(pair)
                    break
    return out


def calibrate(
    measure: Measure,
    pairs: Sequence[Pair],
    meta: dict,
    criteria: Sequence[str] = ("interchange",),
    strategy: str | None = None,
    budget: int = 1,
    constraints: Constraints | None = None,
    settings: AdaptiveSettings = AdaptiveSettings(),
    pool: int | None = None,
    tiebreak=None,
) -> AdaptiveResult:
    """The adaptive loop on any ``measure`` (pure: no torch).

    Args:
        measure: probes ``pairs`` on window rows ``[k]`` of the pool; returns
            per-window values (the keys of the protocols the criteria need).
        pairs: the pairs to score (adjacent pairs for the swap criteria).
        meta: ``ScoreResult.meta`` (``num_layers`` at least).
        criteria: swap criteria whose selections must all be stable.
        strategy: selection strategy spec (default: each criterion's).
        budget: blocks to remove.
        constraints: protected blocks.
        settings: target, tranche, maximum, bootstrap.
        pool: windows available (default ``settings.max_windows``).
        tiebreak: ``[L]`` key that breaks ties between equally removable blocks (the
            residual norms the plan will use), held fixed across resamples; ``None``:
            the lower index.

    Returns:
        An :class:`AdaptiveResult`.
    """
    from swapprune.engine.scores import ScoreResult

    settings.check()
    resolved = [_resolve(c, strategy) for c in criteria]
    for crit, _ in resolved:
        if crit.name not in PAIR_PROTOCOLS:
            raise SwappruneError(
                f"adaptive calibration works with the swap criteria {PAIR_PROTOCOLS}, "
                f"not '{crit.name}'"
            )
    crits = [c for c, _ in resolved]
    strat = resolved[0][1]
    L = int(meta["num_layers"])
    cons = constraints or Constraints(L)
    strat.check(budget, cons)
    limit = min(settings.max_windows, pool or settings.max_windows)
    if limit < settings.tranche:
        raise SwappruneError(
            f"only {limit} windows available, fewer than one tranche of {settings.tranche}"
        )
    order = np.random.default_rng(settings.seed).permutation(limit)
    pairs = [cast(Pair, tuple(sorted(p))) for p in pairs]
    values: dict[Pair, dict[str, np.ndarray]] = {}
    rounds: list[dict] = []
    stopped = ""
    pair_windows = 0
    start, cpu = time.perf_counter(), time.process_time()
    active: list[Pair] = list(pairs)
    used = 0
    while True:
        rows = order[used : used + settings.tranche]
        got = measure(active, rows) if active else {}
        n_new = len(rows)
        for p in pairs:
            old = values.get(p)
            new = got.get(p)
            keys = list(new) if new is not None else list(old or {})
            values[p] = {
                k: np.concatenate(
                    [
                        old[k] if old is not None else np.full(used, np.nan),
                        new[k] if new is not None else np.full(n_new, np.nan),
                    ]
                )
                for k in keys
            }
        used += n_new
        pair_windows += len(active) * n_new
        scores = ScoreResult(
            meta=dict(meta), pairs=dict(values), n_boot=settings.n_boot, seed=settings.seed
        )
        stab = {
            c.name: selection_stability(
                scores, c, strat, budget, cons, settings.n_boot, settings.seed, tiebreak=tiebreak
            )
            for c in crits
        }
        record = {
            "windows": used,
            "pairs_probed": len(active),
            "frequency": {k: s.frequency for k, s in stab.items()},
            "chosen": {k: s.chosen for k, s in stab.items()},
        }
        rounds.append(record)
        if min(s.frequency for s in stab.values()) >= settings.target:
            stopped = "stable"
            break
        if used + settings.tranche > limit:
            stopped = "max windows"
            break
        idx = resample_indices(used, settings.n_boot, settings.seed)
        decisive = decisive_pairs(scores, crits, strat, budget, cons, idx, tiebreak)
        if not decisive:
            play = {
                b
                for s in stab.values()
                for b, p in enumerate(s.inclusion)
                if IN_PLAY <= p <= 1 - IN_PLAY
            }
            decisive = {p for p in pairs if p[0] in play or p[1] in play} or set(pairs)
        active = sorted(decisive)
    result = AdaptiveResult(
        scores=scores, stability=stab, rounds=rounds, stopped=stopped, pair_windows=pair_windows
    )
    result.seconds = time.perf_counter() - start
    result.cpu_seconds = time.process_time() - cpu
    scores.meta["adaptive"] = {
        "target": settings.target,
        "tranche": settings.tranche,
        "max_windows": settings.max_windows,
        "stopped": result.stopped,
        "window_order_seed": settings.seed,
        "pair_windows": result.pair_windows,
        "rounds": result.rounds,
    }
    return result


def adaptive_score(
    model,
    tokenizer=None,
    *,
    criteria: Sequence[str] = ("interchange",),
    strategy: str | None = None,
    budget: int = 1,
    constraints: Constraints | None = None,
    settings: AdaptiveSettings = AdaptiveSettings(),
    calibration=None,
    calib: str | None = None,
    tokens: int = 128,
    positions: str = "all",
    batch_size: int = 8,
    model_id: str | None = None,
) -> AdaptiveResult:
    """Score ``model``'s adjacent pairs adaptively (see the module docstring).

    Args:
        model: causal LM (left unmodified).
        tokenizer: for the window pool, unless ``calibration`` is given.
        criteria: swap criteria whose selections must be stable
            (``("interchange", "replacement")`` for ``--protocol auto``).
        strategy, budget, constraints: the selection to stabilise.
        settings: :class:`AdaptiveSettings` (checked before any model work).
        calibration: a pool of windows (:class:`~swapprune.calibration.Calibration`);
            default: ``settings.max_windows`` windows of ``tokens`` from ``calib``.
        calib, tokens: calibration source and window length.
        positions: ``all`` or ``last``.
        batch_size: windows per forward pass.
        model_id: recorded in the scores.
    """
    import torch

    from swapprune.architectures import decoder_stack
    from swapprune.calibration import Calibration, load_calibration
    from swapprune.engine.scoring import score

    settings.check()
    for c in criteria:
        crit, strat = _resolve(c, strategy)
        if crit.name not in PAIR_PROTOCOLS:
            raise SwappruneError(
                f"adaptive calibration works with the swap criteria {PAIR_PROTOCOLS}, not '{c}'"
            )
    L = decoder_stack(model).num_layers
    strat.check(budget, constraints or Constraints(L))
    if calibration is None:
        if tokenizer is None:
            raise SwappruneError("adaptive calibration needs a tokenizer or calibration windows")
        from swapprune.architectures import context_length

        calibration = load_calibration(
            tokenizer,
            calib,
            settings.max_windows,
            tokens,
            settings.seed,
            context_length(model.config),
        )
    ids = calibration.input_ids
    protocols = sorted({_resolve(c, strategy)[0].name for c in criteria})
    counter = {"block_evals": 0}
    meta_box: dict = {}

    def measure(pairs: list[Pair], rows: np.ndarray) -> dict:
        sub = Calibration(ids[torch.as_tensor(rows)], calibration.source, calibration.seed)
        res = score(
            model,
            calibration=sub,
            protocols=protocols,
            pairs=pairs,
            positions=positions,
            batch_size=batch_size,
            model_id=model_id,
            progress=False,
            n_boot=10,
        )
        counter["block_evals"] += res.meta["timing"]["block_evals"]
        meta_box.setdefault("meta", res.meta)
        return res.pairs

    pairs = [(i, i + 1) for i in range(L - 1)]
    tiebreak = None
    if any(getattr(_resolve(c, strategy)[0], "tiebreak", None) == "residual" for c in criteria):
        # The plan breaks ties by the residual update measured on this pool; the stopping
        # rule must judge the selection the plan will actually make.
        from swapprune.engine.oracle import residual_norms

        tiebreak = residual_norms(model, ids, batch_size)
        counter["block_evals"] += L * -(-ids.shape[0] // batch_size)
    result = calibrate(
        measure,
        pairs,
        {"num_layers": L, "positions": positions},
        criteria,
        strategy,
        budget,
        constraints,
        settings,
        pool=ids.shape[0],
        tiebreak=tiebreak,
    )
    used = np.random.default_rng(settings.seed).permutation(
        min(settings.max_windows, ids.shape[0])
    )[: result.scores.num_windows()]
    result.block_evals = counter["block_evals"]
    probed = {k: v for k, v in meta_box["meta"].items() if k != "timing"}
    result.scores.meta = {**probed, **result.scores.meta}
    result.scores.meta["calibration"] = {
        **Calibration(ids[torch.as_tensor(used)], calibration.source, calibration.seed).describe(),
        "pool": calibration.describe(),
    }
    result.scores.meta["timing"] = {
        "seconds": result.seconds,
        "block_evals": result.block_evals,
        "pair_windows": result.pair_windows,
    }
    return result
