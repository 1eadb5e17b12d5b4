"""Bootstraps over articles, seeds x articles and blocks."""

import math
import warnings

import numpy as np
import pytest

from swapprune.stats import LEVEL, N_BOOT, SEED
from swapprune.stats.bootstrap import (
    bootstrap_p_value,
    ci_ppl,
    paired_cost_ratio,
    paired_difference,
)
from swapprune.stats.clustered import (
    cluster_weights,
    clustered_ci,
    clustered_ci_ppl,
    cost_ratio,
    paired_replicates,
    percentile_interval,
    two_level_cost_difference,
    window_weights,
)
from swapprune.stats.comparison import compare_cuts
from swapprune.stats.layers import average_ranks, layer_bootstrap_spearman

TOKENS = 256


def _two_articles(windows_per_article: int = 40, seed: int = 0):
    """Windows of two articles whose perplexities differ: the article, not the window, varies.

    Articles of this population have log-perplexity 3.0 on average; these two
    sit at 3.3 and 2.9, and their windows scatter only slightly around them.
    """
    rng = np.random.default_rng(seed)
    effect = np.repeat([0.3, -0.1], windows_per_article)
    log_ppl = 3.0 + effect + rng.normal(0, 0.02, effect.size)
    articles = np.repeat([7, 12], windows_per_article)
    return log_ppl * TOKENS, np.full(effect.size, TOKENS), articles


def test_clustered_ci_resamples_articles_where_the_window_ci_is_overconfident():
    nll, tokens, articles = _two_articles()
    truth = math.exp(3.0)
    window = ci_ppl(nll, tokens)
    clustered = clustered_ci_ppl(nll, tokens, articles)
    assert window.estimate == pytest.approx(clustered.estimate)
    # Windows of one article are near copies: the window bootstrap sees 80
    # independent draws and misses the truth; two articles can only say "between them".
    assert not window.low <= truth <= window.high
    assert clustered.low <= truth <= clustered.high
    assert clustered.high - clustered.low > 3 * (window.high - window.low)
    assert clustered.low == pytest.approx(math.exp(2.9), rel=0.01)
    assert clustered.high == pytest.approx(math.exp(3.3), rel=0.01)


def test_cluster_weights_draw_whole_articles():
    articles = np.array([5, 5, 5, 9, 9, 2])
    w = cluster_weights(articles, n_boot=300, seed=1)
    assert w.shape == (300, 6)
    # Every window of an article carries its article's draw count ...
    assert (w[:, 0] == w[:, 1]).all() and (w[:, 1] == w[:, 2]).all() and (w[:, 3] == w[:, 4]).all()
    # ... and each resample draws 3 articles, whatever their window counts.
    assert (w[:, [0, 3, 5]].sum(axis=1) == 3).all()
    assert (w == 0).any() and (w == 3).any()


def test_window_weights_reproduce_the_window_bootstrap():
    rng = np.random.default_rng(2)
    a = np.column_stack([rng.normal(3, 0.3, 30) * TOKENS, np.full(30, TOKENS)])
    b = a + np.column_stack([rng.normal(5, 20, 30), np.zeros(30)])
    ref = paired_difference(a, b, "ppl", n_boot=400, seed=3)
    points, reps = paired_replicates([a, b], "ppl", None, n_boot=400, seed=3)
    assert points[1] - points[0] == pytest.approx(ref.difference.estimate)
    assert np.percentile(reps[1] - reps[0], 2.5) == pytest.approx(ref.difference.low)
    assert window_weights(30, 400, 3).sum(axis=1).tolist() == [30.0] * 400
    base = a - np.column_stack([np.full(30, 40.0), np.zeros(30)])
    ratio = paired_cost_ratio(base, a, b, "ppl", n_boot=400, seed=3)
    mine = cost_ratio(base, a, b, "ppl", None, n_boot=400, seed=3)
    assert (mine.estimate, mine.low, mine.high) == pytest.approx(
        (ratio.estimate, ratio.low, ratio.high)
    )


