"""Every removal set of a small budget: which are admissible, how they are screened (pure numpy).

A *landscape* is the cost of every removal set of ``n`` blocks that the
constraints in force admit (:class:`Admissible`: protected ends, the in-phase
``--serve`` constraint, and optionally the never-adjacent rule). Evaluating all
of them on long windows is too dear, so they are screened by successive
halving on more and longer windows, and the survivors refined on held-out
windows. This module holds the decisions; :mod:`swapprune.engine.exhaustive`
measures and :mod:`swapprune.studies.landscape` runs the sequence.

Cost. A set ``S`` evaluated on windows ``w`` has summed next-token NLL ``l_w(S)``
over ``t_w`` scored tokens; on a multiset ``I`` of windows its cost is the
certificate's (:func:`swapprune.select.certificate.cost_samples`)::

    c(S; I) = exp(sum_I l_w(S) / sum_I t_w) / exp(sum_I l_w(base) / sum_I t_w) - 1,

reported in dPPL points (percent).

**The screening rule.** Round ``r`` evaluates its sets on its own windows.
Write ``x_w(S) = l_w(S) / t_w`` and ``X(S) = sum_w l_w(S) / sum_w t_w`` (the
pooled mean NLL, nats per token). The round's best ``B`` is the set with the
lowest ``X`` (ties: the lexicographically smaller set). For every set ``S``,
with the per-window paired differences ``d_w = x_w(S) - x_w(B)``, their
token-weighted mean ``D = X(S) - X(B)`` and its standard error
``SE = sqrt(m / (m - 1) * sum_w (t_w / T)^2 (d_w - D)^2)`` over the round's
``m`` windows (``T = sum_w t_w``; with equal lengths ``SE = sd(d) / sqrt(m)``)::

    S survives the round  iff  D - z * SE <= margin

that is, unless its excess over the round's best is excluded from
``[0, margin]`` at a lenient one-sided level (``z = 3`` by default: a set as
good as the best is dropped by noise with probability about 0.0013 per
round under a normal approximation; ``margin = 0.005`` nats per token, a
perplexity within 0.5% of the best's, is the floor for sets that tie the best
on every window). If fewer than ``min_keep`` sets survive (default
``4 * top_k``), the ``min_keep`` lowest-``X`` sets survive instead (ties:
lexicographic). With one window nothing can be excluded and every set
survives. The **final** screening round keeps the ``top_k`` lowest-``X`` sets
(default 20) *and* every other set that survives the test, at most
``max_refine`` in all when a cap is set (the lowest ``X`` first): a set the
final round cannot tell from the best is refined, not cut at an arbitrary
rank. A round that starts with at most ``top_k`` sets ends the screening
(every one of them is refined). The refined sets are evaluated on held-out
windows disjoint from every screening window; their regret against the best of
them comes with a paired bootstrap CI (:func:`refined_rows`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from math import comb

import numpy as np

from swapprune.errors import SwappruneError
from swapprune.select.certificate import cost_samples
from swapprune.stats.bootstrap import resample_indices

Removal = tuple[int, ...]

#: Default margin of the screening rule, nats per token (a perplexity within 0.5%).
MARGIN = 0.005
#: Default z of the screening rule (one-sided; about 0.13% of ties dropped by noise).
Z = 3.0
#: Sets refined on held-out windows by default.
TOP_K = 20
#: ``--budget`` above this is refused unless forced (the count grows as ``C(L, n)``).
MAX_BUDGET = 3


# -- which sets ------------------------------------------------------------------------
@dataclass(frozen=True)
class Admissible:
    """The removal sets of ``budget`` blocks the constraints in force admit.

    Attributes:
        num_layers: ``L``.
        budget: ``n``, blocks removed.
        protect_first, protect_last: the first / last k blocks are never removed.
        never_adjacent: no two removed blocks are neighbours.
        in_phase: ``removed -> bool``, the ``--serve`` constraint
            (:meth:`swapprune.select.constraints.ServeConstraint.in_phase`), or ``None``.
    """

    num_layers: int
    budget: int
    protect_first: int = 0
    protect_last: int = 0
    never_adjacent: bool = False
    in_phase: Callable[[Removal], bool] | None = field(default=None, compare=False)

    def candidates(self) -> list[int]:
        """Blocks a set may contain."""
        return list(range(self.protect_first, self.num_layers - self.protect_last))

    def admits(self, removed: Iterable[int]) -> bool:
        """Whether ``removed`` is one of the admissible sets."""
        s = tuple(sorted(int(b) for b in removed))
        if len(s) != self.budget or len(set(s)) != len(s):
            return False
        lo, hi = self.protect_first, self.num_layers - self.protect_last
        if any(not lo <= b < hi for b in s):
            return False
        if self.never_adjacent and any(b - a == 1 for a, b in zip(s, s[1:])):
            return False
        return self.in_phase is None or bool(self.in_phase(s))

    def sets(self) -> list[Removal]:
        """Every admissible set, sorted, in lexicographic order."""
        out = []
        for s in combinations(self.candidates(), self.budget):
            if self.never_adjacent and any(b - a == 1 for a, b in zip(s, s[1:])):
                continue
            if self.in_phase is None or self.in_phase(s):
                out.append(s)
        return out

    def total(self) -> int:
        """``C(L, n)``: removal sets of ``n`` blocks with no constraint."""
        return comb(self.num_layers, self.budget)

    def upper_count(self) -> int:
        """The admissible sets without the in-phase constraint (exact when there is none)."""
        free, n = len(self.candidates()), self.budget
        if n <= 0 or free < n:
            return 0
        return comb(free - n + 1, n) if self.never_adjacent else comb(free, n)

    def describe(self) -> str:
        """The constraints in force, in words."""
        parts = []
        if self.protect_first:
            parts.append(f"first {self.protect_first} protected")
        if self.protect_last:
            parts.append(f"last {self.protect_last} protected")
        if self.never_adjacent:
            parts.append("never two adjacent")
        if self.in_phase is not None:
            parts.append("in phase for the serving runtimes")
        return ", ".join(parts) or "no constraint"


def from_constraints(cons, budget: int, never_adjacent: bool = False) -> Admissible:
    """The :class:`Admissible` sets of a selection's constraints object.

    ``cons`` has ``num_layers``, ``protect_first``, ``protect_last`` and ``serve``
    (a :class:`~swapprune.select.constraints.Constraints`).
    """
    serve = getattr(cons, "serve", None)
    return Admissible(
        cons.num_layers,
        budget,
        cons.protect_first,
        cons.protect_last,
        never_adjacent,
        serve.in_phase if serve is not None else None,
    )


def set_key(removed: Iterable[int]) -> str:
    """``"3,7"``: the JSON key of a set."""
    return ",".join(str(int(b)) for b in sorted(removed))


def parse_key(key: str) -> Removal:
    """The set of a :func:`set_key` key."""
    return tuple(int(b) for b in key.split(",")) if key else ()


def parse_shape(text: str) -> tuple[int, int]:
    """``"16x128"`` -> ``(16, 128)``: windows and tokens per window."""
    try:
        a, b = text.lower().split("x")
        windows, tokens = int(a), int(b)
    except ValueError:
        raise SwappruneError(f"expected WINDOWSxTOKENS such as 16x128, got '{text}'") from None
    if windows < 1 or tokens < 2:
        raise SwappruneError(f"{text}: needs at least 1 window of at least 2 tokens")
    return windows, tokens


# -- the screening rule ----------------------------------------------------------------
@dataclass(frozen=True)
class ScreeningRule:
    """Successive halving's keep rule (the module docstring states it).

    Attributes:
        z: one-sided z of the keep test.
        margin: nats per token a set may exceed the round's best by and still tie.
        top_k: sets the final screening round keeps (and the refinement evaluates).
        min_keep: every non-final round keeps at least this many (default ``4 * top_k``).
        max_refine: the final round keeps at most this many (``None``: no cap).
    """

    z: float = Z
    margin: float = MARGIN
    top_k: int = TOP_K
    min_keep: int | None = None
    max_refine: int | None = None

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise SwappruneError(f"top_k must be >= 1, got {self.top_k}")
        if not self.z >= 0 or not self.margin >= 0:
            raise SwappruneError("the screening rule needs z >= 0 and margin >= 0")
        if self.min_keep is not None and self.min_keep < self.top_k:
            raise SwappruneError(f"min_keep {self.min_keep} is below top_k {self.top_k}")
        if self.max_refine is not None and self.max_refine < self.top_k:
            raise SwappruneError(f"max_refine {self.max_refine} is below top_k {self.top_k}")

    @property
    def floor(self) -> int:
        return self.min_keep if self.min_keep is not None else 4 * self.top_k

    def describe(self) -> str:
        return (
            f"after each round keep every set S with D - {self.z:g} * SE <= {self.margin:g} "
            f"nats/token, D = X(S) - X(best) the token-weighted mean of the paired per-window "
            f"NLL differences and SE its standard error over the round's windows; at least "
            f"the {self.floor} lowest; the final round keeps the {self.top_k} lowest and every "
            f"other set that passes"
            + (f", at most {self.max_refine}" if self.max_refine is not None else "")
        )

    def to_dict(self) -> dict:
        return {
            "z": self.z,
            "margin_nats_per_token": self.margin,
            "top_k": self.top_k,
            "min_keep": self.floor,
            "max_refine": self.max_refine,
            "rule": self.describe(),
        }


def pooled(nll: np.ndarray, tokens: np.ndarray) -> float:
    """``X``: summed NLL over summed tokens (nats per token)."""
    return float(np.sum(nll) / np.sum(tokens))


def ranked(nll: Mapping[Removal, np.ndarray], tokens: np.ndarray) -> list[Removal]:
    """The sets from the lowest pooled NLL up (ties: lexicographic)."""
    tokens = np.asarray(tokens, dtype=np.float64)
    return sorted(nll, key=lambda s: (pooled(nll[s], tokens), s))


def excess(nll: np.ndarray, best: np.ndarray, tokens: np.ndarray) -> tuple[float, float]:
    """``(D, SE)`` of one set against the round's best (module docstring)."""
    t = np.asarray(tokens, dtype=np.float64)
    d = (np.asarray(nll, dtype=np.float64) - np.asarray(best, dtype=np.float64)) / t
    m = d.size
    w = t / t.sum()
    mean = float(np.sum(w * d))
    if m < 2:
        return mean, math.inf
    se = math.sqrt(m / (m - 1) * float(np.sum(w**2 * (d - mean) ** 2)))
    return mean, se


