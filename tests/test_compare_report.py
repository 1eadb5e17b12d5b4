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

from swapprune.engine.scores import ScoreResult
from swapprune.evaluation.results import EvalResult, Metric, TaskResult
from swapprune.plan import PrunePlan
from swapprune.stats.bootstrap import resample_indices
from swapprune.studies.compare_report import SCHEMA, build_results, write_markdown

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
    eval=SimpleNamespace(bootstrap=1000),
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
    from swapprune.studies.compare_plots import write_plots

    written = write_plots(results, _scores(0.5, 0.02), tmp_path)
    assert written[0].name == "cost_vs_budget.png" and len(written) >= 2  # + the score plots
    assert all(p.suffix == ".png" and p.stat().st_size > 1000 for p in written)


def test_paired_bootstrap_edge_cases():
    """The paired comparison under the verdicts: seeded, sized, and safe on a zero baseline."""
    from swapprune.stats.bootstrap import paired_difference, verdict

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


# -- every field and every branch, on results whose answers are known by construction --------


def _units_run(task: str, acc, ci=None, extra=None) -> EvalResult:
    """A 0/1 accuracy task; ``ci`` sets the marginal interval the overlap test reads."""
    acc = np.asarray(acc, dtype=float)
    low, high = ci or (0.0, 1.0)
    metrics = {"acc": Metric(float(acc.mean()), low, high, True, ["acc"], "mean")}
    units = {"acc": acc.tolist()}
    for name, col in (extra or {}).items():
        col = np.asarray(col, dtype=float)
        metrics[name] = Metric(float(col.mean()), 0.0, 1.0, True, [name], "mean")
        units[name] = col.tolist()
    task_result = TaskResult(task, "example", list(range(len(acc))), units, metrics)
    return EvalResult(tasks={task: task_result})


def _ones(k: int, n: int = 20) -> list[float]:
    return [1.0] * k + [0.0] * (n - k)


def _plain_cell(removed, result, select_s=0.1, eval_s=0.2):
    return {
        "plan": PrunePlan.from_removal(6, removed),
        "result": result,
        "select_s": select_s,
        "eval_s": eval_s,
    }


def test_contract_document_in_full():
    job = SimpleNamespace(
        limit=8,
        words=2000,
        max_length=1024,
        strategy="iterative",
        calib=SimpleNamespace(calib="c4", prompts=32, tokens=64, positions="last", seed=3),
        eval=SimpleNamespace(bootstrap=250),
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
    }
    assert res["num_layers"] == 6 and res["tasks"] == [PPL, ACC] and res["regime"] is None
    assert res["contract"] == {
        "limit": 8,
        "words": 2000,
        "max_length": 1024,
        "stride": 512,
        "ci": "95% percentile bootstrap, 250 resamples over the task's units",
        "test": "paired bootstrap of the metric difference over the same units; "
        "tie when its 95% CI includes zero; p-values Holm-adjusted across the "
        "comparisons of one budget; overlap verdict: tie when the two marginal "
        "95% CIs overlap (the paper's test); mdd: the difference detectable with "
        "80% power at alpha 0.05",
        "cost": "relative change of the metric vs the unpruned model (dPPL% for perplexity)",
        "calibration": {
            "source": "c4",
            "prompts": 32,
            "tokens": 64,
            "positions": "last",
            "seed": 3,
        },
        "strategy": "iterative",
    }
    assert type(res["contract"]["stride"]) is int  # a token count, not 512.0


