"""results.json of a comparison: costs with the sign of harm, four-outcome verdicts, both families.

Results are built by hand so the answer is known: per-window NLLs raised by a
constant per token multiply perplexity by an exact factor, so "interchange"
costs exactly +5%, "bi" +10% and "replacement" +30% on every resample, and
every difference of costs is exact in dPPL points.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from swapprune.engine.scores import ScoreResult
from swapprune.evaluation.results import EvalResult, Metric, TaskResult
from swapprune.plan import PrunePlan
from swapprune.stats.clustered import percentile_interval, window_weights
from swapprune.studies.compare_report import SCHEMA, build_results

PPL, ACC, EXT = "swapprune_wikitext2_ppl", "acc_task", "swapprune_wikitext2_ext"
N, TOK = 20, 100
RNG = np.random.default_rng(0)
BASE_NLL = TOK * math.log(10.0) + RNG.normal(0, 5, N)  # perplexity about 10
BASE_ACC = (RNG.random(40) < 0.6).astype(float)
EXACT_P = 2 / 1001  # every resample on one side: the (k + 1) / (B + 1) floor


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


def _cell(removed, factor, flipped=0, **extra):
    return {
        "plan": PrunePlan.from_removal(6, removed),
        "result": _run(factor, flipped),
        "select_s": 0.1,
        "eval_s": 0.2,
        **extra,
    }


JOB = SimpleNamespace(
    limit=None,
    words=5000,
    max_length=512,
    strategy=None,
    calib=SimpleNamespace(calib=None, prompts=64, tokens=128, positions="all", seed=0),
    eval=SimpleNamespace(bootstrap=1000, per_article=1),
    compare=SimpleNamespace(margin=2.0, margin_unit="points"),
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


def _gen(agreement: float) -> dict:
    """A cell's generative record as generative_cost(...).to_dict() writes it."""
    return {
        "measure": "greedy choices given the base model's greedy continuation (teacher-forced)",
        "prompts": {"source": "LAMBADA", "n": 32, "tokens": 48},
        "new_tokens": 32,
        "agreement": {"mean": agreement, "ci": [agreement - 0.05, agreement + 0.05]},
        "first_divergence": {"mean": 3.5, "ci": [1.0, 6.0]},
        "unchanged_prompts": 1,
        "per_prompt": {"agreement": [agreement] * 32, "first_divergence": [3] * 32},
        "seconds": 9.0,
    }


@pytest.fixture(scope="module")
def results():
    cells = {
        2: {
            "replacement": _cell([2, 4], 1.30, flipped=10, generative=_gen(0.6)),
            "interchange": _cell([1, 3], 1.05, flipped=2, generative=_gen(0.8)),
            "sleb": _cell([1, 3], 1.05, flipped=2),  # same layers as interchange
            "bi": _cell([1, 4], 1.10, flipped=3),
            "random:0": _cell([0, 5], 2.0),
            "random:1": _cell([1, 5], 3.0),
        },
        # equal perplexity on every unit, different sets: equivalent within the margin
        1: {"interchange": _cell([3], 1.02), "replacement": _cell([4], 1.02)},
    }
    return build_results(JOB, "/models/m", 6, _run(1.0), cells, _scores(0.5, 0.02), [PPL, ACC])


def _table(results, task=PPL):
    return next(t for t in results["verdicts"] if t["task"] == task)


def _row(results, budget, a, b, task=PPL):
    return next(
        r for r in _table(results, task)["rows"] if (r["budget"], r["a"], r["b"]) == (budget, a, b)
    )


def test_costs_have_the_sign_of_harm(results):
    assert results["schema"] == SCHEMA == "swapprune.compare/2"
    assert results["model"] == "/models/m"
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
    assert "comparisons" not in results["budgets"][1]  # the verdicts have their own tables


def test_the_cheaper_method_is_better_in_dppl_points(results):
    table = _table(results)
    assert [t["task"] for t in results["verdicts"]] == [PPL]  # no extended task evaluated
    rows = [r for r in table["rows"] if r["budget"] == 2]
    assert not any(lab.startswith("random:") for r in rows for lab in (r["a"], r["b"]))
    assert len(rows) == 6  # every two of replacement, interchange, sleb, bi
    c = _row(results, 2, "replacement", "interchange")
    assert c["outcome"] == "b_better" and c["label"] == "interchange better"
    # B - A in dPPL points, exactly 5 - 30 on every resample
    assert c["estimate"] == pytest.approx(-25.0) and c["ci"] == pytest.approx([-25.0, -25.0])
    assert c["cost_a"] == pytest.approx(30.0) and c["cost_b"] == pytest.approx(5.0)
    assert c["cost_ratio"]["estimate"] == pytest.approx(6.0)
    assert c["cost_ratio"]["ci"] == pytest.approx([6.0, 6.0])
    assert c["a_value"] == pytest.approx(results["budgets"][1]["methods"]["replacement"]["metrics"][PPL]["word_perplexity"]["value"])  # fmt: skip
    assert c["margin"] == {"value": 2.0, "unit": "points"} and c["resampled"] == "windows"
    assert c["n_units"] == N and c["n_clusters"] is None
    assert c["scope"] == f"{PPL}/word_perplexity"
    assert _row(results, 2, "replacement", "sleb")["label"] == "sleb better"
    assert _row(results, 2, "interchange", "bi")["label"] == "interchange better"


