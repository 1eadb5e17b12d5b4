"""The checkpoint self-check: one reload, and a KV-cache fault is caught."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_model
from transformers import AutoModelForCausalLM

from swapprune.edit.surgery import apply_plan
from swapprune.output import checkpoint
from swapprune.output.checkpoint import SelfCheckError, save_checkpoint
from swapprune.plan import PrunePlan


def _pruned(family: str = "llama"):
    model = tiny_model(family)
    plan = PrunePlan.from_removal(6, [2, 3])
    apply_plan(model, plan, log=lambda _: None)
    return model, plan


def _save(model, plan, out):
    return save_checkpoint(model, None, plan, out, provenance={}, base_model_id="tiny/model")


def _count_loads(monkeypatch, after=None):
    calls = []
    real = AutoModelForCausalLM.from_pretrained.__func__

    def from_pretrained(cls, *args, **kwargs):
        calls.append(kwargs)
        result = real(cls, *args, **kwargs)
        if after is not None:
            after(result[0] if isinstance(result, tuple) else result)
        return result

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(from_pretrained))
    return calls


def _break_decode_steps(model) -> None:
    """Single-token (cached decode) steps get a bias toward token 7; full forwards do not."""

    def hook(module, args, out):
        if out.shape[1] != 1:
            return out
        bias = torch.zeros(out.shape[-1], dtype=out.dtype)
        bias[7] = 100.0
        return out + bias

    model.lm_head.register_forward_hook(hook)


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_selfcheck_reloads_once_in_the_model_dtype(family, tmp_path, monkeypatch):
    model, plan = _pruned(family)
    calls = _count_loads(monkeypatch)
    results = _save(model, plan, tmp_path / "ckpt")
    assert len(calls) == 1 and calls[0]["dtype"] == torch.float32
    assert results["passed"] and results["generate_cache_equal"]
    assert results["generate_new_tokens"] == checkpoint.GENERATE_TOKENS
    assert results["num_layers"] == 4
    assert results["generate_logits_max_abs_diff"] <= results["logits_tolerance"]
    assert {"reload_s", "logits_s", "generate_s"} <= results.keys()


def test_cached_generation_fault_is_caught(tmp_path, monkeypatch):
    model, plan = _pruned()
    _count_loads(monkeypatch, after=_break_decode_steps)
    with pytest.raises(SelfCheckError, match="KV cache differs"):
        _save(model, plan, tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


def test_cached_generation_check_passes_on_a_sound_model():
    model, _ = _pruned("qwen2")  # sliding windows: the 8 + 8 tokens cross the window of 8
    prompt = torch.arange(3, 11).unsqueeze(0)
    assert checkpoint._check_cached_generation(model, prompt, 1e-5) <= 1e-5
    _break_decode_steps(model)
    with pytest.raises(SelfCheckError, match="step"):
        checkpoint._check_cached_generation(model, prompt, 1e-5)
