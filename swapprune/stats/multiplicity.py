"""Multiple testing over a table of verdicts: Holm over distinct model pairs, primary contrasts.

:func:`holm_distinct` adjusts over the *distinct* model pairs of a table: rows
whose two cuts are the same pair of sets (in either order, at any budget or
seed of the table) are one test, counted once, and every such row gets the same
adjusted values. Identical-set rows are excluded. The difference p-values and
the TOST p-values are adjusted as two families. The Holm-level MDD uses
``alpha / k`` for a family of ``k`` distinct pairs (Holm's first, strictest
step).

:func:`primary_contrasts` names the confirmatory contrasts of one budget
(interchange vs replacement; auto vs the best baseline), which are adjusted as
their own, smaller family (``holm_distinct(rows, family="primary")``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from swapprune.stats.bootstrap import holm, minimum_detectable_difference
from swapprune.stats.verdicts import POWER, Verdict, outcome_of

#: Criteria that count as the field's baselines for the "auto vs best baseline" contrast.
BASELINES = (
    "bi",
    "bi-greedy",
    "angular",
    "angular-tokens",
    "sleb",
    "sleb-oneshot",
    "sleb-kl",
    "taylor",
)


def holm_distinct(
    verdicts: Sequence[Verdict], family: str = "all distinct pairs", alpha: float | None = None
) -> list[Verdict]:
    """Holm-adjust a table's verdicts over its distinct model pairs.

    Rows are grouped by :attr:`Verdict.pair` (scope and the unordered pair of
    cuts): a group is one test, counted once, and all its rows get the same
    adjusted values. Identical-set rows are returned unchanged and not counted.

    Args:
        verdicts: The rows of one table (any budgets, seeds, orders).
        family: Name of the family, for the record.
        alpha: Test level (default: each verdict's own).

    Returns:
        The rows in the given order, with ``p_holm``, ``p_tost_holm``,
        ``mdd_holm``, ``outcome_holm``, ``family`` and ``family_size`` set.

    Raises:
        ValueError: If two rows of one pair disagree on their p-values (they
            were measured differently and are not the same test).
    """
    groups: dict[tuple, Verdict] = {}
    for v in verdicts:
        if v.outcome == "identical":
            continue
        first = groups.setdefault(v.pair, v)
        if not (
            math.isclose(first.p_value, v.p_value, rel_tol=1e-9, abs_tol=1e-12)
            and math.isclose(first.p_tost, v.p_tost, rel_tol=1e-9, abs_tol=1e-12)
        ):
            raise ValueError(
                f"rows {first.a} vs {first.b} and {v.a} vs {v.b} are the same pair of models "
                f"({v.pair}) but disagree on their p-values; compute each pair once"
            )
    reps = list(groups.values())
    k = len(reps)
    p_diff = dict(zip(groups, holm([r.p_value for r in reps]), strict=True))
    p_tost = dict(zip(groups, holm([r.p_tost for r in reps]), strict=True))
    out = []
    for v in verdicts:
        if v.outcome == "identical":
            out.append(replace(v, family=family, family_size=k))
            continue
        level = v.alpha if alpha is None else alpha
        ph, pt = p_diff[v.pair], p_tost[v.pair]
        # Orientation follows the row (a row and its reverse are one test).
        outcome = outcome_of(ph, pt, v.estimate > 0, v.higher_is_better, level)
        out.append(
            replace(
                v,
                family=family,
                family_size=k,
                p_holm=ph,
                p_tost_holm=pt,
                mdd_holm=minimum_detectable_difference(v.se, 1 - level / k, POWER),
                outcome_holm=outcome,
            )
        )
    return out


def _criterion(label: str) -> str | None:
    """The criterion a removal's label names (``bi`` of ``bi``, ``bi:3``, ``bi@greedy``).

    None for a merge (``bi@merge:laco``) or a patched cell (``bi+linear``): another
    operation than auto's, so never its "best baseline".
    """
    if "@merge" in label or "+" in label:
        return None
    return label.partition("@")[0].partition(":")[0]


def primary_contrasts(
    costs: Mapping[str, float | None], higher_is_better: bool = False
) -> list[tuple[str, str]]:
    """The confirmatory contrasts of one budget, as ``(a, b)`` method labels.

    * ``(interchange, replacement)``: the paper's protocol question (I vs R);
    * ``(auto, best baseline)``: the best of the :data:`BASELINES` present at
      this budget by its measured cost (lowest for a lower-is-better metric).
      Choosing the competitor on the same data makes "auto better" harder to
      claim and "baseline better" easier; both are reported, so the bias runs
      against the product, not for it.

    Args:
        costs: Method label -> its cost (or metric) at this budget; labels of
            absent or unmeasured methods are skipped.
        higher_is_better: Direction of the metric the costs are on.

    Returns:
        The contrasts whose two methods are both present (possibly none).
    """
    present = {k: v for k, v in costs.items() if v is not None and math.isfinite(v)}
    out = []
    if "interchange" in present and "replacement" in present:
        out.append(("interchange", "replacement"))
    baselines = [k for k in present if _criterion(k) in BASELINES]
    if "auto" in present and baselines:
        pick = max if higher_is_better else min
        out.append(("auto", pick(baselines, key=lambda k: present[k])))
    return out
