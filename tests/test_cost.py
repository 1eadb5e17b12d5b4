"""The cost of a cut: base vs pruned perplexity from one load, with a paired CI."""

import copy

import pytest
import torch
from tiny_models import tiny_model, tiny_tokenizer

from swapprune.edit.surgery import apply_plan
from swapprune.errors import SwappruneError
from swapprune.evaluation import evaluate
from swapprune.evaluation.cost import pruning_cost
from swapprune.plan import PrunePlan

KW = dict(words=200, max_length=64, windows=6, n_boot=300)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_view_cost_equals_a_pruned_copy_and_leaves_the_model_alone(tok):
    model = tiny_model("llama")
    before = [id(b) for b in model.model.layers]
    plan = PrunePlan.from_removal(6, [1, 4], budget=2)
    cost = pruning_cost(model, tok, plan, **KW)
    assert [id(b) for b in model.model.layers] == before and model.config.num_hidden_layers == 6
    copy_ = apply_plan(copy.deepcopy(model), plan)
    direct = evaluate(copy_, tok, ["swapprune_wikitext2_ppl"], limit=6, words=200, max_length=64)
    ppl = direct.tasks["swapprune_wikitext2_ppl"].metrics["perplexity"].value
    assert cost.pruned_ppl == pytest.approx(ppl, rel=1e-5)
    assert cost.dppl == pytest.approx(cost.pruned_ppl / cost.base_ppl - 1)
    assert cost.ci[0] <= cost.dppl <= cost.ci[1]
    assert cost.windows == 6 and cost.contract_windows > 6
    assert "first 6 of" in cost.summary()
    # the same model given as the pruned one: exactly the same cost
    same = pruning_cost(model, tok, pruned=copy_, **KW)
    assert same.pruned_ppl == pytest.approx(cost.pruned_ppl, rel=1e-6)


def test_identity_costs_nothing_and_does_not_warn(tok):
    model = tiny_model("llama")
    cost = pruning_cost(model, tok, PrunePlan.from_removal(6, []), **KW)
    assert cost.dppl == pytest.approx(0.0, abs=1e-9) and cost.verdict == "identical"
    assert cost.to_dict()["comparison"]["outcome"] == "identical"  # the same set: not tested
    assert cost.warning is None and cost.to_dict()["warning"] is None


def test_above_the_threshold_warns_with_the_next_step(tok):
    model = tiny_model("llama")
    plan = PrunePlan.from_removal(6, [0, 2, 4], budget=3)
    cost = pruning_cost(model, tok, plan, threshold=-0.99, **KW)
    w = cost.warning
    assert w.startswith("warning: this cut raises perplexity") and "\n" not in w
    assert "--budget 1" in w and "--protocol auto" in w and "--patch linear" in w
    d = cost.to_dict()
    assert d["contract"]["stride"] == 32 and d["windows"] == 6 and d["threshold"] == -0.99
    # A cut that auto chose is not told to try auto.
    plan = PrunePlan.from_removal(6, [0, 2, 4], budget=3, protocol="auto")
    w = pruning_cost(model, tok, plan, threshold=-0.99, **KW).warning
    assert "--protocol auto" not in w and "--budget 1" in w and "--patch linear" in w


def test_a_patched_cut_is_not_told_to_patch():
    from swapprune.evaluation.cost import next_step

    assert next_step(8, "interchange") == (
        "a smaller budget (--budget 4), --protocol auto (the cheapest cut it can verify), or "
        "--patch linear (a map fitted over each removed span)"
    )
    w = next_step(8, "interchange", "linear")
    assert "--patch linear" not in w and "--patch-aware" in w
    assert next_step(8, "auto", "aware") == "a smaller budget (--budget 4)"
    assert next_step(8, "auto", "linear").endswith(
        "or --patch-aware (sets compared after their own patch)"
    )


def test_bad_calls(tok):
    model = tiny_model("llama")
    with pytest.raises(SwappruneError, match="one of them"):
        pruning_cost(model, tok)
    merge = PrunePlan.from_merges(6, {1: [1, 2]})
    with pytest.raises(SwappruneError, match="merge plan"):
        pruning_cost(model, tok, merge)
    with pytest.raises(SwappruneError, match="at least 2 windows"):
        pruning_cost(model, tok, [0, 1, 2], windows=1)


def test_the_cost_record_carries_the_generative_measure_and_a_four_outcome_verdict(tok):
    from swapprune.evaluation.generative import reference_continuations

    model = tiny_model("llama")
    plan = PrunePlan.from_removal(6, [1, 4], budget=2)
    ref = reference_continuations(model, tok, n_prompts=8, new_tokens=16)
    cost = pruning_cost(model, tok, plan, reference=ref, **KW)
    g = cost.to_dict()["generative"]
    assert g["new_tokens"] == 16 and g["prompts"]["n"] == 8
    assert 0 <= g["agreement"]["ci"][0] <= g["agreement"]["mean"] <= g["agreement"]["ci"][1] < 1
    assert g["first_divergence"]["mean"] < 16  # the cut leaves the base's path somewhere
    summary = cost.summary().splitlines()
    assert summary[0].startswith("cost: WikiText-2 perplexity") and len(summary) == 2
    assert summary[1].startswith("generation: greedy agreement with the base ")
    d = cost.to_dict()["comparison"]
    assert d["a"] == "base" and d["b"] == "cut" and d["label"].split(" (within")[0] in cost.verdict
    assert "base" in cost.verdict and "cut" in cost.verdict  # both sides named
    assert d["outcome"] in ("a_better", "b_better", "equivalent", "inconclusive")
    assert d["a_key"] == "kept:0,1,2,3,4,5" and d["b_key"] == "kept:0,2,3,5"
    # off: no generative record, one summary line
    off = pruning_cost(model, tok, plan, generative=False, **KW)
    assert off.generative is None and off.to_dict()["generative"] is None
    assert "\n" not in off.summary() and off.pruned_ppl == pytest.approx(cost.pruned_ppl)
