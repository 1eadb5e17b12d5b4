"""Study v3's analysis on a constructed input (no model, no files)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "eval" / "study_v3"))
analysis = pytest.importorskip("analysis")


def _units(nll, tokens=100):
    return [[float(x), tokens] for x in nll]


def _data():
    rng = np.random.default_rng(0)
    n, articles = 40, np.repeat(np.arange(10), 4)
    base = 3.0 * 100 + rng.normal(0, 5, n)  # nll per 100-token window
    good = base + 30 + rng.normal(0, 1, n)  # ~ +35% perplexity
    bad = base + 45 + rng.normal(0, 1, n)  # ~ +57%
    seeds = {}
    for s in range(3):
        seeds[s] = {
            # interchange and replacement choose the same set on every seed
            "interchange": {"key": "A", "removed": [1], "units": {"t": _units(good)}},
            "replacement": {"key": "A", "removed": [1], "units": {"t": _units(good)}},
            "bi": {"key": "B", "removed": [2], "units": {"t": _units(bad)}},
            "auto": {"key": "A", "removed": [1], "units": {"t": _units(good)}},
        }
    data = {
        "contracts": {"t": {"base": _units(base), "clusters": articles.tolist()}},
        "seeds": seeds,
    }
    return data, base, good, bad


def test_costs_verdicts_regret():
    data, base, good, bad = _data()
    r = analysis.analyse(data, margin=2.0, n_boot=400)
    c = r["contracts"]["t"]
    want_good = 100 * (np.exp(good.sum() / 4000) / np.exp(base.sum() / 4000) - 1)
    want_bad = 100 * (np.exp(bad.sum() / 4000) / np.exp(base.sum() / 4000) - 1)
    assert c["methods"]["interchange"]["cost_mean"] == pytest.approx(want_good)
    assert c["methods"]["bi"]["cost_mean"] == pytest.approx(want_bad)
    # the best method has zero regret on every seed; bi's regret is the cost gap
    assert c["methods"]["auto"]["regret_mean"] == pytest.approx(0.0)
    assert c["methods"]["bi"]["regret_mean"] == pytest.approx(want_bad - want_good)
    lo, hi = c["methods"]["bi"]["regret_ci"]
    assert lo > 0 and hi > lo
    # identical sets on every seed: reported as identical, never tested
    assert c["pairs"]["interchange vs replacement"]["outcome"] == "identical"
    # primary contrasts: I vs R identical; auto vs the best baseline (bi, the only one)
    prim = {p["contrast"]: p for p in c["primary"]}
    assert prim["interchange vs replacement"]["outcome"] == "identical"
    assert prim["auto vs bi"]["outcome"] == "a_better"
    assert prim["auto vs bi"]["estimate"] == pytest.approx(want_bad - want_good)
    # the Holm family counts the one distinct primary pair once
    assert prim["auto vs bi"]["family_size"] == 1
    # the distinct pairs of the table: {A, B} once, whatever the method names
    assert c["pairs"]["interchange vs bi"]["family_size"] == 1
    assert c["n_clusters"] == 10
