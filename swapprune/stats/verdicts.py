"""Verdicts on two cuts measured on the same units: four outcomes, never an unqualified tie.

Two cuts A and B are compared through the paired bootstrap replicates of their
difference ``d = B - A``, on one of two scales:

* ``points`` (the default): ``100 * (stat(B) - stat(A)) / stat(base)``, the
  difference of the two costs in percentage points of the unpruned model's
  value (for perplexity: dPPL(B) - dPPL(A)); base, A and B are resampled
  together;
* ``metric``: ``stat(B) - stat(A)`` in the metric's own units.

The units are windows (window bootstrap) or, when their articles are given,
articles (:mod:`swapprune.stats.clustered`). With ``alpha`` (0.05) and a
declared margin ``m > 0`` on the same scale, the outcome is the first that holds:

1. **identical**: A and B are the same set (same kept blocks and merges). The
   two models are one model; nothing is tested and the row never enters a
   multiple-testing family.
2. **A better** / **B better**: the two-sided bootstrap p-value of ``d = 0`` is
   below ``alpha`` (equivalently, up to one replicate, the ``1 - alpha``
   percentile CI of ``d`` excludes 0). Which is better follows the sign of ``d``
   and the metric's direction.
3. **equivalent within +-m** (shown as ``tie (equivalent within +-m)``): TOST.
   The two one-sided tests of ``H0: d <= -m`` and ``H0: d >= m`` each reject at
   level ``alpha``; their bootstrap p-values are ``p_low = (#{d* <= -m} + 1) / (B + 1)``
   and ``p_high = (#{d* >= m} + 1) / (B + 1)`` and ``p_tost = max(p_low, p_high)``.
   Equivalently (up to one replicate) the ``1 - 2 alpha`` percentile CI of ``d``
   (90%) lies inside ``(-m, m)``. A difference can be significant and still
   within the margin; it is then "better" and :attr:`Verdict.within_margin` says so.
4. **inconclusive (MDD x)**: neither. ``x`` is the minimum detectable
   difference at this n: the true difference a two-sided test at ``alpha``
   detects with 80% power, ``(z_{1-alpha/2} + z_{0.8}) * se`` (2.80 se), with
   ``se`` the bootstrap standard error of ``d``. An inconclusive result is never
   called a tie.

**Default margin: 2 points** (2% of the unpruned model's value; for perplexity
dPPL(B) - dPPL(A) within +-2 points). Why: it is a quarter of the cheapest
single-block deletion measured on SmolLM2-135M (+8.8%, ``eval/study/validity.json``)
and far below the cost of any cut this project has compared (n = 2 and 3 on the
matched contract: +31% to +71%, ``eval/study/pruning``),
so two cuts within it differ by much less than one block's worth; and because it
is relative to the base model it carries across models whose perplexities differ
several-fold. It was fixed before looking at any extended-contract result. A
margin in the metric's own units (``Margin(0.5, "metric")``) is the alternative.

**Multiplicity**: :mod:`swapprune.stats.multiplicity` (Holm over the distinct
model pairs of a table; the primary contrasts).

**The paper's test** (:func:`paper_overlap`; the comparison itself is :func:`swapprune.stats.comparison.compare_cuts`): a tie when the two marginal CIs
overlap (Garcia 2026). It is weaker than the paired test and is shown beside
the verdict, labelled as the paper's, never instead of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from swapprune.stats.bootstrap import (
    Interval,
    bootstrap_p_value,
    intervals_overlap,
    minimum_detectable_difference,
)
from swapprune.stats.clustered import percentile_interval

ALPHA = 0.05
#: MDD power.
POWER = 0.8
UNITS = ("points", "metric")
OUTCOMES = ("identical", "a_better", "b_better", "equivalent", "inconclusive")


@dataclass(frozen=True)
class Margin:
    """The equivalence margin ``m`` of a comparison.

    Attributes:
        value: ``m > 0``.
        unit: ``"points"``: percentage points of the unpruned model's value
            (for perplexity, dPPL points); ``"metric"``: the metric's own units.
    """

    value: float = 2.0
    unit: str = "points"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.value) and self.value > 0):
            raise ValueError(f"an equivalence margin must be > 0, got {self.value}")
        if self.unit not in UNITS:
            raise ValueError(f"margin unit must be one of {UNITS}, got {self.unit!r}")

    def label(self) -> str:
        """``+-2 pts`` or ``+-0.5``."""
        return f"+-{self.value:g}" + (" pts" if self.unit == "points" else "")


DEFAULT_MARGIN = Margin()


def cut_key(kept: Sequence[int], merged: Mapping[Any, Sequence[int]] | None = None) -> str:
    """A canonical string naming a cut: its kept blocks and its merges (0-based)."""
    key = "kept:" + ",".join(str(int(b)) for b in kept)
    if merged:
        parts = sorted(f"{int(k)}={','.join(str(int(x)) for x in v)}" for k, v in merged.items())
        key += "|merged:" + ";".join(parts)
    return key


@dataclass(frozen=True)
class Verdict:
    """The comparison of cut ``b`` against cut ``a`` (difference ``d = b - a``).

    Attributes:
        a, b: Display names.
        a_key, b_key: What each cut is (:func:`cut_key`); equal keys are identical models.
        scope: What was measured (e.g. ``"swapprune_wikitext2_ext/perplexity"``);
            rows of different scopes are never the same test.
        outcome: One of :data:`OUTCOMES`.
        higher_is_better: Direction of the metric.
        estimate: ``d`` on all units, on the margin's scale.
        ci: ``1 - alpha`` percentile CI of ``d``.
        ci_tost: ``1 - 2 alpha`` percentile CI of ``d`` (TOST).
        p_value: Two-sided p-value of ``d = 0``.
        p_tost: ``max`` of the two one-sided p-values against ``-m`` and ``m``.
        within_margin: ``p_tost < alpha`` (set on a "better" outcome too).
        equivalence_bound: Smallest margin these data would call equivalent
            (``max |ci_tost|``).
        se: Bootstrap standard error of ``d``.
        mdd: Minimum detectable difference at ``alpha`` with 80% power.
        margin: The declared margin.
        alpha: Test level.
        n_units: Windows (or examples) paired.
        n_clusters: Articles, when the bootstrap resampled articles.
        resampled: ``"windows"``, ``"articles"`` or ``"seeds x articles"``.
        overlap: The paper's test: the two marginal ``1 - alpha`` CIs overlap.
        a_value, b_value: The metric of each cut on all units.
        family, family_size: Holm family and its number of distinct pairs.
        p_holm, p_tost_holm, mdd_holm, outcome_holm: The same at the Holm level.
    """

    a: str
    b: str
    a_key: str
    b_key: str
    scope: str
    outcome: str
    higher_is_better: bool
    margin: Margin
    alpha: float = ALPHA
    estimate: float = 0.0
    ci: tuple[float, float] = (float("nan"), float("nan"))
    ci_tost: tuple[float, float] = (float("nan"), float("nan"))
    p_value: float = float("nan")
    p_tost: float = float("nan")
    within_margin: bool = False
    equivalence_bound: float = float("nan")
    se: float = float("nan")
    mdd: float = float("nan")
    n_units: int = 0
    n_clusters: int | None = None
    resampled: str = "windows"
    overlap: bool | None = None
    a_value: float = float("nan")
    b_value: float = float("nan")
    family: str | None = None
    family_size: int | None = None
    p_holm: float | None = None
    p_tost_holm: float | None = None
    mdd_holm: float | None = None
    outcome_holm: str | None = None

    @property
    def pair(self) -> tuple[str, tuple[str, ...]]:
        """The test's identity: its scope and the unordered pair of cuts."""
        return self.scope, tuple(sorted((self.a_key, self.b_key)))

    @property
    def _suffix(self) -> str:
        return " pts" if self.margin.unit == "points" else ""

    def _label(self, outcome: str, mdd: float | None, within: bool) -> str:
        if outcome == "identical":
            return "identical"
        if outcome in ("a_better", "b_better"):
            name = self.a if outcome == "a_better" else self.b
            return f"{name} better" + (f" (within {self.margin.label()})" if within else "")
        if outcome == "equivalent":
            return f"tie (equivalent within {self.margin.label()})"
        return f"inconclusive (MDD {mdd:.3g}{self._suffix})"

    @property
    def label(self) -> str:
        """What a person reads: ``A better``, ``tie (equivalent within +-2 pts)``, ..."""
        return self._label(self.outcome, self.mdd, self.within_margin)

    @property
    def sentence(self) -> str:
        """The label with both sides named: ``base better than cut``, ``tie (...): base vs cut``."""
        if self.outcome == "identical":
            return self.label
        if self.outcome == "a_better":
            return self.label.replace(" better", f" better than {self.b}", 1)
        if self.outcome == "b_better":
            return self.label.replace(" better", f" better than {self.a}", 1)
        return f"{self.label}: {self.a} vs {self.b}"

    @property
    def label_holm(self) -> str | None:
        """The label at the Holm level (None before :func:`holm_distinct`)."""
        if self.outcome_holm is None:
            return None
        within = self.p_tost_holm is not None and self.p_tost_holm < self.alpha
        return self._label(self.outcome_holm, self.mdd_holm, within)

    @property
    def overlap_label(self) -> str | None:
        """The paper's test, labelled as the paper's."""
        if self.overlap is None:
            return None
        return paper_overlap_label(
            self.overlap, self.a, self.b, self.estimate > 0, self.higher_is_better
        )

    def to_dict(self) -> dict:
        """JSON-ready record, labels included."""
        d = asdict(self)  # the margin too (asdict recurses)
        d["ci"], d["ci_tost"] = list(self.ci), list(self.ci_tost)
        d.update(label=self.label, label_holm=self.label_holm, overlap_label=self.overlap_label)
        return {k: _json_float(v) for k, v in d.items()}


