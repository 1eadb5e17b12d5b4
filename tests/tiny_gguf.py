"""Tiny GGUF files written in code with ``gguf.GGUFWriter``: a Llama-like and a Gemma-3-like model.

Weights are seeded random, quantized to Q8_0 / Q4_0 (F16 for the Gemma
embeddings, F32 norms), so the writer's byte copies cover several types. The
byte-level BPE vocabulary is the one transformers' GGUF tokenizer loader reads
for Llama-style files. Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HIDDEN, FFN = 64, 128
# (heads, kv heads, head dim). Gemma-3's head dim is 256 because transformers' GGUF loader
# keeps the config default query_pre_attn_scalar=256 while llama.cpp scales by the head dim:
# the two agree only where they are equal, as in the released Gemma-3 models.
HEADS = {"llama": (4, 2, 16), "gemma3": (2, 1, 256)}
WINDOW = 4  # Gemma-3 sliding window: shorter than the check windows, so types matter


def _tokens() -> tuple[list[str], list[str], int]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "r e"]
    tokens = specials + list(bytes_to_unicode().values()) + [m.replace(" ", "") for m in merges]
    return tokens, merges, len(specials)


def tiny_vocab() -> list[str]:
    """The tiny vocabulary's pieces, by id."""
    return _tokens()[0]


def write_tiny_gguf(path: Path, arch: str = "llama", layers: int = 4, seed: int = 0) -> Path:
    """Write a tiny ``llama`` or ``gemma3`` GGUF to ``path``.

    The Llama file also carries two arch-prefixed arrays of length ``layers``:
    ``llama.test.layer_ids`` (``[0..layers-1]``, per layer: the writer must keep
    the kept blocks' entries) and ``llama.rope.dimension_sections`` (not per
    layer: it must be left alone).
    """
    import gguf
    from gguf import GGMLQuantizationType as Q

    heads, kv_heads, head_dim = HEADS[arch]
    rng = np.random.default_rng(seed)
    tokens, merges, n_special = _tokens()
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}")
    w.add_block_count(layers)
    w.add_context_length(128)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(len(tokens))
    if arch == "gemma3":
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_sliding_window(WINDOW)
    else:
        w.add_rope_dimension_count(head_dim)
        w.add_array("llama.test.layer_ids", list(range(layers)))
        w.add_array("llama.rope.dimension_sections", [2] * layers)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3] * n_special + [1] * (len(tokens) - n_special))
    w.add_token_merges(merges)
    if arch == "gemma3":
        # transformers < 5.2x reads a Gemma GGUF's vocabulary as SentencePiece and needs scores
        w.add_token_scores([0.0] * len(tokens))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"
    )

    def tensor(name: str, shape: tuple[int, ...], qtype) -> None:
        data = rng.standard_normal(shape).astype(np.float32)
        data = 1 + 0.1 * data if len(shape) == 1 else 0.05 * data
        if qtype == Q.F16:
            w.add_tensor(name, data.astype(np.float16))
        elif qtype == Q.F32:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)

    q, kv = head_dim * heads, head_dim * kv_heads
    tensor("token_embd.weight", (len(tokens), HIDDEN), Q.F16 if arch == "gemma3" else Q.Q8_0)
    for i in range(layers):
        tensor(f"blk.{i}.attn_norm.weight", (HIDDEN,), Q.F32)
        tensor(f"blk.{i}.attn_q.weight", (q, HIDDEN), Q.Q4_0)
        tensor(f"blk.{i}.attn_k.weight", (kv, HIDDEN), Q.Q8_0)
        tensor(f"blk.{i}.attn_v.weight", (kv, HIDDEN), Q.Q8_0)
        tensor(f"blk.{i}.attn_output.weight", (HIDDEN, q), Q.Q4_0)
        tensor(f"blk.{i}.ffn_norm.weight", (HIDDEN,), Q.F32)
        tensor(f"blk.{i}.ffn_gate.weight", (FFN, HIDDEN), Q.Q4_0)
        tensor(f"blk.{i}.ffn_up.weight", (FFN, HIDDEN), Q.Q8_0)
        tensor(f"blk.{i}.ffn_down.weight", (HIDDEN, FFN), Q.Q4_0)
        if arch == "gemma3":
            tensor(f"blk.{i}.attn_q_norm.weight", (head_dim,), Q.F32)
            tensor(f"blk.{i}.attn_k_norm.weight", (head_dim,), Q.F32)
            tensor(f"blk.{i}.post_attention_norm.weight", (HIDDEN,), Q.F32)
            tensor(f"blk.{i}.post_ffw_norm.weight", (HIDDEN,), Q.F32)
    tensor("output_norm.weight", (HIDDEN,), Q.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
