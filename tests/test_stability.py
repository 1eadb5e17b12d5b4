"""Selection stability on score tables whose bootstrap answer is known."""

import math

import numpy as np
import pytest

from swapprune.engine.scores import ScoreResult
from swapprune.errors import SwappruneError
from swapprune.select.constraints import Constraints
from swapprune.select.stability import selection_stability

L, N = 6, 16


def deletion_table(del2: np.ndarray, del4: np.ndarray) -> ScoreResult:
    """Blocks 2 and 4 compete; every other block is far more costly to delete."""
    deletion = {i: np.full(N, 5.0 + i) for i in range(L)}
    deletion[2], deletion[4] = del2, del4
    return ScoreResult(meta={"num_layers": L}, deletion=deletion)


def binom_cdf(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k + 1))


def test_known_frequency_from_paired_windows():
    # del2 - del4 is +1 on 7 windows and -1.1 on 9: on all windows block 2 is
    # cheaper (mean -0.18). A resample picks block 2 iff 2.1 K < 17.6, K the number
    # of "+1" windows drawn, K ~ Binomial(16, 7/16): P = P(K <= 8). Only a paired
    # resampling (same windows for both blocks) gives this answer.
    base = np.linspace(0.5, 2.0, N)  # shared window difficulty, cancels in the pair
    d = np.where(np.arange(N) < 7, 1.0, -1.1)
    scores = deletion_table(base + d, base)
    st = selection_stability(scores, "deletion", "greedy", 1, n_boot=20000, seed=1)
    expected = binom_cdf(8, N, 7 / 16)
    assert st.chosen == [2]
    assert st.frequency == pytest.approx(expected, abs=0.012)
    assert st.inclusion[2] == pytest.approx(expected, abs=0.012)
    assert st.inclusion[4] == pytest.approx(1 - expected, abs=0.012)
    assert st.inclusion[0] == st.inclusion[1] == st.inclusion[3] == st.inclusion[5] == 0.0
    assert st.alternatives[0]["set"] == [4]
    assert st.is_stable(0.5) and not st.is_stable(0.9)


def test_clearly_separated_selection_is_always_chosen():
    scores = deletion_table(np.full(N, 0.1), np.full(N, 0.2))
    st = selection_stability(scores, "deletion", "greedy", 2, n_boot=200)
    assert st.chosen == [2, 4] and st.frequency == 1.0
    assert st.inclusion == [0, 0, 1, 0, 1, 0]
    assert st.warning() is None and st.alternatives == []
    d = st.to_dict()
    assert d["stable"] and d["bootstrap"]["windows"] == N and d["frequency"] == 1.0


def test_unstable_selection_warns_with_the_fix():
    rng = np.random.default_rng(0)
    noise = rng.standard_normal(N)
    noise -= noise.mean() + 0.01  # block 2 ahead by a hair on all windows
    scores = deletion_table(1.0 + noise, 1.0 - noise)  # a coin flip
    st = selection_stability(scores, "deletion", "greedy", 1, n_boot=500)
    assert 0.2 < st.frequency < 0.8
    st.threshold = 0.9
    w = st.warning()
    assert w.startswith("warning: selection") and "\n" not in w
    assert "--adaptive" in w and "--protocol auto" in w and "--prompts 32" in w
    assert "stability:" in st.summary() and "blocks in play" in st.summary()


def test_interchange_pairs_and_protected_blocks():
    pairs = {
        (i, i + 1): {
            "repl_ij": np.full(N, 1.0),
            "repl_ji": np.full(N, 1.0),
            "inter": np.full(N, 0.5 + i),
        }
        for i in range(L - 1)
    }
    scores = ScoreResult(meta={"num_layers": L}, pairs=pairs)
    st = selection_stability(scores, "interchange", "greedy", 1, n_boot=100)
    assert st.frequency == 1.0 and st.chosen[0] in (0, 1)
    st = selection_stability(
        scores, "interchange", "greedy", 1, Constraints(L, protect_first=2), n_boot=100
    )
    assert st.chosen == [2] and st.inclusion[2] == 1.0


def test_model_measured_selections_are_refused():
    scores = deletion_table(np.ones(N), np.ones(N))
    with pytest.raises(SwappruneError, match="measured on the model"):
        selection_stability(scores, "bi", "greedy", 1)
    with pytest.raises(SwappruneError, match="queries the model"):
        selection_stability(scores, "deletion", "iterative", 1)
    with pytest.raises(SwappruneError, match="threshold"):
        selection_stability(scores, "deletion", "greedy", 1, threshold=1.5)


def test_plan_stability_uses_the_plans_tiebreak():
    from swapprune.plan import PrunePlan
    from swapprune.select.stability import plan_stability

    inter = [1.0, 0.9, 0.1, 0.8, 1.2]  # pair (2, 3): blocks 2 and 3 tie in every resample
    pairs = {
        (i, i + 1): {
            "repl_ij": np.full(N, 1.0),
            "repl_ji": np.full(N, 1.0),
            "inter": np.full(N, inter[i]) * np.linspace(0.9, 1.1, N),
        }
        for i in range(L - 1)
    }
    scores = ScoreResult(meta={"num_layers": L}, pairs=pairs)
    tb = {"rule": "residual", "values": [5.0, 4.0, 3.0, 1.0, 2.0, 6.0]}  # block 3 is weaker
    plan = PrunePlan.from_removal(
        L, [3], budget=1, protocol="interchange", strategy="greedy", scores={"tiebreak": tb}
    )
    st = plan_stability(plan, scores, n_boot=100)
    assert st.chosen == [3] and st.frequency == 1.0
    plan.scores = {}
    assert plan_stability(plan, scores, n_boot=100).chosen == [2]  # lower index without it
    plan.protocol = "bi"
    assert plan_stability(plan, scores) is None
