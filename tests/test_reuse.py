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


class _Scores:
    """A scores file's reading: which probes it holds, and how it was measured."""

    def __init__(self, protocols, calibration):
        self._protocols = protocols
        self.meta = {"calibration": calibration, "positions": "all"}

    def protocols(self):
        return list(self._protocols)


def test_the_refusal_carries_its_fix_as_data_and_the_cli_writes_it():
    from swapprune.cli import error_line
    from swapprune.config import ExportConfig, ModelConfig, RunConfig, SelectConfig
    from swapprune.errors import SwappruneError
    from swapprune.model.facts import ModelFacts
    from swapprune.pipeline.checks import selection_spec
    from swapprune.select.reuse import check_reused

    cfg = RunConfig(
        model=ModelConfig("m"),
        prune=SelectConfig(budget=1, protocol="replacement", scores="s.json"),
        export=ExportConfig(output="out"),
    )
    spec = selection_spec(cfg.prune, cfg.calibration, ModelFacts("llama", 6, 256, 32))
    scores = _Scores(["interchange"], {"source": "wikitext2-valid", "prompts": 4, "tokens": 32})
    with pytest.raises(SwappruneError) as e:
        check_reused(scores, spec, "s.json", cfg)
    fix = e.value.fix
    # The library says what is missing; the fix is a configuration, not a command line.
    assert fix is not None and fix.command == "score" and fix.what == "add them to the file"
    assert fix.config.score.probes == ["replacement"] and fix.config.score.output == "s.json"
    assert (fix.config.calibration.prompts, fix.config.calibration.tokens) == (4, 32)
    assert fix.config.prune is None and "swapprune" not in str(e.value)
    assert str(e.value).endswith("(it holds interchange); or choose --protocol interchange")
    line = error_line(e.value)
    assert "; add them to the file: swapprune score --model m " in line
    assert line.endswith("; or choose --protocol interchange")
    # Without the run's configuration there is no fix to write.
    with pytest.raises(SwappruneError) as bare:
        check_reused(scores, spec, "given as scores=")
    assert bare.value.fix is None and error_line(bare.value) == str(bare.value)