def survivors(
    nll: Mapping[Removal, np.ndarray], tokens: np.ndarray, rule: ScreeningRule, final: bool
) -> list[Removal]:
    """The sets that go on from a round, in the round's order (lowest pooled NLL first)."""
    order = ranked(nll, tokens)
    best = nll[order[0]]
    passed = [s for s in order if _passes(nll[s], best, tokens, rule)]
    if final:
        kept = order[: rule.top_k] + [s for s in passed if s not in set(order[: rule.top_k])]
        return kept if rule.max_refine is None else kept[: rule.max_refine]
    return passed if len(passed) >= rule.floor else order[: rule.floor]


def _passes(nll: np.ndarray, best: np.ndarray, tokens: np.ndarray, rule: ScreeningRule) -> bool:
    d, se = excess(nll, best, tokens)
    return d - rule.z * se <= rule.margin


# -- costs, ranks, regret --------------------------------------------------------------
def costs_points(
    nll: Mapping[Removal, np.ndarray], base: np.ndarray, tokens: np.ndarray
) -> dict[Removal, float]:
    """``100 * c(S)`` on all windows, for every set of ``nll``."""
    base = np.asarray(base, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.float64)
    none = np.zeros((0, len(base)), dtype=np.int64)
    return {
        s: 100 * cost_samples(np.asarray(v, dtype=np.float64), base, tokens, none)[0]
        for s, v in nll.items()
    }


