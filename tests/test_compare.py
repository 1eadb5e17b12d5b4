"""swapprune compare on a tiny model: schema, verdicts, cache."""

import json

import pytest
from tiny_models import save_tiny

from swapprune.cli import main

ARGS = [
    "--prompts",
    "4",
    "--tokens",
    "32",
    "--no-progress",
    "--words",
    "150",
    "--max-length",
    "64",
    "--random-seeds",
    "0,1",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    model_dir = str(save_tiny("llama", tmp_path_factory.mktemp("m") / "tiny"))
    out = tmp_path_factory.mktemp("cmp") / "cmp"
    cmd = [
        "compare",
        "--model",
        model_dir,
        "--budgets",
        "1,2",
        "--output",
        str(out),
        "--criteria",
        "interchange,replacement,reverse,random,interchange@ranked,interchange@merge:laco",
        *ARGS,
    ]
    assert main(cmd) == 0
    return cmd, out


CELLS = {
    "interchange",
    "replacement",
    "reverse",
    "random:0",
    "random:1",
    "interchange@ranked",
    "interchange@merge:laco",
}


def test_results_schema(run):
    _, out = run
    res = json.loads((out / "results.json").read_text())
    assert res["schema"] == "swapprune.compare/2"
    assert res["primary"] == {"task": "swapprune_wikitext2_ppl", "metric": "perplexity"}
    assert [b["budget"] for b in res["budgets"]] == [1, 2]
    for entry in res["budgets"]:
        assert set(entry["methods"]) == CELLS
        for m in entry["methods"].values():
            assert len(m["removed"]) == entry["budget"]
            lo, hi = m["cost_pct_ci"]
            assert lo <= m["cost_pct"] <= hi
            g = m["generative"]  # every cell, against one set of base continuations
            assert 0 <= g["agreement"]["mean"] <= 1 and g["new_tokens"] == 32
    (table,) = res["verdicts"]
    assert table["task"] == "swapprune_wikitext2_ppl"
    pairs = {(r["budget"], r["a"], r["b"]) for r in table["rows"]}
    assert (2, "interchange", "replacement") in pairs
    for r in table["rows"]:
        if r["a_key"] == r["b_key"]:
            assert r["outcome"] == r["label"] == "identical" and r["p_value"] is None
            continue
        lo, hi = r["ci"]
        assert (r["outcome"] in ("a_better", "b_better")) == (r["p_value"] < 0.05)
        if r["outcome"] in ("a_better", "b_better"):
            assert not lo <= 0 <= hi
        assert r["label"] != "tie" and r["family"] == "all distinct pairs"
    assert (out / "results.md").read_text().count("| 2 |") >= 7


def test_strategy_and_merge_cells_are_labelled_as_written(run):
    _, out = run
    res = json.loads((out / "results.json").read_text())
    for entry in res["budgets"]:
        ranked, greedy = (entry["methods"][k] for k in ("interchange@ranked", "interchange"))
        assert ranked["strategy"] == "ranked" and greedy["strategy"] == "greedy"
        assert ranked["criterion"] == greedy["criterion"] == "interchange"
        merge = entry["methods"]["interchange@merge:laco"]
        assert merge["op"] == "merge" and merge["merge"] == "laco" and merge["merged"]
        assert merge["criterion"] == "interchange"
        # a merge is another model than the removal of the same blocks
        row = next(
            r
            for t in res["verdicts"]
            for r in t["rows"]
            if (r["budget"], r["a"], r["b"])
            == (entry["budget"], "interchange", "interchange@merge:laco")
        )
        assert row["outcome"] != "identical" and row["b_key"].endswith("|rule:laco")
    # Adjacent pairs only: distances along depth, not a near-empty matrix.
    assert not (out / "distance_heatmaps.png").exists()
    for png in ("cost_vs_budget.png", "distances_along_depth.png", "ir_along_depth.png"):
        assert (out / png).stat().st_size > 1000


def test_cached_rerun_evaluates_nothing(run, monkeypatch):
    cmd, out = run
    import swapprune.evaluation as ev

    def boom(*a, **k):
        raise AssertionError("a cached rerun evaluated a model")

    monkeypatch.setattr(ev, "evaluate", boom)
    before = sorted(p.name for p in (out / "cache").iterdir())
    assert main(cmd) == 0
    assert sorted(p.name for p in (out / "cache").iterdir()) == before


def test_unknown_task_fails_before_loading(tmp_path, capsys, monkeypatch):
    import swapprune.pipeline.stages as stages

    def no_load(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(stages, "load", no_load)
    model_dir = str(save_tiny("llama", tmp_path / "m"))
    assert (
        main(
            [
                "compare",
                "--model",
                model_dir,
                "--budgets",
                "1",
                "--tasks",
                "wikitext2_pl",
                "--output",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "did you mean" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    # A budget the model cannot take fails from its config alone, also before loading.
    assert (
        main(
            [
                "compare",
                "--model",
                model_dir,
                "--budgets",
                "1,40",
                "--max-length",
                "64",
                "--output",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "budget 40" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_iterative_methods_are_selected_once(tmp_path, monkeypatch):
    import swapprune.select.core as pruning

    model_dir = str(save_tiny("llama", tmp_path / "m"))
    calls = []
    real = pruning.select_fixed

    def counting(model, spec, *a, **kw):
        calls.append(spec.budget)
        return real(model, spec, *a, **kw)

    monkeypatch.setattr(pruning, "select_fixed", counting)
    out = tmp_path / "cmp"
    assert (
        main(
            [
                "compare",
                "--model",
                model_dir,
                "--budgets",
                "1,2,3",
                "--output",
                str(out),
                "--criteria",
                "sleb",
                *ARGS,
            ]
        )
        == 0
    )
    assert calls == [3]
    res = json.loads((out / "results.json").read_text())
    removed = [b["methods"]["sleb"]["removed"] for b in res["budgets"]]
    assert set(removed[0]) < set(removed[1]) < set(removed[2])


def test_auto_uses_the_shared_probes(tmp_path, monkeypatch):
    """compare scores the windows once; auto selects on those scores, not on new tranches.

    Built through the Python API with no ``score`` section, the path on which the
    run configuration asks for adaptive calibration (``--protocol auto``'s default).
    """
    import swapprune.engine.sharding as sharding
    import swapprune.select.adaptive as adaptive
    from swapprune.config import (
        CalibrationConfig,
        CompareConfig,
        EvalConfig,
        ModelConfig,
        RunConfig,
    )
    from swapprune.studies.compare import CompareJob, run_compare

    def no_tranches(*a, **k):
        raise AssertionError("auto re-probed windows compare had already scored")

    probes = []
    real = sharding.score_sharded
    monkeypatch.setattr(adaptive, "adaptive_score", no_tranches)
    monkeypatch.setattr(
        sharding, "score_sharded", lambda *a, **k: probes.append(1) or real(*a, **k)
    )
    model_dir = str(save_tiny("llama", tmp_path / "m"))
    run = RunConfig(
        model=ModelConfig(model_dir),
        calibration=CalibrationConfig(prompts=4, tokens=32),
        eval=EvalConfig(words=150, max_length=64),
    )
    from swapprune.config import SelectConfig
    from swapprune.select.spec import adaptive_on

    assert run.score is None and adaptive_on(SelectConfig(protocol="auto"), run.calibration)
    job = CompareJob(
        run=run,
        compare=CompareConfig(output=str(tmp_path / "cmp"), budgets=[1, 2], criteria=["auto"]),
    )
    res = run_compare(job, progress=False)
    assert probes == [1]
    assert [len(b["methods"]["auto"]["removed"]) for b in res["budgets"]] == [1, 2]