def test_identical_sets_are_identical_and_never_enter_a_family(results):
    same = _row(results, 2, "interchange", "sleb")
    assert same["outcome"] == same["label"] == "identical"
    assert same["a_key"] == same["b_key"] == "kept:0,2,4,5"
    for key in ("p_value", "p_tost", "p_holm", "estimate_ci", "overlap", "cost_ratio"):
        assert same.get(key) is None, key
    assert same["primary"] is None and same["outcome_holm"] is None
    # 4 distinct pairs: n=1 I-R; n=2 R-I (= R-sleb), R-bi, I-bi (= sleb-bi); I-sleb is none
    assert _table(results)["families"] == {"all distinct pairs": 4, "primary": 2}
    assert same["family_size"] == 4


def test_equal_costs_are_equivalent_within_the_margin_not_a_bare_tie(results):
    (c,) = [r for r in _table(results)["rows"] if r["budget"] == 1]
    assert (c["a"], c["b"]) == ("interchange", "replacement")
    assert c["outcome"] == "equivalent" and c["label"] == "tie (equivalent within +-2 pts)"
    assert c["estimate"] == 0.0 and c["ci"] == [0.0, 0.0] and c["ci_tost"] == [0.0, 0.0]
    assert c["p_value"] == 1.0 and c["p_tost"] == pytest.approx(1 / 1001)
    assert c["within_margin"] is True and c["equivalence_bound"] == 0.0
    assert c["cost_ratio"]["estimate"] == pytest.approx(1.0)
    assert c["overlap_label"] == "CIs overlap (paper's test: tie)"


def test_holm_over_distinct_pairs_and_the_primary_family(results):
    c = _row(results, 2, "replacement", "interchange")
    assert c["p_value"] == pytest.approx(EXACT_P)
    # all distinct pairs: p = (1, 2/1001, 2/1001, 2/1001); Holm's first step is 4 x 2/1001
    assert c["family"] == "all distinct pairs" and c["family_size"] == 4
    assert c["p_holm"] == pytest.approx(4 * EXACT_P) and c["label_holm"] == "interchange better"
    # the same pair reached by another label is the same test, adjusted once
    twin = _row(results, 2, "replacement", "sleb")
    assert (twin["p_value"], twin["p_holm"]) == (c["p_value"], c["p_holm"])
    assert twin["primary"] is None  # sleb is no primary contrast
    # primary: interchange vs replacement at n=1 and n=2, a family of 2
    prim = c["primary"]
    assert prim["family"] == "primary" and prim["family_size"] == 2
    assert (
        prim["p_holm"] == pytest.approx(2 * EXACT_P) and prim["label_holm"] == "interchange better"
    )
    assert _table(results)["primary_contrasts"] == {
        "1": [["interchange", "replacement"]],
        "2": [["interchange", "replacement"]],
    }
    tie = _row(results, 1, "interchange", "replacement")
    assert tie["p_holm"] == 1.0 and tie["p_tost_holm"] == pytest.approx(4 / 1001)
    assert tie["outcome_holm"] == "equivalent" and tie["primary"]["p_tost_holm"] == pytest.approx(
        2 / 1001
    )
    assert tie["primary"]["label_holm"] == "tie (equivalent within +-2 pts)"


def test_mdd_and_the_paper_s_overlap_test_beside_the_verdict(results):
    c = _row(results, 2, "replacement", "interchange")
    # exact factors: the difference in points does not vary over resamples, nor does its MDD
    assert c["se"] == pytest.approx(0.0, abs=1e-9)
    assert c["mdd"] == pytest.approx(2.801585 * c["se"], rel=1e-5, abs=1e-12)
    assert c["mdd_holm"] >= c["mdd"]
    # the paper's test reads the two marginal window-bootstrap CIs of each cut
    w = window_weights(N, 1000, 0)
    ppl = {f: np.exp((w @ (BASE_NLL + TOK * math.log(f))) / (w.sum(1) * TOK)) for f in (1.3, 1.05)}
    ia, ib = (percentile_interval(0.0, ppl[f]) for f in (1.3, 1.05))
    assert c["overlap"] is (ia.low <= ib.high and ib.low <= ia.high) is False
    assert c["overlap_label"] == "interchange better (paper's test: CIs apart)"


def _noisy_cell(removed, factor, sigma, seed):
    cell = _cell(removed, factor)
    task = cell["result"].tasks[PPL]
    noise = np.random.default_rng(seed).normal(0, sigma, N)
    task.units["nll"] = (np.asarray(task.units["nll"]) + noise).tolist()
    return cell


