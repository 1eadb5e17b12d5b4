"""Every "next:" line is a command that works as printed: each one is run here, as printed,
on a tiny model, and must carry the model, windows, scores and settings of the run before it."""

from __future__ import annotations

import json
import shlex

import pytest
from tiny_models import save_tiny

from swapprune.cli import main
from swapprune.cli.argv import command_line
from swapprune.cli.next_steps import heldout_rerun
from swapprune.config import CalibrationConfig, CostConfig, ExportConfig, RunConfig, SelectConfig

# The settings every first command runs with; the next lines must carry them on.
WINDOWS = ["--prompts", "4", "--tokens", "32"]
SMALL = [*WINDOWS, "--cost-windows", "2"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny("llama", tmp_path_factory.mktemp("m") / "tiny"))


def _next_lines(capsys) -> list[str]:
    """The commands of every "next:" line printed (stdout and stderr), in order, once each."""
    cap = capsys.readouterr()
    found = []
    for line in (cap.out + "\n" + cap.err).splitlines():
        if "next: " in line:
            command = line.split("next: ", 1)[1].strip()
            if command not in found:
                found.append(command)
    return found


def _run_printed(command: str) -> int:
    argv = shlex.split(command)
    assert argv[0] == "swapprune", command
    return main([*argv[1:], "--no-progress"])


def _follow(capsys, argv: list[str], expect: int = 1) -> list[str]:
    """Run ``argv``, then each next line it printed; returns those lines."""
    assert main([*argv, "--no-progress"]) == 0
    lines = _next_lines(capsys)
    assert len(lines) == expect, lines
    for command in lines:
        assert _run_printed(command) == 0, command
    return lines


