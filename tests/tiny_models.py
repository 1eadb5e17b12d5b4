"""Tiny random-weight models of every supported family, built in code.

Nothing is downloaded: configs are written here, weights are seeded random.
Each model has 6 blocks, so adjacent and non-adjacent pairs, removals of 1-2
blocks and cross-type pairs (Gemma, Qwen sliding windows) all exist.
"""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM

VOCAB = 96
LAYERS = 6

_COMMON = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=LAYERS,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    max_position_embeddings=256,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)

FAMILY_CONFIGS: dict[str, dict] = {
    "llama": dict(_COMMON, head_dim=8),
    "mistral": dict(_COMMON, head_dim=8, sliding_window=None),
    "qwen2": dict(
        _COMMON,
        use_sliding_window=True,
        sliding_window=8,
        max_window_layers=3,
    ),
    "qwen3": dict(_COMMON, head_dim=8),
    "gemma2": dict(
        _COMMON,
        head_dim=8,
        sliding_window=8,
        final_logit_softcapping=5.0,
        attn_logit_softcapping=20.0,
    ),
    "gemma3_text": dict(
        _COMMON,
        head_dim=8,
        sliding_window=8,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
        final_logit_softcapping=5.0,
    ),
    "phi3": dict(_COMMON, pad_token_id=0),
    "gpt2": dict(
        n_embd=32,
        n_layer=LAYERS,
        n_head=4,
        n_positions=256,
        vocab_size=VOCAB,
        bos_token_id=1,
        eos_token_id=2,
    ),
    "gpt_neox": dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        vocab_size=VOCAB,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
    ),
    "opt": dict(
        hidden_size=32,
        ffn_dim=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        vocab_size=VOCAB,
        max_position_embeddings=256,
        word_embed_proj_dim=32,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    ),
}

FAMILIES = sorted(FAMILY_CONFIGS)


def tiny_model(family: str, seed: int = 0, attn: str = "eager"):
    """Build a tiny causal LM of ``family`` with seeded random weights (fp32, eval)."""
    cfg = AutoConfig.for_model(family, **FAMILY_CONFIGS[family])
    cfg._attn_implementation = attn
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    # Random init leaves some norms at exactly 1 and biases at 0; perturb every
    # parameter so blocks differ and a wrong index cannot go unnoticed.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model.eval()


def tiny_ids(n: int = 4, t: int = 24, seed: int = 0) -> torch.Tensor:
    """Token ids ``[n, t]`` avoiding the special ids 0-2."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (n, t), generator=g)


def tiny_tokenizer():
    """Character-level fast tokenizer with ``VOCAB`` ids that prepends BOS like Llama's.

    ``BPE`` without merges splits text into single characters; characters not
    in the vocabulary map to ``<unk>``. Ids: pad 0, bos 1, eos 2, unk 3.
    """
    from tokenizers import Tokenizer, decoders, models, processors
    from transformers import PreTrainedTokenizerFast

    special = ["<pad>", "<s>", "</s>", "<unk>"]
    chars = "\n" + "".join(chr(c) for c in range(32, 127) if chr(c) not in "`^~|")
    vocab = {t: i for i, t in enumerate(special + list(chars))}
    assert len(vocab) == VOCAB
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )


def save_tiny(family: str, path, seed: int = 0):
    """Save a tiny model and its tokenizer as a Hugging Face directory; returns the path."""
    model = tiny_model(family, seed=seed)
    model.save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path
