"""Probe distances equal the literal definitions; the scores artifact is complete."""

import json

import numpy as np
import pytest
import torch
from tiny_models import FAMILIES, tiny_ids, tiny_model

from swapprune.engine.naive import kl_per_window, plan_logits
from swapprune.engine.probing import score
from swapprune.engine.scores import ScoreResult
from swapprune.errors import SwappruneError

# Block types of the tiny models (s: sliding, f: full attention):
#   gemma2 s f s f s f, gemma3_text s s f s s f, qwen2 f f f s s s.
# (1, 2) is adjacent and crosses types on both Gemmas; the distant (0, 3) crosses on
# gemma2 and qwen2, (2, 4) on gemma3_text and qwen2.
PAIRS = [(1, 2), (0, 3), (2, 4)]
# The plans for L=6, written out (slot <- block for replacement; see test_probe_plans.py).
PLANS = {
    (1, 2): {
        "repl_ij": (0, 2, 2, 3, 4, 5),
        "repl_ji": (0, 1, 1, 3, 4, 5),
        "inter": (0, 2, 1, 3, 4, 5),
    },
    (0, 3): {
        "repl_ij": (3, 1, 2, 3, 4, 5),
        "repl_ji": (0, 1, 2, 0, 4, 5),
        "inter": (3, 1, 2, 0, 4, 5),
    },
    (2, 4): {
        "repl_ij": (0, 1, 4, 3, 4, 5),
        "repl_ji": (0, 1, 2, 3, 2, 5),
        "inter": (0, 1, 4, 3, 2, 5),
    },
}
DELETIONS = {0: (1, 2, 3, 4, 5), 3: (0, 1, 2, 4, 5)}


def _naive(model, ids, plan, positions):
    base = plan_logits(model, range(6), ids)
    return kl_per_window(base, plan_logits(model, plan, ids), positions).double().numpy()


@pytest.mark.parametrize("positions", ["last", "all"])
@pytest.mark.parametrize("family", FAMILIES)
def test_probes_equal_naive_definition(family, positions):
    model, ids = tiny_model(family), tiny_ids(5, 20)
    res = score(
        model,
        calibration=ids,
        pairs=PAIRS,
        positions=positions,
        protocols="replacement,interchange,deletion",
        batch_size=5,
        progress=False,
    )
    for pair in PAIRS:
        v = res.pairs[pair]
        assert set(v) == set(PLANS[pair])
        for key, plan in PLANS[pair].items():
            np.testing.assert_allclose(
                v[key],
                _naive(model, ids, plan, positions),
                rtol=1e-5,
                atol=1e-9,
                err_msg=f"{family} {pair} {key}",
            )
    for layer, plan in DELETIONS.items():
        np.testing.assert_allclose(
            res.deletion[layer], _naive(model, ids, plan, positions), rtol=1e-5, atol=1e-9
        )


def test_json_contract_and_ratios(tmp_path):
    model, ids = tiny_model("gemma3_text"), tiny_ids(6, 16)
    out = tmp_path / "scores.json"
    res = score(
        model,
        calibration=ids,
        pairs="gap:3",
        protocols="replacement,interchange,deletion",
        out=out,
        progress=False,
    )
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
    from swapprune.engine.probing import score_modes

    model, ids = tiny_model("gemma2"), tiny_ids(4, 16)
    both = score_modes(model, calibration=ids, modes=("last", "all"), pairs="gap:2", progress=False)
    for mode in ("last", "all"):
        single = score(model, calibration=ids, positions=mode, pairs="gap:2", progress=False)
        assert both[mode].meta["positions"] == mode
        for k, v in single.pairs.items():
            for key in v:
                np.testing.assert_allclose(both[mode].pairs[k][key], v[key], rtol=1e-5, atol=1e-10)


