"""Bad input from the command line: one line on stderr, exit 2, nothing written, no compute.

Every case here once gave a traceback, or failed only after the model had loaded.
"""

import json

import pytest
from tiny_models import save_tiny

import swapprune.pipeline.stages as stages
from swapprune.cli import main


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny("llama", tmp_path_factory.mktemp("m") / "tiny"))


@pytest.fixture
def no_load(monkeypatch):
    """Fail the test if a command gets as far as loading the model."""

    def refuse(*a, **k):
        raise AssertionError("the model was loaded before the input was checked")

    monkeypatch.setattr(stages, "load", refuse)


CASES = [
    (["--budget", "1", "--seed", "-1"], "seed must be >= 0"),
    (["--budget", "1", "--batch-size", "0"], "batch_size must be >= 1"),
    (["--budget", "1", "--prompts", "0"], "prompts must be >= 1"),
    (["--budget", "1", "--device", "foo"], "unknown device 'foo'"),
    (["--budget", "1", "--dtype", "float8"], "unknown dtype 'float8'"),
    (["--budget", "1", "--max-oracle-calls", "0"], "max_oracle_calls must be >= 1"),
    (["--budget", "40"], "budget 40"),
    (["--budget", "1", "--tokens", "100000"], "context length"),
    (["--budget", "1", "--protocol", "interchang"], "did you mean 'interchange'"),
    (["--budget", "1", "--protocl", "x"], "did you mean '--protocol'"),
    (
        ["--budget", "1", "--protocol", "auto", "--target-frequency", "1.5"],
        "stability target must be in (0, 1]",
    ),
    (["--budget", "1", "--protocol", "bi", "--adaptive", "on"], "adaptive calibration works"),
    (["--budget", "1", "--adaptive", "sometimes"], "unknown adaptive 'sometimes'"),
    (["--budget", "1", "--stability-threshold", "0"], "stability_threshold must be in (0, 1]"),
    (["--budget", "1", "--cost-windows", "1"], "cost windows must be 0 (all) or >= 2"),
    (["score", "--bootstrap", "0"], "bootstrap must be >= 1"),
    (["score", "--bootstrap", "-5"], "bootstrap must be >= 1"),
    (["score", "--probes", "swap"], "unknown probe 'swap'"),
    (["score", "--cache-gb", "0"], "cache_gb must be > 0"),
    (["eval", "--limit", "0"], "limit must be >= 1"),
    (["eval", "--tasks", "wikitext2_pl"], "did you mean"),
    (["compare", "--budgets", "0"], "budgets must be positive"),
    (["compare", "--criteria", "bii"], "did you mean 'bi'"),
    (["--budget", "1", "--certify-sets", "0"], "certify_sets must be >= 1"),
    (["--budget", "1", "--certify-delta", "-1"], "certify_delta must be >= 0"),
    (["--budget", "1", "--heldout-tokens", "1000"], "heldout_tokens 1000 exceeds the model's"),
    (["--budget", "1", "--heldout-calib", "missing.txt"], "heldout_calib: file missing.txt"),
]