def test_overlap_tie_where_the_paired_test_decides_and_mdd():
    """Marginal CIs overlap (the paper's tie) while the paired test separates the methods."""
    cells = {
        3: {
            "interchange": _noisy_cell([1, 2, 3], 1.10, 2.0, 1),
            "replacement": _noisy_cell([2, 3, 4], 1.12, 2.0, 2),
        }
    }
    res = build_results(JOB, "m", 6, _run(1.0), cells, None, [PPL])
    (c,) = res["verdicts"][0]["rows"]
    assert c["label"] == "interchange better" and c["p_value"] < 0.05
    assert c["estimate"] == pytest.approx(2.0, abs=0.7)  # about 12 - 10 points
    assert c["overlap"] is True and c["overlap_label"] == "CIs overlap (paper's test: tie)"
    lo, hi = c["ci"]
    se_from_ci = (hi - lo) / (2 * 1.959964)
    assert c["mdd"] == pytest.approx(2.801585 * se_from_ci, rel=0.2)
    assert c["mdd"] == pytest.approx(2.801585 * c["se"], rel=1e-5)
    assert c["ci_tost"][0] > lo and c["ci_tost"][1] < hi  # the 90% CI sits inside the 95%
    rlo, rhi = c["cost_ratio"]["ci"]
    assert rlo < c["cost_ratio"]["estimate"] < rhi < 1.0  # interchange's cost below replacement's


def test_contract_states_the_outcomes_margin_and_family_sizes(results):
    c = results["contract"]
    assert c["stride"] == 256 and c["words"] == 5000 and c["per_article"] == 1
    assert c["calibration"] == {
        "source": "wikitext2-valid",
        "prompts": 64,
        "tokens": 128,
        "positions": "all",
        "seed": 0,
    }
    assert (
        c["margin"] == {"value": 2.0, "unit": "points", "label": "+-2 pts"} and c["alpha"] == 0.05
    )
    for words in ("'A better' / 'B better'", "'tie (equivalent within +-2 pts)'", "TOST",
                  "'inconclusive (MDD x)'", "'identical' and not tested"):  # fmt: skip
        assert words in c["test"], words
    assert c["families"] == {PPL: {"all distinct pairs": 4, "primary": 2}}
    assert "distinct model pairs" in c["multiplicity"] and "primary" in c["multiplicity"]
    assert c["overlap"].startswith("the paper's test")
    assert results["regime"]["call"] == "divergent"
    assert results["tasks"] == [PPL, ACC] and results["num_layers"] == 6


def test_a_higher_is_better_primary():
    cells = {1: {"a": _cell([2], 1.0, flipped=1), "b": _cell([3], 1.0, flipped=12)}}
    res = build_results(JOB, "m", 6, _run(1.0), cells, None, [ACC])
    assert res["primary"] == {"task": ACC, "metric": "acc"}
    methods = res["budgets"][0]["methods"]
    assert methods["a"]["cost_pct"] == pytest.approx(-100 / BASE_ACC.sum())
    assert methods["b"]["cost_pct"] == pytest.approx(-1200 / BASE_ACC.sum())
    table = res["verdicts"][0]
    assert (table["task"], table["metric"]) == (ACC, "acc")
    (c,) = table["rows"]
    assert c["label"] == "a better" and c["higher_is_better"] is True
    # points of the base accuracy: 100 * (acc_b - acc_a) / acc_base
    assert c["estimate"] == pytest.approx(100 * (-11 / 40) / BASE_ACC.mean())
    assert res["regime"] is None


def test_plots_are_written(results, tmp_path):
    pytest.importorskip("matplotlib")
    from swapprune.studies.compare_plots import write_plots

    written = write_plots(results, _scores(0.5, 0.02), tmp_path)
    assert written[0].name == "cost_vs_budget.png" and len(written) >= 2  # + the score plots
    assert all(p.suffix == ".png" and p.stat().st_size > 1000 for p in written)


def test_paired_bootstrap_edge_cases():
    """The paired comparison under the costs: seeded, sized, and safe on a zero baseline."""
    from swapprune.stats.bootstrap import paired_difference

    a, b = np.arange(1.0, 11.0), np.arange(1.0, 11.0) * 2
    one, two = (
        paired_difference(a, b, "mean", n_boot=200),
        paired_difference(a, b, "mean", n_boot=200),
    )
    assert one == two and one.n_units == 10  # the same seed gives the same intervals
    assert one.ratio.estimate == pytest.approx(2.0)
    assert one.difference.estimate == pytest.approx(5.5)
    unit = paired_difference(np.ones(4), np.full(4, 3.0), "mean", n_boot=50)
    assert unit.ratio.estimate == pytest.approx(3.0)  # a baseline of exactly 1 is not special
    zero = paired_difference(np.zeros(4), np.ones(4), "mean", n_boot=50)
    assert math.isnan(zero.ratio.estimate) and zero.difference.estimate == 1.0
    with pytest.raises(ValueError, match=r"paired units differ in shape: \(3, 1\) vs \(4, 1\)"):
        paired_difference(np.ones(3), np.ones(4), "mean")


# -- every field and every branch, on results whose answers are known by construction --------