class TestArtifact:
    """The scores artifact on hand-written per-window values (pure numpy, no model)."""

    @staticmethod
    def result(n_boot=200):
        res = ScoreResult(
            meta={
                "num_layers": 4,
                "positions": "last",
                "layer_types": ["sliding_attention", "full_attention"] * 2,
            },
            n_boot=n_boot,
            seed=1,
        )
        w = np.array([0.1, 0.2, 0.3, 0.4])
        res.pairs[(0, 1)] = {"repl_ij": w * 2, "repl_ji": w * 3, "inter": w}  # 0.5, 0.75
        res.pairs[(1, 2)] = {"repl_ij": w * 4, "repl_ji": w, "inter": w * 3}  # 1.0, 0.25
        res.pairs[(0, 2)] = {"repl_ij": w, "repl_ji": w, "inter": w * 2}  # gap 2
        res.pairs[(2, 3)] = {"repl_ij": w * 0, "repl_ji": w * 0, "inter": w}  # d_repl 0
        res.deletion[1] = w * 5
        res.deletion[0] = w / 5
        return res

    def test_point_values(self):
        res = self.result()
        assert res.directed(0, 1) == pytest.approx((0.5, 0.75))
        assert res.directed(1, 0) == pytest.approx((0.75, 0.5))
        assert res.distance("replacement", 1, 0) == pytest.approx(0.75)
        assert res.distance("replacement", 0, 1, mode="mean") == pytest.approx(0.625)
        assert res.distance("interchange", 2, 1) == pytest.approx(0.75)
        assert res.protocols() == ["replacement", "interchange", "deletion"]
        assert res.num_windows() == 4 and res.num_layers == 4
        with pytest.raises(SwappruneError, match="pair 1-3 was not scored"):
            res.distance("interchange", 3, 1)
        with pytest.raises(SwappruneError, match="'deletion' is not a pair protocol"):
            res.distance("deletion", 0, 1)
        only = ScoreResult(meta={"num_layers": 2}, pairs={(0, 1): {"inter": np.ones(3)}})
        assert only.protocols() == ["interchange"] and only.num_windows() == 3
        with pytest.raises(SwappruneError, match="replacement was not scored"):
            only.distance("replacement", 0, 1)
        dele = ScoreResult(meta={"num_layers": 2}, deletion={1: np.ones(5)})
        assert dele.protocols() == ["deletion"] and dele.num_windows() == 5
        assert ScoreResult(meta={"num_layers": 2}).num_windows() == 0
        assert ScoreResult(meta={"num_layers": 2}).protocols() == []
        repl = ScoreResult(
            meta={"num_layers": 2}, pairs={(0, 1): {"repl_ij": np.ones(2), "repl_ji": np.ones(2)}}
        )
        assert repl.protocols() == ["replacement"]
        with pytest.raises(SwappruneError, match="interchange was not scored"):
            repl.distance("interchange", 0, 1)

    def test_rows(self):
        d = self.result().to_dict()
        assert d["schema"] == "swapprune.scores/1" and d["positions"] == "last"
        assert d["bootstrap"] == {
            "resamples": 200,
            "seed": 1,
            "unit": "window",
            "interval": "95% percentile",
        }
        assert [(r["i"], r["j"]) for r in d["pairs"]] == [(0, 1), (0, 2), (1, 2), (2, 3)]
        r = d["pairs"][0]
        assert r["gap"] == 1 and r["types"] == ["sliding_attention", "full_attention"]
        assert r["crosses_types"] is True and d["pairs"][1]["crosses_types"] is False
        rep = r["replacement"]
        assert rep["distance"] == pytest.approx(0.75) and rep["mean"] == pytest.approx(0.625)
        assert rep["directed"] == pytest.approx([0.5, 0.75])
        assert rep["per_window"] == [
            pytest.approx([0.2, 0.4, 0.6, 0.8]),
            pytest.approx([0.3, 0.6, 0.9, 1.2]),
        ]
        lo, hi = rep["ci"]
        assert 0.3 <= lo < 0.75 < hi <= 1.2
        (alo, ahi), (blo, bhi) = rep["directed_ci"]
        assert 0.2 <= alo < 0.5 < ahi <= 0.8 and 0.3 <= blo < 0.75 < bhi <= 1.2
        inter = r["interchange"]
        assert inter["distance"] == pytest.approx(0.25)
        assert 0.1 <= inter["ci"][0] < 0.25 < inter["ci"][1] <= 0.4
        assert inter["per_window"] == pytest.approx([0.1, 0.2, 0.3, 0.4])
        assert r["ir_ratio"]["value"] == pytest.approx(0.25 / 0.75)
        # every resample has inter/repl = 1/3 exactly: the CI collapses onto it
        assert r["ir_ratio"]["ci"] == pytest.approx([1 / 3, 1 / 3])
        assert r["gap_diff"] == pytest.approx(0.5)
        zero = d["pairs"][3]
        assert zero["replacement"]["distance"] == 0 and zero["ir_ratio"]["value"] is None
        dele = d["deletion"]
        assert [x["layer"] for x in dele] == [0, 1]
        assert dele[1]["distance"] == pytest.approx(1.25)
        assert dele[1]["per_window"] == pytest.approx([0.5, 1.0, 1.5, 2.0])
        assert 0.5 <= dele[1]["ci"][0] < 1.25 < dele[1]["ci"][1] <= 2.0

    def test_summary(self):
        s = self.result().to_dict()["summary"]
        g1, g2 = s["by_gap"]
        assert g1["gap"] == 1 and g1["pairs"] == 3 and g2["gap"] == 2 and g2["pairs"] == 1
        assert g1["median_replacement"] == pytest.approx(0.75)  # of 0.75, 1.0, 0
        assert g1["median_interchange"] == pytest.approx(0.25)  # of 0.25, 0.75, 0.25
        assert g1["median_ir"] == pytest.approx((1 / 3 + 0.75) / 2)  # the d_repl=0 pair is left out
        assert g1["mean_gap_diff"] == pytest.approx((0.5 + 0.25 - 0.25) / 3)
        assert g1["fraction_inter_le_repl"] == pytest.approx(2 / 3)
        assert g2["median_replacement"] == pytest.approx(0.25)
        assert g2["median_interchange"] == pytest.approx(0.5) and g2["median_ir"] == pytest.approx(
            2
        )
        assert g2["fraction_inter_le_repl"] == 0.0
        rank = s["ranking"]
        assert [(x["i"], x["j"]) for x in rank["interchange"]] == [(0, 1), (2, 3), (0, 2), (1, 2)]
        assert [x["rank"] for x in rank["interchange"]] == [1, 2, 3, 4]
        assert [(x["i"], x["j"]) for x in rank["replacement"]][:2] == [(2, 3), (0, 2)]
        assert rank["replacement"][0]["distance"] == 0.0
        assert rank["replacement"][-1]["rank_ci"] == [4, 4]  # (1, 2): largest on every resample
        assert rank["replacement"][0]["rank_ci"] == [1, 1]
        assert "regime" in s

    def test_ranking_lists_ten_pairs_at_most(self):
        res = ScoreResult(meta={"num_layers": 13}, n_boot=20)
        for i in range(12):
            res.pairs[(i, i + 1)] = {"inter": np.full(3, 0.01 * (12 - i))}
        rank = res.to_dict()["summary"]["ranking"]
        assert list(rank) == ["interchange"]
        assert [x["i"] for x in rank["interchange"]] == list(range(11, 1, -1))

    def test_round_trip(self, tmp_path):
        res = self.result()
        res.save(tmp_path / "s.json")
        again = ScoreResult.load(tmp_path / "s.json")
        assert again.n_boot == 200 and again.seed == 1
        assert again.meta == res.meta
        assert json.dumps(again.to_dict()) == json.dumps(res.to_dict())  # NaN != NaN in ==
        for k, v in res.pairs.items():
            for key in v:
                np.testing.assert_array_equal(again.pairs[k][key], v[key])
        np.testing.assert_array_equal(again.deletion[1], res.deletion[1])
        with pytest.raises(SwappruneError, match="not a swapprune scores file"):
            ScoreResult.from_dict({"schema": "x"})
        (tmp_path / "bad.json").write_text("{")
        with pytest.raises(SwappruneError, match="cannot read scores file"):
            ScoreResult.load(tmp_path / "bad.json")
        with pytest.raises(SwappruneError, match="cannot read scores file"):
            ScoreResult.load(tmp_path / "absent.json")
