"""Patch-aware selection: sets compared after their own linear patch."""

from __future__ import annotations

import copy
import dataclasses
import math
from itertools import combinations

import numpy as np
import pytest
import torch
from tiny_models import LAYERS, tiny_ids, tiny_model

from swapprune.calibration.windows import Calibration
from swapprune.config import CalibrationConfig, SelectConfig
from swapprune.edit.patch import fit_patches
from swapprune.edit.patched_costs import PatchedOracle, PatchFitter
from swapprune.edit.surgery import apply_plan
from swapprune.engine.oracle import CalibrationOracle
from swapprune.engine.scores import ScoreResult
from swapprune.errors import SwappruneError
from swapprune.plan import PrunePlan
from swapprune.select.reference import Heldout, PatchAware, patch_screen_windows
from swapprune.select.spec import build

EVAL = tiny_ids(6, 16, seed=11)
PATCH = tiny_ids(8, 32, seed=13)


def folded_window_nll(model, removed, patch_ids, ids) -> np.ndarray:
    """The literal definition: fit, remove and fold, run the checkpoint-to-be, mean NLL per window."""
    patches, _ = fit_patches(model, removed, patch_ids, 8, 1e-3)
    m = copy.deepcopy(model)
    plan = PrunePlan.from_removal(LAYERS, removed)
    plan.patch = {"kind": "linear", "file": "patch.safetensors",
                  "spans": [p.describe() for p in patches]}  # fmt: skip
    apply_plan(m, plan, log=lambda *_: None, patches=patches)
    with torch.no_grad():
        logits = m(input_ids=ids, use_cache=False).logits[:, :-1].float()
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    )
    return nll.reshape(ids.shape[0], -1).double().mean(-1).numpy()


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma3_text"])
@pytest.mark.parametrize("removed", [[2], [2, 3], [1, 4]])
def test_a_patched_cost_is_the_folded_models(family, removed):
    model = tiny_model(family)
    oracle = PatchedOracle(model, EVAL, 4, PatchFitter(model, PATCH, 8, 1e-3))
    got = oracle.window_costs(removed)
    want = folded_window_nll(model, removed, PATCH, EVAL)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert oracle.cost(removed) == pytest.approx(math.exp(want.mean()), rel=1e-5)
    # no set: the unpruned model; the plain removal is a different number
    base = CalibrationOracle(model, EVAL, 4, "ppl")
    assert oracle.cost([]) == pytest.approx(base.cost([]), rel=1e-6)
    assert abs(oracle.cost(removed) - base.cost(removed)) > 1e-4


def test_fits_are_remembered_and_sized_for_the_screen():
    model = tiny_model("llama")
    fitter = PatchFitter(model, PATCH, 8, 1e-3)
    small = PatchedOracle(model, EVAL[:2], 4, fitter, fit_windows=2)
    full = PatchedOracle(model, EVAL, 4, fitter)
    small.window_costs_many([[2], [3], [2]])
    assert fitter.fits == 2 and small.calls == 3
    full.cost([2])
    assert fitter.fits == 3 and fitter.fitted([2]) is not None and fitter.fitted([3]) is None
    # the screen's fit differs from the full one (fewer patch tokens)
    a, b = fitter.patches([2], 2)[0].matrix, fitter.patches([2])[0].matrix
    assert not torch.equal(a, b)
    # a fit runs in the model's precision even under bfloat16 autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fresh = PatchFitter(model, PATCH, 8, 1e-3).patches([4])[0].matrix
    assert torch.equal(fresh, fitter.patches([4])[0].matrix)
    # the compute of each oracle counts its evaluations and the fits it asked for
    assert full.compute()["block_tokens"] > full.runner.stats.block_tokens
    with pytest.raises(SwappruneError, match="block 0"):
        fitter.patches([0, 3])


def test_screen_fit_size():
    assert patch_screen_windows(32, 256, 576, True) == 5  # SmolLM2: 2 x 576 tokens
    assert patch_screen_windows(32, 256, 8192, True) == 32  # never more than there are
    assert patch_screen_windows(32, 256, 8192, False) == 1  # a channel-wise map
    assert patch_screen_windows(4, 32, 32, True) == 2


L, N = LAYERS, 8


def both_high_scores() -> ScoreResult:
    """Adjacent pairs whose distances put auto in the both-high regime (it verifies)."""
    rng = np.random.default_rng(0)
    pairs = {}
    for i, (r, x) in enumerate(zip([0.6, 0.5, 0.7, 0.4, 0.6], [0.3, 0.2, 0.25, 0.15, 0.4])):
        w = 1 + 0.1 * rng.uniform(-1, 1, N)
        pairs[(i, i + 1)] = {"repl_ij": r * w, "repl_ji": r * w * 0.8, "inter": x * w}
    return ScoreResult(meta={"num_layers": L, "positions": "all"}, pairs=pairs, n_boot=100)


