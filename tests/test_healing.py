"""LoRA healing: lowers the calibration loss of a pruned tiny model and merges to a plain model."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_model, tiny_tokenizer
from transformers import AutoModelForCausalLM

from swapprune.edit.healing import HealConfig, default_targets, heal, heal_windows, near_cut_layers
from swapprune.edit.surgery import apply_plan
from swapprune.errors import SwappruneError
from swapprune.plan import PrunePlan

SMALL = dict(steps=25, lr=3e-3, prompts=16, tokens=48, heldout=4, batch_size=4)


def pruned(removed=(2, 4)):
    model = tiny_model("llama")
    plan = PrunePlan.from_removal(6, list(removed))
    apply_plan(model, plan)
    return model, plan


@pytest.fixture(scope="module")
def windows():
    return heal_windows(tiny_tokenizer(), HealConfig(**SMALL))


def test_windows_are_disjoint(windows):
    train = {tuple(r.tolist()) for r in windows.train}
    assert windows.train.shape == (16, 48) and windows.heldout.shape == (4, 48)
    assert not train & {tuple(r.tolist()) for r in windows.heldout}


def test_heal_lowers_loss_and_merges_to_plain_model(tmp_path, windows):
    model, plan = pruned()
    healed, rep = heal(model, config=HealConfig(**SMALL), plan=plan, windows=windows)
    assert rep.calib_loss_after < rep.calib_loss_before
    assert rep.heldout_ppl_after < rep.heldout_ppl_before
    assert rep.train_loss_last < rep.train_loss_first
    assert rep.layers == [0, 1, 2, 3] and "down_proj" in rep.target_modules
    assert type(healed).__name__ == "LlamaForCausalLM"
    assert not [n for n, m in healed.named_modules() if type(m).__module__.startswith("peft")]
    assert not [k for k in healed.state_dict() if "lora" in k or "base_layer" in k]
    healed.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = windows.heldout[:2]
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, healed(ids).logits)


def test_near_cut_layers_from_plans():
    assert near_cut_layers(PrunePlan.from_removal(6, [2, 4])) == [1, 2, 3]
    assert near_cut_layers(PrunePlan.from_removal(6, [0])) == [0]
    assert near_cut_layers(PrunePlan.from_removal(6, [5])) == [4]
    assert near_cut_layers(PrunePlan.from_merges(6, {2: [3]})) == [2, 3]


def test_near_cuts_adapts_only_blocks_next_to_a_cut(windows):
    model, plan = pruned((3,))  # kept [0, 1, 2, 4, 5]: new blocks 2 and 3 touch the cut
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = HealConfig(**dict(SMALL, steps=3), near_cuts=True)
    healed, rep = heal(model, config=cfg, plan=plan, windows=windows)
    assert rep.layers == [2, 3]
    after = healed.state_dict()
    changed = {
        int(k.split(".")[2])
        for k in after
        if k.startswith("model.layers.") and not torch.equal(after[k], before[k])
    }
    assert changed == {2, 3}
    assert torch.equal(after["lm_head.weight"], before["lm_head.weight"])


def test_distillation_runs_and_needs_a_teacher(windows):
    teacher = tiny_model("llama")
    model, plan = pruned()
    cfg = HealConfig(**dict(SMALL, steps=3), distill=0.5)
    with pytest.raises(SwappruneError, match="teacher"):
        heal(model, config=cfg, plan=plan, windows=windows)
    _, rep = heal(model, config=cfg, plan=plan, teacher=teacher, windows=windows)
    assert rep.distill == 0.5


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(calib="none"), "needs calibration text"),
        (dict(calib=None), "needs calibration text"),
        (dict(distill=1.5), "distill"),
        (dict(rank=0), "rank"),
    ],
)
def test_config_errors(bad, match):
    with pytest.raises(SwappruneError, match=match):
        HealConfig(**bad).check()


def test_unknown_target_module_says_did_you_mean(windows):
    model, plan = pruned()
    with pytest.raises(SwappruneError, match="did you mean 'q_proj'"):
        heal(
            model, config=HealConfig(**SMALL, target_modules=["q_prj"]), plan=plan, windows=windows
        )


def test_default_targets_find_conv1d_projections():
    assert default_targets(tiny_model("gpt2")) == ["c_attn", "c_proj", "c_fc"]
