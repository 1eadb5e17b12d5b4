"""Model-based criteria and strategies, and prune() end to end on tiny models."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tiny_models import tiny_ids, tiny_model, tiny_tokenizer

from swapprune import criteria
from swapprune.calibration import Calibration
from swapprune.naive import plan_logits
from swapprune.engine.oracle import CalibrationOracle
from swapprune.pruning import PruneRequest, plan_pruning, prune

IDS = tiny_ids(6, 24, seed=3)


def naive_ppl(model, removed):
    plan = [b for b in range(6) if b not in removed]
    logits = plan_logits(model, plan, IDS)[:, :-1]
    return math.exp(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), IDS[:, 1:].reshape(-1)).item())


def test_oracle_cost_equals_naive_perplexity():
    model = tiny_model("qwen2")
    oracle = CalibrationOracle(model, IDS, batch_size=6)
    for removed in ([], [2], [1, 4]):
        assert oracle.cost(removed) == pytest.approx(naive_ppl(model, removed), rel=1e-5)


def test_block_influence_and_angular_match_direct_hidden_states():
    model = tiny_model("llama")
    oracle = CalibrationOracle(model, IDS, batch_size=6)
    bi, ang = oracle.similarity()
    hs = model(input_ids=IDS, output_hidden_states=True).hidden_states  # hs[k] enters block k (k < L)
    for k in range(4):
        cos = F.cosine_similarity(hs[k].double(), hs[k + 1].double(), dim=-1)
        assert bi[k] == pytest.approx((1 - cos).mean().item(), rel=1e-6)
        assert ang[k] == pytest.approx((torch.arccos(cos.clamp(-1, 1)) / math.pi).mean().item(), rel=1e-6)


def test_sleb_is_iterative_minimum_perplexity():
    model = tiny_model("llama")
    plan, _ = plan_pruning(model, None, PruneRequest(budget=2, protocol="sleb"),
                           calibration=Calibration(IDS, "test", 0), progress=False)
    first = min(range(6), key=lambda b: naive_ppl(model, [b]))
    second = min((b for b in range(6) if b != first), key=lambda b: naive_ppl(model, [first, b]))
    assert plan.removed == sorted([first, second])
    assert plan.strategy == "iterative"


@pytest.mark.parametrize("protocol", ["interchange", "replacement", "deletion", "bi", "angular", "random", "reverse"])
def test_every_criterion_prunes(protocol):
    model = tiny_model("gemma3_text")
    model, plan = prune(model, tiny_tokenizer(), budget=2, protocol=protocol, prompts=4, tokens=32,
                        progress=False)
    assert len(plan.removed) == 2 and plan.protocol == protocol
    assert model.config.num_hidden_layers == 4
    assert abs(plan.removed[0] - plan.removed[1]) >= 2  # greedy: never adjacent


def test_beam_and_merge():
    tok = tiny_tokenizer()
    _, plan = prune(tiny_model("llama"), tok, budget=2, protocol="interchange", strategy="beam:2",
                    prompts=4, tokens=32, progress=False)
    assert 0 < plan.scores["oracle_calls"] <= 400
    model, plan = prune(tiny_model("llama"), tok, budget=2, protocol="interchange", op="merge",
                        merge="laco", prompts=4, tokens=32, progress=False)
    assert len(plan.kept) == 4 and sum(len(v) for v in plan.merged.values()) == 4
    assert model.config.num_hidden_layers == 4


def test_importance_vectors_for_other_tools():
    model = tiny_model("llama")
    oracle = CalibrationOracle(model, IDS)
    ctx = criteria.Context(num_layers=6, oracle=oracle)
    for name in ("bi", "angular", "sleb", "deletion"):
        imp = criteria.get(name).importance(ctx)
        assert imp.shape == (6,) and np.isfinite(imp).all()
