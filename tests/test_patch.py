"""The linear patch: folded equals unfolded, it reloads and re-applies bitwise, and it is exact
where the removed span is."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch
from tiny_models import LAYERS, save_tiny, tiny_ids, tiny_model

from swapprune.cli import main
from swapprune.config import SelectConfig
from swapprune.edit.patch import Patch, apply_unfolded, fit_patches, solve, spans
from swapprune.edit.surgery import apply_plan
from swapprune.errors import SwappruneError
from swapprune.model.arch import ARCHITECTURES
from swapprune.model.stack import decoder_stack, get_submodule
from swapprune.plan import PrunePlan

FAMILIES = ["llama", "qwen2", "gemma3_text", "gpt2", "olmo2"]
IDS = tiny_ids(12, 32, seed=4)


def model_of(family: str):
    """The tiny model of ``family``; OLMo 2 (post-MLP norm, a channel-wise patch) built here."""
    if family != "olmo2":
        return tiny_model(family)
    from tiny_models import FAMILY_CONFIGS
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model("olmo2", **FAMILY_CONFIGS["llama"])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model.eval()


def _plan(removed, patches):
    plan = PrunePlan.from_removal(LAYERS, removed)
    plan.patch = {
        "kind": "linear",
        "file": "patch.safetensors",
        "spans": [p.describe() for p in patches],
    }
    return plan


def _unfolded_logits(model, removed, patches, ids):
    """Remove, then apply each patch as an explicit map on its block's branch (hooks)."""
    m = copy.deepcopy(model)
    stack = decoder_stack(m)
    handles = []
    for p in patches:
        mod = get_submodule(stack.blocks[p.block], p.module)
        handles.append(mod.register_forward_hook(lambda _m, _a, out, p=p: apply_unfolded(out, p)))
    apply_plan(m, PrunePlan.from_removal(LAYERS, removed), log=lambda *_: None)
    with torch.no_grad():
        out = m(input_ids=ids, use_cache=False).logits
    for h in handles:
        h.remove()
    return out


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("removed", [[2], [2, 3], [1, 4]])
def test_folded_equals_unfolded(family, removed):
    model = model_of(family)
    patches, record = fit_patches(model, removed, IDS, batch_size=6)
    assert [p.span for p in patches] == spans(removed) and record["block_tokens"] > 0
    kind = ARCHITECTURES[family].mlp_out_kind
    assert all(p.kind == kind for p in patches)
    assert all(p.matrix.dim() == (2 if kind in ("linear", "conv1d") else 1) for p in patches)
    folded = apply_plan(copy.deepcopy(model), _plan(removed, patches), lambda *_: None, patches)
    probe = tiny_ids(3, 20, seed=9)
    with torch.no_grad():
        got = folded(input_ids=probe, use_cache=False).logits
    want = _unfolded_logits(model, removed, patches, probe)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # and the patch is not the identity: it changes the cut's logits
    plain = apply_plan(
        copy.deepcopy(model), PrunePlan.from_removal(LAYERS, removed), lambda *_: None
    )
    with torch.no_grad():
        assert (plain(input_ids=probe, use_cache=False).logits - got).abs().max() > 1e-4


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3_text"])
def test_a_span_that_adds_nothing_is_restored_exactly(family):
    """Block 3 adds nothing to the residual stream (zeroed output projections): the span is
    the identity map, and the fitted patch leaves the base logits as they were."""
    model = tiny_model(family)
    block = decoder_stack(model).blocks[3]
    with torch.no_grad():
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            get_submodule(block, name).weight.zero_()
    patches, _ = fit_patches(model, [3], IDS, batch_size=6)
    folded = apply_plan(copy.deepcopy(model), _plan([3], patches), lambda *_: None, patches)
    probe = tiny_ids(3, 20, seed=9)
    with torch.no_grad():
        base = model(input_ids=probe, use_cache=False).logits
        got = folded(input_ids=probe, use_cache=False).logits
    torch.testing.assert_close(got, base, rtol=1e-5, atol=1e-5)
    assert patches[0].fit["unexplained_after"] < 1e-8


def test_the_solver_recovers_a_known_map():
    """Least squares on activations that follow h_out = Y + B T exactly finds T."""
    g = torch.Generator().manual_seed(0)
    b = torch.randn(500, 16, generator=g, dtype=torch.float64)
    t_true = torch.eye(16, dtype=torch.float64) + 0.3 * torch.randn(
        16, 16, generator=g, dtype=torch.float64
    )
    rest = b @ t_true  # H - Y
    t = solve(b.T @ b, b.T @ rest, ridge=1e-12, diagonal=False)
    torch.testing.assert_close(t, t_true, rtol=1e-8, atol=1e-8)
    s = solve(b.T @ b, b.T @ (b * 1.7), ridge=1e-12, diagonal=True)
    torch.testing.assert_close(s, torch.full((16,), 1.7, dtype=torch.float64), rtol=1e-8, atol=1e-8)