def _units_run(task: str, acc, extra=None) -> EvalResult:
    """A 0/1 accuracy task (its marginal CI comes from the same bootstrap as the verdicts)."""
    acc = np.asarray(acc, dtype=float)
    metrics = {"acc": Metric(float(acc.mean()), 0.0, 1.0, True, ["acc"], "mean")}
    units = {"acc": acc.tolist()}
    for name, col in (extra or {}).items():
        col = np.asarray(col, dtype=float)
        metrics[name] = Metric(float(col.mean()), 0.0, 1.0, True, [name], "mean")
        units[name] = col.tolist()
    task_result = TaskResult(task, "example", list(range(len(acc))), units, metrics)
    return EvalResult(tasks={task: task_result})


def _ones(k: int, n: int = 20) -> list[float]:
    return [1.0] * k + [0.0] * (n - k)


def _plain_cell(removed, result, select_s=0.1, eval_s=0.2, **extra):
    return {
        "plan": PrunePlan.from_removal(6, removed),
        "result": result,
        "select_s": select_s,
        "eval_s": eval_s,
        **extra,
    }


def test_contract_document_in_full():
    job = SimpleNamespace(
        limit=8,
        words=2000,
        max_length=1024,
        strategy="iterative",
        calib=SimpleNamespace(calib="c4", prompts=32, tokens=64, positions="last", seed=3),
        eval=SimpleNamespace(bootstrap=250, per_article=2),
        compare=SimpleNamespace(margin=0.5, margin_unit="metric"),
    )
    cells = {1: {"a": _cell([2], 1.1, flipped=1)}}
    res = build_results(job, "org/tiny", 6, _run(1.0), cells, None, [PPL, ACC])
    assert set(res) == {
        "schema",
        "model",
        "num_layers",
        "tasks",
        "primary",
        "contract",
        "regime",
        "baseline",
        "budgets",
        "verdicts",
    }
    assert res["num_layers"] == 6 and res["tasks"] == [PPL, ACC] and res["regime"] is None
    c = res["contract"]
    assert set(c) == {"limit", "words", "max_length", "stride", "per_article", "ci", "test",
                      "margin", "alpha", "multiplicity", "families", "overlap", "cost",
                      "generative", "calibration", "strategy"}  # fmt: skip
    assert (c["limit"], c["words"], c["max_length"], c["stride"]) == (8, 2000, 1024, 512)
    assert type(c["stride"]) is int  # a token count, not 512.0
    assert c["per_article"] == 2 and c["strategy"] == "iterative"
    assert c["ci"].startswith("95% percentile bootstrap, 250 resamples over the task's units")
    assert "over articles for swapprune_wikitext2_ext" in c["ci"]
    assert c["margin"] == {"value": 0.5, "unit": "metric", "label": "+-0.5"}
    assert "on the margin's scale (metric)" in c["test"] and "|d| >= 0.5" in c["test"]
    assert c["families"] == {PPL: {"all distinct pairs": 0, "primary": 0}}
    assert c["cost"] == "relative change of the metric vs the unpruned model (dPPL% for perplexity)"
    assert c["generative"].startswith("greedy choices given the base model's greedy continuation")
    assert c["calibration"] == {
        "source": "c4",
        "prompts": 32,
        "tokens": 64,
        "positions": "last",
        "seed": 3,
    }


def test_method_entry_and_baseline_rows():
    cells = {
        1: {
            "a": _plain_cell(
                [2],
                _run(1.1, flipped=1),
                select_s=1.5,
                eval_s=7.25,
                generative=_gen(0.7),
                entry="bi@greedy",
            ),  # fmt: skip
            "b": _plain_cell([3], _run(1.2, flipped=2)),
        }
    }
    res = build_results(JOB, "m", 6, _run(1.0), cells, None, [PPL, ACC])
    entry = res["budgets"][0]
    assert "random_mean_cost_pct" not in entry  # no random seeds at this budget
    a = entry["methods"]["a"]
    assert set(a) == {
        "removed",
        "kept",
        "merged",
        "op",
        "merge",
        "criterion",
        "strategy",
        "metrics",
        "cost_pct",
        "cost_pct_ci",
        "generative",
        "select_s",
        "eval_s",
    }
    assert a["select_s"] == 1.5 and a["eval_s"] == 7.25
    assert a["removed"] == [2] and a["kept"] == [0, 1, 3, 4, 5] and a["merged"] == {}
    assert (a["op"], a["merge"], a["criterion"]) == ("remove", None, "bi")
    assert a["cost_pct"] == pytest.approx(10.0)
    # the generative measure, without its per-prompt values
    assert a["generative"] == {
        "agreement": {"mean": 0.7, "ci": pytest.approx([0.65, 0.75])},
        "first_divergence": {"mean": 3.5, "ci": [1.0, 6.0]},
        "unchanged_prompts": 1,
        "new_tokens": 32,
        "prompts": {"source": "LAMBADA", "n": 32, "tokens": 48},
    }
    assert entry["methods"]["b"]["generative"] is None  # not measured for this cell
    ppl = a["metrics"][PPL]["word_perplexity"]
    v = math.exp(BASE_NLL.sum() / (N * TOK)) * 1.1
    assert ppl["value"] == pytest.approx(v) and ppl["ci"] == pytest.approx([0.9 * v, 1.1 * v])
    assert ppl["n"] == N and ppl["higher_is_better"] is False
    assert ppl["rel_change"] == pytest.approx(0.1)
    assert ppl["rel_change_ci"] == pytest.approx([0.1, 0.1])
    base = res["baseline"][PPL]["word_perplexity"]
    v0 = math.exp(BASE_NLL.sum() / (N * TOK))
    assert base == {
        "value": pytest.approx(v0),
        "ci": pytest.approx([0.9 * v0, 1.1 * v0]),
        "higher_is_better": False,
        "n": N,
    }
    assert res["baseline"][ACC]["acc"] == {
        "value": pytest.approx(BASE_ACC.mean()),
        "ci": [0.0, 1.0],
        "higher_is_better": True,
        "n": 40,
    }