def test_method_entry_and_baseline_rows():
    cells = {
        1: {
            "a": _plain_cell([2], _run(1.1, flipped=1), select_s=1.5, eval_s=7.25),
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
        "metrics",
        "cost_pct",
        "cost_pct_ci",
        "select_s",
        "eval_s",
    }
    assert a["select_s"] == 1.5 and a["eval_s"] == 7.25
    assert a["removed"] == [2] and a["kept"] == [0, 1, 3, 4, 5] and a["merged"] == {}
    assert a["cost_pct"] == pytest.approx(10.0)
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


def test_comparison_of_identical_models_in_full(results):
    same = _comparison(results["budgets"][1], "interchange", "sleb")
    assert same == {
        "a": "interchange",
        "b": "sleb",
        "task": PPL,
        "metric": "word_perplexity",
        "same_layers": True,
        "ratio_of_costs": pytest.approx(1.0),
        "verdict": "same layers: identical models",
        "overlap_verdict": "same layers: identical models",
    }
    c = _comparison(results["budgets"][1], "replacement", "interchange")
    assert c["task"] == PPL and c["metric"] == "word_perplexity" and c["same_layers"] is False


def test_a_task_missing_from_the_baseline_is_skipped():
    cells = {1: {"a": _cell([2], 1.1), "b": _cell([4], 1.3)}}
    res = build_results(JOB, "m", 6, _run(1.0), cells, None, ["lambada", PPL])
    assert res["primary"] == {"task": PPL, "metric": "word_perplexity"}
    assert res["tasks"] == ["lambada", PPL] and list(res["baseline"]) == [PPL]
    assert list(res["budgets"][0]["methods"]["a"]["metrics"]) == [PPL]
    assert res["budgets"][0]["methods"]["a"]["cost_pct"] == pytest.approx(10.0)
    (c,) = res["budgets"][0]["comparisons"]
    assert c["winner"] == "a" and c["ratio_of_costs"] == pytest.approx(10.0 / 30.0)


def test_a_method_without_the_primary_task_has_no_cost():
    only_acc = EvalResult(tasks={ACC: _acc_task(3)})
    cells = {
        1: {
            "a": _plain_cell([2], only_acc),
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
    assert entry["comparisons"] == []
    assert "random_mean_cost_pct" not in entry  # one seed has no cost: no mean


def test_primary_without_unit_metrics_is_the_first_task_and_metric(tmp_path):
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

    cells = {1: {"a": _plain_cell([2], grouped(-0.1))}}
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
    path = tmp_path / "results.md"
    write_markdown(res, path)
    lines = path.read_text().splitlines()
    assert lines[2].startswith("Metric: mmlu / acc; baseline 0.5 [n/a, n/a]. Cost = ")
    assert lines[3] == ""  # no WikiText-2 setting line, no warning for another task
    assert "| 1 | a | [2] | 0.4 [n/a, n/a] | n/a [n/a, n/a] |" in lines


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
    (c,) = res["budgets"][0]["comparisons"]
    assert c["metric"] == "word_perplexity" and c["winner"] == "a"
    assert c["ratio_of_costs_ci"] == pytest.approx([10.0 / 30.0, 10.0 / 30.0])


def test_merge_plan_keeps_the_same_blocks_but_is_another_model(tmp_path):
    merge = {
        "plan": PrunePlan.from_merges(6, {2: [3]}),
        "result": _run(1.1),
        "select_s": 0.1,
        "eval_s": 0.2,
    }
    cells = {1: {"merge": merge, "drop": _cell([3], 1.2)}}
    res = build_results(JOB, "m", 6, _run(1.0), cells, None, [PPL])
    m = res["budgets"][0]["methods"]["merge"]
    assert m["merged"] == {"2": [2, 3]} and m["removed"] == [3]
    assert m["kept"] == res["budgets"][0]["methods"]["drop"]["kept"] == [0, 1, 2, 4, 5]
    (c,) = res["budgets"][0]["comparisons"]
    assert c["same_layers"] is False
    assert c["verdict"] == f"merge better by {1.2 / 1.1:.3g}x" and c["winner"] == "merge"


def test_ratio_of_costs_without_a_cost_to_divide_by():
    cells = {
        1: {"free": _cell([1], 1.0), "costly": _cell([2], 1.3)},
        2: {"costly": _cell([2, 4], 1.3), "free": _cell([1, 3], 1.0)},
    }
    res = build_results(JOB, "m", 6, _run(1.0), cells, None, [PPL])
    one, two = res["budgets"]
    assert one["methods"]["free"]["cost_pct"] == 0.0  # the unpruned model's own units
    (c,) = one["comparisons"]  # cost(free) / cost(costly) = 0 / 30
    assert c["ratio_of_costs"] == 0.0 and c["ratio_of_costs_ci"] == [0.0, 0.0]
    assert c["winner"] == "free" and c["overlap_verdict"] == "free better"
    (c,) = two["comparisons"]  # cost(costly) / cost(free) = 30 / 0: no ratio, no CI
    assert c["ratio_of_costs"] is None and "ratio_of_costs_ci" not in c
    assert c["winner"] == "free" and c["verdict"] == f"free better by {1.3:.3g}x"


def test_winner_of_a_zero_difference(results):
    # equal perplexity on every unit: nothing favours a, so b is named (and the verdict is a tie)
    (tie,) = results["budgets"][0]["comparisons"]
    assert tie["difference"]["estimate"] == 0.0 and tie["winner"] == "replacement"


def test_winner_and_overlap_on_a_higher_is_better_metric():
    base = _units_run(ACC, _ones(16))
    cells = {
        1: {
            "p30": _plain_cell([1], _units_run(ACC, _ones(6), (0.25, 0.35))),
            "p60": _plain_cell([2], _units_run(ACC, _ones(12), (0.55, 0.65))),
            "p45": _plain_cell([3], _units_run(ACC, _ones(9), (0.40, 0.50))),
            "p65": _plain_cell([4], _units_run(ACC, _ones(13), (0.5, 0.7))),
        }
    }
    res = build_results(JOB, "m", 6, base, cells, None, [ACC])
    entry = res["budgets"][0]
    c = _comparison(entry, "p30", "p60")  # b - a = +0.3: b is better
    assert c["difference"]["estimate"] == pytest.approx(0.3)
    assert c["winner"] == "p60" and c["verdict"] == "p60 better by 2x"
    assert c["overlap_verdict"] == "p60 better"  # [0.25, 0.35] vs [0.55, 0.65]
    assert c["mdd_pct"] == pytest.approx(100 * c["mdd"] / 0.8) and c["mdd"] > 0
    assert c["ratio_of_costs"] == pytest.approx((0.3 / 0.8 - 1) / (0.6 / 0.8 - 1))
    c = _comparison(entry, "p60", "p45")  # b - a = -0.15: a is better
    assert c["winner"] == "p60" and c["difference"]["estimate"] == pytest.approx(-0.15)
    assert c["overlap_verdict"] == "p60 better"
    c = _comparison(entry, "p60", "p65")  # the marginal CIs overlap
    assert c["winner"] == "p65" and c["overlap_verdict"] == "tie"
    assert c["difference"]["estimate"] == pytest.approx(0.05)


def test_mdd_pct_is_absent_on_a_zero_baseline():
    base = _units_run(ACC, _ones(0))
    cells = {
        1: {
            "a": _plain_cell([1], _units_run(ACC, _ones(4))),
            "b": _plain_cell([2], _units_run(ACC, _ones(0))),
        }
    }
    res = build_results(JOB, "m", 6, base, cells, None, [ACC])
    (c,) = res["budgets"][0]["comparisons"]
    assert c["winner"] == "a" and c["mdd"] > 0 and c["mdd_pct"] is None


def test_holm_over_one_budget():
    from swapprune.studies.compare_report import _holm

    comps = [
        {"winner": "b1", "p_value": 0.04},
        {"winner": "b2", "verdict": "same layers: identical models"},  # not a test
        {"winner": "b3", "p_value": 0.01},
        {"winner": "b4", "p_value": 0.025},
    ]
    _holm(comps)
    # three tests: 0.01 * 3, then 0.025 * 2, then max(0.05, 0.04 * 1)
    assert [c.get("p_holm") for c in comps] == [0.05, None, pytest.approx(0.03), 0.05]
    assert [c.get("verdict_holm") for c in comps] == ["tie", None, "b3 better", "tie"]
    assert comps[1] == {"winner": "b2", "verdict": "same layers: identical models"}


def _by_hand(contract: dict, task: str = PPL, n: int | None = 20) -> dict:
    row = {"value": 12.3456, "ci": [11.5, 13.25], "higher_is_better": False}
    if n is not None:
        row["n"] = n
    return {
        "model": "org/tiny",
        "num_layers": 8,
        "primary": {"task": task, "metric": "word_perplexity"},
        "contract": {"limit": None, "words": 5000, "max_length": 512, "stride": 256, **contract},
        "baseline": {task: {"word_perplexity": row}},
        "budgets": [],
    }


def _contract_part(results: dict, tmp_path) -> list[str]:
    path = tmp_path / "results.md"
    write_markdown(results, path)
    lines = path.read_text().splitlines()
    assert lines[2].startswith("Metric: ")
    return lines[3 : lines.index("", 3)]


SETTING = "Setting: WikiText-2 test, first {} words, windows of {} tokens, stride {}{}."
OFF_CONTRACT = (
    "**Warning: these settings differ from the paper's matched contract "
    "(5000 words, 512-token windows).**"
)


def test_contract_lines(tmp_path):
    matched = _contract_part(_by_hand({}), tmp_path)
    assert matched == [SETTING.format(5000, 512, 256, ", 20 windows")]
    assert _contract_part(_by_hand({}, n=None), tmp_path) == [SETTING.format(5000, 512, 256, "")]
    assert _contract_part(_by_hand({"limit": 8}), tmp_path) == [
        SETTING.format(5000, 512, 256, ", 20 windows"),
        "**Warning: limit 8: only the first 8 units of each task were evaluated. This is a "
        "quick look, not the matched contract; verdicts have less power.**",
    ]
    assert _contract_part(_by_hand({"words": 2000}), tmp_path) == [
        SETTING.format(2000, 512, 256, ", 20 windows"),
        OFF_CONTRACT,
    ]
    longer = _by_hand({"max_length": 1024, "stride": 512})
    assert _contract_part(longer, tmp_path) == [
        SETTING.format(5000, 1024, 512, ", 20 windows"),
        OFF_CONTRACT,
    ]
    # another primary task: no WikiText-2 setting and no contract to match; a limit still warns
    assert _contract_part(_by_hand({"words": 2000}, task=ACC), tmp_path) == []
    assert _contract_part(_by_hand({"limit": 3}, task=ACC), tmp_path) == [
        "**Warning: limit 3: only the first 3 units of each task were evaluated. This is a "
        "quick look, not the matched contract; verdicts have less power.**"
    ]


def test_setting_line_from_build_results(results, tmp_path):
    path = tmp_path / "results.md"
    write_markdown(results, path)
    assert path.read_text().splitlines()[3] == SETTING.format(5000, 512, 256, ", 20 windows")


def test_markdown_in_full(tmp_path):
    """Every line of results.md for a results document written by hand."""
    results = _by_hand({})

    def method(removed, value, ci, cost, cost_ci):
        row = {"value": value, "ci": ci}
        return {
            "removed": removed,
            "merged": {},
            "metrics": {PPL: {"word_perplexity": row}},
            "cost_pct": cost,
            "cost_pct_ci": cost_ci,
        }

    results["budgets"] = [
        {
            "budget": 0,
            "methods": {"none": method([], 12.3456, [11.5, 13.25], 0.0, [0.0, 0.0])},
            "comparisons": [],
        },
        {
            "budget": 2,
            "methods": {
                "replacement": method([2, 4], 16.5, [15.0, 18.0], 33.6, [30.1, 37.4]),
                "interchange": method([1, 3], 13.0, [12.0, 14.0], 5.3, [4.3, 6.7]),
                "sleb": method([1, 3], 13.0, [12.0, 14.0], 5.3, [4.3, 6.7]),
                "random:0": method([0, 5], float("nan"), [None, None], None, None),
            },
            "comparisons": [
                {
                    "a": "replacement",
                    "b": "interchange",
                    "difference": {"estimate": -3.5, "ci": [-4.25, -2.75]},
                    "p_value": 0.001998,
                    "p_holm": 0.003996,
                    "verdict": "interchange better by 1.27x",
                    "verdict_holm": "interchange better",
                    "overlap_verdict": "interchange better",
                    "mdd_pct": 2.345,
                    "ratio_of_costs": 6.34,
                    "ratio_of_costs_ci": [5.5, 7.25],
                },
                {
                    "a": "interchange",
                    "b": "sleb",
                    "same_layers": True,
                    "verdict": "same layers: identical models",
                    "overlap_verdict": "same layers: identical models",
                    "ratio_of_costs": 1.0,
                },
                {
                    "a": "replacement",
                    "b": "sleb",
                    "difference": {"estimate": 0.0123, "ci": [-0.5, 0.52]},
                    "p_value": 0.8,
                    "p_holm": 1.0,
                    "verdict": "tie",
                    "verdict_holm": "tie",
                    "overlap_verdict": "tie",
                    "mdd_pct": None,
                    "ratio_of_costs": None,
                },
            ],
            "random_mean_cost_pct": 150.3,
        },
    ]
    results["regime"] = {
        "call": "divergent",
        "median_replacement": 0.51234,
        "median_interchange": 0.020004,
        "median_ir": 0.039,
        "advice": "interchange and replacement rank blocks differently",
    }
    path = tmp_path / "results.md"
    write_markdown(results, path)
    text = path.read_text()
    assert text.endswith("I/R 0.039. interchange and replacement rank blocks differently.\n")
    lines = text.split("\n")
    assert lines[:7] == [
        "# Pruning cost by protocol: org/tiny (8 blocks)",
        "",
        "Metric: swapprune_wikitext2_ppl / word_perplexity; baseline 12.35 [11.5, 13.25]. "
        "Cost = relative change vs the unpruned model (positive = worse for a lower-is-better "
        "metric); 95% CIs from a bootstrap over the same units.",
        SETTING.format(5000, 512, 256, ", 20 windows"),
        "",
        "| n | method | removed (0-based) | value [95% CI] | cost [95% CI] |",
        "|---|---|---|---|---|",
    ]
    rows = [[x.strip() for x in line.split("|")[1:-1]] for line in lines[7:13]]
    assert rows == [
        ["0", "none", "[]", "12.35 [11.5, 13.25]", "+0.0% [+0.0%, +0.0%]"],
        ["2", "replacement", "[2, 4]", "16.5 [15, 18]", "+33.6% [+30.1%, +37.4%]"],
        ["2", "interchange", "[1, 3]", "13 [12, 14]", "+5.3% [+4.3%, +6.7%]"],
        ["2", "sleb", "[1, 3]", "13 [12, 14]", "+5.3% [+4.3%, +6.7%]"],
        ["2", "random:0", "[0, 5]", "n/a [n/a, n/a]", "n/a [n/a, n/a]"],
        ["2", "random (mean of seeds)", "", "", "+150.3%"],
    ]
    assert lines[12] == "| 2 | random (mean of seeds) | | | +150.3% |"
    assert lines[13:18] == [
        "",
        "Verdicts. Paired: B - A is the difference of word_perplexity over the same units; "
        "tie when its 95% CI includes zero. Holm: the paired p-values adjusted across the "
        "comparisons of one budget (tie when >= 0.05). Overlap: the paper's test, tie when "
        "the two marginal 95% CIs overlap. MDD: the smallest difference the paired test "
        "detects with 80% power, as cost points (% of the baseline). Cost ratio: "
        "cost(A) / cost(B) with a paired 95% CI (interchange vs replacement: the "
        "pruning-level I/R).",
        "",
        "| n | A vs B | B - A (word_perplexity) [95% CI] | p (Holm) | paired | Holm | overlap | "
        "MDD (pts) | cost A / B [95% CI] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [[x.strip() for x in line.split("|")[1:-1]] for line in lines[18:21]]
    assert rows == [
        [
            "2",
            "replacement vs interchange",
            "-3.5 [-4.25, -2.75]",
            "0.002 (0.004)",
            "interchange better by 1.27x",
            "interchange better",
            "interchange better",
            "2.3",
            "6.34 [5.5, 7.25]",
        ],
        [
            "2",
            "interchange vs sleb",
            "0",
            "",
            "same layers: identical models",
            "",
            "same layers: identical models",
            "",
            "1",
        ],
        [
            "2",
            "replacement vs sleb",
            "0.0123 [-0.5, 0.52]",
            "0.8 (1)",
            "tie",
            "tie",
            "tie",
            "",
            "n/a",
        ],
    ]
    assert lines[19] == (
        "| 2 | interchange vs sleb | 0 |  | same layers: identical models |  | "
        "same layers: identical models |  | 1 |"
    )
    assert lines[21:] == [
        "",
        "Probe regime (adjacent pairs): **divergent**: median d_repl 0.512, d_inter 0.02, "
        "I/R 0.039. interchange and replacement rank blocks differently.",
        "",
    ]


def test_zero_baseline_and_missing_primary_do_not_crash(tmp_path):
    """A baseline of 0 has no relative cost: no ratio, no crash; a method without the task: n/a."""
    zero = EvalResult(tasks={ACC: _acc_task(int(BASE_ACC.sum()))})  # every answer wrong
    assert zero.tasks[ACC].metrics["acc"].value == 0.0
    cells = {1: {"a": _cell([2], 1.0, flipped=1), "b": _cell([3], 1.0, flipped=3)}}
    res = build_results(JOB, "m", 6, zero, cells, None, [ACC])
    (c,) = res["budgets"][0]["comparisons"]
    assert c["ratio_of_costs"] is None and "ratio_of_costs_ci" not in c
    assert c["winner"] == "a" and c["mdd_pct"] is None
    no_ppl = {1: {"b": _cell([3], 1.0)}}  # a method evaluated without the primary task
    no_ppl[1]["b"]["result"].tasks.pop(PPL)
    res = build_results(JOB, "m", 6, _run(1.0), no_ppl, None, [PPL, ACC])
    assert res["budgets"][0]["methods"]["b"]["cost_pct"] is None
    write_markdown(res, tmp_path / "r.md")
    assert "| 1 | b | [3] | n/a [n/a, n/a] | n/a [n/a, n/a] |" in (tmp_path / "r.md").read_text()
