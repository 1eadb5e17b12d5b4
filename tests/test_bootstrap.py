"""Percentile and paired bootstrap (pure numpy)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from swapprune import bootstrap
from swapprune.bootstrap import (
    ci_mean,
    ci_of_statistic,
    ci_ppl,
    paired_difference,
    resample_indices,
    verdict,
)


def test_ci_mean_is_seeded_and_covers_truth():
    x = np.random.default_rng(1).normal(3.0, 1.0, size=400)
    a, b = ci_mean(x), ci_mean(x)
    assert a == b  # same seed, same interval
    assert a.low < 3.0 < a.high
    assert a.estimate == pytest.approx(x.mean())
    # Width close to the normal-theory 2 * 1.96 * sd / sqrt(n).
    assert a.high - a.low == pytest.approx(2 * 1.96 * x.std() / 20, rel=0.15)
    assert ci_mean(x, seed=5) != a


def test_ci_ppl_weights_by_tokens():
    nll, n = np.array([10.0, 30.0, 20.0]), np.array([5, 10, 10])
    ci = ci_ppl(nll, n)
    assert ci.estimate == pytest.approx(math.exp(60 / 25))
    assert ci.low <= ci.estimate <= ci.high


def test_vectorised_matches_loop_and_blocks(monkeypatch):
    units = np.random.default_rng(2).random((50, 2)) + 0.5
    idx = resample_indices(50, 200, seed=7)
    loop = [math.exp(units[i, 0].sum() / units[i, 1].sum()) for i in idx]
    want = np.percentile(loop, [2.5, 97.5])
    got = ci_of_statistic(units, "ppl", n_boot=200, seed=7)
    assert [got.low, got.high] == pytest.approx(want)
    # Row blocks (bounded memory) must not change the result.
    monkeypatch.setattr(bootstrap, "_BLOCK_ELEMENTS", 7)
    assert ci_of_statistic(units, "ppl", n_boot=200, seed=7) == got


def test_custom_statistic_callable():
    x = np.arange(10.0)
    ci = ci_of_statistic(x, lambda r: np.median(r[..., 0], axis=-1))
    assert ci.estimate == 4.5


def test_paired_identical_is_tie():
    x = np.random.default_rng(3).random(100)
    cmp = paired_difference(x, x.copy(), "mean")
    assert cmp.difference.low == cmp.difference.high == 0.0
    assert verdict(cmp, higher_is_better=True) == "tie"


def test_paired_detects_consistent_small_shift():
    # Unit-to-unit spread dwarfs the shift; pairing cancels it.
    rng = np.random.default_rng(4)
    nll = rng.uniform(50, 150, size=60)
    tokens = np.full(60, 50.0)
    a = np.column_stack([nll, tokens])
    b = np.column_stack([nll * 1.02, tokens])
    cmp = paired_difference(a, b, "ppl")
    assert cmp.difference.low > 0
    assert cmp.ratio.estimate == pytest.approx(cmp.b / cmp.a)
    assert verdict(cmp, higher_is_better=False, names=("base", "pruned")) == (
        f"base better by {cmp.b / cmp.a:.3g}x"
    )
    # Unpaired intervals overlap heavily: only pairing resolves it.
    assert ci_ppl(nll * 1.02, tokens).low < ci_ppl(nll, tokens).high


def test_verdict_higher_is_better():
    a = (np.arange(200) % 2).astype(float)  # acc 0.5
    b = np.ones(200)
    cmp = paired_difference(a, b, "mean")
    assert verdict(cmp, higher_is_better=True) == "b better by 2x"
    assert verdict(cmp, higher_is_better=False) == "a better by 2x"


def test_bad_inputs():
    with pytest.raises(ValueError):
        paired_difference(np.ones(3), np.ones(4), "mean")
    with pytest.raises(ValueError):
        ci_of_statistic([], "mean")
    with pytest.raises(ValueError):
        ci_of_statistic([1.0, 2.0], "nope")