def test_two_level_with_one_repeated_selection_is_the_article_bootstrap():
    nll, tokens, articles = _two_articles(10)
    articles = np.repeat(np.arange(10), 2)  # 10 articles of 2 windows each
    base = np.column_stack([nll, tokens])
    a = base * [1.3, 1]
    b = base * [1.32, 1]
    # Five seeds that all selected the same two sets re-test one pair of models.
    one = two_level_cost_difference(base, [a] * 5, [b] * 5, articles, n_boot=500)
    v = compare_cuts(
        a, b, "ppl", a_key="A", b_key="B", higher_is_better=False, base_units=base,
        clusters=articles, n_boot=500,
    )  # fmt: skip
    assert one.estimate == pytest.approx(v.estimate)
    assert (one.interval.low, one.interval.high) == pytest.approx(v.ci)
    assert one.n_seeds == 5 and one.n_clusters == 10
    # Seeds that selected different sets add their own spread.
    b_seeds = [base * [1.3 + s, 1] for s in (0.0, 0.01, 0.02, 0.04, 0.06)]
    many = two_level_cost_difference(base, [a] * 5, b_seeds, articles, n_boot=500)
    assert many.interval.high - many.interval.low > one.interval.high - one.interval.low
    assert len(many.per_seed) == 5 and many.to_dict()["resampled"].startswith("seeds x articles")


def test_layer_bootstrap_spearman():
    cost = np.array([5.0, 0.1, 0.2, 0.3, 0.15, 0.4, 0.6, 0.25, 0.5, 2.0])
    good = cost * 10  # ranks the blocks exactly as their cost does
    noisy = np.array([3.0, 0.1, 0.5, 0.2, 0.3, 0.2, 0.9, 0.1, 0.4, 1.0])
    rng_scores = np.random.default_rng(0).permutation(10).astype(float)
    res = layer_bootstrap_spearman(
        {"good": good, "noisy": noisy, "random": rng_scores}, cost, n_boot=500
    )
    g, r = res.intervals["good"], res.intervals["random"]
    assert g.estimate == pytest.approx(1.0) and g.low == pytest.approx(1.0)
    assert r.low < 0 < r.high  # over 10 blocks a random order is not resolved
    diff, p = res.difference("good", "random")
    assert diff.estimate == pytest.approx(g.estimate - r.estimate) and diff.low > 0 and p < 0.05
    assert res.to_dict()["criteria"]["noisy"]["ci"][0] < res.intervals["noisy"].estimate


def test_average_ranks_share_ties():
    assert average_ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]


# -- seeds, defaults and the records (each pins a behaviour a mutant changed) --------------


def test_clustered_draws_follow_the_seed_and_the_defaults():
    nll, tokens, _ = _two_articles(10)
    articles = np.repeat(np.arange(10), 2)  # two articles give the same interval on any seed
    units = np.column_stack([nll, tokens])
    first = clustered_ci(units, articles, seed=7)
    assert first == clustered_ci(units, articles, seed=7)  # reproducible
    assert first != clustered_ci(units, articles)  # the seed is used
    assert clustered_ci(units, articles) == clustered_ci(
        units, articles, "ppl", N_BOOT, LEVEL, SEED
    )
    assert clustered_ci(units, articles, level=0.8).level == 0.8
    assert clustered_ci_ppl(nll, tokens, articles, seed=7) == first
    assert cluster_weights(articles, 50, 4).tolist() == cluster_weights(articles, 50, 4).tolist()
    assert cluster_weights(articles, 50, 4).tolist() != cluster_weights(articles, 50).tolist()


def _seeds_case(n_boot: int = 400, seed: int = SEED, level: float = LEVEL):
    """Two seeds whose B cuts differ, over 10 articles of 2 windows each."""
    nll, tokens, _ = _two_articles(10)
    articles = np.repeat(np.arange(10), 2)
    base = np.column_stack([nll, tokens])
    a = [base * [1.3, 1]] * 2
    b = [base * [1.32, 1], base * [1.45, 1]]
    return two_level_cost_difference(base, a, b, articles, n_boot=n_boot, level=level, seed=seed)


