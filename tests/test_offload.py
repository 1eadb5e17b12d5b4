"""Probes on a model whose blocks accelerate offloads to disk equal the in-memory ones,
and a model larger than its memory budget scores within that budget."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_models import save_tiny, tiny_ids, tiny_model
from transformers import AutoModelForCausalLM

from swapprune.engine.probing import score


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


# A process that loads a model through accelerate with max_memory={"cpu": CPU_BUDGET}
# (the rest offloaded; a budget of 0: plainly, in memory), scores it, and reports its peak RSS above the level after a
# warm-up: a tiny model scored first imports the modeling code and fills the
# allocator's pools, and clear_refs resets the kernel's high-water mark (VmHWM) so
# that the peak counts the big model's scoring alone.
_MEASURE = r"""
import json, sys
import torch
from transformers import AutoModelForCausalLM
from swapprune.engine.probing import score
from tiny_models import tiny_model, tiny_ids

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

path, folder, budget, out = sys.argv[1:5]
ids = tiny_ids(2, 16)
score(tiny_model("llama"), calibration=ids, pairs="0-1", batch_size=2, progress=False, n_boot=10)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM := VmRSS
base = status("VmRSS:")
placed = dict(device_map="auto", max_memory={"cpu": int(budget)}, offload_folder=folder)
model = AutoModelForCausalLM.from_pretrained(
    path, dtype=torch.float32, attn_implementation="eager", **(placed if int(budget) else {})
).eval()
res = score(model, calibration=ids, pairs="0-1,18-19", batch_size=2, progress=False, n_boot=10)
json.dump({
    "base": base, "peak": status("VmHWM:"),
    "placement": sorted(set(map(str, getattr(model, "hf_device_map", {}).values()))),
    "disk_modules": sum(v == "disk" for v in getattr(model, "hf_device_map", {}).values()),
    "values": {f"{i}-{j}": {k: v.tolist() for k, v in d.items()} for (i, j), d in res.pairs.items()},
}, open(out, "w"))
"""
CPU_BUDGET = 64 * 2**20
# What the measured process may hold above its warm baseline besides CPU_BUDGET of
# weights: the blocks being streamed in from the offload (one at a time, 16 MiB
# each here), the probe cache and activations, allocator slack.
MARGIN = 64 * 2**20


@pytest.mark.slow
def test_offloaded_model_scores_with_bounded_rss(tmp_path):
    """A 320 MiB model under max_memory={"cpu": 64 MiB} scores through accelerate's offload
    with a peak RSS of about the budget, not the model: measured in a subprocess."""
    import torch
    from tiny_models import FAMILY_CONFIGS
    from transformers import AutoConfig

    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux /proc/self/clear_refs to reset the RSS high-water mark")
    shape = dict(
        FAMILY_CONFIGS["llama"],
        hidden_size=512,
        intermediate_size=2048,
        num_hidden_layers=20,
        num_attention_heads=8,
        num_key_value_heads=8,
        head_dim=64,
    )
    cfg = AutoConfig.for_model("llama", **shape)
    torch.manual_seed(0)
    big = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    size = sum(p.numel() * p.element_size() for p in big.parameters())
    assert size > 300 * 2**20
    big.save_pretrained(tmp_path / "big")
    ids = tiny_ids(2, 16)
    ref = score(big, calibration=ids, pairs="0-1,18-19", batch_size=2, progress=False, n_boot=10)
    del big
    script = tmp_path / "measure.py"
    script.write_text(_MEASURE)
    tests = Path(__file__).resolve().parent
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=f"{tests.parent}{os.pathsep}{tests}")

    def measure(budget: int) -> dict:
        out = tmp_path / f"measured-{budget}.json"
        proc = subprocess.run(
            [
                sys.executable,
                str(script),
                str(tmp_path / "big"),
                str(tmp_path / "off"),
                str(budget),
                str(out),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(out.read_text())

    offloaded, in_memory = measure(CPU_BUDGET), measure(0)
    assert "disk" in offloaded["placement"] and offloaded["disk_modules"] > 0  # over budget
    peak = offloaded["peak"] - offloaded["base"]
    control = in_memory["peak"] - in_memory["base"]
    print(
        f"model {size / 2**20:.0f} MiB, cpu budget {CPU_BUDGET / 2**20:.0f} MiB: peak RSS above "
        f"the warm baseline {peak / 2**20:.1f} MiB offloaded, {control / 2**20:.1f} MiB in memory"
    )
    assert control > 0.9 * size  # the measurement sees a model that is held whole
    assert peak < CPU_BUDGET + MARGIN < size / 2
    for result in (offloaded, in_memory):
        for pair, d in ref.pairs.items():
            for key, v in d.items():
                got = result["values"][f"{pair[0]}-{pair[1]}"][key]
                np.testing.assert_allclose(got, v, rtol=1e-5)
