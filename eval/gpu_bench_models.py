"""Random-weight causal LMs in the shapes of Llama-3.1-8B and Qwen3-8B, and their FLOP counts.

Built in code from the published configs' shapes: nothing is downloaded, and
timing depends on the shapes, not on trained values. ``--tiny`` keeps each
family's architecture (attention layout, Qwen3's q/k norms, rotary variant)
and shrinks its dimensions so that the same code path runs on a CPU in seconds.

FLOPs are counted from the config, one multiply-add = 2 FLOPs, per token of a
window of ``T`` tokens (:func:`block_flops_per_token`, :func:`head_flops_per_row`):

* attention projections ``2 H (n_q d + 2 n_kv d) + 2 n_q d H`` (q, k, v, o),
* gated MLP ``2 * 3 H I`` (gate, up, down),
* attention scores ``4 n_q d T``: ``Q K^T`` and ``A V`` over the full ``T x T``
  square (a causal kernel skips about half of it; at T = 128 that is under
  0.3% of a Llama-3.1-8B block),
* LM head ``2 H V`` per row it is applied to.

Norms, rotary embeddings, activations and softmaxes are not counted.
"""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM

# The shapes of the published configs (meta-llama/Llama-3.1-8B, Qwen/Qwen3-8B).
SHAPES: dict[str, dict] = {
    "llama3.1-8b": dict(
        model_type="llama",
        num_hidden_layers=32,
        hidden_size=4096,
        intermediate_size=14336,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=128256,
        max_position_embeddings=131072,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters=dict(
            rope_type="llama3",
            rope_theta=500000.0,
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8192,
        ),
    ),
    "qwen3-8b": dict(
        model_type="qwen3",
        num_hidden_layers=36,
        hidden_size=4096,
        intermediate_size=12288,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
    ),
}

# --tiny: the same families, dimensions a CPU runs in milliseconds. Six blocks
# give five adjacent pairs, room for SLEB to remove two and for auto's beam. The
# larger init puts the tiny models in the both-high regime (median adjacent
# d_inter about 0.5; at the configs' 0.02 it is 0.002, tie-like), so the smoke
# run covers auto's expensive branch, the beam verified on the pruned model.
TINY = dict(
    initializer_range=0.2,
    num_hidden_layers=6,
    hidden_size=64,
    intermediate_size=160,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=512,
)
# The tiny Llama keeps the llama3 rotary variant, scaled to its context.
_TINY_ROPE = {
    "llama3.1-8b": dict(
        rope_type="llama3",
        rope_theta=500000.0,
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=64,
    ),
}


def config_of(name: str, tiny: bool = False):
    """The transformers config of family ``name`` (a key of :data:`SHAPES`)."""
    shape = dict(SHAPES[name])
    model_type = shape.pop("model_type")
    if tiny:
        shape.update(TINY, max_position_embeddings=512)
        shape["rope_parameters"] = _TINY_ROPE.get(name, shape["rope_parameters"])
    return AutoConfig.for_model(model_type, **shape)


def build_model(name: str, dtype: torch.dtype, device: str, seed: int = 0, tiny: bool = False):
    """A random-weight model of family ``name`` on ``device`` in ``dtype``, in eval mode.

    Weights are drawn in float32 directly on ``device`` (no CPU copy, no
    transfer) from ``seed``, then cast: the bfloat16 model is the float32 model
    rounded, so the bf16-vs-fp32 ranking compares one set of weights, and a
    rebuild with the same seed gives the same weights (checked by the bench
    through the float32 fingerprint this function returns).

    Returns:
        ``(model, fp32_fingerprint)``: the fingerprint of the float32 weights
        before the cast (:func:`swapprune.model.fingerprint.model_fingerprint`).
    """
    from swapprune.model.fingerprint import model_fingerprint

    cfg = config_of(name, tiny)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            cfg, dtype=torch.float32, attn_implementation="sdpa"
        )
    if next(model.parameters()).device.type != torch.device(device).type:
        model.to(device)  # a transformers version that ignores the device context
    model.eval()
    fingerprint = model_fingerprint(model)
    # Module.to casts parameter by parameter: the peak is the float32 model plus one tensor.
    model.to(dtype)
    return model, fingerprint


def param_bytes(model) -> int:
    """Bytes of the model's own parameters (what its weights occupy)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def block_flops_per_token(cfg, tokens: int) -> float:
    """FLOPs of one decoder block per token, for windows of ``tokens`` tokens (see module doc)."""
    h, d = cfg.hidden_size, cfg.head_dim
    n_q, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    projections = 2 * h * (n_q * d + 2 * n_kv * d) + 2 * n_q * d * h
    mlp = 2 * 3 * h * cfg.intermediate_size
    scores = 4 * n_q * d * tokens
    return float(projections + mlp + scores)


def head_flops_per_row(cfg) -> float:
    """FLOPs of the LM head on one row (one position of one window)."""
    return float(2 * cfg.hidden_size * cfg.vocab_size)


def random_windows(vocab: int, n: int, tokens: int, seed: int) -> torch.Tensor:
    """``[n, tokens]`` token ids drawn uniformly from the whole vocabulary (CPU, int64)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n, tokens), generator=g)
