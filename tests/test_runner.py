"""The plan runner equals the literal definition, and the identity plan is the base model."""

import pytest
import torch
from tiny_models import FAMILIES, tiny_ids, tiny_model

from swapprune.engine.naive import plan_logits
from swapprune.engine.runner import PlanRunner

PLANS = [
    (0, 2, 1, 3, 4, 5),  # adjacent interchange
    (0, 1, 2, 3, 5, 5),  # replacement 4 <- 5
    (4, 1, 2, 3, 0, 5),  # distant interchange, crosses Gemma3 types
    (0, 1, 3, 4, 5),  # deletion
    (0, 2, 2, 3, 4, 5),
]


@pytest.mark.parametrize("family", FAMILIES)
def test_identity_plan_is_bitwise_base(family):
    model, ids = tiny_model(family), tiny_ids()
    runner = PlanRunner(model)
    cache = runner.capture(ids)
    ref = model(input_ids=ids, use_cache=False).logits
    assert torch.equal(runner.logits(runner.base_plan, cache), ref)


@pytest.mark.parametrize("family", FAMILIES)
def test_plans_equal_rebuilt_module_list(family):
    model, ids = tiny_model(family), tiny_ids()
    runner = PlanRunner(model)
    cache = runner.capture(ids)
    for plan in PLANS:
        ref = plan_logits(model, plan, ids)
        got = runner.logits(plan, cache).float()
        assert torch.allclose(got, ref, rtol=1e-5, atol=1e-5 * ref.abs().max().item()), plan


def test_prefix_reuse_counts_blocks():
    model, ids = tiny_model("llama"), tiny_ids(2, 8)
    runner = PlanRunner(model)
    cache = runner.capture(ids)
    before = runner.stats.block_evals
    # replacement 3<-4 and interchange 3<->4 share slot 3; 3<-4 re-runs slots 3..5
    plans = [(0, 1, 2, 4, 4, 5), (0, 1, 2, 4, 3, 5)]
    out = dict(runner.run_plans(plans, cache))
    assert runner.stats.block_evals - before == 1 + 2 + 2
    assert set(out) == {0, 1}


def test_model_is_not_mutated():
    model, ids = tiny_model("gemma3_text"), tiny_ids()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    types = list(model.config.layer_types)
    runner = PlanRunner(model)
    runner.logits((5, 4, 3, 2, 1, 0), runner.capture(ids))
    assert model.config.layer_types == types
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