def _json_float(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list):
        return [_json_float(x) for x in v]
    return v


def outcome_of(
    p: float, p_tost: float, b_higher: bool, higher_is_better: bool, alpha: float
) -> str:
    """The first outcome that holds: better (``p < alpha``), equivalent (``p_tost < alpha``), inconclusive.

    Args:
        p: Two-sided p-value of ``d = 0``.
        p_tost: TOST p-value against the margin.
        b_higher: Whether ``d = b - a`` is positive.
        higher_is_better: Direction of the metric.
        alpha: Test level.
    """
    if p < alpha:
        return "b_better" if b_higher == higher_is_better else "a_better"
    if p_tost < alpha:
        return "equivalent"
    return "inconclusive"


def tost_p_values(reps: np.ndarray, margin: float) -> tuple[float, float]:
    """One-sided bootstrap p-values of ``H0: d <= -margin`` and ``H0: d >= margin``."""
    r = np.asarray(reps, dtype=np.float64)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return float("nan"), float("nan")
    # (count + 1) / (B + 1) is at most 1: no clipping needed
    low = (int(np.sum(r <= -margin)) + 1) / (r.size + 1)
    high = (int(np.sum(r >= margin)) + 1) / (r.size + 1)
    return float(low), float(high)


def verdict_from_replicates(
    estimate: float,
    reps: np.ndarray,
    *,
    a: str,
    b: str,
    a_key: str,
    b_key: str,
    higher_is_better: bool,
    margin: Margin = DEFAULT_MARGIN,
    alpha: float = ALPHA,
    scope: str = "",
    resampled: str = "windows",
    n_units: int = 0,
    n_clusters: int | None = None,
) -> Verdict:
    """The verdict on ``d = b - a`` from its point value and bootstrap replicates.

    The entry point for replicates from any scheme (window, article, seed x
    article); :func:`compare_cuts` computes them from per-unit values.

    Args:
        estimate: ``d`` on all units, on the margin's scale.
        reps: ``[B]`` bootstrap replicates of ``d``.
        a, b: Display names. a_key, b_key: :func:`cut_key` of each cut.
        higher_is_better: Direction of the metric.
        margin: Equivalence margin, on the same scale as ``d``.
        alpha: Test level.
        scope: What was measured (task/metric, contract).
        resampled: The unit of the bootstrap, for the record.
        n_units, n_clusters: Sizes, for the record.
    """
    identical = Verdict(
        a=a,
        b=b,
        a_key=a_key,
        b_key=b_key,
        scope=scope,
        outcome="identical",
        higher_is_better=higher_is_better,
        margin=margin,
        alpha=alpha,
        n_units=n_units,
        n_clusters=n_clusters,
        resampled=resampled,
    )
    if a_key == b_key:
        return identical
    r = np.asarray(reps, dtype=np.float64)
    r = r[np.isfinite(r)]
    ci = percentile_interval(estimate, r, 1 - alpha)
    ci_tost = percentile_interval(estimate, r, 1 - 2 * alpha)
    p = bootstrap_p_value(r)
    p_low, p_high = tost_p_values(r, margin.value)
    p_tost = max(p_low, p_high)
    se = float(np.std(r, ddof=1)) if r.size > 1 else float("nan")
    return replace(
        identical,
        outcome=outcome_of(p, p_tost, estimate > 0, higher_is_better, alpha),
        estimate=float(estimate),
        ci=(ci.low, ci.high),
        ci_tost=(ci_tost.low, ci_tost.high),
        p_value=p,
        p_tost=p_tost,
        within_margin=bool(p_tost < alpha),
        equivalence_bound=float(max(abs(ci_tost.low), abs(ci_tost.high))),
        se=se,
        mdd=minimum_detectable_difference(se, 1 - alpha, POWER),
    )


def paper_overlap(a: Interval, b: Interval) -> bool:
    """The paper's tie test: the two marginal CIs share a point."""
    return intervals_overlap(a, b)


def paper_overlap_label(
    overlap: bool, a: str, b: str, b_higher: bool, higher_is_better: bool
) -> str:
    """``CIs overlap (paper's test: tie)`` or ``B better (paper's test: CIs apart)``."""
    if overlap:
        return "CIs overlap (paper's test: tie)"
    winner = b if b_higher == higher_is_better else a
    return f"{winner} better (paper's test: CIs apart)"
