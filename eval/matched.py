"""The matched contract's cost of one cut, as the benchmarks record it (in percent).

The matched contract is WikiText-2 test, first 5,000 words, 512-token windows with
a 256 stride: 23 windows (``swapprune.evaluation.contract``).
"""

from __future__ import annotations


def matched_cost(model, tok, plan=None, *, pruned=None) -> dict:
    """dPPL % of ``plan`` (a ``PrunePlan`` or the removed blocks) or of ``pruned`` (a model).

    Returns the base and cut perplexities, dPPL % with its 95% paired-bootstrap CI,
    and the number of windows scored.
    """
    from swapprune.evaluation.cost import pruning_cost
    from swapprune.plan import PrunePlan

    if plan is not None and not isinstance(plan, PrunePlan):
        plan = PrunePlan.from_removal(model.config.num_hidden_layers, sorted(plan))
    c = pruning_cost(model, tok, plan, pruned=pruned, windows=None)
    return {"base_ppl": c.base_ppl, "ppl": c.pruned_ppl, "dppl_pct": 100 * c.dppl,
            "ci_pct": [100 * c.ci[0], 100 * c.ci[1]], "windows": c.windows}  # fmt: skip
