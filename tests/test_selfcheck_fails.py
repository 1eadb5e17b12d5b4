"""A checkpoint self-check that is made to fail must fail, and leave nothing in place.

Each test breaks one thing the self-check is there to catch, by patching the
reload it runs (``AutoModelForCausalLM.from_pretrained``), and checks that
:class:`SelfCheckError` is raised, that no output (and no hidden partial) is
left, and that an earlier output being replaced survives untouched.
"""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import tiny_model
from transformers import AutoModelForCausalLM

from swapprune.edit.surgery import apply_plan
from swapprune.output.artifacts import PROVENANCE
from swapprune.output.checkpoint import SelfCheckError, save_checkpoint
from swapprune.plan import PrunePlan

_RELOAD = AutoModelForCausalLM.from_pretrained


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def pruned():
    model = tiny_model("llama")
    plan = PrunePlan.from_removal(6, [2])
    apply_plan(model, plan, log=lambda _: None)
    return model, plan


def _save(model, plan, out, **kw):
    return save_checkpoint(
        model, None, plan, out, provenance={"command": "pytest"}, base_model_id="tiny/model", **kw
    )


def _patch_reload(monkeypatch, change):
    """Make the self-check's reload return a model changed by ``change(model)``."""
    calls = []

    def reload(*args, **kwargs):
        model, info = _RELOAD(*args, **kwargs)
        calls.append(args[0])
        return change(model, info) or (model, info)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", reload)
    return calls


def _nothing_left(tmp_path, keep=()):
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)


def _on_forward(model, change):
    """Wrap ``model.forward``; ``change(out, cached)`` sees whether a filled KV cache was used."""
    forward = model.forward

    def wrapped(*args, **kwargs):
        cache = kwargs.get("cache")  # transformers 5 name; "past_key_values" before
        cache = kwargs.get("past_key_values") if cache is None else cache
        cached = cache is not None and cache.get_seq_length() > 0
        return change(forward(*args, **kwargs), cached)

    model.forward = wrapped


def test_passing_selfcheck_runs_both_checks(pruned, tmp_path, monkeypatch):
    seen = []

    def spy(model, info):
        _on_forward(model, lambda out, cached: seen.append(cached) or out)

    calls = _patch_reload(monkeypatch, spy)
    results = _save(*pruned, tmp_path / "ckpt")
    assert len(calls) == 1
    assert True in seen and False in seen  # decoding steps on a cache, and plain forwards
    assert results["passed"]
    assert results["logits_max_abs_diff"] <= results["logits_tolerance"]
    assert results["num_layers"] == 5


def test_reloaded_logits_differ(pruned, tmp_path, monkeypatch):
    def perturb(model, info):
        with torch.no_grad():
            model.lm_head.weight.add_(1e-2)

    _patch_reload(monkeypatch, perturb)
    with pytest.raises(SelfCheckError, match="reloaded logits differ"):
        _save(*pruned, tmp_path / "ckpt")
    _nothing_left(tmp_path)


def test_cached_generation_differs(pruned, tmp_path, monkeypatch):
    def break_cache(model, info):
        def change(out, cached):
            if cached:  # what a wrong layer_idx does: only cached decoding goes astray
                out.logits = out.logits.roll(1, dims=-1)
            return out

        _on_forward(model, change)

    _patch_reload(monkeypatch, break_cache)
    with pytest.raises(SelfCheckError, match="generation with the KV cache differs"):
        _save(*pruned, tmp_path / "ckpt")
    _nothing_left(tmp_path)


def test_reload_fails(pruned, tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError("truncated safetensors")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", fail)
    with pytest.raises(SelfCheckError, match="does not reload.*truncated safetensors"):
        _save(*pruned, tmp_path / "ckpt")
    _nothing_left(tmp_path)


def test_reload_reports_missing_weights(pruned, tmp_path, monkeypatch):
    def missing(model, info):
        return model, dict(info, missing_keys={"model.layers.0.mlp.up_proj.weight"})

    _patch_reload(monkeypatch, missing)
    with pytest.raises(SelfCheckError, match="missing_keys"):
        _save(*pruned, tmp_path / "ckpt")
    _nothing_left(tmp_path)


def test_reloaded_depth_differs(pruned, tmp_path, monkeypatch):
    def drop_block(model, info):
        del model.model.layers[4]
        model.config.num_hidden_layers = 4

    _patch_reload(monkeypatch, drop_block)
    with pytest.raises(SelfCheckError, match="has 4 blocks, expected 5"):
        _save(*pruned, tmp_path / "ckpt")
    _nothing_left(tmp_path)


def test_reloaded_layer_types_differ(tmp_path, monkeypatch):
    model = tiny_model("gemma3_text")
    plan = PrunePlan.from_removal(6, [1])
    apply_plan(model, plan, log=lambda _: None)

    def retype(m, info):
        m.config.layer_types = ["full_attention"] * 5

    _patch_reload(monkeypatch, retype)
    with pytest.raises(SelfCheckError, match="layer_types"):
        _save(model, plan, tmp_path / "ckpt")
    _nothing_left(tmp_path)


def test_failed_overwrite_keeps_the_earlier_output(pruned, tmp_path, monkeypatch):
    out = tmp_path / "ckpt"
    _save(*pruned, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert json.loads(before[PROVENANCE])["selfcheck"]["passed"]

    def perturb(model, info):
        with torch.no_grad():
            model.lm_head.weight.add_(1e-2)

    _patch_reload(monkeypatch, perturb)
    with pytest.raises(SelfCheckError):
        _save(*pruned, out, overwrite=True)
    _nothing_left(tmp_path, keep=["ckpt"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