def test_two_level_record_is_what_its_replicates_say():
    d = _seeds_case(level=0.9)
    assert d.replicates.shape == (400,)
    assert d.p_value == bootstrap_p_value(d.replicates)
    assert d.se == pytest.approx(float(np.std(d.replicates, ddof=1)))
    assert d.interval.level == 0.9
    assert d.interval == percentile_interval(d.estimate, d.replicates, 0.9)
    assert d.estimate == pytest.approx(np.mean(d.per_seed))
    assert d.to_dict() == {
        "estimate": d.estimate,
        "ci": [d.interval.low, d.interval.high],
        "level": 0.9,
        "p_value": d.p_value,
        "se": d.se,
        "per_seed": d.per_seed,
        "n_seeds": 2,
        "n_clusters": 10,
        "resampled": "seeds x articles (crossed, independent draws)",
    }
    again = _seeds_case(level=0.9)
    assert again.replicates.tolist() == d.replicates.tolist()  # reproducible
    assert _seeds_case(seed=3).replicates.tolist() != d.replicates.tolist()


def test_two_level_draws_every_seed():
    """With one article the article draw is fixed: each replicate averages 2 drawn seeds."""
    base = np.column_stack([np.full(4, 3.0 * TOKENS), np.full(4, TOKENS)])
    a = [base * [1.2, 1]] * 2
    b = [base * [1.25, 1], base * [1.4, 1]]
    d = two_level_cost_difference(base, a, b, [0] * 4, n_boot=200)
    d0, d1 = d.per_seed
    values = {round(float(r), 9) for r in d.replicates}
    assert values == {round(d0, 9), round((d0 + d1) / 2, 9), round(d1, 9)}


def test_two_level_bootstrap_standard_error_edges():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one resample: no spread, and no warning computing it
        assert math.isnan(_seeds_case(n_boot=1).se)
    assert math.isfinite(_seeds_case(n_boot=2).se)


@pytest.mark.parametrize(
    "a, b",
    [
        ("bad-n", "bad-n"),  # [S, n+1]
        ("empty", "empty"),  # no seeds
        ("4d", "4d"),
        ("ok", "one-seed"),  # A and B differ in seeds
    ],
)
def test_two_level_refuses_units_that_do_not_pair(a, b):
    base = np.column_stack([np.full(4, 3.0 * TOKENS), np.full(4, TOKENS)])
    shapes = {
        "bad-n": np.ones((2, 5, 2)),
        "empty": np.ones((0, 4, 2)),
        "4d": np.ones((2, 4, 2, 1)),
        "ok": np.stack([base, base]),
        "one-seed": np.stack([base]),
    }
    with pytest.raises(ValueError, match=r"per-seed units must be|do not pair up"):
        two_level_cost_difference(base, shapes[a], shapes[b], [0, 0, 1, 1], n_boot=10)


def test_two_level_takes_one_seed_and_two_dimensional_units():
    base = np.column_stack([np.full(4, 3.0 * TOKENS), np.full(4, TOKENS)])
    one = two_level_cost_difference(base, [base * [1.2, 1]], [base * [1.3, 1]], [0, 0, 1, 1])
    assert one.n_seeds == 1 and one.estimate == pytest.approx(
        100 * (math.exp(3.9) - math.exp(3.6)) / math.exp(3.0)
    )
    # [S, n] units (one value per window) with a callable statistic
    mean = lambda u, w: (w @ u[:, 0]) / w.sum(axis=1)  # noqa: E731
    flat = two_level_cost_difference(
        np.ones(4), [np.full(4, 2.0)], [np.full(4, 3.0)], [0, 0, 1, 1], mean
    )
    assert flat.estimate == pytest.approx(100.0)


