"""Study v4's analysis (design: PLAN.md): coverage, H1 and H2 against the exact landscapes.

Pure: numpy and swapprune.stats only. Inputs are the per-window units of every set
on each contract and the cut records that ``run.py`` wrote; outputs are plain dicts
that ``report.py`` turns into REPORT.md.

Units of a set on a contract: ``nll[w]`` (summed NLL of window ``w``'s scored tokens)
and ``tokens[w]``; the extended contract's windows are one per article (article =
cluster), the matched contract's 23 are ordered windows of 2 articles (moving-block
bootstrap, descriptive).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from swapprune.stats.clustered import block_weights, two_level_cost_difference
from swapprune.stats.layers import spearman
from swapprune.stats.multiplicity import holm_distinct
from swapprune.stats.verdicts import Margin, cut_key, verdict_from_replicates

MARGIN = 2.0  # dPPL points
N_BOOT = 10_000
BLOCK = 3  # matched contract: moving blocks of 3 windows


def cost_points(nll: np.ndarray, base: np.ndarray, tokens: np.ndarray) -> float:
    """dPPL in points of a set on all windows of a contract."""
    t = float(tokens.sum())
    return 100.0 * (math.exp((float(nll.sum()) - float(base.sum())) / t) - 1.0)


def units(nll: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``[n, 2]`` units ``(nll, tokens)`` for the two-level bootstrap."""
    return np.stack([np.asarray(nll, float), np.asarray(tokens, float)], axis=1)


@dataclass
class Contract:
    """One contract's data: every set's per-window NLL, the base's, tokens and clusters."""

    name: str
    base: np.ndarray
    tokens: np.ndarray
    clusters: list
    nll: Mapping[tuple[int, ...], np.ndarray]
    ordered: bool = False  # windows in document order of few articles: block bootstrap

    def cost(self, s: Sequence[int]) -> float:
        return cost_points(self.nll[tuple(sorted(s))], self.base, self.tokens)

    def best(self, budget: int) -> tuple[tuple[int, ...], float]:
        """The cheapest set of ``budget`` blocks measured on this contract."""
        sets = [s for s in self.nll if len(s) == budget]
        b = min(sets, key=lambda s: (self.cost(s), s))
        return b, self.cost(b)

    def weights(self, n_boot: int, seed: int):
        return block_weights(len(self.base), BLOCK, n_boot, seed) if self.ordered else None

    def difference(self, a: Sequence[Sequence[int]], b: Sequence[Sequence[int]], n_boot, seed):
        """Two-level paired difference ``mean_s cost(b_s) - cost(a_s)`` (points)."""
        ua = np.stack([units(self.nll[tuple(sorted(s))], self.tokens) for s in a])
        ub = np.stack([units(self.nll[tuple(sorted(s))], self.tokens) for s in b])
        return two_level_cost_difference(
            units(self.base, self.tokens), ua, ub, self.clusters, n_boot=n_boot, seed=seed,
            weights=self.weights(n_boot, seed),
        )  # fmt: skip


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval for ``k`` successes in ``n`` trials (by bisection)."""
    if n == 0:
        return (float("nan"), float("nan"))
    alpha = 1 - level

    def cdf(x: int, p: float) -> float:
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(x + 1))

    def solve(f, lo=0.0, hi=1.0) -> float:
        for _ in range(80):
            mid = (lo + hi) / 2
            if f(mid):
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    low = 0.0 if k == 0 else solve(lambda p: 1 - cdf(k - 1, p) < alpha / 2)
    high = 1.0 if k == n else solve(lambda p: cdf(k, p) > alpha / 2)
    return low, high


def coverage(rows: Sequence[Mapping]) -> dict:
    """C1: of the certified cuts, the share whose true regret is within their own delta.

    ``rows``: one per cut with ``certified`` (bool), ``delta`` (points) and
    ``true_regret`` (points, against the best cut on the extended contract).
    """
    certified = [r for r in rows if r["certified"]]
    hit = [r for r in certified if r["true_regret"] <= r["delta"] + 1e-9]
    n, k = len(certified), len(hit)
    return {
        "cuts": len(rows),
        "certified": n,
        "certify_rate": n / len(rows) if rows else float("nan"),
        "certify_rate_ci": list(clopper_pearson(n, len(rows))),
        "covered": k,
        "coverage": k / n if n else float("nan"),
        "coverage_ci": list(clopper_pearson(k, n)),
        "target": 0.90,
        "met": bool(n and k / n >= 0.90 and n / len(rows) >= 0.20),
        "misses": [dict(r) for r in certified if r["true_regret"] > r["delta"] + 1e-9],
    }


def regret_against_best(
    contract: Contract, cuts: Sequence[Sequence[int]], best: Sequence[int], n_boot, seed
) -> dict:
    """A method's regret over seeds against ``best``: mean, two-level CI, one-sided bound."""
    d = contract.difference([best] * len(cuts), cuts, n_boot, seed)
    upper = float(np.percentile(d.replicates, 95))  # one-sided 95% upper bound
    return {
        "mean": d.estimate,
        "ci": [d.interval.low, d.interval.high],
        "upper_95": upper,
        "within_margin": upper < MARGIN,
        "per_seed": d.per_seed,
    }


