"""Adaptive calibration: the stopping rule and where windows are spent."""

import numpy as np
import pytest
import torch
from tiny_models import tiny_ids, tiny_model

from swapprune.calibration.windows import Calibration
from swapprune.config import CalibrationConfig, SelectConfig
from swapprune.engine.probing import score
from swapprune.errors import SwappruneError
from swapprune.select import criteria
from swapprune.select.adaptive import AdaptiveSettings, adaptive_score, tranches
from swapprune.select.constraints import Constraints
from swapprune.select.spec import build
from swapprune.select.strategies import get_strategy

L = 8
PAIRS = [(i, i + 1) for i in range(L - 1)]


def fake_measure(means: dict, noise: float, calls: list):
    """Per-window KL = mean x (1 + noise x z), z fixed per (pair, window): a seeded fake probe."""

    def measure(pairs, rows):
        calls.append((list(pairs), list(rows)))
        out = {}
        for p in pairs:
            z = np.array(
                [np.random.default_rng(1000 * p[0] + int(r)).standard_normal() for r in rows]
            )
            inter = means[p] * np.maximum(0.05, 1 + noise * z)
            out[p] = {"inter": inter, "repl_ij": 4 * inter, "repl_ji": 3 * inter}
        return out

    return measure


def run(means, noise, **kw):
    calls = []
    settings = AdaptiveSettings(**{"target": 0.9, **kw}, tranche=8, max_windows=64, n_boot=300)
    res = tranches(
        fake_measure(means, noise, calls),
        PAIRS,
        {"num_layers": L},
        [criteria.get("interchange")],
        get_strategy("greedy"),
        1,
        Constraints(L),
        settings,
    )
    return res, calls


def test_clearly_separated_stops_after_one_tranche():
    means = {p: 1.0 + p[0] for p in PAIRS}
    means[(3, 4)] = 0.05
    res, calls = run(means, 0.2)
    assert res.stopped == "stable" and len(res.rounds) == 1 and len(calls) == 1
    assert res.scores.num_windows() == 8
    assert res.stability["interchange"].frequency >= 0.9
    assert res.stability["interchange"].chosen[0] in (3, 4)


def test_near_tie_keeps_going_and_spends_windows_only_where_it_matters():
    means = {p: 2.0 + p[0] for p in PAIRS}
    means[(1, 2)], means[(5, 6)] = 0.050, 0.0505
    res, calls = run(means, 0.3)
    assert res.stopped == "max windows" and res.scores.num_windows() == 64
    assert len(res.rounds) == 8
    # after the first tranche only the two competing pairs (and neighbours whose CI
    # reaches them) are probed; pairs far above the boundary get no more windows
    later = {p for pairs, _ in calls[1:] for p in pairs}
    assert {(1, 2), (5, 6)} <= later
    assert (3, 4) not in later and (6, 7) not in later
    assert np.isnan(res.scores.pairs[(3, 4)]["inter"][8:]).all()
    assert not np.isnan(res.scores.pairs[(1, 2)]["inter"]).any()
    assert res.pair_windows < len(PAIRS) * 64 / 2
    # means skip the windows a pair did not get
    assert res.scores.distance("interchange", 3, 4) == pytest.approx(
        np.mean(res.scores.pairs[(3, 4)]["inter"][:8])
    )
    assert res.rounds[-1]["frequency"]["interchange"] < 0.9


def test_a_close_call_settles_with_more_windows():
    means = {p: 2.0 + p[0] for p in PAIRS}
    means[(1, 2)], means[(5, 6)] = 0.05, 0.056
    res, _ = run(means, 0.5)
    assert len(res.rounds) > 1
    assert res.stopped == "stable" and res.scores.num_windows() < 64
    assert res.stability["interchange"].frequency >= 0.9


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(target=1.5), "stability target must be in"),
        (dict(target=0.0), "stability target must be in"),
        (dict(tranche=16, max_windows=8), "smaller than one tranche"),
    ],
)
def test_bad_settings_are_one_line_errors_before_any_probe(kw, match):
    calls = []
    settings = {"target": 0.9, "tranche": 16, "max_windows": 128, **kw}
    with pytest.raises(SwappruneError, match=match) as e:
        tranches(
            fake_measure({p: 1.0 for p in PAIRS}, 0.1, calls),
            PAIRS,
            {"num_layers": L},
            [criteria.get("interchange")],
            get_strategy("greedy"),
            1,
            Constraints(L),
            AdaptiveSettings(**settings),
        )
    assert "\n" not in str(e.value) and calls == []
    names = {"target": "target_frequency", "tranche": "tranche", "max_windows": "prompts"}
    cal = CalibrationConfig(adaptive="on", **{names[k]: v for k, v in kw.items()})
    if "tranche" in kw:  # from the configuration, a pool smaller than a tranche is one round
        assert build(SelectConfig(budget=1), cal, L).adaptive.tranche == kw["max_windows"]
        return
    with pytest.raises(SwappruneError, match=match):
        build(SelectConfig(budget=1), cal, L)  # the spec is refused before any model work


def test_tiny_model_values_equal_a_direct_score_on_the_same_windows():
    model = tiny_model("llama")
    pool = Calibration(tiny_ids(12, 16, seed=5), "tensor", 0)
    cal = CalibrationConfig(
        adaptive="on", target_frequency=0.99, tranche=4, prompts=12, batch_size=4
    )
    spec = build(SelectConfig(budget=1), cal, 6)
    both = [criteria.get("interchange"), criteria.get("replacement")]
    res = adaptive_score(model, spec, pool, both)
    n = res.scores.num_windows()
    assert n in (4, 8, 12) and res.block_evals > 0
    assert set(res.stability) == {"interchange", "replacement"}
    assert res.scores.meta["adaptive"]["stopped"] == res.stopped
    first = np.random.default_rng(0).permutation(12)[:4]
    direct = score(
        model,
        calibration=Calibration(pool.input_ids[torch.as_tensor(first)], "tensor", 0),
        pairs=[(0, 1)],
        progress=False,
    )
    np.testing.assert_allclose(
        res.scores.pairs[(0, 1)]["inter"][:4], direct.pairs[(0, 1)]["inter"], rtol=1e-6
    )
    d = res.scores.to_dict()
    assert d["adaptive"]["rounds"][0]["windows"] == 4 and d["calibration"]["prompts"] == n
