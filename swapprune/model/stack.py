"""The decoder stack of a loaded model: its block list, what runs after it, and its types.

:func:`decoder_stack` resolves it with the order written in
:mod:`swapprune.model.arch` (the table, then ``_no_split_modules``, then the
numbered ``nn.ModuleList``); the knowledge itself lives in that table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from swapprune.errors import SwappruneError
from swapprune.model.arch import ARCHITECTURES, TAIL_NAMES, TYPE_KEY, ArchSpec, count_key


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
        tail: the modules between the last block and the LM head.
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
        """Whether the config lists ``layer_types`` explicitly."""
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


def _infer_spec(model: nn.Module) -> tuple[ArchSpec, str]:
    config: Any = model.config
    key = count_key(config)
    count = getattr(config, key)
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
            "add an entry to swapprune.model.arch.ARCHITECTURES"
        )
    parent = path.rsplit(".", 1)[0] if "." in path else ""
    tail = tuple(
        f"{parent}.{n}" if parent else n
        for n in TAIL_NAMES
        if get_submodule(model, f"{parent}.{n}" if parent else n) is not None
    )[:1]
    softcap = (
        "final_logit_softcapping" if getattr(config, "final_logit_softcapping", None) else None
    )
    return ArchSpec(blocks=path, count_key=key, tail=tail, softcap_key=softcap), source


def decoder_stack(model: nn.Module) -> DecoderStack:
    """Resolve the decoder stack of a causal LM (see :mod:`swapprune.model.arch`)."""
    model_type = getattr(model.config, "model_type", "")
    spec = ARCHITECTURES.get(model_type)
    source = "table"
    if spec is None or get_submodule(model, spec.blocks) is None:
        spec, source = _infer_spec(model)
    blocks = get_submodule(model, spec.blocks)
    if not isinstance(blocks, nn.ModuleList):
        raise SwappruneError(
            f"'{spec.blocks}' of model_type '{model_type}' is not a ModuleList; "
            "fix its entry in swapprune.model.arch.ARCHITECTURES"
        )
    tail = [m for p in spec.tail if (m := get_submodule(model, p)) is not None]
    return DecoderStack(model=model, spec=spec, blocks=blocks, source=source, tail=tail)


def block_layer_idx_modules(block: nn.Module) -> list[nn.Module]:
    """Modules inside a block that carry a KV-cache ``layer_idx``."""
    return [m for m in block.modules() if isinstance(getattr(m, "layer_idx", None), int)]
