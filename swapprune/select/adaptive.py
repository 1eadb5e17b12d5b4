"""Adaptive calibration: score in tranches of windows until the cut is certified.

The paper's prompt-budget check (rank on a tranche, add an equal tranche,
re-rank; if the top moves, add more) made into a loop:

1. probe every pair on the first tranche of windows;
2. bootstrap the selection (:mod:`swapprune.select.stability`) and certify it: its
   regret against the plausible sets, measured on held-out windows
   (:mod:`swapprune.select.certificate`); stop at the first certified look, or when
   the next tranche would exceed ``max_windows``;
3. otherwise probe the next tranche, but only on pairs that can still change
   the selection, and go to 2.

**The stopping rule under repeated looks** (epsilon-best-arm identification):
the looks follow a fixed schedule (``max_windows // tranche`` of them) and each
spends ``alpha / looks`` of the error (Bonferroni alpha spending): a look
certifies when the ``1 - alpha / looks`` quantile of the regret is at most
``delta``. By the union bound a certified cut has regret above ``delta`` with
probability at most ``alpha`` over the whole schedule, however the looks
depend on each other. Held-out sets are evaluated once and remembered, so a
later look pays only for sets it has not seen. Without held-out windows
(``--no-certify``) the loop falls back to the chosen set's bootstrap frequency
(``target``), which cannot settle on a near-tie.

A pair *can still change the selection* when moving its distance to either end
of its 95% bootstrap CI, all other pairs held at their point values, changes
the selected set. A pair whose CI is clear of the selection boundary fails
that test and gets no more windows. Interactions between pairs escape a
one-at-a-time test, so when the selection is unstable and no pair passes it,
the pairs that touch a block still in play (inclusion probability between
``IN_PLAY`` and ``1 - IN_PLAY``) are probed instead.

Windows a pair did not get are ``nan`` in the resulting
:class:`~swapprune.engine.scores.ScoreResult`; its means and bootstraps skip
them. The decision logic (:func:`tranches`) takes a ``measure`` callable, so
it is tested without a model; :func:`adaptive_score` supplies one built on
:func:`swapprune.engine.probing.score`.

Which pairs can still change a selection: where adaptive calibration spends its windows.

A pair *can still change the selection* when moving its distance to either end
of its 95% bootstrap CI, all other pairs held at their point values, changes
the selected set. Pure numpy.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from swapprune.engine.orders import PAIR_PROBES
from swapprune.errors import SwappruneError
from swapprune.records import AdaptiveRecord
from swapprune.select.constraints import Constraints
from swapprune.select.reference import certificate_judge
from swapprune.select.spec import AdaptiveSettings
from swapprune.select.stability import Stability, select_on, selection_stability
from swapprune.stats.bootstrap import resample_indices

if TYPE_CHECKING:
    from swapprune.engine.scores import ScoreResult
    from swapprune.select.criteria import Criterion
    from swapprune.select.spec import SelectionSpec
    from swapprune.select.strategies import Strategy

# engine/ and calibration.windows import torch: they are imported where the model is
# probed, so that the loop on given measurements imports no torch.

IN_PLAY = 0.02

Pair = tuple[int, int]
# (pairs, window rows into the pool) -> {pair: {"repl_ij"|"repl_ji"|"inter": kl[len(rows)]}}
Measure = Callable[[list[Pair], np.ndarray], dict[Pair, dict[str, np.ndarray]]]
# (scores so far, stability per criterion, look, scheduled looks) -> {"certified": bool, ...}
Judge = Callable[[Any, dict, int, int], dict]


@dataclass
class AdaptiveResult:
    """Scores from adaptive calibration and how they were reached.

    Attributes:
        scores: the :class:`~swapprune.engine.scores.ScoreResult` (``nan`` where a
            pair was not probed).
        stability: criterion name -> :class:`~swapprune.select.stability.Stability` at the end.
        rounds: one record per tranche (windows, pairs probed, frequencies).
        stopped: ``"certified"``, ``"futile"`` (an independent alternative is clearly cheaper
            than anything more windows could change), ``"stable"`` (the frequency rule) or
            ``"max windows"``.
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
    tiebreak: Any = None  # [L] residual norms the stopping rule and the plan share

    def record(self, stability: bool = True) -> AdaptiveRecord:
        """The plan's record of the loop (``stability=False``: without the stabilities)."""
        return AdaptiveRecord(
            stopped=self.stopped,
            windows=self.scores.num_windows(),
            pair_windows=self.pair_windows,
            block_evals=self.block_evals,
            seconds=self.seconds,
            cpu_seconds=self.cpu_seconds,
            rounds=self.rounds,
            stability=dict(self.stability) if stability else None,
        )

    def summary(self) -> str:
        freqs = ", ".join(f"{k} {v.frequency:.0%}" for k, v in self.stability.items())
        return (
            f"adaptive calibration: {self.scores.num_windows()} windows in "
            f"{len(self.rounds)} rounds, {self.pair_windows} pair-window probes; "
            f"stopped ({self.stopped}): chosen-set frequency {freqs}"
        )