def percentile_rank(cost: float, costs: Sequence[float], member: bool = True) -> tuple[int, float]:
    """``(rank, percentile)`` of ``cost`` among ``costs``.

    ``rank``: 1 + the sets strictly cheaper; ``percentile``: the share (in percent) of
    the sets at most as costly, so the best set of 435 is at 0.23% and the median at
    about 50%. ``member``: whether the set is one of ``costs``; a set outside them (one
    the constraints do not admit) is placed among them, counted once more.
    """
    arr = np.asarray(costs, dtype=np.float64)
    below = int(np.sum(arr < cost))
    at_most = int(np.sum(arr <= cost)) + (0 if member else 1)
    return below + 1, 100.0 * at_most / (arr.size + (0 if member else 1))


def refined_rows(
    nll: Mapping[Removal, np.ndarray],
    base: np.ndarray,
    tokens: np.ndarray,
    n_boot: int,
    seed: int,
    level: float = 0.95,
) -> tuple[Removal, dict[Removal, dict]]:
    """The best refined set and, for every set, its cost and regret with paired CIs.

    ``best``: the lowest point cost (ties: lexicographic). Over paired bootstrap
    resamples ``I_b`` of the held-out windows, ``c(S; I_b)`` gives the cost's CI and
    ``c(S; I_b) - c(best; I_b)`` the regret's (percentile intervals at ``level``), in
    dPPL points; the best set's regret is 0 on every resample.
    """
    base = np.asarray(base, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.float64)
    idx = resample_indices(len(base), n_boot, seed)
    point, boot = {}, {}
    for s, v in nll.items():
        p, b = cost_samples(np.asarray(v, dtype=np.float64), base, tokens, idx)
        point[s], boot[s] = 100 * p, 100 * b
    best = min(point, key=lambda s: (point[s], s))
    tail = 100 * (1 - level) / 2
    rows = {}
    for s in nll:
        lo, hi = np.percentile(boot[s], [tail, 100 - tail])
        diff = boot[s] - boot[best]
        rlo, rhi = np.percentile(diff, [tail, 100 - tail])
        rows[s] = {
            "cost_points": point[s],
            "cost_ci": [float(lo), float(hi)],
            "regret_points": point[s] - point[best],
            "regret_ci": [float(rlo), float(rhi)],
        }
    return best, rows


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    ra, rb = _ranks(np.asarray(a, dtype=np.float64)), _ranks(np.asarray(b, dtype=np.float64))
    if ra.size < 2 or ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(x.size)
    ranks[order] = np.arange(x.size, dtype=np.float64)
    for v in np.unique(x):  # ties share their mean rank
        tie = x == v
        if tie.sum() > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks


# -- work ------------------------------------------------------------------------------
def trie_blocks(num_layers: int, budget: int) -> int:
    """Block calls per window batch to run every set of ``budget`` from cached base states.

    A node of the trie is a kept-plan prefix that ends on kept block ``k`` after
    ``r >= 1`` removals before it, with the other ``n - r`` still to fit after ``k``:
    ``sum_k sum_r C(k, r) [n - r <= L - 1 - k]`` (no constraint; an upper bound with
    some). Equals :func:`swapprune.engine.estimate.trie_blocks` over the plans.
    """
    L, n = num_layers, budget
    return sum(comb(k, r) for k in range(L) for r in range(1, n + 1) if n - r <= L - 1 - k)