def test_row_of_identical_models_in_full(results):
    same = _row(results, 2, "interchange", "sleb")
    nan_fields = ("ci", "ci_tost")
    assert {k: v for k, v in same.items() if k not in nan_fields} == {
        "budget": 2,
        "a": "interchange",
        "b": "sleb",
        "task": PPL,
        "metric": "word_perplexity",
        "cost_a": pytest.approx(5.0),
        "cost_b": pytest.approx(5.0),
        "cost_ratio": None,
        "a_key": "kept:0,2,4,5",
        "b_key": "kept:0,2,4,5",
        "scope": f"{PPL}/word_perplexity",
        "outcome": "identical",
        "higher_is_better": False,
        "margin": {"value": 2.0, "unit": "points"},
        "alpha": 0.05,
        "estimate": 0.0,
        "p_value": None,
        "p_tost": None,
        "within_margin": False,
        "equivalence_bound": None,
        "se": None,
        "mdd": None,
        "n_units": N,
        "n_clusters": None,
        "resampled": "windows",
        "overlap": None,
        "a_value": None,
        "b_value": None,
        "family": "all distinct pairs",
        "family_size": 4,
        "p_holm": None,
        "p_tost_holm": None,
        "mdd_holm": None,
        "outcome_holm": None,
        "label": "identical",
        "label_holm": None,
        "overlap_label": None,
        "primary": None,
    }
    assert same["ci"] == same["ci_tost"] == [None, None]


def test_a_task_missing_from_the_baseline_is_skipped():
    cells = {1: {"a": _cell([2], 1.1), "b": _cell([4], 1.3)}}
    res = build_results(JOB, "m", 6, _run(1.0), cells, None, ["lambada", PPL])
    assert res["primary"] == {"task": PPL, "metric": "word_perplexity"}
    assert res["tasks"] == ["lambada", PPL] and list(res["baseline"]) == [PPL]
    assert list(res["budgets"][0]["methods"]["a"]["metrics"]) == [PPL]
    assert res["budgets"][0]["methods"]["a"]["cost_pct"] == pytest.approx(10.0)
    (c,) = res["verdicts"][0]["rows"]
    assert c["label"] == "a better" and c["cost_ratio"]["estimate"] == pytest.approx(10.0 / 30.0)


def test_a_method_without_the_primary_task_has_no_cost_and_is_not_tested():
    only_acc = EvalResult(tasks={ACC: _acc_task(3)})
    cells = {
        1: {
            "a": _plain_cell([2], only_acc),
            "b": _plain_cell([4], _run(1.5)),
            "random:0": _plain_cell([0], only_acc),
            "random:1": _plain_cell([1], _run(1.5)),
        }
    }
    res = build_results(JOB, "m", 6, _run(1.0), cells, None, [PPL, ACC])
    entry = res["budgets"][0]
    a = entry["methods"]["a"]
    assert a["cost_pct"] is None and a["cost_pct_ci"] is None
    assert list(a["metrics"]) == [ACC]
    assert a["metrics"][ACC]["acc"]["rel_change"] == pytest.approx(-3 / BASE_ACC.sum())
    assert entry["methods"]["random:1"]["cost_pct"] == pytest.approx(50.0)
    (row,) = res["verdicts"][0]["rows"]  # random seeds are controls, never compared pairwise
    assert row["outcome"] is None and row["label"].startswith("not tested:")
    assert res["verdicts"][0]["families"]["all distinct pairs"] == 0
    assert "random_mean_cost_pct" not in entry  # one seed has no cost: no mean


