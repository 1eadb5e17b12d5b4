"""The command line end to end on a tiny saved model, and its bad-input contract."""

import json

import pytest
from tiny_models import save_tiny
from transformers import AutoModelForCausalLM

from swapprune.cli import main

FAST = ["--prompts", "4", "--tokens", "32", "--no-progress"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny("qwen2", tmp_path_factory.mktemp("m") / "tiny-qwen2"))


def test_prune_writes_a_checkpoint_that_loads(model_dir, tmp_path, capsys):
    out = tmp_path / "pruned"
    rc = main(
        [
            "--model",
            model_dir,
            "--budget",
            "2",
            "--protocol",
            "interchange",
            "--output",
            str(out),
            *FAST,
        ]
    )
    assert rc == 0
    plan = json.loads((out / "plan.json").read_text())
    assert len(plan["kept"]) == 4 and len(plan["removed"]) == 2
    assert (out / "scores.json").is_file() and (out / "mergekit.yaml").is_file()
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["selfcheck"]["generate_cache_equal"] is True
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.num_hidden_layers == 4
    assert "checkpoint:" in capsys.readouterr().out

    again = tmp_path / "again"
    assert (
        main(
            [
                "apply",
                "--plan",
                str(out / "plan.json"),
                "--model",
                model_dir,
                "--output",
                str(again),
            ]
        )
        == 0
    )
    assert json.loads((again / "plan.json").read_text())["kept"] == plan["kept"]


def test_score_command(model_dir, tmp_path):
    out = tmp_path / "scores.json"
    assert (
        main(["score", "--model", model_dir, "--output", str(out), "--pairs", "gap:2", *FAST]) == 0
    )
    data = json.loads(out.read_text())
    assert len(data["pairs"]) == 9 and data["calibration"]["prompts"] == 4


@pytest.mark.parametrize(
    "args, message",
    [
        (["--budget", "0", "--protocol", "interchange"], "budget must be >= 1"),
        (
            ["--budget", "6", "--protocol", "interchange"],
            "the 5 blocks that can be removed from a 6-block",
        ),
        (["--budget", "4", "--protocol", "interchange"], "adjacent"),
        (["--budget", "1", "--protocol", "interchang"], "did you mean 'interchange'"),
        (["--budget", "1", "--strategy", "gredy"], "did you mean 'greedy'"),
        (["--budget", "1", "--op", "merge", "--merge", "lacoo"], "did you mean 'laco'"),
        (["--budget", "3", "--strategy", "spaced:3"], "impossible"),
        (["--budget", "1", "--tokens", "100000"], "context"),
    ],
)
def test_bad_prune_input_exits_2_and_writes_nothing(model_dir, tmp_path, capsys, args, message):
    out = tmp_path / "out"
    assert main(["--model", model_dir, "--output", str(out), *args, "--no-progress"]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("swapprune:")]
    assert len(lines) == 1 and message in lines[0]
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_bad_score_input(model_dir, tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["score", "--model", model_dir, "--output", str(out), "--probes", "swap"]) == 2
    assert main(["score", "--model", model_dir, "--output", str(out), "--pairs", "3-9"]) == 2
    assert main(["score", "--model", str(tmp_path / "missing"), "--output", str(out)]) == 2
    assert "not found" in capsys.readouterr().err
    assert not out.exists()


def test_existing_output_needs_overwrite(model_dir, tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["--model", model_dir, "--budget", "1", "--output", str(out), *FAST]) == 2
    assert "not empty" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "interchange" in out and "greedy" in out and "laco" in out
    # every table's descriptions start in one column, past its longest name
    rows = [line for line in out.splitlines() if line.startswith("  ")]
    starts = {len(line) - len(line[2:].split(" ", 1)[1].lstrip()) for line in rows}
    assert len(starts) == 1, starts
    assert any(line.split()[0] == "replacement-directed" for line in rows)


def test_validate_writes_the_report(model_dir, tmp_path, capsys):
    out = tmp_path / "v"
    assert (
        main(
            [
                "validate",
                "--model",
                model_dir,
                "--criteria",
                "interchange,bi",
                "--output",
                str(out),
                "--bootstrap",
                "50",
                *FAST,
            ]
        )
        == 0
    )
    data = json.loads((out / "validity.json").read_text())
    assert set(data["criteria"]) == {"interchange", "bi"}
    assert (out / "validity.md").is_file() and (out / "validity.png").is_file()
    assert "| interchange |" in capsys.readouterr().out


def test_version_and_command_did_you_mean(capsys):
    from swapprune import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"swapprune {__version__}"
    assert main(["scroe"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "swapprune: error: unknown command 'scroe' (did you mean 'score'?)"


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["prune"],
        ["score"],
        ["apply"],
        ["eval"],
        ["compare"],
        ["validate"],
        ["run"],
        ["list"],
        ["--budget", "2"],
    ],
)
def test_help_of_every_command(command, capsys):
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: swapprune")
    if command[:1] in (["prune"], ["--budget"]):
        assert "(default: 64)" in out and "--no-eval" in out and "--quick" in out


def test_a_reader_that_stops_early_gets_no_traceback():
    """``swapprune run --schema | head -5``: the pipe closes, the command stops quietly."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "swapprune", "run", "--schema"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # the reader is gone before the first line is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141  # as a tool killed by SIGPIPE
    assert err == "", err


def test_the_quick_flag_says_the_settings_it_sets(capsys):
    """Only the settings this command has, each by its flag (prune has no --bootstrap)."""
    from swapprune.config import QUICK

    assert main(["prune", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    said = text.split("--quick a first look, quicker than the defaults: ", 1)[1]
    assert said.startswith("--prompts 16, --tokens 64, --tranche 8, --heldout-tokens 128,")
    assert "bootstrap" not in said.split("(explicit flags win)")[0]
    assert QUICK["score.bootstrap"] == 200
    assert main(["score", "--help"]) == 0
    assert "--bootstrap 200" in " ".join(capsys.readouterr().out.split())


def test_no_certify_says_what_it_does(capsys):
    assert main(["prune", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--no-certify keep the criterion's own choice without certifying it" in text
    assert "skip: certify" not in text


@pytest.mark.parametrize(
    "command, kept",
    [
        ("prune", "partial files removed; no checkpoint written, {out} is as it was"),
        ("score", "partial files removed; nothing was written"),
    ],
)
def test_an_interrupted_command_says_what_it_kept_and_where(
    model_dir, tmp_path, capsys, monkeypatch, command, kept
):
    import swapprune.pipeline.stages as stages

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(stages, "load", stop)
    out = tmp_path / ("out" if command == "prune" else "s.json")
    extra = ["--budget", "1"] if command == "prune" else []
    argv = [command, "--model", model_dir, "--output", str(out), "--no-progress", *extra]
    assert main(argv) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"swapprune: interrupted; {kept.format(out=out)}"]


def test_an_interrupted_score_names_the_file_it_resumes_from(model_dir, tmp_path, capsys):
    from swapprune.cli import build_parser, kept_on_interrupt

    out = tmp_path / "s.json"
    args = build_parser().parse_args(["score", "--model", model_dir, "--output", str(out)])
    assert kept_on_interrupt(args) == "partial files removed; nothing was written"
    out.write_text("{}")  # what a flush leaves
    assert kept_on_interrupt(args) == (
        f"partial files removed; the probes finished so far are in {out}, and the same "
        "command resumes from them"
    )
