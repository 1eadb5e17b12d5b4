"""PrunePlan: construction, validation, JSON round trip and the mergekit config."""

from __future__ import annotations

import json

import pytest
import yaml

from swapprune.errors import SwappruneError
from swapprune.plan import PrunePlan


def test_from_removal_partitions_layers():
    plan = PrunePlan.from_removal(6, [3, 1], protocol="swap-kl", strategy="greedy", budget=2)
    assert plan.kept == [0, 2, 4, 5]
    assert plan.removed == [1, 3]
    assert plan.op == "remove" and plan.merged == {} and not plan.is_identity
    assert PrunePlan.from_removal(6, []).is_identity


def test_from_merges_removes_absorbed_blocks():
    plan = PrunePlan.from_merges(8, {4: [5], 1: [2, 3]}, merge="laco")
    assert plan.kept == [0, 1, 4, 6, 7]
    assert plan.removed == [2, 3, 5]
    assert plan.merged == {4: [4, 5], 1: [1, 2, 3]}
    assert plan.op == "merge" and plan.merge == "laco"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_layers=4, kept=[0, 1, 2], removed=[4]), "out of range"),
        (dict(num_layers=4, kept=[0, 1, 2], removed=[]), "neither keeps nor removes"),
        (dict(num_layers=4, kept=[0, 1, 2, 3], removed=[3]), "both kept and removed"),
        (dict(num_layers=4, kept=[0, 1, 1, 2], removed=[3]), "twice"),
        (dict(num_layers=4, kept=[1, 0, 2], removed=[3]), "ascending"),
        (dict(num_layers=4, kept=[], removed=[0, 1, 2, 3]), "keeps no block"),
        (dict(num_layers=0, kept=[]), "positive"),
        (dict(num_layers=4, kept=[0, 1, 2], removed=[3], op="drop"), "op must be"),
        (dict(num_layers=4, kept=[0, 1, 2], removed=[3], merged={2: [2, 3]}), "op is 'remove'"),
        (
            dict(num_layers=4, kept=[0, 1, 2], removed=[3], merged={2: [2, 3]}, op="merge"),
            "names no merge rule",
        ),
        (
            dict(
                num_layers=4,
                kept=[0, 1, 2],
                removed=[3],
                merged={3: [3]},
                op="merge",
                merge="average",
            ),
            "not a kept block",
        ),
        (
            dict(
                num_layers=4,
                kept=[0, 1, 3],
                removed=[2],
                merged={1: [1, 2], 3: [2, 3]},
                op="merge",
                merge="average",
            ),
            "both",
        ),
        (
            dict(
                num_layers=4,
                kept=[0, 1, 2],
                removed=[3],
                merged={1: [1, 2]},
                op="merge",
                merge="average",
            ),
            "not listed as removed",
        ),
        (
            dict(
                num_layers=4,
                kept=[0, 1, 2],
                removed=[3],
                merged={1: [2, 3]},
                op="merge",
                merge="average",
            ),
            "must include 1",
        ),
        (dict(num_layers=4, kept=[0, 1.0, 2], removed=[3]), "not an integer"),
    ],
)
def test_invalid_plans_are_user_errors(kwargs, message):
    with pytest.raises(SwappruneError, match=message):
        PrunePlan(**kwargs)