def test_primary_without_unit_metrics_is_the_first_task_and_metric():
    def grouped(shift: float) -> EvalResult:
        def task(name, value):
            return TaskResult(
                task=name,
                unit="group",
                unit_ids=[],
                units={},
                metrics={
                    "acc": Metric(value + shift, None, None, True),
                    "acc_norm": Metric(value + shift + 0.01, None, None, True),
                },
            )

        return EvalResult(tasks={"mmlu": task("mmlu", 0.5), "arc": task("arc", 0.25)})

    cells = {1: {"a": _plain_cell([2], grouped(-0.1)), "b": _plain_cell([3], grouped(-0.2))}}
    res = build_results(JOB, "m", 6, grouped(0.0), cells, None, ["mmlu", "arc"])
    assert res["primary"] == {"task": "mmlu", "metric": "acc"}
    a = res["budgets"][0]["methods"]["a"]
    assert a["cost_pct"] is None and a["cost_pct_ci"] is None
    assert a["metrics"]["arc"]["acc"] == {
        "value": pytest.approx(0.15),
        "ci": [None, None],
        "higher_is_better": True,
        "n": 0,
    }
    (row,) = res["verdicts"][0]["rows"]
    assert row["label"] == "not tested: mmlu/acc has no per-unit values"


def test_relative_change_of_each_metric_uses_its_own_units():
    bpb = Metric(0.5, None, None, False)  # reported, but not recomputable from units

    def run(factor, acc, acc_norm):
        r = _run(factor)
        ppl = r.tasks[PPL]
        ppl.metrics = {"bits_per_byte": bpb, **ppl.metrics}
        r.tasks[ACC] = _units_run(ACC, acc, extra={"acc_norm": acc_norm}).tasks[ACC]
        return r

    base = run(1.0, _ones(10), _ones(16))
    cells = {
        1: {
            "a": _plain_cell([2], run(1.1, _ones(8), _ones(8))),
            "b": _plain_cell([4], run(1.3, _ones(5), _ones(12))),
        }
    }
    res = build_results(JOB, "m", 6, base, cells, None, [PPL, ACC])
    assert res["primary"] == {"task": PPL, "metric": "word_perplexity"}
    assert res["baseline"][PPL]["bits_per_byte"] == {
        "value": 0.5,
        "ci": [None, None],
        "higher_is_better": False,
        "n": N,
    }
    rows = res["budgets"][0]["methods"]["a"]["metrics"]
    assert "rel_change" not in rows[PPL]["bits_per_byte"]
    assert rows[PPL]["word_perplexity"]["rel_change"] == pytest.approx(0.1)
    assert rows[ACC]["acc"]["rel_change"] == pytest.approx(8 / 10 - 1)
    assert rows[ACC]["acc_norm"]["rel_change"] == pytest.approx(8 / 16 - 1)
    (c,) = res["verdicts"][0]["rows"]
    assert c["metric"] == "word_perplexity" and c["label"] == "a better"
    assert c["cost_ratio"]["ci"] == pytest.approx([10.0 / 30.0, 10.0 / 30.0])


def test_merges_and_patches_keep_the_same_blocks_but_are_other_models():
    def merge(rule, factor):
        plan = PrunePlan.from_merges(6, {2: [3]}, merge=rule)
        return {"plan": plan, "result": _run(factor), "select_s": 0.1, "eval_s": 0.2}

    patch = {"kind": "linear", "file": "patch.safetensors", "spans": [[3, 4]], "sha256": "ab"}
    patched = _cell([3], 1.15)
    patched["plan"] = PrunePlan.from_removal(6, [3], patch=patch)
    cells = {
        1: {
            "interchange@merge:average": merge("average", 1.1),
            "interchange@merge:laco": merge("laco", 1.1),  # same groups and units, another rule
            "drop": _cell([3], 1.2),
            "drop+linear": patched,
        }
    }
    res = build_results(JOB, "m", 6, _run(1.0), cells, None, [PPL])
    m = res["budgets"][0]["methods"]["interchange@merge:laco"]
    assert m["merged"] == {"2": [2, 3]} and m["removed"] == [3]
    assert (m["op"], m["merge"]) == ("merge", "laco")
    assert m["kept"] == res["budgets"][0]["methods"]["drop"]["kept"] == [0, 1, 2, 4, 5]
    rows = {(r["a"], r["b"]): r for r in res["verdicts"][0]["rows"]}
    rules = rows["interchange@merge:average", "interchange@merge:laco"]
    assert rules["outcome"] == "equivalent"  # tested: a rule makes another model
    assert rules["a_key"].endswith("|rule:average") and rules["b_key"].endswith("|rule:laco")
    assert rows["interchange@merge:average", "drop"]["label"] == "interchange@merge:average better"
    plain = rows["drop", "drop+linear"]
    assert plain["outcome"] == "b_better" and plain["b_key"] == "kept:0,1,2,4,5|patch:ab"


def test_ratio_of_costs_without_a_cost_to_divide_by():
    cells = {
        1: {"free": _cell([1], 1.0), "costly": _cell([2], 1.3)},
        2: {"costly": _cell([2, 4], 1.3), "free": _cell([1, 3], 1.0)},
    }
    res = build_results(JOB, "m", 6, _run(1.0), cells, None, [PPL])
    one, two = res["budgets"]
    assert one["methods"]["free"]["cost_pct"] == 0.0  # the unpruned model's own units
    rows = res["verdicts"][0]["rows"]
    c = rows[0]  # cost(free) / cost(costly) = 0 / 30
    assert c["cost_ratio"] == {"estimate": 0.0, "ci": [0.0, 0.0]}
    assert (
        c["label"] == "free better"
        and c["overlap_label"] == "free better (paper's test: CIs apart)"
    )
    c = rows[1]  # cost(costly) / cost(free) = 30 / 0: no ratio
    assert c["budget"] == 2 and c["cost_ratio"] is None and c["label"] == "free better"