def contrast(
    contract: Contract, a_name: str, a: Sequence, b_name: str, b: Sequence, n_boot, seed
) -> dict:
    """``b - a`` in points over seeds, with the four-outcome verdict at +-MARGIN."""
    d = contract.difference(a, b, n_boot, seed)
    same = all(tuple(sorted(x)) == tuple(sorted(y)) for x, y in zip(a, b))
    v = verdict_from_replicates(
        d.estimate, d.replicates, a=a_name, b=b_name,
        a_key=cut_key(sorted(a[0])) if same else a_name,
        b_key=cut_key(sorted(b[0])) if same else b_name,
        higher_is_better=False, margin=Margin(MARGIN, "points"), scope=contract.name,
        resampled="seeds x moving blocks of windows" if contract.ordered else "seeds x articles",
        n_units=len(contract.base), n_clusters=d.n_clusters,
    )  # fmt: skip
    p = d.p_value
    return {
        "a": a_name,
        "b": b_name,
        "d": d.estimate,
        "ci": [d.interval.low, d.interval.high],
        "p": p,
        "p_mc_se": math.sqrt(p * (1 - p) / n_boot) if p == p else float("nan"),
        "outcome": v.outcome if not same else "identical",
        "label": v.label if not same else "identical",
        "per_seed": d.per_seed,
        "resamples": n_boot,
        "verdict": v,
    }


def holm_primary(tests: Sequence[dict]) -> list[dict]:
    """Holm over the primary family (identical contrasts leave it); adds ``p_holm`` and the
    outcome at the Holm level to each test."""
    adjusted = holm_distinct([t["verdict"] for t in tests], family="primary")
    for t, v in zip(tests, adjusted):
        t["p_holm"] = v.p_holm
        t["label_holm"] = v.label_holm
    return list(tests)


def percentile_rank(cost: float, costs: Sequence[float]) -> float:
    """Share of sets strictly cheaper than ``cost`` (0: the best), in percent."""
    arr = np.asarray(costs, float)
    return 100.0 * float(np.mean(arr < cost))


def screening_agreement(a: Mapping[tuple, float], b: Mapping[tuple, float], top: int = 20) -> dict:
    """Two screenings of the same sets: rank correlation over the common sets, top overlap."""
    common = sorted(set(a) & set(b))
    order_a = sorted(a, key=lambda s: (a[s], s))
    order_b = sorted(b, key=lambda s: (b[s], s))
    rho = spearman(np.array([a[s] for s in common]), np.array([b[s] for s in common]))
    return {
        "sets": len(common),
        "spearman": float(rho),
        "top": top,
        "top_overlap": len(set(order_a[:top]) & set(order_b[:top])),
        "best_a": list(order_a[0]),
        "best_b": list(order_b[0]),
    }
