"""DepthPruningModifier inside llm-compressor's oneshot, on a tiny Llama built in code.

Runs where llm-compressor is installed (the second environment: ``make
test-llmcompressor``); elsewhere the module is skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip(
    "llmcompressor",
    reason="llm-compressor is not installed here; `make test-llmcompressor` runs these "
    "tests in .venv-llmc",
)

import torch  # noqa: E402
from compressed_tensors.quantization import preset_name_to_scheme  # noqa: E402
from llmcompressor import oneshot  # noqa: E402
from llmcompressor.core import State  # noqa: E402
from llmcompressor.modifiers.quantization import QuantizationModifier  # noqa: E402
from llmcompressor.recipe import Recipe  # noqa: E402
from tiny_models import LAYERS, save_tiny, tiny_ids, tiny_tokenizer  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from swapprune.api import prune  # noqa: E402
from swapprune.calibration.windows import Calibration  # noqa: E402
from swapprune.errors import SwappruneError  # noqa: E402
from swapprune.integrations.llmcompressor import (  # noqa: E402
    DepthPruningModifier,
    windows_from_dataloader,
)

pytestmark = pytest.mark.llmcompressor

BUDGET = 2
WINDOWS, TOKENS = 8, 24


def _w4a16():
    # The W4A16 preset with groups of 32: the tiny model's hidden size is 32.
    scheme = preset_name_to_scheme("W4A16", ["Linear"])
    scheme.weights.group_size = 32
    return QuantizationModifier(config_groups={"group_0": scheme}, ignore=["lm_head"])


def _loader(ids: torch.Tensor):
    from torch.utils.data import DataLoader

    rows = [{"input_ids": r[None], "attention_mask": torch.ones_like(r)[None]} for r in ids]
    return DataLoader(rows, batch_size=None)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny("llama", tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def calib_ids():
    return tiny_ids(WINDOWS, TOKENS, seed=1)


@pytest.fixture(scope="module")
def compressed(tiny_dir, calib_ids, tmp_path_factory):
    """oneshot(prune 2 blocks -> W4A16), its in-memory logits, then the saved checkpoint."""
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    modifier = DepthPruningModifier(
        budget=BUDGET,
        protocol="interchange",
        prompts=WINDOWS,
        tokens=TOKENS,
    )
    model = oneshot(
        model=model,
        processor=tiny_tokenizer(),
        dataset=_loader(calib_ids),
        recipe=[modifier, _w4a16()],
    )
    out = tmp_path_factory.mktemp("compressed")
    model.save_pretrained(out, save_compressed=True)
    # The in-memory compressed model. Measured after the save: with an accelerator
    # (llm-compressor 0.14, transformers 5.17, H200) oneshot returns the model dispatched
    # onto it and running unquantized weights until save_pretrained compresses them.
    probe = tiny_ids(2, 16, seed=7)
    with torch.no_grad():
        logits = model(probe.to(model.device)).logits.cpu()
    return dict(model=model, modifier=modifier, logits=logits, probe=probe, out=out)


def test_checkpoint_reloads_with_the_pruned_depth(compressed):
    plan = compressed["modifier"].plan
    assert len(plan.removed) == BUDGET and len(plan.kept) == LAYERS - BUDGET
    reloaded = AutoModelForCausalLM.from_pretrained(compressed["out"])
    assert reloaded.config.num_hidden_layers == LAYERS - BUDGET
    assert len(reloaded.model.layers) == LAYERS - BUDGET
    assert [b.self_attn.layer_idx for b in reloaded.model.layers] == list(range(LAYERS - BUDGET))
    saved = json.loads((compressed["out"] / "config.json").read_text())
    assert saved["num_hidden_layers"] == LAYERS - BUDGET
    assert saved["quantization_config"]["quant_method"] == "compressed-tensors"


def test_reloaded_logits_match_the_in_memory_compressed_model(compressed):
    reloaded = AutoModelForCausalLM.from_pretrained(compressed["out"]).eval()
    with torch.no_grad():
        logits = reloaded(compressed["probe"]).logits
    torch.testing.assert_close(logits, compressed["logits"], rtol=1e-4, atol=1e-4)


def test_cached_generation_equals_uncached(compressed):
    reloaded = AutoModelForCausalLM.from_pretrained(compressed["out"]).eval()
    prompt = compressed["probe"][:1, :6]
    kw = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        cached = reloaded.generate(prompt, use_cache=True, **kw)
        uncached = reloaded.generate(prompt, use_cache=False, **kw)
    assert cached.shape[1] == prompt.shape[1] + 10
    assert torch.equal(cached, uncached)


def test_plan_inside_oneshot_equals_swapprune_prune(compressed, tiny_dir, calib_ids):
    mod = compressed["modifier"]
    assert mod.calibration_info["source"] == "oneshot-dataloader"
    assert (mod.calibration_info["prompts"], mod.calibration_info["tokens"]) == (WINDOWS, TOKENS)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    _, plan = prune(
        model,
        tiny_tokenizer(),  # the same held-out windows as the modifier's (its model's tokenizer)
        budget=BUDGET,
        protocol="interchange",
        calibration=Calibration(calib_ids, "test", 0),
        progress=False,
    )
    assert plan.removed == mod.plan.removed
    assert plan.records.certificate == mod.plan.records.certificate
    assert plan.scores["importance"] == pytest.approx(mod.plan.scores["importance"])
    # The same blocks in full precision: close to the compressed model, but not equal
    # (the quantization is really in the in-memory model and in the checkpoint).
    with torch.no_grad():
        full = model(compressed["probe"]).logits
    gap = (full - compressed["logits"]).abs().max().item()
    assert 1e-4 < gap < 0.5 * full.abs().max().item()


def test_pruned_model_is_consistent_for_the_next_modifier(tiny_dir, calib_ids):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    state = State(model=model)
    state.data.calib = _loader(calib_ids)
    mod = DepthPruningModifier(budget=BUDGET, op="merge", prompts=WINDOWS, tokens=TOKENS)
    mod.initialize(state)
    kept = LAYERS - BUDGET
    assert model.config.num_hidden_layers == len(model.model.layers) == kept
    assert [b.self_attn.layer_idx for b in model.model.layers] == list(range(kept))
    assert mod.plan.merged and mod.plan.op == "merge"
    # The probes' hooks are gone: the next modifier starts from a clean model. (transformers
    # installs its own output-capturing hooks on a model's first plain forward; those stay.)
    ours = [
        (name, hook)
        for name, m in model.named_modules()
        for hook in (*m._forward_hooks.values(), *m._forward_pre_hooks.values())
        if not getattr(hook, "__module__", "").startswith("transformers.")
    ]
    assert ours == []
    assert all(p.grad is None for p in model.parameters())


def test_auto_criterion_passes_through(tiny_dir, calib_ids):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    state = State(model=model)
    state.data.calib = _loader(calib_ids)
    mod = DepthPruningModifier(
        budget=BUDGET, protocol="auto", prompts=WINDOWS, tokens=TOKENS, tranche=4
    )
    mod.initialize(state)
    auto = mod.plan.records.auto
    assert mod.plan.protocol == "auto" and auto.regime["call"]
    # The same adaptive tranches as the CLI's --protocol auto, on oneshot's windows.
    assert auto.adaptive.rounds[0]["windows"] == 4
    assert len(model.model.layers) == LAYERS - BUDGET
    with pytest.raises(SwappruneError, match="does not merge"):
        DepthPruningModifier(budget=BUDGET, protocol="auto", op="merge")


def test_no_dataset_falls_back_to_swapprune_calibration(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    mod = DepthPruningModifier(budget=1, prompts=4, tokens=32)
    oneshot(model=model, processor=tiny_tokenizer(), recipe=[mod])
    assert mod.calibration_info["source"] == "wikitext2-valid"
    assert model.config.num_hidden_layers == LAYERS - 1


def test_oneshot_calibration_required_but_missing(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    mod = DepthPruningModifier(budget=1, calib="oneshot")
    with pytest.raises(SwappruneError, match="oneshot has no calibration data"):
        oneshot(model=model, processor=tiny_tokenizer(), recipe=[mod])


def test_unknown_criterion_fails_when_the_modifier_is_built():
    with pytest.raises(SwappruneError, match="did you mean 'interchange'"):
        DepthPruningModifier(budget=2, protocol="interchang")
    with pytest.raises(SwappruneError, match="unknown strategy"):
        DepthPruningModifier(budget=2, strategy="gredy")
    with pytest.raises(ValueError, match="Extra inputs"):
        DepthPruningModifier(budget=2, protocl="interchange")


def test_budget_too_large_fails_before_any_forward(tiny_dir, calib_ids):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    calls = []
    model.register_forward_pre_hook(lambda *_: calls.append(1))
    mod = DepthPruningModifier(budget=LAYERS, prompts=WINDOWS, tokens=TOKENS)
    with pytest.raises(
        SwappruneError,
        match=f"budget {LAYERS} is more than the {LAYERS - 1} blocks that can be removed",
    ):
        oneshot(
            model=model,
            processor=tiny_tokenizer(),
            dataset=_loader(calib_ids),
            recipe=[mod, _w4a16()],
        )
    assert calls == []
    assert len(model.model.layers) == LAYERS


def test_yaml_recipe_names_the_modifier(tiny_dir, calib_ids):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    yaml = (
        "default_stage:\n"
        "  default_modifiers:\n"
        "    DepthPruningModifier: {budget: 1, protocol: interchange, protect_last: 1,\n"
        f"                           prompts: {WINDOWS}, "
        f"tokens: {TOKENS}}}\n"
    )
    oneshot(model=model, processor=tiny_tokenizer(), dataset=_loader(calib_ids), recipe=yaml)
    assert model.config.num_hidden_layers == len(model.model.layers) == LAYERS - 1
    with pytest.raises(SwappruneError, match="unknown criterion"):
        Recipe.create_instance(
            "default_stage:\n  default_modifiers:\n    DepthPruningModifier: {budget: 3, protocol: x}\n"
        )


def test_example_yaml_recipe_resolves():
    path = Path(__file__).parent.parent / "recipes" / "llmcompressor" / "prune_w4a16.yaml"
    pruner, quant = Recipe.create_instance(str(path)).modifiers
    assert isinstance(pruner, DepthPruningModifier) and isinstance(quant, QuantizationModifier)
    assert (pruner.budget, pruner.protocol) == (8, "interchange")
    assert quant.config_groups["group_0"].weights.group_size == 64


def test_windows_from_dataloader_drops_padding_and_short_samples():
    pad = 0
    batch = {
        "input_ids": torch.tensor(
            [[pad, pad, 5, 6, 7, 8], [9, 10, 11, pad, pad, pad], [12, 13, 14, 15, 16, 17]]
        ),
        "attention_mask": torch.tensor(
            [[0, 0, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]]
        ),
    }
    cal = windows_from_dataloader([batch], samples=2, tokens=4)
    assert cal.input_ids.tolist() == [[5, 6, 7, 8], [12, 13, 14, 15]]
    with pytest.raises(SwappruneError, match="lower tokens"):
        windows_from_dataloader([batch], samples=2, tokens=7)


def test_windows_follow_oneshots_data_when_not_set():
    """Unset prompts/tokens: the lower median length of the samples, and those reaching it."""
    lengths = [10, 48, 48, 30, 48]
    batch = [{"input_ids": torch.arange(n)[None] + 3} for n in lengths]
    cal = windows_from_dataloader(batch, samples=None, tokens=None)
    assert tuple(cal.input_ids.shape) == (3, 48)  # lower median of 10, 30, 48, 48, 48
    assert cal.input_ids[0].tolist() == list(range(3, 51))
    capped = [{"input_ids": torch.arange(300)[None]} for _ in range(3)]
    assert windows_from_dataloader(capped, None, None).input_ids.shape[1] == 128


def test_fields_are_select_and_calibration_configs():
    """One schema: every SelectConfig field (but plan) is a modifier field, with its default."""
    import dataclasses

    from swapprune.config import CalibrationConfig, SelectConfig

    fields = DepthPruningModifier.model_fields
    for f in dataclasses.fields(SelectConfig):
        # No saved plan; modifier.scores is what it measured; no GGUF to keep in phase.
        if f.name in ("plan", "scores", "serve"):
            assert f.name not in fields
            continue
        assert fields[f.name].description == f.metadata["help"]
        if f.name != "budget":
            assert fields[f.name].default == f.default
    assert fields["positions"].default == CalibrationConfig().positions
    assert fields["prompts"].default is None and fields["tokens"].default is None
