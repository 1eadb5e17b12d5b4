"""No verdict swapprune prints says an unqualified "tie".

Two checks: every string the package can print (its string constants, docstrings
aside) and the outputs themselves (results.md/json of a comparison with every
outcome, the cost record and summary, the eval summary, the auto decision and
the regime line). "tie" may appear only as the equivalence outcome
``tie (equivalent within +-m)``, as the paper's overlap test (``paper's test:
tie``), or in the paper's regime name ``tie-like``.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from test_compare_report import JOB, PPL, _cell, _run, _scores

import swapprune

ALLOWED = (r"tie \(equivalent within", r"paper's test: tie", r"tie-like")
BARE = re.compile(r"\btie\b", re.IGNORECASE)


def bare_ties(text: str) -> list[str]:
    """The places where ``text`` says "tie" outside the allowed phrases."""
    for pattern in ALLOWED:
        text = re.sub(pattern, "", text, flags=re.IGNORECASE)
    return [text[max(0, m.start() - 40) : m.end() + 40] for m in BARE.finditer(text)]


def test_the_check_catches_a_bare_tie():
    assert bare_ties("verdict: tie") and bare_ties("| 1 | a vs b | Tie |")
    assert not bare_ties("tie (equivalent within +-2 pts); CIs overlap (paper's test: tie)")
    assert not bare_ties("regime tie-like; tiebreak; tied embeddings")


def _docstrings(tree) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def test_no_string_the_package_can_print_says_a_bare_tie():
    found = []
    for path in Path(swapprune.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in skip
            ):
                found += [f"{path.name}: {hit}" for hit in bare_ties(node.value)]
    assert not found, found


def _every_outcome_report(tmp_path) -> tuple[dict, str]:
    from swapprune.studies.compare_markdown import write_markdown
    from swapprune.studies.compare_report import build_results

    noisy = _cell([1, 2], 1.06)
    task = noisy["result"].tasks[PPL]
    task.units["nll"] = (np.asarray(task.units["nll"]) + np.random.default_rng(1).normal(0, 30, 20)).tolist()  # fmt: skip
    cells = {
        2: {
            "replacement": _cell([2, 4], 1.30),  # better / worse
            "interchange": _cell([1, 3], 1.05),
            "sleb": _cell([1, 3], 1.05),  # identical
            "noisy": noisy,  # inconclusive
            "bi": _cell([0, 1], 1.5),  # worse than the cells before it
        },
        1: {"interchange": _cell([3], 1.02), "replacement": _cell([4], 1.02)},  # equivalent
    }
    res = build_results(JOB, "m", 6, _run(1.0), cells, _scores(0.5, 0.02), [PPL])
    outcomes = {r["outcome"] for r in res["verdicts"][0]["rows"]}
    assert outcomes >= {"a_better", "b_better", "equivalent", "inconclusive", "identical"}
    write_markdown(res, tmp_path / "results.md")
    return res, (tmp_path / "results.md").read_text()


def test_no_output_says_a_bare_tie(tmp_path, capsys):
    from swapprune.cli.summary import print_eval_summary
    from swapprune.evaluation.cost import Cost
    from swapprune.evaluation.pairing import compare
    from swapprune.records.policy import AutoRecord, summary_line
    from swapprune.select.regime import regime

    res, md = _every_outcome_report(tmp_path)
    outputs = [md, json.dumps(res)]
    # the eval summary against a baseline: the same units, a cut that changes nothing
    base, same = _run(1.0), _run(1.0)
    print_eval_summary(SimpleNamespace(eval={"base": same}, output="e.json"), base)
    outputs.append(capsys.readouterr().out)
    assert "tie (equivalent within +-2 pts)" in outputs[-1]
    # the cost record of a cut equivalent to its base
    _, v = compare(base, same, PPL, names=("base", "cut"), keys=("kept:0,1", "kept:0"))
    cost = Cost(10.0, 10.0, 0.0, (0.0, 0.0), v.label, 1, 1, 5000, 512, comparison=v.to_dict())
    outputs += [cost.summary(), json.dumps(cost.to_dict())]
    assert "tie (equivalent within" in outputs[-1]
    # auto in the tie-like regime, and the regime line
    pairs = {(i, i + 1): {"repl_ij": np.full(4, 0.03), "repl_ji": np.full(4, 0.02),
                          "inter": np.full(4, 0.029)} for i in range(4)}  # fmt: skip
    reg = regime(pairs)
    assert reg["call"] == "tie-like"
    from swapprune.select.auto import ACTIONS

    decision = AutoRecord(reg, ACTIONS["tie-like"], {"interchange": [1], "replacement": [1]},
                          agree=True, stability={}, oracle_calls=0, windows=4, adaptive=None,
                          chosen=[1])  # fmt: skip
    outputs += [*decision.lines(), summary_line(reg)]
    found = [hit for text in outputs for hit in bare_ties(text)]
    assert not found, found
