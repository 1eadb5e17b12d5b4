"""The regime call: the paper's precedence, each band from both sides, and its confidence."""

import json
from pathlib import Path

import numpy as np
import pytest

from swapprune.engine.scores import SCHEMA, ScoreResult
from swapprune.records.policy import summary_line
from swapprune.select import regime as R
from swapprune.stats.bootstrap import resample_indices

STUDY = Path(__file__).resolve().parent.parent / "eval" / "study"


def table(d_repl, d_inter, n=8, layers=5, noise=0.0, seed=0):
    """Adjacent pairs all with the given distances (per-window values, optional noise)."""
    rng = np.random.default_rng(seed)
    pairs = {}
    for i in range(layers - 1):

        def w(x):
            return x * (1 + noise * rng.standard_normal(n)) if noise else np.full(n, x)

        pairs[(i, i + 1)] = {"repl_ij": w(d_repl), "repl_ji": w(d_repl) * 0.5, "inter": w(d_inter)}
    return pairs


@pytest.mark.parametrize(
    "d_repl, d_inter, expected",
    [
        # both-high comes first: I/R = 0.2 << 1, yet interchange itself is high.
        (0.55, 0.11, "both-high"),
        (0.55, R.HIGH, "both-high"),
        (0.55, 0.099, "divergent"),
        # the I/R band (0.7), replacement well above the floor
        (0.13, 0.0896, "divergent"),  # I/R 0.689
        (0.12, 0.0845, "tie-like"),  # I/R 0.704
        # the replacement floor (0.05), I/R 0.2
        (0.051, 0.0102, "divergent"),
        (0.049, 0.0098, "tie-like"),
        # both low and I/R ~ 1 (the paper's Llama)
        (0.03, 0.029, "tie-like"),
    ],
)
def test_each_side_of_every_band(d_repl, d_inter, expected):
    r = R.regime(table(d_repl, d_inter))
    assert r["call"] == expected
    assert r["median_replacement"] == pytest.approx(d_repl)
    assert r["median_interchange"] == pytest.approx(d_inter)
    assert r["median_ir"] == pytest.approx(d_inter / d_repl)
    assert r["action"] == R.ACTIONS[expected]


def test_adjacent_pairs_decide_when_present():
    pairs = table(0.5, 0.05)
    pairs[(0, 2)] = {
        "repl_ij": np.full(8, 5.0),
        "repl_ji": np.full(8, 5.0),
        "inter": np.full(8, 4.0),
    }
    pairs[(1, 3)] = dict(pairs[(0, 2)])
    pairs[(2, 4)] = dict(pairs[(0, 2)])
    r = R.regime(pairs)
    assert r["pairs_used"] == 4 and r["call"] == "divergent"


def test_confidence_is_one_when_windows_agree_and_lower_near_a_band():
    n = 16
    idx = resample_indices(n, 400, 0)
    sure = R.regime(table(0.6, 0.02, n=n), idx)
    assert sure["confidence"] == 1.0
    # median d_inter sits on the 0.10 band with 30% window noise: resamples disagree
    near = R.regime(table(0.6, 0.10, n=n, noise=0.3, seed=3), idx)
    assert 0.1 < near["confidence"] < 0.9


def test_unmeasured_windows_are_skipped():
    pairs = table(0.5, 0.2)
    pairs[(0, 1)]["inter"][:4] = np.nan
    r = R.regime(pairs, resample_indices(8, 100, 0))
    assert r["call"] == "both-high" and r["median_interchange"] == pytest.approx(0.2)


def test_score_json_keeps_its_keys_and_adds_confidence():
    s = ScoreResult(meta={"num_layers": 5, "positions": "all"}, pairs=table(0.5, 0.05), n_boot=50)
    reg = s.to_dict()["summary"]["regime"]
    for key in (
        "call",
        "advice",
        "median_replacement",
        "median_interchange",
        "median_ir",
        "confidence",
    ):
        assert key in reg
    assert reg["call"] == "divergent" and reg["confidence"] == 1.0
    assert "positions=all" in reg["note"]
    assert summary_line(reg).startswith("regime divergent, confidence 100%")


def test_smollm2_study_is_both_high():
    """The committed study (last position): median adjacent d_inter 0.19."""
    data = json.loads((STUDY / "scores_trained_last.json").read_text())
    data["schema"] = SCHEMA  # written by an earlier version of the same format
    s = ScoreResult.from_dict(data)
    r = R.regime_of(s, n_boot=300)
    assert r["call"] == "both-high"
    assert r["median_interchange"] > R.HIGH and r["median_ir"] < R.DIVERGENT_IR
    assert r["confidence"] > 0.8


def test_no_pair_with_both_protocols_gives_none():
    pairs = {(0, 1): {"inter": np.ones(4)}}
    assert R.regime(pairs) is None


def test_relative_band_divides_by_the_pair_s_cheaper_deletion_and_is_not_acted_on():
    """A model both-high on the paper's fixed bands can be divergent relative to deletion."""
    pairs = table(2.0, 0.3)  # fixed bands: d_inter 0.3 >= 0.10, both-high
    # deleting any block costs 3 nats: interchange is a tenth of that, replacement 2/3
    deletion = {b: np.full(8, 3.0 + b) for b in range(5)}
    r = R.regime(pairs, deletion=deletion)
    assert r["call"] == "both-high" and r["action"] == "verify"  # the call is unchanged
    rel = r["relative"]
    # pair (i, i+1) divides by min(3 + i, 4 + i) = 3 + i; medians over pairs 0..3
    want_inter = float(np.median([0.3 / (3 + i) for i in range(4)]))
    assert rel["median_interchange_over_deletion"] == pytest.approx(want_inter)
    assert rel["median_replacement_over_deletion"] == pytest.approx(
        float(np.median([2.0 / (3 + i) for i in range(4)]))
    )
    assert rel["call"] == "divergent" and rel["pairs_used"] == 4
    assert "not acted on" in rel["note"] and rel["thresholds"]["high"] == R.REL_HIGH
    # interchange half a deletion or more: both-high on the relative band too
    assert R.regime(table(4.0, 2.5), deletion=deletion)["relative"]["call"] == "both-high"
    assert "relative to deletion: divergent" in summary_line(r)
    # without deletion scores there is no relative band
    assert R.regime(pairs)["relative"] is None


def test_relative_band_reaches_the_score_summary_with_its_confidence():
    pairs = table(2.0, 0.3)
    s = ScoreResult(
        meta={"num_layers": 5, "positions": "all"},
        pairs=pairs,
        deletion={b: np.full(8, 3.0) for b in range(5)},
        n_boot=50,
    )
    reg = s.to_dict()["summary"]["regime"]
    assert reg["relative"]["call"] == "divergent" and reg["relative"]["confidence"] == 1.0
    assert R.regime_of(s)["relative"]["call"] == "divergent"