@pytest.fixture(scope="module")
def patched_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("patch")
    model_dir = str(save_tiny("qwen2", d / "m"))
    out = d / "cut"
    argv = [
        "--model",
        model_dir,
        "--budget",
        "2",
        "--protocol",
        "interchange",
        "--output",
        str(out),
    ]
    fast = ["--prompts", "4", "--tokens", "32", "--no-progress", "--patch", "linear"]
    assert main([*argv, *fast, "--patch-prompts", "8", "--patch-tokens", "32"]) == 0
    return model_dir, out, d


def test_patched_checkpoint_reloads_and_its_cache_agrees(patched_run):
    from transformers import AutoModelForCausalLM

    _, out, _ = patched_run
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["selfcheck"]["passed"] and prov["selfcheck"]["generate_cache_equal"]
    plan = json.loads((out / "plan.json").read_text())
    assert plan["patch"]["kind"] == "linear" and plan["patch"]["sha256"]
    assert (out / "patch.safetensors").is_file()
    reloaded = AutoModelForCausalLM.from_pretrained(out)
    assert reloaded.config.num_hidden_layers == LAYERS - 2
    metrics = json.loads((out / "metrics.json").read_text())
    assert "unpatched" in metrics["cost"] and metrics["patch"]["spans"]


def test_apply_of_a_patched_plan_is_bitwise_the_original(patched_run):
    model_dir, out, d = patched_run
    again = d / "again"
    cmd = ["apply", "--plan", str(out / "plan.json"), "--model", model_dir, "--output", str(again)]
    assert main([*cmd, "--no-progress", "--no-eval"]) == 0
    assert (again / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()


def test_bad_patch_input_is_one_line():
    with pytest.raises(SwappruneError, match="does not combine with --op merge"):
        SelectConfig(budget=2, patch="linear", op="merge").check()
    with pytest.raises(SwappruneError, match="unknown patch 'lin'"):
        SelectConfig(budget=2, patch="lin").check()
    model = tiny_model("llama")
    with pytest.raises(
        SwappruneError, match="at least as many patch tokens as the hidden size"
    ) as e:
        fit_patches(model, [2], tiny_ids(1, 16), batch_size=1)
    assert "\n" not in str(e.value)
    with pytest.raises(SwappruneError, match="starts at block 0"):
        fit_patches(model, [0, 1], IDS)
    gone = dataclasses.replace(ARCHITECTURES["llama"], mlp_out=None)
    assert gone.mlp_out is None  # a family with no fold site is refused (mixtral, qwen3_moe)


def test_cli_bad_patch_settings_write_nothing(tmp_path, capsys):
    model_dir = str(save_tiny("llama", tmp_path / "m"))
    out = tmp_path / "o"
    base = ["--model", model_dir, "--budget", "1", "--output", str(out), "--no-progress"]
    for extra, message in (
        (["--patch", "linear", "--op", "merge"], "does not combine with --op merge"),
        (["--patch", "cubic"], "unknown patch 'cubic'"),
        (["--patch", "linear", "--patch-prompts", "1", "--patch-tokens", "8"], "hidden size"),
    ):
        assert main([*base, "--prompts", "4", "--tokens", "16", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert not out.exists()


def test_patches_are_folded_at_their_own_blocks():
    p = Patch((2, 2), 1, "mlp.down_proj", "linear", torch.eye(32, dtype=torch.float64) * 2, {})
    model = tiny_model("llama")
    before = decoder_stack(model).blocks[1].mlp.down_proj.weight.clone()
    pruned = apply_plan(copy.deepcopy(model), _plan([2], [p]), lambda *_: None, [p])
    after = decoder_stack(pruned).blocks[1].mlp.down_proj.weight
    torch.testing.assert_close(after, 2 * before)
    with pytest.raises(SwappruneError, match="carries a linear patch"):
        apply_plan(copy.deepcopy(model), _plan([2], [p]), lambda *_: None)


def test_compare_measures_each_criterion_with_and_without_the_patch(tmp_path):
    model_dir = str(save_tiny("llama", tmp_path / "m"))
    out = tmp_path / "cmp"
    argv = ["compare", "--model", model_dir, "--budgets", "2", "--criteria", "interchange,bi"]
    more = [
        "--patches",
        "none,linear",
        "--output",
        str(out),
        "--words",
        "150",
        "--max-length",
        "64",
    ]
    fast = ["--prompts", "4", "--tokens", "32", "--no-progress", "--patch-prompts", "8"]
    assert main([*argv, *more, *fast, "--protect-first", "1"]) == 0
    methods = json.loads((out / "results.json").read_text())["budgets"][0]["methods"]
    assert {"interchange", "interchange+linear", "bi", "bi+linear"} <= set(methods)
    for crit in ("interchange", "bi"):
        plain, patched = methods[crit], methods[f"{crit}+linear"]
        assert plain["removed"] == patched["removed"]  # the same cut, folded or not
        assert plain["cost_pct"] != patched["cost_pct"]
