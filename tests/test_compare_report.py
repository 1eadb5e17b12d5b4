"""The comparison report names the right winner, with the right cost sign.

Results are built by hand so the answer is known: per-window NLLs raised by a
constant per token multiply perplexity by an exact factor, so "interchange"
costs exactly +5% and "replacement" +30% on every resample.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from swapprune.bootstrap import resample_indices
from swapprune.compare_report import SCHEMA, build_results, write_markdown
from swapprune.engine.scores import ScoreResult
from swapprune.evaluation.results import EvalResult, Metric, TaskResult
from swapprune.plan import PrunePlan

PPL, ACC = "swapprune_wikitext2_ppl", "acc_task"
N, TOK = 20, 100
RNG = np.random.default_rng(0)
BASE_NLL = TOK * math.log(10.0) + RNG.normal(0, 5, N)  # perplexity about 10
BASE_ACC = (RNG.random(40) < 0.6).astype(float)


def _ppl_task(factor: float) -> TaskResult:
    nll = BASE_NLL + TOK * math.log(factor)
    value = math.exp(nll.sum() / (N * TOK))
    return TaskResult(
        task=PPL,
        unit="window",
        unit_ids=list(range(N)),
        units={"nll": nll.tolist(), "tokens": [TOK] * N},
        metrics={
            "word_perplexity": Metric(
                value, value * 0.9, value * 1.1, False, ["nll", "tokens"], "ppl"
            )
        },
    )


def _acc_task(flipped: int) -> TaskResult:
    acc = BASE_ACC.copy()
    ones = np.flatnonzero(acc == 1)[:flipped]
    acc[ones] = 0.0  # the pruned model gets these wrong
    return TaskResult(
        task=ACC,
        unit="example",
        unit_ids=list(range(len(acc))),
        units={"acc": acc.tolist()},
        metrics={"acc": Metric(float(acc.mean()), 0.0, 1.0, True, ["acc"], "mean")},
    )


def _run(factor: float, flipped: int = 0) -> EvalResult:
    return EvalResult(tasks={PPL: _ppl_task(factor), ACC: _acc_task(flipped)})


def _cell(removed, factor, flipped=0):
    return {
        "plan": PrunePlan.from_removal(6, removed),
        "result": _run(factor, flipped),
        "select_s": 0.1,
        "eval_s": 0.2,
    }


JOB = SimpleNamespace(
    limit=None,
    words=5000,
    max_length=512,
    strategy=None,
    calib=SimpleNamespace(calib=None, prompts=64, tokens=128, positions="all", seed=0),
)


def _scores(repl: float, inter: float) -> ScoreResult:
    res = ScoreResult(meta={"num_layers": 6, "positions": "last"}, n_boot=50)
    for i in range(5):
        res.pairs[(i, i + 1)] = {
            "repl_ij": np.full(8, repl),
            "repl_ji": np.full(8, repl / 2),
            "inter": np.full(8, inter),
        }
    return res


@pytest.fixture(scope="module")
def results():
    cells = {
        2: {
            "replacement": _cell([2, 4], 1.30, flipped=10),
            "interchange": _cell([1, 3], 1.05, flipped=2),
            "sleb": _cell([1, 3], 1.05, flipped=2),  # same layers as interchange
            "random:0": _cell([0, 5], 2.0),
            "random:1": _cell([1, 5], 3.0),
        },
        1: {"interchange": _cell([3], 1.02), "replacement": _cell([4], 1.02)},  # a tie
    }
    return build_results(JOB, "/models/m", 6, _run(1.0), cells, _scores(0.5, 0.02), [PPL, ACC])


def _comparison(entry, a, b):
    return next(c for c in entry["comparisons"] if (c["a"], c["b"]) == (a, b))


def test_costs_have_the_sign_of_harm(results):
    assert results["schema"] == SCHEMA and results["model"] == "/models/m"
    assert results["primary"] == {"task": PPL, "metric": "word_perplexity"}
    assert [e["budget"] for e in results["budgets"]] == [1, 2]
    two = results["budgets"][1]["methods"]
    assert two["interchange"]["cost_pct"] == pytest.approx(5.0)
    assert two["replacement"]["cost_pct"] == pytest.approx(30.0)
    lo, hi = two["replacement"]["cost_pct_ci"]
    assert lo == pytest.approx(30.0) and hi == pytest.approx(30.0)
    assert two["interchange"]["removed"] == [1, 3] and two["interchange"]["kept"] == [0, 2, 4, 5]
    # accuracy falls: its relative change is negative
    acc = two["replacement"]["metrics"][ACC]["acc"]
    assert acc["rel_change"] == pytest.approx(-10 / BASE_ACC.sum())
    assert acc["rel_change"] < two["interchange"]["metrics"][ACC]["acc"]["rel_change"] < 0
    assert acc["higher_is_better"] is True
    base = results["baseline"][PPL]["word_perplexity"]
    assert base["value"] == pytest.approx(math.exp(BASE_NLL.sum() / (N * TOK)))
    assert "rel_change" not in base
    assert results["budgets"][1]["random_mean_cost_pct"] == pytest.approx(150.0)


def test_the_cheaper_method_wins(results):
    entry = results["budgets"][1]
    labels = {(c["a"], c["b"]) for c in entry["comparisons"]}
    assert not any(lab.startswith("random:") for pair in labels for lab in pair)
    assert len(entry["comparisons"]) == 3
    c = _comparison(entry, "replacement", "interchange")
    assert c["verdict"] == f"interchange better by {1.30 / 1.05:.3g}x"
    assert c["ratio_of_costs"] == pytest.approx(30.0 / 5.0)
    d = c["difference"]  # interchange - replacement, in perplexity
    assert d["estimate"] < 0 and d["ci"][1] < 0
    assert d["estimate"] == pytest.approx(
        results["baseline"][PPL]["word_perplexity"]["value"] * (1.05 - 1.30)
    )
    same = _comparison(entry, "interchange", "sleb")
    assert same["same_layers"] is True and same["verdict"] == "same layers: identical models"
    assert "difference" not in same
    assert _comparison(entry, "replacement", "sleb")["verdict"].startswith("sleb better by")
    assert _comparison(entry, "replacement", "sleb")["same_layers"] is False


def test_equal_costs_tie(results):
    (c,) = results["budgets"][0]["comparisons"]
    assert c["verdict"] == "tie" and c["ratio_of_costs"] == pytest.approx(1.0)
    assert c["difference"]["ci"][0] <= 0 <= c["difference"]["ci"][1]


def test_contract_and_regime(results):
    contract = results["contract"]
    assert contract["stride"] == 256 and contract["words"] == 5000
    assert contract["calibration"] == {
        "source": "wikitext2-valid",
        "prompts": 64,
        "tokens": 128,
        "positions": "all",
        "seed": 0,
    }
    assert results["regime"]["call"] == "divergent"
    assert results["tasks"] == [PPL, ACC] and results["num_layers"] == 6


def test_winner_on_a_higher_is_better_primary():
    cells = {1: {"a": _cell([2], 1.0, flipped=1), "b": _cell([3], 1.0, flipped=12)}}
    res = build_results(JOB, "m", 6, _run(1.0), cells, None, [ACC])
    assert res["primary"] == {"task": ACC, "metric": "acc"}
    methods = res["budgets"][0]["methods"]
    assert methods["a"]["cost_pct"] == pytest.approx(-100 / BASE_ACC.sum())
    assert methods["b"]["cost_pct"] == pytest.approx(-1200 / BASE_ACC.sum())
    (c,) = res["budgets"][0]["comparisons"]
    acc_a, acc_b = (BASE_ACC.sum() - 1) / 40, (BASE_ACC.sum() - 12) / 40
    assert c["verdict"] == f"a better by {acc_a / acc_b:.3g}x"
    assert c["difference"]["estimate"] == pytest.approx(acc_b - acc_a)
    assert res["regime"] is None


def test_markdown_table(results, tmp_path):
    path = tmp_path / "results.md"
    write_markdown(results, path)
    text = path.read_text()
    assert text.startswith("# Pruning cost by protocol: /models/m (6 blocks)")
    assert "| 2 | interchange | [1, 3] |" in text
    assert "+5.0% [+5.0%, +5.0%] |" in text and "+30.0% [+30.0%, +30.0%] |" in text
    assert "| 2 | random (mean of seeds) | | | +150.0% |" in text
    assert "| 2 | replacement vs interchange | " in text
    assert "B - A (word_perplexity) [95% CI]" in text and "cost ratio" not in text
    assert f"| interchange better by {1.30 / 1.05:.3g}x |" in text
    assert "| 1 | interchange vs replacement | " in text and "| tie |" in text
    assert "Probe regime (adjacent pairs): **divergent**" in text


def test_plots_are_written(results, tmp_path):
    pytest.importorskip("matplotlib")
    from swapprune.compare_plots import write_plots

    written = write_plots(results, _scores(0.5, 0.02), tmp_path)
    assert written[0].name == "cost_vs_budget.png" and len(written) >= 2  # + the score plots
    assert all(p.suffix == ".png" and p.stat().st_size > 1000 for p in written)


def test_paired_bootstrap_edge_cases():
    """The paired comparison under the verdicts: seeded, sized, and safe on a zero baseline."""
    from swapprune.bootstrap import paired_difference, verdict

    a, b = np.arange(1.0, 11.0), np.arange(1.0, 11.0) * 2
    one, two = (
        paired_difference(a, b, "mean", n_boot=200),
        paired_difference(a, b, "mean", n_boot=200),
    )
    assert one == two and one.n_units == 10  # the same seed gives the same intervals
    assert one.ratio.estimate == pytest.approx(2.0) and one.difference.estimate == pytest.approx(
        5.5
    )
    assert verdict(one, higher_is_better=True, names=("x", "y")) == "y better by 2x"
    assert verdict(one, higher_is_better=False, names=("x", "y")) == "x better by 2x"
    unit = paired_difference(np.ones(4), np.full(4, 3.0), "mean", n_boot=50)
    assert unit.ratio.estimate == pytest.approx(3.0)  # a baseline of exactly 1 is not special
    zero = paired_difference(np.zeros(4), np.ones(4), "mean", n_boot=50)
    assert math.isnan(zero.ratio.estimate) and zero.difference.estimate == 1.0
    with pytest.raises(ValueError, match=r"paired units differ in shape: \(3, 1\) vs \(4, 1\)"):
        paired_difference(np.ones(3), np.ones(4), "mean")


def test_every_verdict_of_a_budget(results):
    """Paired p, Holm over the budget's tests, the paper's overlap test and the cost ratio CI."""
    entry = results["budgets"][1]
    exact_p = 2 / 1001  # every resample on one side: the (k + 1) / (B + 1) floor
    c = _comparison(entry, "replacement", "interchange")
    assert c["p_value"] == pytest.approx(exact_p) and c["winner"] == "interchange"
    # two tests in this table (interchange vs sleb is one model): Holm doubles the smaller p
    assert c["p_holm"] == pytest.approx(2 * exact_p)
    assert c["verdict_holm"] == "interchange better"
    # marginal CIs [0.9 v, 1.1 v]: 10.5 -> [9.45, 11.55], 13 -> [11.7, 14.3]: disjoint
    assert c["overlap_verdict"] == "interchange better"
    lo, hi = c["ratio_of_costs_ci"]
    assert lo == pytest.approx(6.0) and hi == pytest.approx(6.0)  # cost(repl) / cost(inter)
    # b - a = ppl_base(resample) * (1.05 - 1.30): its spread is the baseline's, scaled
    idx = resample_indices(N, 1000, 0)
    base_reps = np.exp(BASE_NLL[idx].sum(axis=1) / (N * TOK))
    se = np.std(base_reps * (1.05 - 1.30), ddof=1)
    assert c["mdd"] == pytest.approx(2.801585 * se, rel=1e-5)
    base = results["baseline"][PPL]["word_perplexity"]["value"]
    assert c["mdd_pct"] == pytest.approx(100 * c["mdd"] / base)
    s = _comparison(entry, "replacement", "sleb")
    assert s["p_holm"] == pytest.approx(2 * exact_p) and s["verdict_holm"] == "sleb better"
    same = _comparison(entry, "interchange", "sleb")
    assert "p_value" not in same and "p_holm" not in same
    assert same["overlap_verdict"] == "same layers: identical models"
    (tie,) = results["budgets"][0]["comparisons"]
    assert tie["p_value"] == 1.0 and tie["p_holm"] == 1.0
    assert tie["verdict_holm"] == "tie" and tie["overlap_verdict"] == "tie"


def _noisy_cell(removed, factor, sigma, seed):
    cell = _cell(removed, factor)
    task = cell["result"].tasks[PPL]
    noise = np.random.default_rng(seed).normal(0, sigma, N)
    task.units["nll"] = (np.asarray(task.units["nll"]) + noise).tolist()
    return cell


def test_overlap_tie_where_paired_test_decides_and_mdd():
    """Marginal CIs overlap (the paper's tie) while the paired test separates the methods."""
    cells = {
        3: {
            "interchange": _noisy_cell([1, 2, 3], 1.10, 2.0, 1),
            "replacement": _noisy_cell([2, 3, 4], 1.12, 2.0, 2),
        }
    }
    res = build_results(JOB, "m", 6, _run(1.0), cells, None, [PPL])
    (c,) = res["budgets"][0]["comparisons"]
    assert c["verdict"].startswith("interchange better") and c["p_value"] < 0.05
    assert c["overlap_verdict"] == "tie"  # [0.9 v, 1.1 v] intervals of 11.0 and 11.2 overlap
    lo, hi = c["difference"]["ci"]
    se_from_ci = (hi - lo) / (2 * 1.959964)
    assert c["mdd"] == pytest.approx(2.801585 * se_from_ci, rel=0.2)
    base = res["baseline"][PPL]["word_perplexity"]["value"]
    assert c["mdd_pct"] == pytest.approx(100 * c["mdd"] / base)
    rlo, rhi = c["ratio_of_costs_ci"]
    assert rlo < c["ratio_of_costs"] < rhi < 1.0  # interchange's cost below replacement's


def test_markdown_states_every_test(results, tmp_path):
    path = tmp_path / "results.md"
    write_markdown(results, path)
    text = path.read_text()
    assert "| p (Holm) | paired | Holm | overlap | MDD (pts) | cost A / B [95% CI] |" in text
    row = next(line for line in text.splitlines() if "| 2 | replacement vs interchange |" in line)
    cells = [x.strip() for x in row.split("|")]
    assert cells[4] == f"{2 / 1001:.3g} ({4 / 1001:.3g})"
    mdd = _comparison(results["budgets"][1], "replacement", "interchange")["mdd_pct"]
    assert cells[6:9] == ["interchange better", "interchange better", f"{mdd:.1f}"]
    assert cells[9] == "6 [6, 6]"
