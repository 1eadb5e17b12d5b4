"""Everything swapprune knows about model architectures, as data (no torch).

The decoder stack of a causal LM is found (by :func:`swapprune.model.stack.decoder_stack`)
in this order:

1. ``ARCHITECTURES``, a table keyed by ``config.model_type``;
2. the model's ``_no_split_modules``: the ``nn.ModuleList`` whose items are of
   one of those classes;
3. the numbered ``nn.ModuleList`` whose length equals the layer count.

If all three fail the error names ``ARCHITECTURES`` as the table to extend.
The table also says what runs after the blocks (final norm, projections, the
LM head and any logit soft-capping) and which config fields index layers.
Config accessors here take a ``transformers`` config object or the plain dict
of a ``config.json``, so model facts can be read before transformers loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swapprune.errors import SwappruneError


@dataclass(frozen=True)
class ArchSpec:
    """Where a family keeps its decoder stack and what follows it.

    Attributes:
        blocks: dotted path (from the ``*ForCausalLM`` module) to the block list.
        count_key: config field holding the number of blocks.
        tail: dotted paths of modules applied, in order, between the last
            block and the LM head (missing or ``None`` modules are skipped).
        softcap_key: config field of a final logit soft-cap, if any.
        window_layers_key: config field counting leading full-attention layers
            (Qwen2's ``max_window_layers``), kept consistent on removal.
        mlp_out: path, inside a block, of the last module of the MLP branch before it is
            added to the residual stream (where a linear patch is folded), or ``None``.
        mlp_out_kind: ``linear`` (``nn.Linear``: a full map folds into its weight),
            ``conv1d`` (GPT-2's transposed ``Conv1D``), ``norm`` (a post-MLP RMSNorm
            with weight ``w``: a channel-wise map folds into ``w``), ``norm1p`` (Gemma's
            RMSNorm, which scales by ``1 + w``).
        residual_scale_key: config field scaling the branch before the residual add
            (Granite's ``residual_multiplier``).
    """

    blocks: str
    count_key: str = "num_hidden_layers"
    tail: tuple[str, ...] = ()
    softcap_key: str | None = None
    window_layers_key: str | None = None
    mlp_out: str | None = "mlp.down_proj"
    mlp_out_kind: str = "linear"
    residual_scale_key: str | None = None


_LLAMA_LIKE = ArchSpec(blocks="model.layers", tail=("model.norm",))
_QWEN = ArchSpec("model.layers", tail=("model.norm",), window_layers_key="max_window_layers")
# Gemma 2/3 normalise the MLP branch after it (post_feedforward_layernorm, scale 1 + w).
_GEMMA2 = ArchSpec(
    "model.layers",
    tail=("model.norm",),
    softcap_key="final_logit_softcapping",
    mlp_out="post_feedforward_layernorm",
    mlp_out_kind="norm1p",
)
# Mixture-of-experts MLPs route each token to other experts: no one module to fold into.
_MOE = ArchSpec("model.layers", tail=("model.norm",), mlp_out=None)

ARCHITECTURES: dict[str, ArchSpec] = {
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "mixtral": _MOE,
    "qwen2": _QWEN,
    "qwen3": _QWEN,
    "qwen3_moe": ArchSpec(
        "model.layers", tail=("model.norm",), window_layers_key="max_window_layers", mlp_out=None
    ),
    "gemma": _LLAMA_LIKE,
    "gemma2": _GEMMA2,
    "gemma3_text": _GEMMA2,
    "phi3": _LLAMA_LIKE,
    "olmo2": ArchSpec(
        "model.layers",
        tail=("model.norm",),
        mlp_out="post_feedforward_layernorm",
        mlp_out_kind="norm",
    ),
    "granite": ArchSpec(
        "model.layers", tail=("model.norm",), residual_scale_key="residual_multiplier"
    ),
    "gpt2": ArchSpec(
        blocks="transformer.h",
        count_key="n_layer",
        tail=("transformer.ln_f",),
        mlp_out="mlp.c_proj",
        mlp_out_kind="conv1d",
    ),
    "gpt_neox": ArchSpec(
        blocks="gpt_neox.layers",
        tail=("gpt_neox.final_layer_norm",),
        mlp_out="mlp.dense_4h_to_h",
    ),
    "opt": ArchSpec(
        blocks="model.decoder.layers",
        tail=("model.decoder.final_layer_norm", "model.decoder.project_out"),
        mlp_out="fc2",
    ),
}

TAIL_NAMES = ("norm", "final_layer_norm", "ln_f", "final_layernorm", "norm_f")
COUNT_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
TYPE_KEY = "layer_types"
# Config fields with one entry per block, in block order (surgery keeps the kept blocks' entries).
PER_LAYER_KEYS = (TYPE_KEY, "mlp_layer_types", "no_rope_layers")
# Config fields listing block indices (surgery maps them to the new indices).
LAYER_INDEX_KEYS = ("mlp_only_layers",)
# Period of a sliding/full pattern, used by some configs only when layer_types is absent.
SLIDING_PATTERN_KEYS = ("sliding_window_pattern", "_sliding_window_pattern")
# Config fields under which a block's computation or structure depends on its own index, with
# the value that makes them harmless: GPT-2 scales attention by 1/(layer_idx + 1), Qwen-MoE
# makes block i sparse when (i + 1) % decoder_sparse_step == 0. Renumbering such a block would
# change the model on reload, so surgery refuses it.
INDEX_DEPENDENT_KEYS = {"scale_attn_by_inverse_layer_idx": False, "decoder_sparse_step": 1}
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def get(config: Any, key: str, default: Any = None) -> Any:
    """``config.key`` for a ``transformers`` config, ``config[key]`` for a ``config.json`` dict."""
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def text_config(config: Any) -> Any:
    """The language model's own config (``text_config`` of a multimodal config, else itself)."""
    return get(config, "text_config") or config


def count_key(config: Any) -> str:
    """The config field that holds the number of decoder blocks."""
    config = text_config(config)
    spec = ARCHITECTURES.get(get(config, "model_type", ""))
    if spec is not None and isinstance(get(config, spec.count_key), int):
        return spec.count_key
    for key in COUNT_KEYS:
        if isinstance(get(config, key), int):
            return key
    raise SwappruneError(
        f"no layer-count field ({', '.join(COUNT_KEYS)}) in the config of model_type "
        f"'{get(config, 'model_type', '')}'; add it to swapprune.model.arch.ARCHITECTURES"
    )


def context_length(config: Any) -> int | None:
    """The model's context length from its config (``None`` if it states none)."""
    config = text_config(config)
    for key in CONTEXT_KEYS:
        value = get(config, key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