def tranches(
    measure: Measure,
    pairs: Sequence[Pair],
    meta: dict,
    criteria: Sequence[Criterion],
    strategy: Strategy,
    budget: int,
    constraints: Constraints,
    settings: AdaptiveSettings,
    pool: int | None = None,
    tiebreak=None,
    judge: Judge | None = None,
) -> AdaptiveResult:
    """The adaptive loop on any ``measure`` (pure: no torch).

    Args:
        measure: probes ``pairs`` on window rows ``[k]`` of the pool; returns
            per-window values (the keys of the protocols the criteria need).
        pairs: the pairs to score (adjacent pairs for the swap criteria).
        meta: ``ScoreResult.meta`` (``num_layers`` at least).
        criteria: swap criteria whose selections must all be stable.
        strategy: the selection strategy.
        budget: blocks to remove.
        constraints: protected blocks.
        settings: target, tranche, maximum, bootstrap.
        pool: windows available (default ``settings.max_windows``).
        tiebreak: ``[L]`` key that breaks ties between equally removable blocks (the
            residual norms the plan will use), held fixed across resamples; ``None``:
            the lower index.
        judge: the stopping rule on the certificate: ``judge(scores, stability, look,
            looks)`` returns a record with ``certified``; the loop stops at the first
            certified look. ``None``: stop on the chosen set's frequency (``target``).

    Returns:
        An :class:`AdaptiveResult`.
    """
    # engine.scores imports select.regime, and so this package's __init__, which imports this
    from swapprune.engine.scores import ScoreResult

    settings.check()
    for crit in criteria:
        if crit.name not in PAIR_PROBES:
            raise SwappruneError(
                f"adaptive calibration works with the swap criteria {PAIR_PROBES}, "
                f"not '{crit.name}'"
            )
    crits, strat, cons = list(criteria), strategy, constraints
    strat.check(budget, cons)
    limit = min(settings.max_windows, pool or settings.max_windows)
    if limit < settings.tranche:
        raise SwappruneError(
            f"only {limit} windows available, fewer than one tranche of {settings.tranche}"
        )
    order = np.random.default_rng(settings.seed).permutation(limit)
    looks = limit // settings.tranche  # the fixed schedule the certificate's error is spent over
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
        record: dict[str, Any] = {
            "windows": used,
            "pairs_probed": len(active),
            "frequency": {k: s.frequency for k, s in stab.items()},
            "chosen": {k: s.chosen for k, s in stab.items()},
        }
        rounds.append(record)
        if judge is not None:
            record["certificate"] = judge(scores, stab, len(rounds), looks)
            if record["certificate"]["certified"]:
                stopped = "certified"
                break
            if record["certificate"].get("futile"):
                # A set the criterion never considers is clearly cheaper: more windows
                # refine the criterion's own choice, not that gap.
                stopped = "futile"
                break
        elif min(s.frequency for s in stab.values()) >= settings.target:
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
        "stop_rule": "certificate" if judge is not None else "frequency",
        "looks": looks,
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
    spec: SelectionSpec,
    pool,
    criteria: Sequence[Criterion] | None = None,
    model_id: str = "",
    heldout=None,
    progress: bool = False,
) -> AdaptiveResult:
    """Score ``model``'s adjacent pairs adaptively on a window ``pool`` (see the module docstring).

    Args:
        model: causal LM (left unmodified).
        spec: the selection (budget, strategy, constraints, positions, batch size and
            ``spec.adaptive``, the tranche settings).
        pool: the window pool (:class:`~swapprune.calibration.windows.Calibration`),
            at least one tranche.
        criteria: swap criteria whose selections must settle (default: the spec's;
            ``auto`` asks for both; the first one's choice is the one certified).
        model_id: recorded in the scores.
        heldout: :class:`~swapprune.select.reference.Heldout` windows: the loop stops on
            the certificate (with ``spec.certify``); ``None``: on the frequency.
        progress: a progress bar over each tranche's probes.
    """
    import torch  # imports torch

    from swapprune.calibration.windows import Calibration  # imports torch
    from swapprune.engine.probing import score  # imports torch

    settings = spec.adaptive
    if settings is None:
        raise SwappruneError("adaptive calibration needs tranche settings")
    crits = list(criteria or (spec.criterion,))
    L = spec.num_layers
    ids = pool.input_ids
    protocols = sorted({c.name for c in crits})
    counter = {"block_evals": 0, "block_tokens": 0}
    meta_box: dict = {}

    def measure(pairs: list[Pair], rows: np.ndarray) -> dict:
        sub = Calibration(ids[torch.as_tensor(rows)], pool.source, pool.seed)
        res = score(
            model,
            calibration=sub,
            protocols=protocols,
            pairs=pairs,
            positions=spec.positions,
            batch_size=spec.batch_size,
            model_id=model_id,
            progress=progress,
            n_boot=10,
        )
        counter["block_evals"] += res.meta["timing"]["block_evals"]
        counter["block_tokens"] += res.meta["timing"]["block_tokens"]
        meta_box.setdefault("meta", res.meta)
        return res.pairs

    pairs = [(i, i + 1) for i in range(L - 1)]
    tiebreak = None
    if any(c.tiebreak == "residual" for c in crits):
        # The plan breaks ties by the residual update measured on the first tranche (the
        # windows every pair is probed on), and the stopping rule judges that same plan.
        from swapprune.engine.oracle import residual_norms  # imports torch

        first = np.random.default_rng(settings.seed).permutation(
            min(settings.max_windows, ids.shape[0])
        )[: settings.tranche]
        sub = ids[torch.as_tensor(first)]
        tiebreak = residual_norms(model, sub, spec.batch_size)
        counter["block_evals"] += L * -(-sub.shape[0] // spec.batch_size)
        counter["block_tokens"] += L * sub.shape[0] * sub.shape[1]
    judge = None
    if heldout is not None and spec.certify:
        judge = certificate_judge(model, spec, heldout, crits, pool)
    result = tranches(
        measure,
        pairs,
        {"num_layers": L, "positions": spec.positions},
        crits,
        spec.strategy,
        spec.budget,
        spec.constraints,
        settings,
        pool=ids.shape[0],
        tiebreak=tiebreak,
        judge=judge,
    )
    used = np.random.default_rng(settings.seed).permutation(
        min(settings.max_windows, ids.shape[0])
    )[: result.scores.num_windows()]
    result.block_evals = counter["block_evals"]
    result.tiebreak = tiebreak
    probed = {k: v for k, v in meta_box["meta"].items() if k != "timing"}
    result.scores.meta = {**probed, **result.scores.meta}
    result.scores.meta["calibration"] = {
        **Calibration(ids[torch.as_tensor(used)], pool.source, pool.seed).describe(),
        "pool": pool.describe(),
    }
    result.scores.meta["timing"] = {
        "seconds": result.seconds,
        "block_evals": result.block_evals,
        "block_tokens": counter["block_tokens"],
        "pair_windows": result.pair_windows,
    }
    return result


def pair_ci(scores, protocol: str, pair: Pair, idx: np.ndarray) -> tuple[float, float]:
    v = scores.pairs[pair]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if protocol == "interchange":
            boot = np.nanmean(v["inter"][idx], -1)
        else:
            boot = np.maximum(np.nanmean(v["repl_ij"][idx], -1), np.nanmean(v["repl_ji"][idx], -1))
    lo, hi = np.nanpercentile(boot, [2.5, 97.5])
    return float(lo), float(hi)


def _with_pair_scaled(scores, pair: Pair, keys: Sequence[str], factor: float):
    from swapprune.engine.scores import ScoreResult  # as in tranches()

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
            for bound in pair_ci(scores, crit.name, pair, idx):
                moved = _with_pair_scaled(scores, pair, keys, bound / point)
                if select_on(moved, crit, strat, budget, cons, tiebreak=tiebreak) != chosen:
                    out.add(pair)
                    break
    return out