def test_higher_is_better_verdicts_and_the_overlap_of_their_marginal_cis():
    base = _units_run(ACC, _ones(16))
    cells = {
        1: {
            "p30": _plain_cell([1], _units_run(ACC, _ones(6))),
            "p60": _plain_cell([2], _units_run(ACC, _ones(12))),
            "p45": _plain_cell([3], _units_run(ACC, _ones(9))),
            "p65": _plain_cell([4], _units_run(ACC, _ones(13))),
        }
    }
    res = build_results(JOB, "m", 6, base, cells, None, [ACC])
    rows = {(r["a"], r["b"]): r for r in res["verdicts"][0]["rows"]}
    c = rows["p30", "p60"]  # b - a = +0.3 = 37.5 points of the base's 0.8: b is better
    assert c["estimate"] == pytest.approx(100 * 0.3 / 0.8) and c["label"] == "p60 better"
    assert c["mdd"] > 0 and c["mdd"] == pytest.approx(2.801585 * c["se"], rel=1e-5)
    assert c["cost_ratio"]["estimate"] == pytest.approx((0.3 / 0.8 - 1) / (0.6 / 0.8 - 1))
    c = rows["p60", "p45"]  # b - a = -0.15 on 3 of 20 examples: 4% of resamples draw none
    assert c["estimate"] == pytest.approx(-100 * 0.15 / 0.8) and c["ci"][1] == 0.0
    assert c["outcome"] == "inconclusive" and 0.05 < c["p_value"] < 0.15
    c = rows["p60", "p65"]  # one example apart out of 20: the test cannot tell
    assert c["estimate"] == pytest.approx(100 * 0.05 / 0.8)
    assert c["outcome"] == "inconclusive" and c["label"] == f"inconclusive (MDD {c['mdd']:.3g} pts)"
    assert c["overlap_label"] == "CIs overlap (paper's test: tie)"


def test_a_zero_baseline_has_no_margin_in_points_but_one_in_the_metric_s_units():
    base = _units_run(ACC, _ones(0))
    cells = {
        1: {
            "a": _plain_cell([1], _units_run(ACC, _ones(4))),
            "b": _plain_cell([2], _units_run(ACC, _ones(0))),
        }
    }
    res = build_results(JOB, "m", 6, base, cells, None, [ACC])
    (c,) = res["verdicts"][0]["rows"]
    assert c["outcome"] is None and c["label"].startswith("not tested: a margin in points")
    job = SimpleNamespace(
        **{**vars(JOB), "compare": SimpleNamespace(margin=0.1, margin_unit="metric")}
    )
    (c,) = build_results(job, "m", 6, base, cells, None, [ACC])["verdicts"][0]["rows"]
    assert c["estimate"] == pytest.approx(-0.2) and c["mdd"] > 0 and c["margin"]["unit"] == "metric"


# -- the extended contract: articles are the unit of replication ------------------------------

ARTICLES = 10
PER = 6  # windows per article
# Cut B against cut A, in dPPL points, per article: large between articles, none within.
SHIFT = np.array([6.0, -3.0, 5.0, -2.0, 4.0, 1.0, -1.0, 3.0, 2.0, 0.0])


def _ext_task(cost_pct: np.ndarray) -> TaskResult:
    """Extended-contract units whose per-window perplexity is the base's times (1 + cost)."""
    art = np.repeat(np.arange(ARTICLES), PER)
    noise = np.random.default_rng(5).normal(0, 2.0, art.size)
    nll = TOK * math.log(10.0) + noise + TOK * np.log1p(np.asarray(cost_pct)[art] / 100)
    value = math.exp(nll.sum() / (art.size * TOK))
    return TaskResult(
        task=EXT,
        unit="window",
        unit_ids=list(range(art.size)),
        units={"nll": nll.tolist(), "tokens": [TOK] * art.size, "article": art.tolist()},
        metrics={
            "perplexity": Metric(value, value * 0.9, value * 1.1, False, ["nll", "tokens"], "ppl")
        },
    )


def _both(factor: float, ext_cost: np.ndarray, **extra) -> dict:
    run = EvalResult(tasks={PPL: _ppl_task(factor), EXT: _ext_task(ext_cost)})
    return {"plan": None, "result": run, "select_s": 0.1, "eval_s": 0.2, **extra}


@pytest.fixture(scope="module")
def extended():
    a = _both(1.05, np.full(ARTICLES, 20.0))
    b = _both(1.10, 20.0 + SHIFT)
    a["plan"], b["plan"] = PrunePlan.from_removal(6, [1]), PrunePlan.from_removal(6, [2])
    cells = {1: {"interchange": a, "replacement": b}}
    base = EvalResult(tasks={PPL: _ppl_task(1.0), EXT: _ext_task(np.zeros(ARTICLES))})
    return build_results(JOB, "m", 6, base, cells, None, [PPL, EXT]), base, cells


