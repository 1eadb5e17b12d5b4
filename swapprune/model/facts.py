"""What swapprune needs to know about a model before its weights load.

:class:`ModelFacts` (depth, context, width, per-layer types) come from the
model's ``config.json`` read as plain JSON, or from a GGUF file's header read
with ``gguf``'s reader, so a budget larger than the model, a window longer
than its context or a pair out of range is refused before torch or
transformers is imported. :func:`read_facts` returns ``None`` when nothing
cheap can be read (a hub id not in the local cache, remote code); the same
checks then run on the loaded model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swapprune.errors import SwappruneError
from swapprune.gguf.convert import lookup, read_header
from swapprune.model import arch


@dataclass(frozen=True)
class ModelFacts:
    """Facts of one model, read once.

    Attributes:
        model_type: ``config.model_type``.
        num_layers: number of decoder blocks.
        context_length: longest input in tokens, or ``None`` when the config has none.
        hidden_size: width of the residual stream, or ``None``.
        layer_types: per-block attention type when the config lists them.
        config: the (text) config as a plain dict, or the GGUF header's scalar metadata:
            what the serving runtimes' rules read beyond these facts (a window, a
            per-layer list, ``general.architecture`` for a GGUF).
    """

    model_type: str
    num_layers: int
    context_length: int | None = None
    hidden_size: int | None = None
    layer_types: tuple[str, ...] | None = None
    config: Mapping[str, Any] | None = field(default=None, compare=False, hash=False, repr=False)

    @classmethod
    def from_config(cls, config: Any) -> ModelFacts:
        """Facts of a ``transformers`` config object or a ``config.json`` dict."""
        config = arch.text_config(config)
        types = arch.get(config, arch.TYPE_KEY)
        return cls(
            model_type=arch.get(config, "model_type", "") or "",
            num_layers=int(arch.get(config, arch.count_key(config))),
            context_length=arch.context_length(config),
            hidden_size=arch.get(config, "hidden_size") or arch.get(config, "n_embd"),
            layer_types=tuple(types) if types else None,
            config=_as_dict(config),
        )

    def with_layers(self, num_layers: int) -> ModelFacts:
        """The same facts with another depth (a config whose count disagrees with its modules)."""
        return ModelFacts(
            self.model_type,
            num_layers,
            self.context_length,
            self.hidden_size,
            self.layer_types,
            self.config,
        )


def _as_dict(config: Any) -> dict[str, Any] | None:
    if isinstance(config, Mapping):
        return dict(config)
    to_dict = getattr(config, "to_dict", None)
    return to_dict() if callable(to_dict) else None


def from_json_file(path: str | Path) -> ModelFacts:
    """Facts of a ``config.json`` file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SwappruneError(f"cannot read model config {path}: {e}") from None
    if not isinstance(data, dict):
        raise SwappruneError(f"model config {path} is not a JSON object")
    return ModelFacts.from_config(data)


# GGUF ``general.architecture`` -> transformers ``model_type`` where the two differ.
_GGUF_MODEL_TYPES = {"gemma3": "gemma3_text", "gptneox": "gpt_neox", "qwen3moe": "qwen3_moe"}


def from_gguf_header(path: str | Path) -> ModelFacts:
    """Facts of a GGUF file from its header (``gguf.GGUFReader``; no tensor data is read)."""
    fields = read_header(path)
    name = fields.get("general.architecture")
    if not isinstance(name, str):
        raise SwappruneError(f"GGUF file {path} names no general.architecture")
    count = fields.get(f"{name}.block_count")
    if not isinstance(count, int):
        raise SwappruneError(f"GGUF file {path} has no {name}.block_count")
    ctx = fields.get(f"{name}.context_length")
    hidden = fields.get(f"{name}.embedding_length")
    return ModelFacts(
        model_type=_GGUF_MODEL_TYPES.get(name, name),
        num_layers=count,
        context_length=ctx if isinstance(ctx, int) and ctx > 0 else None,
        hidden_size=hidden if isinstance(hidden, int) else None,
        config=fields,
    )


def read_facts(source) -> ModelFacts | None:
    """Facts of a :class:`~swapprune.model.load.ModelSource` without loading weights, or ``None``.

    Order: the converted copy of a GGUF (its ``config.json``), else the GGUF
    header; a local directory's ``config.json``; a hub id's ``config.json`` in
    the local Hugging Face cache. ``None`` when none of these is at hand.
    """
    if source.gguf_file:
        entry = lookup(source.gguf_path)
        if entry is not None:
            return from_json_file(entry / "config.json")
        return from_gguf_header(source.gguf_path)
    local = Path(source.path).expanduser()
    if local.is_dir():
        return from_json_file(local / "config.json")
    cached = _hub_cached_config(source.path)
    return from_json_file(cached) if cached is not None else None


def _hub_cached_config(repo_id: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        hit = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # an id the hub library cannot parse: nothing cached for it
        return None
    return Path(hit) if isinstance(hit, str) else None
