"""Probes on a model whose blocks accelerate offloads to disk equal the in-memory ones."""

import numpy as np
from tiny_models import save_tiny, tiny_ids, tiny_model
from transformers import AutoModelForCausalLM

from swapprune.engine.scoring import score


def test_disk_offloaded_blocks_score_like_in_memory(tmp_path):
    path = save_tiny("llama", tmp_path / "m")
    device_map = {
        "model.embed_tokens": "cpu",
        "model.rotary_emb": "cpu",
        "model.norm": "cpu",
        "lm_head": "cpu",
        **{f"model.layers.{i}": "cpu" for i in range(3)},
        **{f"model.layers.{i}": "disk" for i in range(3, 6)},
    }
    offloaded = AutoModelForCausalLM.from_pretrained(
        path, device_map=device_map, offload_folder=str(tmp_path / "off")
    ).eval()
    assert offloaded.model.layers[4].self_attn.q_proj.weight.device.type == "meta"
    ids = tiny_ids(3, 16)
    a = score(offloaded, calibration=ids, pairs="gap:2", progress=False)
    b = score(tiny_model("llama"), calibration=ids, pairs="gap:2", progress=False)
    for k in b.pairs:
        for key in b.pairs[k]:
            np.testing.assert_allclose(a.pairs[k][key], b.pairs[k][key], rtol=1e-5, atol=1e-10)
