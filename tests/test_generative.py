"""Generative agreement of a cut with the base model's greedy continuations."""

import copy

import pytest
from tiny_models import tiny_model, tiny_tokenizer

from swapprune.edit.surgery import apply_plan
from swapprune.errors import SwappruneError
from swapprune.evaluation.generative import (
    generative_cost,
    prompt_texts,
    reference_continuations,
)
from swapprune.plan import PrunePlan

KW = dict(n_prompts=8, new_tokens=16)


@pytest.fixture(scope="module")
def setting():
    model, tok = tiny_model("llama"), tiny_tokenizer()
    return model, tok, reference_continuations(model, tok, **KW)


def test_the_identity_plan_agrees_everywhere(setting):
    model, tok, ref = setting
    # The teacher-forced choices sit at the right positions: the base model's
    # own choices reproduce its greedy continuation (but where EOS, suppressed
    # while generating, was its first choice).
    assert ref.sequence.shape == (8, 48 + 16) and ref.choices.shape == (8, 16)
    assert (ref.choices == ref.sequence[:, 48:]).float().mean() > 0.9
    cost = generative_cost(model, tok, PrunePlan.from_removal(6, []), reference=ref, **KW)
    assert cost.agreement.estimate == 1.0 and cost.first_divergence.estimate == 16
    assert cost.unchanged == 8 and cost.per_prompt_divergence == [16] * 8
    assert "100%" in cost.summary()


def test_a_cut_disagrees_and_a_copy_gives_the_same_record(setting):
    model, tok, ref = setting
    plan = PrunePlan.from_removal(6, [1, 4], budget=2)
    cost = generative_cost(model, tok, plan, reference=ref, **KW)
    assert cost.agreement.estimate < 1.0 and cost.first_divergence.estimate < 16
    assert cost.agreement.low <= cost.agreement.estimate <= cost.agreement.high
    assert [model.config.num_hidden_layers, len(model.model.layers)] == [6, 6]  # view undone
    copied = apply_plan(copy.deepcopy(model), plan)
    same = generative_cost(model, tok, pruned=copied, reference=ref, **KW)
    assert same.per_prompt_agreement == cost.per_prompt_agreement
    d = cost.to_dict()
    assert d["new_tokens"] == 16 and len(d["per_prompt"]["agreement"]) == 8


def test_prompts_and_bad_calls(setting):
    model, tok, _ = setting
    texts = prompt_texts(4)
    assert len(set(texts)) == 4 and all(len(t.split()) > 20 for t in texts)
    with pytest.raises(SwappruneError, match="one of them"):
        generative_cost(model, tok)
    with pytest.raises(SwappruneError, match="merge plan"):
        generative_cost(model, tok, PrunePlan.from_merges(6, {1: [1, 2]}))
