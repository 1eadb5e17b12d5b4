"""Everything swapprune knows about model architectures, in one place.

The decoder stack of a causal LM is found in this order:

1. ``ARCHITECTURES``, a table keyed by ``config.model_type``;
2. the model's ``_no_split_modules``: the ``nn.ModuleList`` whose items are of
   one of those classes;
3. the numbered ``nn.ModuleList`` whose length equals the layer count.

If all three fail the error names ``ARCHITECTURES`` as the table to extend.
The table also says what runs after the blocks (final norm, projections, the
LM head and any logit soft-capping) and which config fields index layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

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
    """

    blocks: str
    count_key: str = "num_hidden_layers"
    tail: tuple[str, ...] = ()
    softcap_key: str | None = None
    window_layers_key: str | None = None


_LLAMA_LIKE = ArchSpec(blocks="model.layers", tail=("model.norm",))

ARCHITECTURES: dict[str, ArchSpec] = {
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "mixtral": _LLAMA_LIKE,
    "qwen2": ArchSpec("model.layers", tail=("model.norm",), window_layers_key="max_window_layers"),
    "qwen3": ArchSpec("model.layers", tail=("model.norm",), window_layers_key="max_window_layers"),
    "qwen3_moe": ArchSpec(
        "model.layers", tail=("model.norm",), window_layers_key="max_window_layers"
    ),
    "gemma": _LLAMA_LIKE,
    "gemma2": ArchSpec("model.layers", tail=("model.norm",), softcap_key="final_logit_softcapping"),
    "gemma3_text": ArchSpec(
        "model.layers", tail=("model.norm",), softcap_key="final_logit_softcapping"
    ),
    "phi3": _LLAMA_LIKE,
    "olmo2": _LLAMA_LIKE,
    "granite": _LLAMA_LIKE,
    "gpt2": ArchSpec(blocks="transformer.h", count_key="n_layer", tail=("transformer.ln_f",)),
    "gpt_neox": ArchSpec(blocks="gpt_neox.layers", tail=("gpt_neox.final_layer_norm",)),
    "opt": ArchSpec(
        blocks="model.decoder.layers",
        tail=("model.decoder.final_layer_norm", "model.decoder.project_out"),
    ),
}

_TAIL_NAMES = ("norm", "final_layer_norm", "ln_f", "final_layernorm", "norm_f")
_COUNT_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
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


_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


@dataclass(frozen=True)
class ModelFacts:
    """What swapprune needs to know about a model, read once from its config.

    Attributes:
        model_type: ``config.model_type``.
        num_layers: number of decoder blocks.
        context_length: longest input in tokens, or ``None`` when the config has none.
        hidden_size: width of the residual stream, or ``None``.
        layer_types: per-block attention type when the config lists them.
    """

    model_type: str
    num_layers: int
    context_length: int | None = None
    hidden_size: int | None = None
    layer_types: tuple[str, ...] | None = None

    @classmethod
    def from_config(cls, config) -> ModelFacts:
        """Facts of a ``transformers`` config (no weights needed)."""
        config = getattr(config, "text_config", None) or config
        model_type = getattr(config, "model_type", "")
        spec = ARCHITECTURES.get(model_type)
        count = int(getattr(config, spec.count_key if spec else _count_key(config)))
        ctx = context_length(config)
        hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)
        types = getattr(config, TYPE_KEY, None)
        return cls(
            model_type=model_type,
            num_layers=count,
            context_length=ctx,
            hidden_size=hidden,
            layer_types=tuple(types) if types else None,
        )


def context_length(config) -> int | None:
    """The model's context length from its config (``None`` if it states none)."""
    config = getattr(config, "text_config", None) or config
    return next(
        (int(v) for k in _CONTEXT_KEYS if isinstance(v := getattr(config, k, None), int) and v > 0),
        None,
    )


def get_submodule(root: nn.Module, path: str) -> nn.Module | None:
    """Return ``root.<path>`` or ``None`` when any step is missing."""
    mod: object = root
    for part in path.split("."):
        mod = getattr(mod, part, None)
        if mod is None:
            return None
    return mod if isinstance(mod, nn.Module) else None