def test_json_round_trip(tmp_path):
    plan = PrunePlan.from_merges(
        8,
        {4: [5]},
        merge="average",
        budget=1,
        protocol="replacement",
        strategy="greedy",
        scores={"importance": [0.1 * i for i in range(8)], "note": "x"},
        model="tiny/llama",
    )
    path = tmp_path / "plan.json"
    plan.to_json(path)
    data = json.loads(path.read_text())
    assert data["merged"] == {"4": [4, 5]}
    assert '"kept": [0, 1, 2, 3, 4, 6, 7]' in path.read_text()
    assert PrunePlan.from_json(path) == plan


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"num_layers": 3, "kept": [0, 1, 2], "kep": []}', "unknown keys"),
        ('{"num_layers": 3}', "missing key 'kept'"),
        ('{"num_layers": 3, "kept": [0, 1, 2, 3]}', "out of range"),
        (
            '{"num_layers": 3, "kept": [0, 1], "removed": [2], "merged": {"x": [1]}, '
            '"op": "merge", "merge": "average"}',
            "not a kept block",
        ),
    ],
)
def test_from_json_rejects_bad_files(tmp_path, text, message):
    path = tmp_path / "plan.json"
    path.write_text(text)
    with pytest.raises(SwappruneError, match=message):
        PrunePlan.from_json(path)


def test_from_json_missing_file(tmp_path):
    with pytest.raises(SwappruneError, match="cannot read plan"):
        PrunePlan.from_json(tmp_path / "absent.json")


def test_mergekit_yaml_uses_exclusive_bounds():
    plan = PrunePlan.from_removal(6, [3])
    assert plan.kept == [0, 1, 2, 4, 5]
    text = plan.mergekit_yaml("org/model", dtype="float16")
    assert "EXCLUSIVE" in text
    config = yaml.safe_load(text)
    ranges = [s["sources"][0]["layer_range"] for s in config["slices"]]
    assert ranges == [[0, 3], [4, 6]]
    assert all(s["sources"][0]["model"] == "org/model" for s in config["slices"])
    assert config["merge_method"] == "passthrough" and config["dtype"] == "float16"


def test_mergekit_yaml_covers_exactly_the_kept_layers():
    plan = PrunePlan.from_removal(10, [0, 4, 5, 9])
    config = yaml.safe_load(plan.mergekit_yaml("m"))
    layers = [i for s in config["slices"] for i in range(*s["sources"][0]["layer_range"])]
    assert layers == plan.kept


def test_mergekit_yaml_for_merges_warns():
    plan = PrunePlan.from_merges(6, {4: [5]}, merge="laco")
    text = plan.mergekit_yaml("a model:with odd chars")
    assert "passthrough cannot express merges" in text
    assert "merged weights are not reproduced" in text
    config = yaml.safe_load(text)
    assert config["slices"][0]["sources"][0]["model"] == "a model:with odd chars"
    assert [s["sources"][0]["layer_range"] for s in config["slices"]] == [[0, 5]]


def test_fingerprint_round_trips_and_old_plans_still_load(tmp_path):
    fp = {
        "config": "0123456789abcdef",
        "weights": "fedcba9876543210",
        "dtype": "float32",
        "num_layers": 6,
    }
    plan = PrunePlan.from_removal(6, [2], fingerprint=fp)
    plan.to_json(tmp_path / "plan.json")
    assert PrunePlan.from_json(tmp_path / "plan.json").fingerprint == fp
    old = plan.to_dict()
    del old["fingerprint"]  # written before plans carried one
    assert PrunePlan.from_dict(old).fingerprint is None


# -- a source's id: the hub id, or an absolute path ---------------------------


def _sources(tmp_path, monkeypatch):
    from swapprune.model.load import resolve_source

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "w.gguf").write_bytes(b"GGUF")
    monkeypatch.chdir(tmp_path)
    return {
        "org/model": resolve_source("org/model"),
        "m": resolve_source("m"),
        "./m/": resolve_source("./m/"),
        "w.gguf": resolve_source("w.gguf"),
    }


def test_source_id_is_the_hub_id_or_an_absolute_path(tmp_path, monkeypatch):
    src = _sources(tmp_path, monkeypatch)
    assert src["org/model"].id == "org/model"
    assert src["m"].id == src["./m/"].id == str(tmp_path.resolve() / "m")
    assert src["w.gguf"].id == str(tmp_path.resolve() / "w.gguf")


# The alias, the card and mergekit's source: tests/test_model_source.py.
