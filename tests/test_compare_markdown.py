"""results.md of a comparison: the methods table with both contracts, one verdict table each."""

from __future__ import annotations

import numpy as np
from test_compare_report import (
    ACC,
    ARTICLES,
    BASE_ACC,
    EXT,
    JOB,
    PPL,
    SHIFT,
    _acc_task,
    _both,
    _cell,
    _ext_task,
    _gen,
    _ppl_task,
    _run,
    results,  # noqa: F401 (the fixture)
)

from swapprune.evaluation.results import EvalResult
from swapprune.plan import PrunePlan
from swapprune.studies.compare_markdown import write_markdown
from swapprune.studies.compare_report import build_results


def _md(res, tmp_path) -> str:
    path = tmp_path / "results.md"
    write_markdown(res, path)
    return path.read_text()


def _cells(line: str) -> list[str]:
    return [x.strip() for x in line.split("|")[1:-1]]


def _table_after(text: str, heading: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("| n |"))
    out = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        out.append(_cells(line))
    return out


def test_methods_table(results, tmp_path):  # noqa: F811
    text = _md(results, tmp_path)
    assert text.startswith("# Pruning cost by protocol: /models/m (6 blocks)")
    head, rule, *rows = _table_after(text, "Metric: ")
    assert head == ["n", "method", "removed (0-based)", "PPL matched [95% CI]",
                    "cost matched [95% CI]", "generation agreement [95% CI]",
                    "first divergence [95% CI]"]  # fmt: skip
    by = {(r[0], r[1]): r for r in rows}
    assert by["2", "interchange"][2] == "[1, 3]"
    assert by["2", "interchange"][4] == "+5.0% [+5.0%, +5.0%]"
    assert by["2", "replacement"][4] == "+30.0% [+30.0%, +30.0%]"
    assert by["2", "interchange"][5:] == ["80% [75%, 85%]", "3.5 [1.0, 6.0] of 32"]
    assert by["2", "sleb"][5:] == ["n/a", "n/a"]  # no generative record for this cell
    assert by["2", "random (mean of seeds)"] == ["2", "random (mean of seeds)", "", "",
                                                 "+150.0%", "", ""]  # fmt: skip
    assert "Probe regime (adjacent pairs): **divergent**" in text


def test_verdict_table_states_every_test(results, tmp_path):  # noqa: F811
    text = _md(results, tmp_path)
    head, _, *rows = _table_after(text, f"### {PPL} / word_perplexity: matched")
    assert head == [
        "n",
        "A vs B",
        "B - A (cost pts) [95% CI]",
        "90% CI (TOST)",
        "p",
        "verdict",
        "Holm over 4 distinct pairs: p, verdict",
        "primary family (2): p, verdict",
        "paper's overlap test",
        "MDD (pts)",
        "cost A / B [95% CI]",
    ]
    by = {(r[0], r[1]): r for r in rows}
    r = by["2", "replacement vs interchange"]
    assert r[2:6] == ["-25.00 [-25.00, -25.00]", "[-25.00, -25.00]", f"{2 / 1001:.3g}",
                      "interchange better"]  # fmt: skip
    assert r[6] == f"{8 / 1001:.3g}, interchange better"
    assert r[7] == f"{4 / 1001:.3g}, interchange better"
    assert r[8] == "interchange better (paper's test: CIs apart)" and r[10] == "6 [6, 6]"
    assert by["2", "replacement vs sleb"][7] == ""  # not a primary contrast
    assert by["2", "interchange vs sleb"] == ["2", "interchange vs sleb", "", "", "", "identical",
                                              "", "", "", "", ""]  # fmt: skip
    tie = by["1", "interchange vs replacement"]
    assert (
        tie[5] == "tie (equivalent within +-2 pts)" and tie[8] == "CIs overlap (paper's test: tie)"
    )
    assert "Margin +-2 pts; primary contrasts per budget: n=1: interchange vs replacement; " in text


def test_both_contracts_extended_verdicts_first(tmp_path):
    a = _both(1.05, np.full(ARTICLES, 20.0), generative=_gen(0.8))
    b = _both(1.10, 20.0 + SHIFT, generative=_gen(0.6))
    a["plan"], b["plan"] = PrunePlan.from_removal(6, [1]), PrunePlan.from_removal(6, [2])
    base = EvalResult(tasks={PPL: _ppl_task(1.0), EXT: _ext_task(np.zeros(ARTICLES))})
    res = build_results(JOB, "m", 6, base, {1: {"interchange": a, "replacement": b}}, None,
                        [PPL, EXT])  # fmt: skip
    text = _md(res, tmp_path)
    head, _, *rows = _table_after(text, "Metric: ")
    assert head[3:7] == ["PPL matched [95% CI]", "cost matched [95% CI]",
                         "PPL extended [article CI]", "cost extended [article CI]"]  # fmt: skip
    assert rows[0][4] == "+5.0% [+5.0%, +5.0%]" and rows[0][6] == "+20.0% [+20.0%, +20.0%]"
    assert (
        "Extended contract: 60 windows of 512 tokens (the second half scored), at most 1 per "
        f"article from {ARTICLES} articles of WikiText-2 test after its first 5000 words" in text
    )
    ext = text.index(f"### {EXT} / perplexity: extended (held out")
    matched = text.index(f"### {PPL} / word_perplexity: matched")
    assert ext < matched
    (row,) = _table_after(text, f"### {EXT}")[2:]
    assert row[5].startswith("inconclusive (MDD ") and row[8] == "CIs overlap (paper's test: tie)"
    (row,) = _table_after(text, f"### {PPL}")[2:]
    assert row[5] == "interchange better"


