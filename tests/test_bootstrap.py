"""Percentile and paired bootstrap (pure numpy)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from swapprune.stats import bootstrap
from swapprune.stats.bootstrap import (
    ci_mean,
    ci_of_statistic,
    ci_ppl,
    paired_difference,
    resample_indices,
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


def test_paired_identical_differs_by_zero_on_every_resample():
    x = np.random.default_rng(3).random(100)
    cmp = paired_difference(x, x.copy(), "mean")
    assert cmp.difference.low == cmp.difference.high == 0.0
    assert cmp.p_value == 1.0 and cmp.se == 0.0


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
    assert cmp.p_value == pytest.approx(2 / 1001)  # every resample on one side
    # Unpaired intervals overlap heavily: only pairing resolves it.
    assert ci_ppl(nll * 1.02, tokens).low < ci_ppl(nll, tokens).high


def test_bad_inputs():
    with pytest.raises(ValueError):
        paired_difference(np.ones(3), np.ones(4), "mean")
    with pytest.raises(ValueError):
        ci_of_statistic([], "mean")
    with pytest.raises(ValueError):
        ci_of_statistic([1.0, 2.0], "nope")


def test_defaults_are_documented_values():
    x = np.random.default_rng(6).random(30)
    ci = ci_mean(x)
    assert (ci.level, ci.n_boot) == (0.95, 1000)
    assert ci == ci_mean(x, n_boot=1000, level=0.95, seed=0)
    assert bootstrap.Interval(1.0, 0.0, 2.0) == bootstrap.Interval(1.0, 0.0, 2.0, 0.95, 1000)
    assert np.array_equal(resample_indices(30), resample_indices(30, 1000, 0))
    assert resample_indices(30).shape == (1000, 30)


def test_resample_indices_cover_every_unit_and_no_more():
    idx = resample_indices(3, 500, seed=1)
    assert set(np.unique(idx)) == {0, 1, 2}


def test_interval_is_the_requested_percentiles():
    x = np.random.default_rng(8).random(40)
    reps = [x[i].mean() for i in resample_indices(40, 300, seed=2)]
    ci = ci_mean(x, n_boot=300, level=0.8, seed=2)
    assert [ci.low, ci.high] == pytest.approx(np.percentile(reps, [10, 90]))
    assert (ci.level, ci.n_boot) == (0.8, 300)
    assert ci.estimate == pytest.approx(x.mean())
    assert type(ci.estimate) is float and type(ci.low) is float and type(ci.high) is float


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("mean", lambda u: u[:, 0].mean()),
        ("ratio", lambda u: u[:, 0].sum() / u[:, 1].sum()),
        ("ppl", lambda u: math.exp(u[:, 0].sum() / u[:, 1].sum())),
        ("bits", lambda u: u[:, 0].sum() / u[:, 1].sum() / math.log(2)),
        ("exp_neg_mean", lambda u: math.exp(-u[:, 0].mean())),
    ],
)
def test_named_statistics(name, want):
    units = np.random.default_rng(9).random((25, 2)) + 0.5
    ci = ci_of_statistic(units, name, n_boot=100, seed=3)
    assert ci.estimate == pytest.approx(want(units))
    reps = [want(units[i]) for i in resample_indices(25, 100, seed=3)]
    assert [ci.low, ci.high] == pytest.approx(np.percentile(reps, [2.5, 97.5]))


def test_resamples_are_evaluated_in_bounded_row_blocks(monkeypatch):
    units = np.random.default_rng(10).random((5, 2))
    shapes = []

    def stat(r):
        shapes.append(r.shape)
        return r[..., 0].mean(axis=-1)

    want = ci_of_statistic(units, stat, n_boot=7, seed=1)
    assert shapes == [(7, 5, 2), (1, 5, 2)]  # one block of all rows, then the estimate
    # 25 elements per block of 10 units x 2 columns: two rows at a time.
    monkeypatch.setattr(bootstrap, "_BLOCK_ELEMENTS", 25)
    shapes.clear()
    assert ci_of_statistic(units, stat, n_boot=7, seed=1) == want
    assert shapes == [(2, 5, 2)] * 3 + [(1, 5, 2)] * 2
    # Fewer elements than one row still takes a row at a time.
    monkeypatch.setattr(bootstrap, "_BLOCK_ELEMENTS", 3)
    shapes.clear()
    assert ci_of_statistic(units, stat, n_boot=7, seed=1) == want
    assert shapes == [(1, 5, 2)] * 8


def test_paired_zero_denominators_stay_silent():
    # One resample of 200 draws only the zero units of ``a``: 1/0 (divide) there,
    # and 0/0 (invalid) when ``b`` is zero on the same units.
    a = np.array([0.0, 0.0, 1.0, 1.0, 1.0])
    assert (a[resample_indices(5, 200)].sum(axis=1) == 0).sum() == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inf = paired_difference(a, np.ones(5), "mean", n_boot=200)
        nan = paired_difference(a, 2 * a, "mean", n_boot=200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # np.percentile of all-infinite ratios
        zero = paired_difference(np.zeros(5), np.ones(5), "mean", n_boot=50)
    assert inf.ratio.estimate == pytest.approx(5 / 3) and inf.ratio.high == pytest.approx(5.0)
    assert nan.ratio.estimate == 2.0 and math.isnan(nan.ratio.low)
    assert math.isnan(zero.ratio.estimate) and (zero.a, zero.b) == (0.0, 1.0)
    assert zero.n_units == 5


def test_paired_fields_and_difference_interval():
    rng = np.random.default_rng(11)
    a = rng.random((30, 2)) + 1.0
    b = a + np.column_stack([rng.random(30), np.zeros(30)])
    cmp = paired_difference(a, b, "ratio", n_boot=150, level=0.9, seed=4)
    ra = [a[i, 0].sum() / a[i, 1].sum() for i in resample_indices(30, 150, seed=4)]
    rb = [b[i, 0].sum() / b[i, 1].sum() for i in resample_indices(30, 150, seed=4)]
    d = np.array(rb) - np.array(ra)
    assert cmp.n_units == 30
    assert cmp.a == pytest.approx(a[:, 0].sum() / a[:, 1].sum())
    assert cmp.b == pytest.approx(b[:, 0].sum() / b[:, 1].sum())
    assert cmp.difference.estimate == pytest.approx(cmp.b - cmp.a)
    assert [cmp.difference.low, cmp.difference.high] == pytest.approx(np.percentile(d, [5, 95]))
    q = np.percentile(np.array(rb) / np.array(ra), [5, 95])
    assert [cmp.ratio.low, cmp.ratio.high] == pytest.approx(q)
    assert (cmp.ratio.level, cmp.ratio.n_boot) == (0.9, 150)
    assert (cmp.difference.level, cmp.difference.n_boot) == (0.9, 150)


def test_bad_input_messages():
    with pytest.raises(ValueError, match=r"differ in shape: \(3, 1\) vs \(4, 1\)"):
        paired_difference(np.ones(3), np.ones(4), "mean")
    with pytest.raises(ValueError, match=r"non-empty \[n\] or \[n, k\] array, got shape \(0, 1\)"):
        ci_of_statistic([], "mean")
    with pytest.raises(ValueError, match=r"got shape \(2, 2, 2\)"):
        ci_of_statistic(np.ones((2, 2, 2)), "mean")
    with pytest.raises(ValueError, match=r"unknown statistic 'nope'; known: \['bits', "):
        ci_of_statistic([1.0, 2.0], "nope")


def test_ci_ppl_passes_its_seed():
    nll, n = np.arange(1.0, 21.0), np.full(20, 4.0)
    units = np.column_stack([nll, n])
    assert ci_ppl(nll, n) == ci_ppl(nll, n, seed=0) == ci_of_statistic(units, "ppl", seed=0)
    assert ci_ppl(nll, n, n_boot=100, level=0.9, seed=3) == ci_of_statistic(
        units, "ppl", n_boot=100, level=0.9, seed=3
    )


def test_units_become_float64():
    # Unsigned counts would wrap around in a difference statistic; booleans cannot subtract.
    units = np.array([[1, 3], [2, 5], [0, 4]], dtype=np.uint8)

    def stat(r):
        return (r[..., 0] - r[..., 1]).mean(axis=-1)

    ci = ci_of_statistic(units, stat, n_boot=50)
    assert ci.estimate == pytest.approx(-3.0) and ci.high < 0
    flags = np.array([[True, False], [False, False], [True, True]])
    assert ci_of_statistic(flags, stat, n_boot=50).estimate == pytest.approx(1 / 3)


class TestVerdictStatistics:
    def test_p_value_counts_tails_with_the_plus_one_floor(self):
        from swapprune.stats.bootstrap import bootstrap_p_value

        assert bootstrap_p_value(np.zeros(999)) == 1.0
        assert bootstrap_p_value(np.arange(1, 1000)) == pytest.approx(2 / 1000)
        assert bootstrap_p_value(-np.arange(1, 1000)) == pytest.approx(2 / 1000)
        assert bootstrap_p_value([-1.0, 1.0, 2.0, 3.0]) == pytest.approx(2 * 2 / 5)
        assert bootstrap_p_value([0.0, 3, 4, 5, 6, 7, 8, 9, 10]) == pytest.approx(2 * 2 / 10)
        assert bootstrap_p_value([-2.0, -1.0, 0.0, 3.0]) == 1.0  # 2 * 3 / 5 capped
        assert np.isnan(bootstrap_p_value([np.nan]))

    def test_holm_step_down(self):
        from swapprune.stats.bootstrap import holm

        assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
        assert holm([0.6, 0.7]) == [1.0, 1.0]
        out = holm([np.nan, 0.01, 0.02])
        assert np.isnan(out[0]) and out[1:] == pytest.approx([0.02, 0.02])
        assert holm([]) == []

    def test_minimum_detectable_difference(self):
        from swapprune.stats.bootstrap import minimum_detectable_difference

        assert minimum_detectable_difference(1.0) == pytest.approx(1.959964 + 0.841621, abs=1e-5)
        assert minimum_detectable_difference(2.0, level=0.9, power=0.5) == pytest.approx(
            2 * 1.644854, abs=1e-5
        )

    def test_overlap(self):
        from swapprune.stats.bootstrap import Interval, intervals_overlap

        a = Interval(1.0, 0.5, 1.5)
        assert intervals_overlap(a, Interval(2.0, 1.5, 2.5))  # touching counts
        assert intervals_overlap(Interval(2.0, 1.5, 2.5), a)
        assert not intervals_overlap(a, Interval(2.0, 1.6, 2.5))
        assert not intervals_overlap(Interval(2.0, 1.6, 2.5), a)

    def test_cost_ratio_of_exact_factors(self):
        from swapprune.stats.bootstrap import paired_cost_ratio

        rng = np.random.default_rng(3)
        tokens = np.full(30, 50.0)
        nll = 50 * np.log(20.0) + rng.normal(0, 4, 30)
        units = [np.column_stack([nll + 50 * np.log(f), tokens]) for f in (1.0, 1.1, 1.4)]
        r = paired_cost_ratio(*units, "ppl")
        assert r.estimate == pytest.approx(0.1 / 0.4)
        assert r.low == pytest.approx(0.25) and r.high == pytest.approx(0.25)

    def test_cost_ratio_noisy_and_shapes(self):
        from swapprune.stats.bootstrap import paired_cost_ratio

        rng = np.random.default_rng(4)
        base = rng.normal(10, 1, 40)
        a, b = base + 1 + rng.normal(0, 0.3, 40), base + 3 + rng.normal(0, 0.3, 40)
        r = paired_cost_ratio(base, a, b, "mean")
        est = (a.mean() / base.mean() - 1) / (b.mean() / base.mean() - 1)
        assert r.estimate == pytest.approx(est)
        assert r.low < est < r.high and r.high - r.low < 0.3
        with pytest.raises(ValueError, match="differ in shape"):
            paired_cost_ratio(base, a[:-1], b, "mean")
        zero = paired_cost_ratio(np.zeros(40), a, b, "mean")  # no base: no relative cost
        assert np.isnan(zero.estimate)

    def test_paired_difference_reports_p_and_se(self):
        x = np.random.default_rng(5).normal(0, 1, 25)
        same = paired_difference(x, x, "mean")
        assert same.p_value == 1.0 and same.se == 0.0
        shifted = paired_difference(x, x + 0.5, "mean")
        assert shifted.p_value == pytest.approx(2 / 1001) and shifted.se == pytest.approx(0.0)
        noisy = paired_difference(x, x + np.random.default_rng(6).normal(0.1, 1, 25), "mean")
        assert 0.0 < noisy.se < 1.0 and 0 < noisy.p_value <= 1

    def test_cost_ratio_without_any_finite_resample(self):
        """b equal to the base: cost(b) is 0 on every resample, so no ratio exists; no warning."""
        from swapprune.stats.bootstrap import paired_cost_ratio

        base = np.random.default_rng(7).normal(10, 1, 30)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # division by a zero cost must stay silent
            r = paired_cost_ratio(base, base + 1, base, "mean")
        assert np.isnan(r.estimate) and np.isnan(r.low) and np.isnan(r.high)
        assert (r.level, r.n_boot) == (0.95, 1000)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # 0 / 0: both costs are 0 on every resample
            r = paired_cost_ratio(base, base, base, "mean", n_boot=300, level=0.9)
        assert np.isnan(r.estimate) and np.isnan(r.low) and (r.level, r.n_boot) == (0.9, 300)
        noisy = paired_cost_ratio(base, base + 1, base + 2, "mean", n_boot=300)
        assert noisy.n_boot == 300 and noisy.estimate == pytest.approx(0.5)

    def test_single_resample_has_no_standard_error(self):
        x = np.arange(10.0)
        one = paired_difference(x, x + 1, "mean", n_boot=1)
        assert np.isnan(one.se) and one.p_value == pytest.approx(1.0)
        two = paired_difference(x, x + np.arange(10) % 3, "mean", n_boot=2)
        assert np.isfinite(two.se)


def test_paired_difference_standard_error_is_the_replicates_sd():
    from swapprune.stats.bootstrap import resample_indices

    x = np.arange(12.0)
    y = x + (np.arange(12) % 4)
    d = paired_difference(x, y, "mean", n_boot=5, seed=2)
    idx = resample_indices(12, 5, 2)
    reps = y[idx].mean(axis=1) - x[idx].mean(axis=1)
    assert d.se == pytest.approx(float(np.std(reps, ddof=1)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one resample: no spread, and no warning computing it
        assert np.isnan(paired_difference(x, y, "mean", n_boot=1).se)
