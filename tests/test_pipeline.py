"""One pipeline: every entry path gives the same plan for the same settings."""

import json

import pytest
import yaml
from tiny_models import save_tiny

import swapprune
from swapprune.cli import main
from swapprune.config import CalibrationConfig, ModelConfig, RunConfig, SelectConfig

SETTINGS = ["--prompts", "4", "--tokens", "32", "--seed", "3", "--no-progress"]


@pytest.mark.slow  # minutes on a shared 2-core machine; CI runs it in the slow step
def test_prune_run_compare_and_python_agree(tmp_path):
    """The CLI, a recipe and the Python API give one plan, certified alike; compare measures
    the criterion's own choice, which is the plan of a run without the certificate."""
    model_dir = str(save_tiny("llama", tmp_path / "m"))
    for criterion in ("interchange", "replacement"):
        plans = {}
        for certify in (True, False):
            pruned = tmp_path / f"pruned-{criterion}-{certify}"
            flags = [] if certify else ["--no-certify"]
            argv = ["--model", model_dir, "--budget", "2", "--protocol", criterion]
            assert main([*argv, "--output", str(pruned), "--no-selfcheck", *SETTINGS, *flags]) == 0
            plans[certify] = json.loads((pruned / "plan.json").read_text())
        removed = plans[True]["removed"]
        cert = plans[True]["scores"]["certificate"]
        assert cert["chosen"] == plans[False]["removed"] and cert["kept"] == removed
        assert "certificate" not in plans[False]["scores"]

        recipe = tmp_path / f"{criterion}.yaml"
        recipe.write_text(
            yaml.safe_dump(
                {
                    "model": {"name": model_dir},
                    "calibration": {"prompts": 4, "tokens": 32, "seed": 3},
                    "prune": {"budget": 2, "protocol": criterion},
                    "export": {"output": str(tmp_path / f"run-{criterion}"), "selfcheck": False},
                }
            )
        )
        assert main(["run", str(recipe), "--no-progress"]) == 0
        ran = json.loads((tmp_path / f"run-{criterion}" / "plan.json").read_text())
        assert ran["scores"]["certificate"] == cert

        cmp = tmp_path / f"cmp-{criterion}"
        argv = ["compare", "--model", model_dir, "--budgets", "2", "--criteria", criterion]
        more = ["--output", str(cmp), "--words", "100", "--max-length", "64", *SETTINGS]
        assert main([*argv, *more]) == 0
        compared = json.loads((cmp / "results.json").read_text())["budgets"][0]["methods"]
        cfg = RunConfig(
            model=ModelConfig(model_dir),
            calibration=CalibrationConfig(prompts=4, tokens=32, seed=3),
            prune=SelectConfig(budget=2, protocol=criterion),
        )
        api = swapprune.run(cfg, progress=False).plan.removed
        assert removed == ran["removed"] == api, criterion
        assert compared[criterion]["removed"] == plans[False]["removed"], criterion
        assert len(removed) == 2