def test_score_then_prune_then_eval(model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (prune,) = _follow(capsys, ["score", "--model", model_dir, "--output", "s.json", *WINDOWS])
    assert f"--model {model_dir}" in prune and f"--scores {tmp_path / 's.json'}" in prune
    assert "--prompts 4 --tokens 32" in prune  # the windows the scores were measured on
    (evaluate,) = _next_lines(capsys)  # the prune just run printed its own next line
    assert evaluate.startswith("swapprune eval --model ") and f"--baseline {model_dir}" in evaluate
    assert _run_printed(evaluate) == 0
    out = capsys.readouterr().out
    assert "vs baseline" in out and "the baseline" in out and "this model" in out
    assert "next:" not in out  # compared already: nothing left to suggest


def test_apply_too_costly_names_a_prune_command(model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["--model", model_dir, "--budget", "2", "--output", "p", *SMALL]
    assert main([*argv, "--no-progress"]) == 0
    capsys.readouterr()
    apply = ["apply", "--plan", "p/plan.json", "--model", model_dir, "--output", "a"]
    # one next line: the cut costs too much, so a cheaper selection, not the evaluation
    (warning,) = _follow(capsys, [*apply, "--cost-windows", "2", "--cost-threshold", "1e-9"], 1)
    # The plan's criterion (interchange, the default, so not written) at half its budget.
    assert "--budget 1" in warning and "--output tiny-interchange-1" in warning
    assert "--cost-threshold 1e-09" in warning  # the settings of the run are carried


def test_eval_of_a_checkpoint_compares_it_with_its_base(model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert (
        main(["--model", model_dir, "--budget", "1", "--output", "p", *SMALL, "--no-progress"]) == 0
    )
    capsys.readouterr()
    metrics = json.loads((tmp_path / "p" / "metrics.json").read_text())
    assert "cost" in metrics and not [k for k, v in metrics.items() if v in ({}, [], None)]
    evaluate = [
        "eval",
        "--model",
        "p",
        "--words",
        "150",
        "--max-length",
        "64",
        "--output",
        "e.json",
    ]
    (line,) = _follow(capsys, evaluate)
    assert f"--baseline {model_dir}" in line and "--words 150" in line
    # The unpruned model evaluated alone suggests no evaluation of itself.
    base = [
        "eval",
        "--model",
        model_dir,
        "--words",
        "150",
        "--max-length",
        "64",
        "--output",
        "b.json",
    ]
    capsys.readouterr()
    assert main(base) == 0  # with its stage lines
    cap = capsys.readouterr()
    assert "next:" not in cap.out and f"--baseline {tmp_path / 'b.json'}" in cap.out
    assert f"[eval {model_dir}] done" in cap.err and "[eval base]" not in cap.err


def test_compare_then_prune(model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["compare", "--model", model_dir, "--budgets", "1", "--criteria", "interchange,bi"]
    args = ["--words", "150", "--max-length", "64", "--output", "c", *WINDOWS]
    (line,) = _follow(capsys, [*argv, *args])
    assert "--scores c/scores.json" in line and "--prompts 4 --tokens 32" in line


def test_validate_then_prune(model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["validate", "--model", model_dir, "--criteria", "interchange,bi", "--bootstrap", "20"]
    (line,) = _follow(capsys, [*argv, "--output", "v", *WINDOWS])
    assert f"--model {model_dir}" in line and "--prompts 4 --tokens 32" in line


def test_an_uncertified_cut_reruns_on_more_heldout_windows(model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = RunConfig(
        calibration=CalibrationConfig(prompts=4, tokens=32),
        prune=SelectConfig(budget=1),
        export=ExportConfig(output="p"),
        cost=CostConfig(windows=2),
    )
    cfg.model.name = model_dir
    argv = shlex.split(command_line(cfg))[1:]
    assert main([*argv, "--no-progress"]) == 0
    from pathlib import Path

    line = heldout_rerun(cfg, Path("p"), 16)
    assert "--heldout-prompts 16" in line and "--scores p/scores.json" in line
    assert _run_printed(line) == 0
    assert Path("p-heldout16/plan.json").is_file()


def test_a_command_line_rebuilds_its_configuration():
    from swapprune.cli import build_parser
    from swapprune.cli.prune import config_from

    argv = [
        "--model",
        "smollm2-135m",
        "--budget",
        "3",
        "--protocol",
        "replacement",
        "--prompts",
        "16",
        "--no-certify",
        "--protect-first",
        "1",
        "--output",
        "x",
        "--cost-windows",
        "4",
        "--overwrite",
    ]
    cfg = config_from(build_parser().parse_args(["prune", *argv]))
    again = config_from(build_parser().parse_args(["prune", *shlex.split(command_line(cfg))[1:]]))
    assert again == cfg
    assert command_line(cfg) == (
        "swapprune --model smollm2-135m --prompts 16 --budget 3 --protocol replacement "
        "--protect-first 1 --no-certify --output x --overwrite --cost-windows 4"
    )


def test_a_cheaper_cut_is_data_the_cli_writes_as_a_command():
    from types import SimpleNamespace

    from swapprune.cli.next_steps import cheaper_cut as command
    from swapprune.pipeline.stages import NextCut, cheaper_cut

    def plan(n, protocol="interchange"):
        return SimpleNamespace(budget=n, removed=list(range(n)), protocol=protocol)

    def cfg(protocol="interchange", patch="none"):
        prune = SelectConfig(budget=4, protocol=protocol, patch=patch)
        return RunConfig(prune=prune, export=ExportConfig(output="o"), cost=CostConfig())

    assert cheaper_cut(cfg(), plan(4)) == NextCut(2)  # half the budget, the run's criterion
    assert cheaper_cut(cfg(), plan(1)) == NextCut(1, "auto")  # then the verified selection
    assert cheaper_cut(cfg("auto"), plan(1, "auto")) == NextCut(1, None, "linear")
    assert cheaper_cut(cfg("auto", "linear"), plan(1, "auto")) is None  # nothing left to try
    applied = RunConfig(prune=SelectConfig(plan="p/plan.json"), export=ExportConfig(output="o"))
    assert cheaper_cut(applied, plan(4, "bi")) == NextCut(2, "bi")  # selected again by its own
    line = command(cfg("auto"), NextCut(1, None, "linear"))
    assert line.startswith("swapprune ") and "--budget 1 --protocol auto" in line
    assert "--patch linear" in line and "--output smollm2-135m-auto-1" in line