def test_both_contracts_are_reported_the_extended_one_first(extended):
    res, _, _ = extended
    assert [t["task"] for t in res["verdicts"]] == [EXT, PPL]
    assert res["verdicts"][0]["contract"].startswith("extended (held out")
    assert res["verdicts"][1]["contract"].startswith("matched (the paper's")
    assert set(res["contract"]["families"]) == {EXT, PPL}
    m = res["budgets"][0]["methods"]["replacement"]["metrics"]
    assert set(m) == {PPL, EXT} and m[EXT]["perplexity"]["rel_change"] == pytest.approx(
        (20.0 + SHIFT).mean() / 100, abs=0.01
    )


def test_the_extended_contract_s_verdicts_resample_articles(extended):
    """Windows of one article move together: the window bootstrap is overconfident here."""
    from swapprune.stats.comparison import compare_cuts

    res, base, cells = extended
    (row,) = res["verdicts"][0]["rows"]
    assert row["resampled"] == "articles" and row["n_clusters"] == ARTICLES
    assert row["n_units"] == ARTICLES * PER
    assert row["estimate"] == pytest.approx(SHIFT.mean(), abs=0.3)
    # the same data, windows resampled as if independent: a confident "better"
    units = [c["result"].tasks[EXT].matrix("perplexity") for c in cells[1].values()]
    naive = compare_cuts(
        *units,
        "ppl",
        a_key="kept:a",
        b_key="kept:b",
        higher_is_better=False,
        base_units=base.tasks[EXT].matrix("perplexity"),
    )
    assert naive.outcome == "a_better" and naive.resampled == "windows"
    # resampling the 10 articles: wider, and not enough to call it
    assert row["outcome"] == "inconclusive" and row["label"].startswith("inconclusive (MDD ")
    assert row["se"] > 2 * naive.se and row["ci"][0] < 0 < row["ci"][1]
    # the methods' costs on it are article-clustered too
    lo, hi = res["budgets"][0]["methods"]["replacement"]["metrics"][EXT]["perplexity"][
        "rel_change_ci"
    ]
    assert hi - lo > 0.01


def test_contract_prose_in_full_and_the_defaults_of_a_bare_job(results):
    """The contract's sentences are the report's definitions: pinned word for word."""
    c = results["contract"]
    assert c["ci"] == (
        "95% percentile bootstrap, 1000 resamples over the task's units "
        "(over articles for swapprune_wikitext2_ext)"
    )
    assert c["test"] == (
        "each two cells of a budget: paired bootstrap of d = B - A over the same units "
        "(articles for the extended contract), on the margin's scale (points); the first "
        "outcome that holds: 'A better' / 'B better' when the two-sided p < 0.05 (the 95% "
        "CI of d excludes 0); 'tie (equivalent within +-2 pts)' when both one-sided "
        "tests reject |d| >= 2 (TOST: the 90% CI of d inside the margin); "
        "otherwise 'inconclusive (MDD x)', x the difference the test detects with 80% power. "
        "Cells that are the same model are 'identical' and not tested. Equivalence is never "
        "claimed without a margin."
    )
    assert c["multiplicity"] == (
        "Holm over the distinct model pairs of each verdict table ('all distinct pairs', "
        "all budgets together, identical cells excluded), and separately over the primary "
        "contrasts ('primary': interchange vs replacement, auto vs the best baseline, "
        "at each budget)"
    )
    assert c["overlap"] == (
        "the paper's test: tie when the two marginal 95% CIs overlap; weaker "
        "than the paired test, shown beside the verdicts"
    )
    assert c["generative"] == (
        "greedy choices given the base model's greedy continuation: agreement "
        "and first divergence over 32 LAMBADA prompts x 32 tokens, 95% CIs over prompts"
    )
    assert c["calibration"]["source"] == "wikitext2-valid"  # calib=None: the default text
    assert c["strategy"] == "criterion default (greedy; iterative for sleb)"
    assert results["regime"] == _scores(0.5, 0.02).to_dict()["summary"]["regime"]
    # a job without compare settings or per_article: the default margin, no article count
    bare = SimpleNamespace(**{k: v for k, v in vars(JOB).items() if k != "compare"})
    bare.eval = SimpleNamespace(bootstrap=1000)
    res = build_results(bare, "m", 6, _run(1.0), {1: {"a": _cell([2], 1.1)}}, None, [PPL])
    assert res["contract"]["margin"] == {"value": 2.0, "unit": "points", "label": "+-2 pts"}
    assert res["contract"]["per_article"] is None and res["regime"] is None


def test_verdict_rows_carry_each_cells_cost_in_points(results):
    for row in _table(results)["rows"]:
        methods = next(e for e in results["budgets"] if e["budget"] == row["budget"])["methods"]
        for side in ("a", "b"):
            want = methods[row[side]]["cost_pct"]
            assert row[f"cost_{side}"] == (None if want is None else pytest.approx(want))