def test_auto_and_adaptive_record_what_they_did(tmp_path, capsys):
    model_dir = str(save_tiny("llama", tmp_path / "m"))
    fast = ["--tokens", "32", "--prompts", "16", "--tranche", "8", "--no-progress"]
    out = tmp_path / "auto"
    assert (
        main(
            [
                "--model",
                model_dir,
                "--budget",
                "2",
                "--protocol",
                "auto",
                "--output",
                str(out),
                *fast,
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "action:" in printed and "adaptive calibration:" in printed and "cost:" in printed
    plan = json.loads((out / "plan.json").read_text())
    assert plan["protocol"] == "auto" and plan["scores"]["auto"]["regime"]["call"] in (
        "tie-like",
        "divergent",
        "both-high",
    )
    # tranches stop on the certificate, or at the cap
    assert plan["scores"]["auto"]["adaptive"]["stopped"] in ("certified", "max windows")
    assert plan["scores"]["certificate"]["kept"] == plan["removed"]
    # ... and the record says whether the final certificate (beam's set included) agrees
    adaptive = plan["scores"]["auto"]["adaptive"]
    assert adaptive["final_certified"] == plan["scores"]["certificate"]["certified"]
    overruled = adaptive["stopped"] == "certified" and not adaptive["final_certified"]
    assert ("stop_note" in adaptive) == overruled
    assert not overruled or adaptive["stop_note"] in printed
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["cost"]["dppl"] == json.loads((out / "metrics.json").read_text())["cost"]["dppl"]
    assert "What `--protocol auto` decided: regime" in (out / "README.md").read_text()

    out = tmp_path / "adaptive"
    assert (
        main(
            [
                "--model",
                model_dir,
                "--budget",
                "2",
                "--protocol",
                "interchange",
                "--adaptive",
                "on",
                "--no-eval",
                "--output",
                str(out),
                *fast,
            ]
        )
        == 0
    )
    plan = json.loads((out / "plan.json").read_text())
    assert plan["scores"]["adaptive"]["windows"] <= 16
    cert = plan["scores"]["certificate"]
    assert plan["scores"]["stability"]["chosen"] == cert["chosen"]
    assert cert["kept"] == plan["removed"]
    # The stopping rule judged the selection the plan made (same residual tie-break).
    last = plan["scores"]["adaptive"]["rounds"][-1]
    assert last["chosen"]["interchange"] == cert["chosen"]
    assert last["certificate"]["certified"] == (
        plan["scores"]["adaptive"]["stopped"] == "certified"
    )
    assert plan["scores"]["adaptive"]["final_certified"] == cert["certified"]
    assert "cost" not in json.loads((out / "metrics.json").read_text())


def test_a_plan_or_scores_from_another_model_is_refused(tmp_path, capsys):
    a = str(save_tiny("llama", tmp_path / "a", seed=0))
    b = str(save_tiny("llama", tmp_path / "b", seed=1))  # same depth, other weights
    out = tmp_path / "pa"
    assert main(["--model", a, "--budget", "1", "--output", str(out), "--no-eval", *SETTINGS]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan["fingerprint"]["num_layers"] == 6
    assert (
        main(
            [
                "apply",
                "--plan",
                str(out / "plan.json"),
                "--model",
                b,
                "--output",
                str(tmp_path / "x"),
                "--no-progress",
            ]
        )
        == 2
    )
    assert "plan" in capsys.readouterr().err
    assert (
        main(
            [
                "--model",
                b,
                "--scores",
                str(out / "scores.json"),
                "--budget",
                "1",
                "--output",
                str(tmp_path / "y"),
                "--no-progress",
            ]
        )
        == 2
    )
    assert "scores file" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_provenance_of_reused_scores_is_their_own_calibration(tmp_path):
    model_dir = str(save_tiny("llama", tmp_path / "m"))
    scores = tmp_path / "s.json"
    assert (
        main(
            [
                "score",
                "--model",
                model_dir,
                "--output",
                str(scores),
                "--prompts",
                "4",
                "--tokens",
                "24",
                "--no-progress",
            ]
        )
        == 0
    )
    out = tmp_path / "p"
    # No calibration flags: the run's own defaults (64 x 128) were never used for these scores.
    assert (
        main(
            [
                "--model",
                model_dir,
                "--scores",
                str(scores),
                "--budget",
                "1",
                "--output",
                str(out),
                "--no-eval",
                "--no-progress",
            ]
        )
        == 0
    )
    prov = json.loads((out / "provenance.json").read_text())
    cal = prov["invocation"]["calibration"]
    assert (cal["prompts"], cal["tokens"]) == (4, 24)
    assert prov["invocation"]["scores_reused_from"] == str(scores)
    assert json.loads((out / "scores.json").read_text())["calibration"]["prompts"] == 4


def test_python_auto_selects_as_the_cli_does(tmp_path):
    """``swapprune.prune(protocol="auto")`` reaches the same select() with the CLI's settings:
    the same adaptive tranches of the same window pool, hence the same plan."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = str(save_tiny("llama", tmp_path / "m"))
    adaptive = ["--tranche", "4", "--prompts", "8"]
    out = tmp_path / "auto"
    argv = ["--model", model_dir, "--budget", "1", "--protocol", "auto", "--output", str(out)]
    assert main([*argv, "--no-eval", "--no-selfcheck", *SETTINGS, *adaptive]) == 0
    cli = json.loads((out / "plan.json").read_text())

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    _, plan = swapprune.prune(
        model,
        AutoTokenizer.from_pretrained(model_dir),
        budget=1,
        protocol="auto",
        prompts=8,
        tokens=32,
        seed=3,
        tranche=4,
        progress=False,
    )
    assert plan.removed == cli["removed"]
    auto, cli_auto = plan.records.auto, cli["scores"]["auto"]
    assert auto.adaptive.rounds == cli_auto["adaptive"]["rounds"]
    assert auto.adaptive.rounds[0]["windows"] == 4  # tranches, as on the command line
    assert auto.regime == cli_auto["regime"]
