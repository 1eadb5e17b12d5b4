"""``--scores`` without the probe the criterion reads is refused in one line, before the model
loads, naming the command that adds it; that command works as printed."""

from __future__ import annotations

import json
import shlex

import pytest
from tiny_models import save_tiny

from swapprune.cli import main

WINDOWS = ["--prompts", "4", "--tokens", "32"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny("llama", tmp_path_factory.mktemp("m") / "tiny"))


def _refusal(capsys, argv) -> str:
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("swapprune: error: "), err
    return err[0]


def test_a_scores_file_without_the_protocol_is_refused(model_dir, tmp_path, capsys):
    scores = tmp_path / "s.json"
    argv = ["score", "--model", model_dir, "--probes", "interchange", "--output", str(scores)]
    assert main([*argv, *WINDOWS, "--no-progress"]) == 0
    capsys.readouterr()
    out = tmp_path / "r"
    prune = ["--model", model_dir, "--scores", str(scores), "--budget", "1"]
    line = _refusal(capsys, [*prune, "--protocol", "replacement", "--output", str(out)])
    assert "has no replacement values, which --protocol replacement reads" in line
    assert "(it holds interchange)" in line and "or choose --protocol interchange" in line
    assert not out.exists()
    # The command it names resumes the file with the missing protocol, on its own windows.
    command = line.split("add them to the file: ", 1)[1].split("; or choose")[0]
    assert "--probes replacement" in command and "--prompts 4 --tokens 32" in command
    assert main([*shlex.split(command)[1:], "--no-progress"]) == 0
    assert json.loads(scores.read_text())["protocols"] == ["replacement", "interchange"]
    capsys.readouterr()
    assert main([*prune, "--protocol", "replacement", "--output", str(out), *WINDOWS]) == 0


def test_scores_a_selection_wrote_are_probed_again_without_them(model_dir, tmp_path, capsys):
    run = tmp_path / "p"
    assert main(["--model", model_dir, "--budget", "1", "--output", str(run), *WINDOWS]) == 0
    capsys.readouterr()
    prune = ["--model", model_dir, "--scores", str(run / "scores.json"), "--budget", "1"]
    line = _refusal(capsys, [*prune, "--protocol", "replacement", "--output", str(tmp_path / "r")])
    # Tranche windows are a subset of a pool: no resume, the run without --scores instead.
    assert "probe them without --scores: swapprune --model" in line
    assert "--scores" not in line.split("without --scores: ", 1)[1].split("; or")[0]