def test_clustered_cost_ratio_defaults_degenerate_cases_and_articles():
    nll, tokens, _ = _two_articles(10)
    articles = np.repeat(np.arange(10), 2)
    base = np.column_stack([nll, tokens])
    a, b = base * [1.1, 1], base * [1.3, 1]
    r = cost_ratio(base, a, b, clusters=articles, n_boot=300, level=0.9)
    assert r == cost_ratio(base, a, b, "ppl", articles, 300, 0.9)
    assert r.level == 0.9 and r.low <= r.estimate <= r.high
    # the article bootstrap is used: a window bootstrap of the same units differs
    assert r != cost_ratio(base, a, b, "ppl", None, 300, 0.9)
    ones = np.ones(20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no cost at all, and a zero base: silent nan
        assert math.isnan(cost_ratio(ones, ones * 2, ones, "mean", articles).estimate)
        assert math.isnan(cost_ratio(ones * 0, ones, ones * 2, "mean", articles).estimate)
    # a base whose statistic is exactly 1 is an ordinary base
    assert cost_ratio(ones, ones * 2, ones * 3, "mean", articles).estimate == pytest.approx(0.5)


def test_clustered_mean_replicates_are_per_resample_means():
    x = np.arange(20.0)
    ci = clustered_ci(x, np.repeat(np.arange(10), 2), "mean", n_boot=200)
    assert ci.estimate == pytest.approx(9.5) and 4 < ci.low < 9.5 < ci.high < 15


def test_units_intervals_and_statistics_refuse_or_record_plainly():
    from swapprune.stats.clustered import resample_weights, weighted_statistic

    empty = percentile_interval(1.5, np.array([np.nan, np.inf]), 0.8)
    assert (empty.estimate, empty.level, empty.n_boot) == (1.5, 0.8, 0)
    assert math.isnan(empty.low) and math.isnan(empty.high)
    full = percentile_interval(1.5, np.array([1.0, 2.0, np.nan, 3.0]), 0.8)
    assert (full.level, full.n_boot) == (0.8, 3)
    for bad in (np.zeros((0,)), np.zeros((2, 2, 2))):
        with pytest.raises(ValueError, match=r"units must be a non-empty \[n\] or \[n, k\] array"):
            clustered_ci(bad, [0] * len(bad), "mean")
    one = clustered_ci(np.array([4.0]), [0], "mean", n_boot=20)
    assert one.estimate == 4.0 and one.low == one.high == 4.0
    with pytest.raises(ValueError, match=r"paired units differ in shape: \(3, 1\) vs \(4, 1\)"):
        paired_replicates([np.ones(3), np.ones(4)], "mean")
    with pytest.raises(ValueError, match="3 cluster labels for 4 units"):
        resample_weights(4, [0, 1, 1])
    arts = np.repeat(np.arange(5), 2)
    assert resample_weights(10, arts, 40, 4).tolist() == cluster_weights(arts, 40, 4).tolist()
    assert resample_weights(10, arts, 40, 4).tolist() != resample_weights(10, arts, 40).tolist()
    with pytest.raises(
        ValueError, match=r"unknown statistic 'nope'; known: \['bits', 'exp_neg_mean', 'mean'"
    ):
        weighted_statistic("nope")


def test_block_weights_keep_neighbours_together():
    from swapprune.stats.clustered import block_weights

    w = block_weights(23, 3, n_boot=4000, seed=1)
    assert w.shape == (4000, 23) and (w.sum(axis=1) == 23).all()
    assert np.allclose(block_weights(23, 23, n_boot=5), 1.0)  # one block: every unit once
    # neighbours are drawn together far more often than units far apart
    near = np.corrcoef(w[:, 10], w[:, 11])[0, 1]
    far = np.corrcoef(w[:, 2], w[:, 20])[0, 1]
    assert near > 0.3 and abs(far) < near / 2  # (far ones compete for a fixed total)
    with pytest.raises(ValueError, match="block length"):
        block_weights(5, 6)


def test_two_level_difference_takes_given_weights():
    from swapprune.stats.clustered import block_weights, two_level_cost_difference

    rng = np.random.default_rng(0)
    n = 12
    base = np.stack([rng.uniform(900, 1100, n), np.full(n, 256.0)], axis=1)
    a = np.stack([base] * 3)
    b = a.copy()
    b[..., 0] += 20.0  # B costs more on every window
    w = block_weights(n, 3, n_boot=500, seed=2)
    d = two_level_cost_difference(base, a, b, clusters=list(range(n)), weights=w, n_boot=500)
    assert d.estimate > 0 and d.interval.low > 0 and len(d.replicates) == 500
