"""Probe distances equal the literal definitions; the scores artifact is complete."""

import json

import numpy as np
import pytest
import torch
from tiny_models import FAMILIES, tiny_ids, tiny_model

from swapprune.engine.scores import ScoreResult
from swapprune.engine.scoring import score
from swapprune.errors import SwappruneError
from swapprune.naive import kl_per_window, plan_logits

# Block types of the tiny models (s: sliding, f: full attention):
#   gemma2 s f s f s f, gemma3_text s s f s s f, qwen2 f f f s s s.
# (1, 2) is adjacent and crosses types on both Gemmas; the distant (0, 3) crosses on
# gemma2 and qwen2, (2, 4) on gemma3_text and qwen2.
PAIRS = [(1, 2), (0, 3), (2, 4)]
# The plans for L=6, written out (slot <- block for replacement; see test_probe_plans.py).
PLANS = {
    (1, 2): {"repl_ij": (0, 2, 2, 3, 4, 5), "repl_ji": (0, 1, 1, 3, 4, 5), "inter": (0, 2, 1, 3, 4, 5)},
    (0, 3): {"repl_ij": (3, 1, 2, 3, 4, 5), "repl_ji": (0, 1, 2, 0, 4, 5), "inter": (3, 1, 2, 0, 4, 5)},
    (2, 4): {"repl_ij": (0, 1, 4, 3, 4, 5), "repl_ji": (0, 1, 2, 3, 2, 5), "inter": (0, 1, 4, 3, 2, 5)},
}
DELETIONS = {0: (1, 2, 3, 4, 5), 3: (0, 1, 2, 4, 5)}


def _naive(model, ids, plan, positions):
    base = plan_logits(model, range(6), ids)
    return kl_per_window(base, plan_logits(model, plan, ids), positions).double().numpy()


@pytest.mark.parametrize("positions", ["last", "all"])
@pytest.mark.parametrize("family", FAMILIES)
def test_probes_equal_naive_definition(family, positions):
    model, ids = tiny_model(family), tiny_ids(5, 20)
    res = score(model, calibration=ids, pairs=PAIRS, positions=positions,
                protocols="replacement,interchange,deletion", batch_size=5, progress=False)
    for pair in PAIRS:
        v = res.pairs[pair]
        assert set(v) == set(PLANS[pair])
        for key, plan in PLANS[pair].items():
            np.testing.assert_allclose(v[key], _naive(model, ids, plan, positions), rtol=1e-5,
                                       atol=1e-9, err_msg=f"{family} {pair} {key}")
    for layer, plan in DELETIONS.items():
        np.testing.assert_allclose(res.deletion[layer], _naive(model, ids, plan, positions),
                                   rtol=1e-5, atol=1e-9)


def test_json_contract_and_ratios(tmp_path):
    model, ids = tiny_model("gemma3_text"), tiny_ids(6, 16)
    out = tmp_path / "scores.json"
    res = score(model, calibration=ids, pairs="gap:3", protocols="replacement,interchange,deletion",
                out=out, progress=False)
    data = json.loads(out.read_text())
    for key in ("model", "num_layers", "positions", "calibration", "pairs", "deletion", "summary"):
        assert key in data
    assert data["num_layers"] == 6 and data["positions"] == "all"
    assert {"source", "prompts", "tokens", "seed"} <= set(data["calibration"])
    rows = {(r["i"], r["j"]): r for r in data["pairs"]}
    # gemma3_text blocks: sliding, sliding, full, sliding, sliding, full
    assert rows[(2, 5)]["types"] == ["full_attention", "full_attention"]
    assert rows[(2, 5)]["crosses_types"] is False
    assert rows[(0, 1)]["types"] == ["sliding_attention", "sliding_attention"]
    assert rows[(0, 1)]["crosses_types"] is False
    assert rows[(1, 2)]["types"] == ["sliding_attention", "full_attention"]
    assert rows[(1, 2)]["crosses_types"] is True
    assert rows[(2, 4)]["crosses_types"] is True
    for r in data["pairs"]:
        rep, inter = r["replacement"], r["interchange"]
        d_ij, d_ji = rep["directed"]
        assert rep["distance"] == pytest.approx(max(d_ij, d_ji))
        assert rep["mean"] == pytest.approx((d_ij + d_ji) / 2)
        assert rep["ci"][0] <= rep["distance"] <= rep["ci"][1]
        assert inter["ci"][0] <= inter["distance"] <= inter["ci"][1]
        assert r["ir_ratio"]["value"] == pytest.approx(inter["distance"] / rep["distance"])
    assert len(data["deletion"]) == 6
    assert {g["gap"] for g in data["summary"]["by_gap"]} == {1, 2, 3}
    assert data["summary"]["regime"]["call"] in ("divergent", "tie-like", "both-high")
    again = ScoreResult.load(out)
    assert again.distance("interchange", 2, 5) == pytest.approx(res.distance("interchange", 2, 5))


def test_interchange_is_symmetric_and_directions_differ():
    model, ids = tiny_model("llama"), tiny_ids(4, 16)
    a = score(model, calibration=ids, pairs=[(1, 3)], progress=False)
    b = score(model, calibration=ids, pairs=[(3, 1)], progress=False)
    assert a.distance("interchange", 1, 3) == b.distance("interchange", 3, 1)
    d13, d31 = a.directed(1, 3)
    assert d13 != d31
    assert a.directed(3, 1) == (d31, d13)


def test_resume_skips_finished_pairs(tmp_path):
    model, ids = tiny_model("qwen2"), tiny_ids(4, 16)
    out = tmp_path / "s.json"
    first = score(model, calibration=ids, pairs="0-1,1-2", out=out, progress=False)
    second = score(model, calibration=ids, pairs="adjacent", out=out, progress=False)
    assert second.meta["timing"]["units_probed"] == 3  # 5 adjacent pairs, 2 already done
    np.testing.assert_array_equal(second.pairs[(0, 1)]["inter"], first.pairs[(0, 1)]["inter"])
    third = score(model, calibration=ids, pairs="adjacent", out=out, progress=False)
    assert third.meta["timing"]["units_probed"] == 0


def test_bad_input():
    model, ids = tiny_model("llama"), tiny_ids(2, 8)
    with pytest.raises(SwappruneError, match="did you mean 'interchange'"):
        score(model, calibration=ids, protocols="interchang", progress=False)
    with pytest.raises(SwappruneError, match="out of range"):
        score(model, calibration=ids, pairs="4-9", progress=False)
    with pytest.raises(SwappruneError):
        score(model, calibration=ids, positions="middle", progress=False)


def test_cross_class_swap_refused():
    model, ids = tiny_model("llama"), tiny_ids(2, 8)

    class Other(torch.nn.Module):
        def forward(self, h, *a, **k):
            return h

    model.model.layers[5] = Other()
    with pytest.raises(SwappruneError, match="different module classes"):
        score(model, calibration=ids, pairs="4-5", progress=False)


def test_both_modes_from_one_pass_equal_separate_runs():
    from swapprune.engine.scoring import score_modes

    model, ids = tiny_model("gemma2"), tiny_ids(4, 16)
    both = score_modes(model, calibration=ids, modes=("last", "all"), pairs="gap:2", progress=False)
    for mode in ("last", "all"):
        single = score(model, calibration=ids, positions=mode, pairs="gap:2", progress=False)
        assert both[mode].meta["positions"] == mode
        for k, v in single.pairs.items():
            for key in v:
                np.testing.assert_allclose(both[mode].pairs[k][key], v[key], rtol=1e-5, atol=1e-10)
