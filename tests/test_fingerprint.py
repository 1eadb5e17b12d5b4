"""Model fingerprints: equal for the same model, different for another of the same depth."""

from __future__ import annotations

import pytest
import torch
from tiny_models import save_tiny, tiny_model

from swapprune.engine.probing import score
from swapprune.errors import SwappruneError
from swapprune.model.fingerprint import check_same_model, fingerprint_difference, model_fingerprint


def test_same_model_same_fingerprint_across_loads(tmp_path):
    from transformers import AutoModelForCausalLM

    path = save_tiny("llama", tmp_path / "m")
    a = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    b = AutoModelForCausalLM.from_pretrained(str(path) + "/", dtype=torch.float32)
    fa, fb = model_fingerprint(a), model_fingerprint(b)
    assert fa == fb  # the load path (_name_or_path) is not part of it
    assert set(fa) == {"config", "weights", "dtype", "num_layers"}
    assert len(fa["config"]) == len(fa["weights"]) == 16 and fa["num_layers"] == 6
    assert fa == model_fingerprint(tiny_model("llama"))  # saved and reloaded = in memory
    check_same_model(fa, fb, "scores file")  # no error


def test_another_model_of_the_same_depth_differs():
    base = model_fingerprint(tiny_model("llama"))
    other = model_fingerprint(tiny_model("llama", seed=1))
    assert other["config"] == base["config"] and other["weights"] != base["weights"]
    with pytest.raises(
        SwappruneError,
        match=r"^plan p\.json was made from a different model "
        r"\(weights [0-9a-f]{16} vs [0-9a-f]{16}\)",
    ):
        check_same_model(base, other, "plan p.json")


@pytest.mark.parametrize("tensor", ["embed", "first", "last"])
def test_each_hashed_tensor_matters(tensor):
    model = tiny_model("qwen2")
    base = model_fingerprint(model)
    weight = {
        "embed": model.model.embed_tokens.weight,
        "first": next(model.model.layers[0].parameters()),
        "last": next(model.model.layers[5].parameters()),
    }[tensor]
    with torch.no_grad():
        weight.view(-1)[0] += 1e-3
    assert model_fingerprint(model)["weights"] != base["weights"]


def test_config_dtype_and_depth_are_named():
    fp = model_fingerprint(tiny_model("llama"))
    other_cfg = model_fingerprint(tiny_model("mistral"))
    assert fingerprint_difference(fp, other_cfg).startswith("config ")
    half = model_fingerprint(tiny_model("llama").to(torch.bfloat16))
    assert half["dtype"] == "bfloat16" and half["config"] == fp["config"]
    assert fingerprint_difference(fp, half) == "dtype float32 vs bfloat16"
    shallow = dict(fp, num_layers=5)
    assert fingerprint_difference(fp, shallow) == "block count 6 vs 5"


def test_volatile_config_fields_are_ignored():
    model = tiny_model("llama")
    fp = model_fingerprint(model)
    model.config._name_or_path = "/somewhere/else"
    model.config.use_cache = not model.config.use_cache
    assert model_fingerprint(model) == fp
    model.config.rms_norm_eps = 1e-3  # a real setting
    assert model_fingerprint(model)["config"] != fp["config"]


def test_missing_fingerprint_is_accepted():
    fp = model_fingerprint(tiny_model("gpt2"))
    assert fingerprint_difference(None, fp) is None and fingerprint_difference(fp, {}) is None
    check_same_model(None, fp, "plan")


def test_scores_record_the_fingerprint():
    model = tiny_model("gpt2")
    res = score(
        model, calibration=torch.randint(3, 90, (2, 8)), pairs="0-1", n_boot=10, progress=False
    )
    assert res.meta["fingerprint"] == model_fingerprint(model)
    assert res.to_dict()["fingerprint"] == model_fingerprint(model)


def test_offloaded_weights_are_read(tmp_path):
    pytest.importorskip("accelerate")
    from transformers import AutoModelForCausalLM

    path = save_tiny("llama", tmp_path / "m")
    offloaded = AutoModelForCausalLM.from_pretrained(
        path,
        dtype=torch.float32,
        device_map={
            "model.embed_tokens": "cpu",
            "model.layers": "disk",
            "model.norm": "cpu",
            "model.rotary_emb": "cpu",
            "lm_head": "cpu",
        },
        offload_folder=str(tmp_path / "off"),
    )
    assert next(offloaded.model.layers[0].parameters()).device.type == "meta"
    assert model_fingerprint(offloaded) == model_fingerprint(tiny_model("llama"))


@pytest.mark.slow
def test_real_model_same_through_any_load_path():
    """The alias (possibly through the converted-GGUF cache) and a direct GGUF load agree."""
    from transformers import AutoModelForCausalLM

    from swapprune.model.load import load_model

    model, _, source = load_model("smollm2-135m", progress=False)
    direct = AutoModelForCausalLM.from_pretrained(
        source.path, gguf_file=source.gguf_file, dtype=torch.float32
    )
    a, b = model_fingerprint(model), model_fingerprint(direct)
    assert a == b and a["num_layers"] == 30
    assert model_fingerprint(tiny_model("llama"))["weights"] != a["weights"]