def test_contract_lines_and_warnings(tmp_path):
    def lines(job_changes: dict, tasks=(PPL,)):
        job = type(JOB)(**{**vars(JOB), **job_changes})
        cells = {1: {"a": _cell([2], 1.1)}}
        res = build_results(job, "m", 6, _run(1.0), cells, None, list(tasks))
        text = _md(res, tmp_path).splitlines()
        assert text[2].startswith("Metric: ")
        return text[3 : text.index("", 3)]

    setting = (
        "Setting: WikiText-2 test, first {} words, windows of {} tokens, stride {}, 20 windows."
    )
    off = ("**Warning: these settings differ from the paper's matched contract "
           "(5000 words, 512-token windows).**")  # fmt: skip
    assert lines({}) == [setting.format(5000, 512, 256)]
    assert lines({"limit": 8}) == [
        setting.format(5000, 512, 256),
        "**Warning: limit 8: only the first 8 units of each task were evaluated. This is a "
        "quick look, not the matched contract; verdicts have less power.**",
    ]
    assert lines({"words": 2000}) == [setting.format(2000, 512, 256), off]
    assert lines({"max_length": 1024}) == [setting.format(5000, 1024, 512), off]
    # another primary task: no WikiText-2 setting and no contract to match; a limit still warns
    assert lines({"words": 2000}, tasks=(ACC,)) == []
    assert lines({"limit": 3}, tasks=(ACC,)) == [
        "**Warning: limit 3: only the first 3 units of each task were evaluated. This is a "
        "quick look, not the matched contract; verdicts have less power.**"
    ]


def test_merges_are_shown_as_merges_and_a_margin_in_metric_units_is_named(tmp_path):
    merge = {"plan": PrunePlan.from_merges(6, {2: [3]}, merge="laco"), "result": _run(1.1),
             "select_s": 0.1, "eval_s": 0.2}  # fmt: skip
    job = type(JOB)(**{**vars(JOB), "compare": type(JOB.compare)(margin=0.5, margin_unit="metric")})
    res = build_results(job, "m", 6, _run(1.0), {1: {"m": merge, "d": _cell([3], 1.2)}}, None,
                        [PPL])  # fmt: skip
    text = _md(res, tmp_path)
    assert "| 1 | m | merge {'2': [2, 3]} (laco) |" in text
    head = _table_after(text, f"### {PPL}")[0]
    assert head[2] == "B - A (word_perplexity) [95% CI]" and head[9] == "MDD (word_perplexity)"
    assert "Margin +-0.5;" in text


def test_zero_baseline_and_missing_primary_do_not_crash(tmp_path):
    """A baseline of 0 has no cost in points: no verdict, no crash; a method without the task: n/a."""
    zero = EvalResult(tasks={ACC: _acc_task(int(BASE_ACC.sum()))})  # every answer wrong
    assert zero.tasks[ACC].metrics["acc"].value == 0.0
    cells = {1: {"a": _cell([2], 1.0, flipped=1), "b": _cell([3], 1.0, flipped=3)}}
    res = build_results(JOB, "m", 6, zero, cells, None, [ACC])
    (c,) = res["verdicts"][0]["rows"]
    assert c["label"].startswith("not tested: ")
    row = _table_after(_md(res, tmp_path), f"### {ACC}")[2]
    assert row[5] == c["label"] and row[2] == ""
    no_ppl = {1: {"b": _cell([3], 1.0)}}  # a method evaluated without the primary task
    no_ppl[1]["b"]["result"].tasks.pop(PPL)
    res = build_results(JOB, "m", 6, _run(1.0), no_ppl, None, [PPL, ACC])
    assert res["budgets"][0]["methods"]["b"]["cost_pct"] is None
    assert "| 1 | b | [3] | n/a [n/a, n/a] | n/a [n/a, n/a] |" in _md(res, tmp_path)


def test_every_verdict_row_is_one_of_the_outcomes(results):  # noqa: F811
    allowed = ("identical", "tie (equivalent within ", "inconclusive (MDD ", "not tested: ")
    for table in results["verdicts"]:
        for r in table["rows"]:
            assert r["label"].startswith(allowed) or r["label"].endswith(" better"), r["label"]
