"""Model-based criteria and strategies, and prune() end to end on tiny models."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tiny_models import tiny_ids, tiny_model, tiny_tokenizer

from swapprune.api import plan_pruning, prune
from swapprune.calibration.windows import Calibration
from swapprune.config import CalibrationConfig, SelectConfig
from swapprune.engine.naive import plan_logits
from swapprune.engine.oracle import CalibrationOracle
from swapprune.select import criteria
from swapprune.select.spec import resolve

CAL = CalibrationConfig()

IDS = tiny_ids(6, 24, seed=3)


def naive_ppl(model, removed):
    plan = [b for b in range(6) if b not in removed]
    logits = plan_logits(model, plan, IDS)[:, :-1]
    return math.exp(
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), IDS[:, 1:].reshape(-1)).item()
    )


def test_oracle_cost_equals_naive_perplexity():
    model = tiny_model("qwen2")
    oracle = CalibrationOracle(model, IDS, batch_size=6)
    for removed in ([], [2], [1, 4]):
        assert oracle.cost(removed) == pytest.approx(naive_ppl(model, removed), rel=1e-5)


def test_block_influence_and_angular_match_direct_hidden_states():
    model = tiny_model("llama")
    oracle = CalibrationOracle(model, IDS, batch_size=6)
    bi, ang = oracle.similarity()
    hs = model(
        input_ids=IDS, output_hidden_states=True
    ).hidden_states  # hs[k] enters block k (k < L)
    for k in range(4):
        cos = F.cosine_similarity(hs[k].double(), hs[k + 1].double(), dim=-1)
        assert bi[k] == pytest.approx((1 - cos).mean().item(), rel=1e-6)
        assert ang[k] == pytest.approx(
            (torch.arccos(cos.clamp(-1, 1)) / math.pi).mean().item(), rel=1e-6
        )


def test_sleb_is_iterative_minimum_perplexity():
    model = tiny_model("llama")
    plan, _ = plan_pruning(
        model,
        None,
        budget=2,
        protocol="sleb",
        calibration=Calibration(IDS, "test", 0),
        progress=False,
    )
    first = min(range(6), key=lambda b: naive_ppl(model, [b]))
    second = min((b for b in range(6) if b != first), key=lambda b: naive_ppl(model, [first, b]))
    assert plan.removed == sorted([first, second])
    assert plan.strategy == "iterative"


@pytest.mark.parametrize(
    "protocol",
    [
        "interchange",
        "replacement",
        "deletion",
        "bi",
        "bi-greedy",
        "angular",
        "angular-tokens",
        "random",
        "reverse",
    ],
)
def test_every_criterion_prunes(protocol):
    model = tiny_model("gemma3_text")
    model, plan = prune(
        model, tiny_tokenizer(), budget=2, protocol=protocol, prompts=4, tokens=32, progress=False
    )
    assert len(plan.removed) == 2 and plan.protocol == protocol
    assert model.config.num_hidden_layers == 4
    default = criteria.get(protocol).default_strategy
    assert plan.strategy == default
    gap = plan.removed[1] - plan.removed[0]
    if default == "greedy":
        assert gap >= 2  # never adjacent
    if default == "contiguous" or protocol == "reverse":
        assert gap == 1  # a span (reverse: the last two blocks)
    if protocol == "reverse":
        assert plan.removed == [4, 5]


def test_beam_and_merge():
    tok = tiny_tokenizer()
    _, plan = prune(
        tiny_model("llama"),
        tok,
        budget=2,
        protocol="interchange",
        strategy="beam:2",
        prompts=4,
        tokens=32,
        progress=False,
    )
    assert 0 < plan.scores["oracle_calls"] <= 400
    model, plan = prune(
        tiny_model("llama"),
        tok,
        budget=2,
        protocol="interchange",
        op="merge",
        merge="laco",
        prompts=4,
        tokens=32,
        progress=False,
    )
    assert len(plan.kept) == 4 and sum(len(v) for v in plan.merged.values()) == 4
    assert model.config.num_hidden_layers == 4


def test_importance_vectors_for_other_tools():
    model = tiny_model("llama")
    oracle = CalibrationOracle(model, IDS)
    ctx = criteria.Context(num_layers=6, oracle=oracle)
    for name in ("bi", "angular", "sleb", "deletion"):
        imp = criteria.get(name).importance(ctx)
        assert imp.shape == (6,) and np.isfinite(imp).all()


def naive_kl(model, removed):
    """Mean all-position KL(p_base || p_pruned), straight from two full forwards."""
    base = plan_logits(model, list(range(6)), IDS)[:, :-1].double()
    pr = plan_logits(model, [b for b in range(6) if b not in removed], IDS)[:, :-1].double()
    lp, lq = base.log_softmax(-1), pr.log_softmax(-1)
    return (lp.exp() * (lp - lq)).sum(-1).mean().item()


def cal():
    return Calibration(IDS, "test", 0)


def test_last_token_angular_over_spans_by_hand():
    model = tiny_model("llama")
    hs = model(input_ids=IDS, output_hidden_states=True).hidden_states  # hs[k] enters block k
    # the final entry is after the final norm; the state after block 5 is what block 6 would get
    after = [*hs[:6], CalibrationOracle(model, IDS).caches[0].hidden[6]]
    oracle = CalibrationOracle(model, IDS, batch_size=6)
    ctx = criteria.Context(num_layers=6, oracle=oracle)
    for n in (1, 2, 3):
        want = []
        for s in range(6 - n + 1):
            cos = F.cosine_similarity(
                after[s][:, -1].double(), after[s + n][:, -1].double(), dim=-1
            )
            want.append((torch.arccos(cos.clamp(-1, 1)) / math.pi).mean().item())
        got = criteria.get("angular").span_scores(ctx, n)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    plan, _ = plan_pruning(
        model, None, budget=3, protocol="angular", calibration=cal(), progress=False
    )
    start = int(np.argmin(want))  # want holds the n=3 spans
    assert plan.removed == [start, start + 1, start + 2] and plan.strategy == "contiguous"


def test_block_influence_is_unconstrained_n_lowest():
    model = tiny_model("llama")
    hs = model(input_ids=IDS, output_hidden_states=True).hidden_states
    after = [*hs[:6], CalibrationOracle(model, IDS).caches[0].hidden[6]]
    bi = [
        (1 - F.cosine_similarity(after[k].double(), after[k + 1].double(), dim=-1)).mean().item()
        for k in range(6)
    ]
    plan, _ = plan_pruning(model, None, budget=3, protocol="bi", calibration=cal(), progress=False)
    assert plan.removed == sorted(np.argsort(bi, kind="stable")[:3].tolist())
    np.testing.assert_allclose(plan.scores["importance"], bi, rtol=1e-6)


def test_taylor_by_hand():
    model = tiny_model("llama")
    oracle = CalibrationOracle(model, IDS, batch_size=4)  # two batches: gradients must accumulate
    got = criteria.get("taylor").importance(criteria.Context(num_layers=6, oracle=oracle))
    model.zero_grad()
    loss = model(input_ids=IDS, labels=IDS).loss  # mean CE over every predicted token
    loss.backward()
    want = [
        sum(float((p.grad.double() * p.detach().double()).abs().sum()) for p in blk.parameters())
        for blk in model.model.layers
    ]
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert all(p.requires_grad for p in model.parameters())  # flags restored as they were


def test_taylor_leaves_the_models_gradients_as_they_were():
    """Only the blocks' parameters get gradients, into the criterion's own accumulator: the
    model's .grad fields (set or not) are as before, and no other parameter gets one."""
    model = tiny_model("llama")
    first = next(model.model.layers[0].parameters())
    mark = torch.full_like(first, 7.0)
    first.grad = mark
    criteria.get("taylor").importance(
        criteria.Context(num_layers=6, oracle=CalibrationOracle(model, IDS, batch_size=4))
    )
    assert first.grad is mark and bool((mark == 7.0).all())
    assert all(p.grad is None for p in model.parameters() if p is not first)