@dataclass
class DecoderStack:
    """The resolved decoder stack of one loaded model.

    Attributes:
        model: the ``*ForCausalLM`` module.
        spec: the architecture spec used (from the table or inferred).
        blocks: the model's own ``nn.ModuleList`` of blocks.
        source: how the stack was found (``table``, ``no_split_modules``, ``numbered``).
    """

    model: Any  # a transformers PreTrainedModel (nn.Module attributes are untyped)
    spec: ArchSpec
    blocks: nn.ModuleList
    source: str
    tail: list[nn.Module] = field(default_factory=list)

    @property
    def num_layers(self) -> int:
        return len(self.blocks)

    @property
    def config(self):
        return self.model.config

    def layer_types(self) -> list[str]:
        """Attention type of each block (``full_attention`` when untyped)."""
        types = getattr(self.config, TYPE_KEY, None)
        if types is not None and len(types) == self.num_layers:
            return list(types)
        return [getattr(b, "attention_type", None) or "full_attention" for b in self.blocks]

    def has_layer_types(self) -> bool:
        return getattr(self.config, TYPE_KEY, None) is not None

    def block_classes(self) -> list[str]:
        return [type(b).__name__ for b in self.blocks]

    def check_swappable(self, i: int, j: int) -> None:
        """Refuse to run block ``j`` where block ``i`` ran if their classes differ."""
        classes = self.block_classes()
        if classes[i] != classes[j]:
            raise SwappruneError(
                f"blocks {i} ({classes[i]}) and {j} ({classes[j]}) are of different module "
                "classes (hybrid stack); a swap between them is undefined"
            )

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm(s), LM head and soft-cap: hidden ``[..., H]`` -> logits ``[..., V]``."""
        for mod in self.tail:
            hidden = mod(hidden)
        lm_head: Any = self.model.get_output_embeddings()
        logits = lm_head(hidden)
        cap = getattr(self.config, self.spec.softcap_key, None) if self.spec.softcap_key else None
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits


def _count_key(config) -> str:
    for key in _COUNT_KEYS:
        if isinstance(getattr(config, key, None), int):
            return key
    raise SwappruneError(
        f"no layer-count field ({', '.join(_COUNT_KEYS)}) in the config of "
        f"model_type '{config.model_type}'; add it to swapprune.architectures.ARCHITECTURES"
    )


def _infer_spec(model: nn.Module) -> tuple[ArchSpec, str]:
    config: Any = model.config
    count_key = _count_key(config)
    count = getattr(config, count_key)
    lists = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m)]
    block_classes = set(getattr(model, "_no_split_modules", None) or [])
    path, source = None, ""
    for name, mod in lists:
        if block_classes and all(type(b).__name__ in block_classes for b in mod):
            path, source = name, "no_split_modules"
            break
    if path is None:
        for name, mod in lists:
            if len(mod) == count:
                path, source = name, "numbered"
                break
    if path is None:
        raise SwappruneError(
            f"could not find the decoder block list of model_type '{config.model_type}'; "
            "add an entry to swapprune.architectures.ARCHITECTURES"
        )
    parent = path.rsplit(".", 1)[0] if "." in path else ""
    tail = tuple(
        f"{parent}.{n}" if parent else n
        for n in _TAIL_NAMES
        if get_submodule(model, f"{parent}.{n}" if parent else n) is not None
    )[:1]
    softcap = (
        "final_logit_softcapping" if getattr(config, "final_logit_softcapping", None) else None
    )
    return ArchSpec(blocks=path, count_key=count_key, tail=tail, softcap_key=softcap), source


def decoder_stack(model: nn.Module) -> DecoderStack:
    """Resolve the decoder stack of a causal LM (see the module docstring)."""
    model_type = getattr(model.config, "model_type", "")
    spec = ARCHITECTURES.get(model_type)
    source = "table"
    if spec is None or get_submodule(model, spec.blocks) is None:
        spec, source = _infer_spec(model)
    blocks = get_submodule(model, spec.blocks)
    if not isinstance(blocks, nn.ModuleList):
        raise SwappruneError(
            f"'{spec.blocks}' of model_type '{model_type}' is not a ModuleList; "
            "fix its entry in swapprune.architectures.ARCHITECTURES"
        )
    tail = [m for p in spec.tail if (m := get_submodule(model, p)) is not None]
    return DecoderStack(model=model, spec=spec, blocks=blocks, source=source, tail=tail)


def block_layer_idx_modules(block: nn.Module) -> list[nn.Module]:
    """Modules inside a block that carry a KV-cache ``layer_idx``."""
    return [m for m in block.modules() if isinstance(getattr(m, "layer_idx", None), int)]