@pytest.mark.parametrize("args, message", CASES)
def test_bad_flag_is_one_line_exit_2_nothing_written(
    model_dir, tmp_path, capsys, no_load, args, message
):
    work = tmp_path / "work"
    work.mkdir()
    command = args[0] if args[0] in ("score", "eval", "compare") else None
    rest = args[1:] if command else args
    out = work / ("out.json" if command in ("score", "eval") else "out")
    argv = ([command] if command else []) + [
        "--model",
        model_dir,
        "--output",
        str(out),
        "--no-progress",
        *rest,
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("command", ["score", "eval", "compare", "prune"])
def test_unusable_output_paths_fail_before_compute(model_dir, tmp_path, capsys, no_load, command):
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    directory = tmp_path / "a-dir"
    directory.mkdir()
    (directory / "x").write_text("mine")
    bad = [str(a_file / "under.json"), "n" * 300 + ".json"]
    if command in ("score", "eval"):
        bad.append(str(directory))  # a directory where a file is expected
    else:
        bad.append(str(a_file))  # a file where a directory is expected
    for out in bad:
        extra = ["--budget", "1"] if command == "prune" else []
        assert main([command, "--model", model_dir, "--output", out, "--no-progress", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("swapprune"), err
    assert a_file.read_text() == "mine" and (directory / "x").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-dir", "a-file"]


def test_recipe_seed_is_checked(model_dir, tmp_path, capsys, no_load):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        json.dumps(
            {"model": model_dir, "prune": {"budget": 1}, "export": {"output": str(tmp_path / "o")}}
        )
    )
    assert main(["run", str(recipe), "--set", "calibration.seed=-1"]) == 2
    assert "seed must be >= 0" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"]


def test_overwrite_never_replaces_the_model_or_the_working_directory(
    model_dir, tmp_path, capsys, no_load, monkeypatch
):
    assert (
        main(
            [
                "apply",
                "--plan",
                str(tmp_path / "nope.json"),
                "--model",
                model_dir,
                "--output",
                model_dir,
                "--overwrite",
            ]
        )
        == 2
    )
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    assert (
        main(
            [
                "apply",
                "--plan",
                str(plan),
                "--model",
                model_dir,
                "--output",
                model_dir,
                "--overwrite",
            ]
        )
        == 2
    )
    assert "would replace the input" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    assert main(["--model", model_dir, "--budget", "1", "--output", ".", "--overwrite"]) == 2
    assert "working directory" in capsys.readouterr().err
    assert (tmp_path / "plan.json").exists()


#: The flags that give the held-out windows enough text, as the refusal names them.
HELDOUT_FIX = (
    "lower --heldout-prompts (at least 4) or --heldout-tokens, or give a longer --heldout-calib, "
    "or cut without a certificate: --no-certify"
)


def test_a_heldout_source_with_too_few_windows_is_one_line(model_dir, tmp_path, capsys, no_load):
    """Found before the load: the windows are cut with the tokenizer alone."""
    short = tmp_path / "short.txt"
    short.write_text("too short for any held-out window. " * 10)
    out = tmp_path / "out"
    argv = ["--model", model_dir, "--budget", "1", "--output", str(out), "--no-progress"]
    assert main([*argv, "--heldout-calib", str(short), "--prompts", "4", "--tokens", "16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"swapprune: error: held-out source {short} has 1 window of 256 tokens outside the "
        f"scoring windows, 8 asked; {HELDOUT_FIX}"
    ]
    assert not out.exists() and not list(tmp_path.glob(".out*"))


def test_a_short_calibration_text_leaves_too_little_held_out_text(
    model_dir, tmp_path, capsys, no_load
):
    """The held-out windows come from the calibration text by default: a short --calib fits
    the scoring windows and leaves too little; every flag that fixes it is named."""
    short = tmp_path / "short.txt"
    short.write_text("a text long enough for the scoring windows, not for more. " * 40)
    out = tmp_path / "out"
    argv = ["--model", model_dir, "--budget", "1", "--output", str(out), "--no-progress"]
    assert main([*argv, "--calib", str(short), "--prompts", "4", "--tokens", "64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"swapprune: error: held-out source {short} has ")
    assert err[0].endswith(HELDOUT_FIX)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["short.txt"]
    # --no-certify needs no held-out text: the same run gets past the check (to the load)
    with pytest.raises(AssertionError, match="the model was loaded"):
        main([*argv, "--calib", str(short), "--prompts", "4", "--tokens", "64", "--no-certify"])


@pytest.mark.parametrize("command", ["prune", "score", "eval"])
def test_an_output_no_file_can_be_created_in_is_refused_before_the_load(
    model_dir, capsys, no_load, command
):
    """/proc takes no new file, even for root (whom every permission test lets through)."""
    out = "/proc/forbidden/" if command == "prune" else "/proc/forbidden/out.json"
    extra = ["--budget", "1"] if command == "prune" else []
    assert main([command, "--model", model_dir, "--output", out, "--no-progress", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"swapprune: error: --output {out} cannot be written: creating a file in /proc fails "
        "(No such file or directory)"
    ]


def _scores_doc(layers: int = 6) -> dict:
    """A scores file of a ``layers``-block model, as ``swapprune score`` writes it."""
    import numpy as np

    from swapprune.engine.scores import ScoreResult

    rng = np.random.default_rng(0)
    pairs = {
        (i, i + 1): {k: rng.uniform(0.01, 0.5, 4) for k in ("repl_ij", "repl_ji", "inter")}
        for i in range(layers - 1)
    }
    meta = {"model": "tiny", "num_layers": layers, "positions": "all",
            "fingerprint": {"config": "0123456789abcdef", "weights": "fedcba9876543210",
                            "dtype": "float32", "num_layers": layers}}  # fmt: skip
    return ScoreResult(meta=meta, pairs=pairs, n_boot=20).to_dict()


def _damaged(what: str) -> dict:
    data = _scores_doc()
    row = data["pairs"][2]
    if what == "fingerprint":
        data["fingerprint"] = {"bogus": 1}
    elif what == "garbage distance":
        row["interchange"]["distance"] = "garbage"
    elif what == "negative distance":
        row["interchange"]["distance"] = -5.0
    elif what == "negative window":
        row["replacement"]["per_window"][0][1] = -5.0
    return data


@pytest.mark.parametrize(
    "what, message",
    [
        ("fingerprint", 'fingerprint {"bogus": 1} is not a model fingerprint (fields config, '
                        "weights, dtype, num_layers)"),
        ("garbage distance", "pair 2-3's interchange distance 'garbage' is not a number"),
        ("negative distance", "pair 2-3's interchange distance -5.0 is negative, which no KL "
                              "divergence is"),
        ("negative window", "per-window value -5.0 is negative, which no KL divergence is"),
    ],
)  # fmt: skip
def test_a_damaged_scores_file_is_refused_before_the_load(
    model_dir, tmp_path, capsys, no_load, what, message
):
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps(_damaged(what)))
    out = tmp_path / "out"
    argv = ["--model", model_dir, "--budget", "1", "--scores", str(scores), "--output", str(out)]
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"swapprune: error: {scores}: malformed scores file: {message}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.json"]


def test_the_undamaged_scores_file_gets_past_the_checks(model_dir, tmp_path, no_load):
    """The same file, undamaged, is read and accepted: the run gets as far as the load."""
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps(_scores_doc()))
    argv = ["--model", model_dir, "--budget", "1", "--scores", str(scores), "--no-progress"]
    with pytest.raises(AssertionError, match="the model was loaded"):
        main([*argv, "--output", str(tmp_path / "out")])