def test_sleb_oneshot_and_sleb_kl_by_hand():
    model = tiny_model("llama")
    plan, _ = plan_pruning(
        model,
        None,
        budget=2,
        protocol="sleb-oneshot",
        calibration=cal(),
        progress=False,
    )
    ppl = [naive_ppl(model, [b]) for b in range(6)]
    assert plan.removed == sorted(np.argsort(ppl)[:2].tolist()) and plan.strategy == "ranked"
    np.testing.assert_allclose(plan.scores["importance"], ppl, rtol=1e-5)

    plan, _ = plan_pruning(
        model, None, budget=2, protocol="sleb-kl", calibration=cal(), progress=False
    )
    first = min(range(6), key=lambda b: naive_kl(model, [b]))
    second = min((b for b in range(6) if b != first), key=lambda b: naive_kl(model, [first, b]))
    assert plan.records.order.blocks == [first, second] and plan.strategy == "iterative"
    np.testing.assert_allclose(
        plan.scores["importance"][first], naive_kl(model, [first]), rtol=1e-4
    )


def test_weaker_contributor_breaks_the_tie_of_the_best_pair():
    from swapprune.engine.scores import ScoreResult

    model = tiny_model("llama", seed=1)  # its residual updates are not monotone in depth
    hs = model(input_ids=IDS, output_hidden_states=True).hidden_states
    after = [*hs[:6], CalibrationOracle(model, IDS).caches[0].hidden[6]]
    g = [(after[k + 1] - after[k]).double().norm(dim=-1).mean().item() for k in range(6)]
    upper = next(k for k in range(5) if g[k] > g[k + 1])  # the lower-index rule would differ
    lower = next(k for k in range(5) if g[k] < g[k + 1])
    for i, want in ((upper, upper + 1), (lower, lower)):
        s = ScoreResult(meta={"num_layers": 6})
        for k in range(5):
            s.pairs[(k, k + 1)] = {"inter": np.full(4, 0.01 if k == i else 1.0 + k)}
        plan, _ = plan_pruning(
            model,
            None,
            budget=1,
            protocol="interchange",
            scores=s,
            calibration=cal(),
            progress=False,
        )
        assert plan.removed == [want]
        np.testing.assert_allclose(plan.scores["tiebreak"]["values"], g, rtol=1e-6)