def test_patch_aware_selection_picks_the_cheapest_patched_set():
    """A case where the cheapest set before patching is not the cheapest after it: the
    patch-aware search finds the patched one, the plain search the plain one."""
    from swapprune.select.auto import select_auto

    model = tiny_model("qwen2")
    certify = Calibration(tiny_ids(6, 16, seed=11), "tensor", 11)
    verify = Calibration(tiny_ids(6, 16, seed=12), "tensor", 12)
    patch = Calibration(PATCH, "tensor", 13)
    budget = 1
    cfg = SelectConfig(budget=budget, protocol="auto", patch="linear", patch_aware=True)
    spec = dataclasses.replace(build(cfg, CalibrationConfig(), L, True), n_boot=200)
    assert 0 not in spec.constraints.candidates()  # a patch keeps block 0
    held = Heldout(certify, verify, patch=PatchAware(patch, 1e-3))
    calib = Calibration(tiny_ids(4, 16), "tensor", 0)
    plan, _ = select_auto(
        model, spec, calib, both_high_scores(), heldout=held, width=100, max_calls=1000,
        shortlist_size=5,
    )  # fmt: skip
    found = plan.records.auto.search
    assert found is not None and sorted(found.shortlist) == [1, 2, 3, 4, 5]
    # the beam's definition: each set after its patch fitted on the screen's windows
    k = patch_screen_windows(PATCH.shape[0], PATCH.shape[1], 32, True)
    patched = PatchedOracle(model, verify.input_ids, 8, PatchFitter(model, PATCH, 8, 1e-3), k)
    plain = CalibrationOracle(model, verify.input_ids, 8, "ppl")
    sets = list(combinations(found.shortlist, budget))
    p_cost = {s: patched.cost(s) for s in sets}
    c_cost = {s: plain.cost(s) for s in sets}
    best_patched, best_plain = min(p_cost, key=p_cost.get), min(c_cost, key=c_cost.get)
    assert best_patched != best_plain  # the constructed case: the rankings differ
    assert tuple(found.verified) == best_patched
    cert = plan.records.measured
    assert cert.extra["patched"]["patch_windows"] == list(PATCH.shape)
    # the same search without the patch finds the plain set
    plain_spec = dataclasses.replace(
        build(SelectConfig(budget=budget, protocol="auto", protect_first=1), CalibrationConfig(),
              L, True), n_boot=200,
    )  # fmt: skip
    plan2, _ = select_auto(
        model, plain_spec, calib, both_high_scores(), heldout=Heldout(certify, verify),
        width=100, max_calls=1000, shortlist_size=5,
    )  # fmt: skip
    assert tuple(plan2.records.auto.search.verified) == best_plain


def test_patch_aware_needs_a_patch():
    with pytest.raises(SwappruneError, match="--patch linear"):
        SelectConfig(budget=2, patch_aware=True).check()
    with pytest.raises(SwappruneError, match="nothing to compare"):
        SelectConfig(budget=2, patch="linear", patch_aware=True, certify=False).check()


def test_the_command_compares_patched_sets_and_keeps_the_fit(tmp_path, capsys):
    import json

    from tiny_models import save_tiny

    from swapprune.cli import main

    model_dir = str(save_tiny("qwen2", tmp_path / "m"))
    out = tmp_path / "cut"
    argv = ["--model", model_dir, "--budget", "2", "--protocol", "interchange", "--output",
            str(out), "--prompts", "4", "--tokens", "32", "--no-progress", "--patch", "linear",
            "--patch-aware", "--patch-prompts", "8", "--patch-tokens", "32"]  # fmt: skip
    assert main(argv) == 0
    got = capsys.readouterr()
    printed = got.out + got.err
    assert "each set after its own linear patch (8 patch windows)" in printed
    assert "every set compared after its own linear patch" in printed  # the estimate
    plan = json.loads((out / "plan.json").read_text())
    cert = plan["scores"]["certificate"]
    assert cert["patched"]["fits"] >= 1 and cert["patched"]["patch_windows"] == [8, 32]
    # the cut's patch is the certificate's fit of the kept set, on the same windows
    assert plan["patch"]["compute"]["reused"] == "the certificate's fit"
    assert plan["patch"]["windows"]["prompts"] == 8
