"""The cost check's base side, memoised on disk: the same numbers, a new key on any change."""

import copy

import pytest
import torch
from tiny_models import tiny_model, tiny_tokenizer

from swapprune.evaluation import base_cache
from swapprune.evaluation.cost import base_side_cached, pruning_cost
from swapprune.plan import PrunePlan

KW = dict(words=200, max_length=64, windows=6, n_boot=300)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWAPPRUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SWAPPRUNE_BASE_CACHE", "1")
    torch.set_num_threads(1)
    return tmp_path / "cache" / "base"


def _same(a, b):
    da, db = copy.deepcopy(a.to_dict()), copy.deepcopy(b.to_dict())
    for d in (da, db):
        d.pop("seconds"), d.pop("base_cached")
        d["generative"].pop("seconds"), d["generative"].pop("reference_seconds")
    return da == db


def test_a_second_cost_reads_the_base_side_and_gives_the_same_record(cache):
    tok = tiny_tokenizer()
    model = tiny_model("llama")
    plan = PrunePlan.from_removal(6, [1, 4], budget=2)
    assert not base_side_cached(model, tok, **KW)
    first = pruning_cost(model, tok, plan, **KW)
    assert first.base_cached == {"perplexity": False, "generation": False}
    assert base_side_cached(model, tok, **KW)  # what the estimate before a run asks
    assert not base_side_cached(model, tok, **{**KW, "windows": 4})
    assert len(list(cache.glob("*.npz"))) == 2
    again = pruning_cost(model, tok, PrunePlan.from_removal(6, [1, 4], budget=2), **KW)
    assert again.base_cached == {"perplexity": True, "generation": True}
    assert _same(first, again)
    # another cut of the same model: the base side is read, the cut's side measured
    other = pruning_cost(model, tok, PrunePlan.from_removal(6, [2], budget=1), **KW)
    assert other.base_cached == {"perplexity": True, "generation": True}
    assert other.base_ppl == first.base_ppl and other.pruned_ppl != first.pruned_ppl
    # off: measured, and nothing read
    with pytest.MonkeyPatch.context() as m:
        m.setenv("SWAPPRUNE_BASE_CACHE", "0")
        off = pruning_cost(model, tok, plan, **KW)
    assert off.base_cached == {"perplexity": False, "generation": False} and _same(first, off)


def test_any_change_to_the_model_or_the_setting_is_a_new_entry(cache):
    tok = tiny_tokenizer()
    model = tiny_model("llama")
    plan = PrunePlan.from_removal(6, [1], budget=1)
    pruning_cost(model, tok, plan, generative=False, **KW)
    with torch.no_grad():  # one weight of a middle block, as a fine-tune would
        model.model.layers[3].mlp.down_proj.weight[5, 7] += 0.5
    tuned = pruning_cost(model, tok, plan, generative=False, **KW)
    assert tuned.base_cached == {"perplexity": False}
    fewer = pruning_cost(model, tok, plan, generative=False, **{**KW, "windows": 5})
    assert fewer.base_cached == {"perplexity": False} and fewer.windows == 5
    assert len(list(cache.glob("ppl-*.npz"))) == 3
    # the digest covers every tensor, not a few: a change in the last element of the last one
    before = base_cache.state_digest(model)
    with torch.no_grad():
        model.lm_head.weight.view(-1)[-1] += 1.0
    assert base_cache.state_digest(model) != before


def test_a_damaged_entry_is_measured_again_and_rewritten(cache):
    tok = tiny_tokenizer()
    model = tiny_model("llama")
    plan = PrunePlan.from_removal(6, [1], budget=1)
    first = pruning_cost(model, tok, plan, generative=False, **KW)
    (entry,) = cache.glob("ppl-*.npz")
    entry.write_bytes(entry.read_bytes()[:100])  # truncated
    again = pruning_cost(model, tok, plan, generative=False, **KW)
    assert again.base_cached == {"perplexity": False} and again.base_ppl == first.base_ppl
    third = pruning_cost(model, tok, plan, generative=False, **KW)
    assert third.base_cached == {"perplexity": True}