def test_ranked_pairs_and_beam_on_a_model():
    tok = tiny_tokenizer()
    _, plan = prune(
        tiny_model("llama"),
        tok,
        budget=3,
        protocol="interchange",
        strategy="ranked-pairs:skip-ends",
        prompts=4,
        tokens=32,
        progress=False,
    )
    assert 0 not in plan.removed and 5 not in plan.removed and len(plan.removed) == 3
    _, plan = prune(
        tiny_model("llama"),
        tok,
        budget=2,
        protocol="bi",
        strategy="beam:2",
        prompts=4,
        tokens=32,
        progress=False,
        beam_seeds=3,
    )
    sel = plan.scores["selection"]
    # 3 seeds, then 2 beams x 5 other blocks, minus the one set both beams reach
    assert plan.scores["strategy_oracle_calls"] == 3 + 2 * 5 - 1
    assert sel["seeds"] == 3 and sel["capped"] is False


def test_a_strategy_input_the_criterion_lacks_fails_before_any_model_work():
    from swapprune.errors import SwappruneError

    with pytest.raises(
        SwappruneError, match="needs pair table.*criteria that can: interchange, replacement"
    ):
        resolve(SelectConfig(budget=2, protocol="bi", strategy="ranked-pairs"), CAL)
    with pytest.raises(SwappruneError, match="needs rescore.*sleb"):
        resolve(SelectConfig(budget=2, protocol="interchange", strategy="iterative"), CAL)
    _, strategy, _ = resolve(
        SelectConfig(budget=2, protocol="bi", strategy="beam:4", max_oracle_calls=50, beam_seeds=5),
        CAL,
    )
    assert (strategy.width, strategy.max_calls, strategy.seeds) == (4, 50, 5)
