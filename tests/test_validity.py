"""Predictor validity: Spearman of removability vs measured single-block deletion cost."""

import json
import math

import numpy as np
import pytest
import torch.nn.functional as F
from tiny_models import tiny_ids, tiny_model

from swapprune.calibration.windows import Calibration
from swapprune.engine.naive import plan_logits
from swapprune.engine.oracle import CalibrationOracle
from swapprune.errors import SwappruneError
from swapprune.select import criteria
from swapprune.studies.validity import predictor_validity, rankdata, spearman
from swapprune.studies.validity_report import write_validity_report

IDS = tiny_ids(8, 24, seed=3)


def test_spearman_by_hand():
    np.testing.assert_allclose(rankdata([3.0, 1.0, 3.0, 2.0]), [3.5, 1, 3.5, 2])
    # d = (0, 1, 1, 0): 1 - 6 * 2 / (4 * 15)
    assert spearman(np.array([1.0, 2, 3, 4]), np.array([1.0, 3, 2, 4])) == pytest.approx(0.8)
    assert spearman(np.array([1.0, 2, 3]), np.array([3.0, 2, 1])) == pytest.approx(-1)
    assert math.isnan(spearman(np.array([1.0, 1, 1]), np.array([1.0, 2, 3])))
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, (2, 30)).astype(float)  # many ties
    assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic)
    batch = spearman(np.stack([a, b]), np.stack([b, b]))  # along the last axis
    assert batch[0] == pytest.approx(spearman(a, b)) and batch[1] == pytest.approx(1)


def naive_ppl(model, removed, ids):
    logits = plan_logits(model, [b for b in range(6) if b not in removed], ids)[:, :-1]
    return math.exp(
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)).item()
    )


def test_validity_on_a_tiny_model(tmp_path):
    model = tiny_model("llama", seed=1)
    names = ["interchange", "bi", "angular", "sleb", "sleb-kl", "taylor", "random"]
    res = predictor_validity(
        model, calibration=Calibration(IDS, "test", 0), criteria=names, n_boot=200
    )
    base = naive_ppl(model, [], IDS)
    want = [naive_ppl(model, [b], IDS) / base - 1 for b in range(6)]
    np.testing.assert_allclose(res["deletion_cost"]["per_layer"], want, rtol=1e-4)
    rows = res["criteria"]
    assert list(rows) == names
    # SLEB's removability is the target itself on the same windows: rho = 1 in every resample
    assert rows["sleb"]["spearman"] == pytest.approx(1) and rows["sleb"]["ci"] == pytest.approx(
        [1, 1]
    )
    # each criterion's removability is what the criterion itself computes
    oracle = CalibrationOracle(model, IDS)
    ctx = criteria.Context(num_layers=6, oracle=oracle)
    np.testing.assert_allclose(
        rows["bi"]["removability"], criteria.get("bi").importance(ctx), rtol=1e-9
    )
    np.testing.assert_allclose(
        rows["angular"]["removability"], criteria.get("angular").importance(ctx), rtol=1e-9
    )
    for name, r in rows.items():
        lo, hi = r["ci"]
        assert -1 <= lo <= hi <= 1, name
        rho = spearman(np.array(r["removability"]), np.array(want))
        assert r["spearman"] == pytest.approx(float(rho)), name
    assert rows["taylor"]["resampled"].startswith("target windows only")
    assert rows["interchange"]["resampled"].startswith("windows")

    out = write_validity_report(res, tmp_path / "v")
    assert json.loads((out / "validity.json").read_text())["schema"] == "swapprune.validity/1"
    assert "| sleb | +1.00 |" in (out / "validity.md").read_text()
    assert (out / "validity.png").stat().st_size > 0


def test_held_out_target_and_bad_names():
    model = tiny_model("llama", seed=1)
    target = Calibration(tiny_ids(8, 24, seed=9), "held-out", 0)
    res = predictor_validity(
        model, calibration=Calibration(IDS, "test", 0), criteria=["sleb"], target=target, n_boot=100
    )
    assert res["target_is_calibration"] is False
    assert "independently" in res["criteria"]["sleb"]["resampled"]
    base = naive_ppl(model, [], target.input_ids)
    assert res["deletion_cost"]["base_ppl"] == pytest.approx(base, rel=1e-5)
    with pytest.raises(SwappruneError, match="did you mean 'sleb'"):
        predictor_validity(model, calibration=Calibration(IDS, "test", 0), criteria=["slbe"])


def test_layer_bootstrap_beside_the_window_ci_and_the_paired_difference(tmp_path):
    """Each criterion also gets a CI over resampled blocks; interchange - BI is paired."""
    from swapprune.stats.layers import layer_bootstrap_spearman

    model = tiny_model("llama", seed=1)
    names = ["interchange", "replacement-directed", "bi", "random"]
    res = predictor_validity(
        model, calibration=Calibration(IDS, "test", 0), criteria=names, n_boot=200
    )
    rows, cost = res["criteria"], res["deletion_cost"]["per_layer"]
    # the same draws as the layer bootstrap of the point removabilities
    want = layer_bootstrap_spearman(
        {n: rows[n]["removability"] for n in names}, cost, n_boot=200, seed=0
    )
    for n in names:
        assert rows[n]["layer_ci"] == pytest.approx([want.intervals[n].low, want.intervals[n].high])
        assert rows[n]["layer_ci"][0] <= rows[n]["spearman"] <= rows[n]["layer_ci"][1]
    lb = res["layer_bootstrap"]
    assert lb["n_blocks"] == 6 and set(lb["criteria"]) == set(names)
    diff = lb["differences"]["interchange - bi"]
    iv, p = want.difference("interchange", "bi")
    assert diff == {"estimate": pytest.approx(iv.estimate), "ci": pytest.approx([iv.low, iv.high]),
                    "p_value": pytest.approx(p)}  # fmt: skip
    assert diff["estimate"] == pytest.approx(
        rows["interchange"]["spearman"] - rows["bi"]["spearman"]
    )
    assert "replacement-directed - interchange" in lb["differences"]
    # replacement-directed reads the replacement probe's directions, window by window
    s = rows["replacement-directed"]
    assert s["resampled"].startswith("windows") and s["source"].startswith("swapprune's own")
    md = write_validity_report(res, tmp_path / "v") / "validity.md"
    text = md.read_text()
    assert "| layer 95% CI |" in text and "- interchange - bi: " in text
