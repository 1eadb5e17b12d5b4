"""A cheap, deterministic identity for a loaded model.

Scores and plans are only meaningful for the model they were measured on, and
the block count alone cannot tell two checkpoints of one architecture apart.
:func:`model_fingerprint` hashes

* the config, minus the fields that change with how the model was loaded
  rather than what it is (``_name_or_path``, ``transformers_version``, the
  config's ``dtype``, attention implementation, quantization marker, ...), and
* a few tensors, in their own dtype: the embedding's first rows, and the first
  parameter of the first and of the last block (at most ``_MAX_ELEMENTS`` of
  each), with their shapes.

Any fine-tune or re-initialisation changes those tensors; a dtype cast changes
their bytes and is recorded separately, so :func:`check_same_model` can say
which of config, dtype or weights differs. Hashing costs a few MB of reads.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch
from torch import nn

from swapprune.errors import SwappruneError
from swapprune.model.stack import decoder_stack

# Config keys that describe how a model was loaded, not which model it is.
_VOLATILE = {
    "_name_or_path",
    "name_or_path",
    "transformers_version",
    "dtype",
    "torch_dtype",
    "_attn_implementation",
    "attn_implementation",
    "_attn_implementation_autoset",
    "quantization_config",
    "use_cache",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "_commit_hash",
    "auto_map",
    "tf_legacy_loss",
    "torchscript",
    "architectures",  # None until a model is saved; model_type and the weights say enough
}
_EMBED_ROWS = 8
_MAX_ELEMENTS = 1 << 20  # per tensor: 4 MB in fp32


def _config_digest(config) -> str:
    data = {k: v for k, v in config.to_dict().items() if k not in _VOLATILE}
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _materialized(module: nn.Module, name: str) -> torch.Tensor:
    """Parameter ``name`` of ``module`` on the CPU, loading it if accelerate offloaded it."""
    tensor = getattr(module, name)
    if tensor.device.type != "meta":
        return tensor.detach()
    try:
        from accelerate.utils import align_module_device
    except ImportError:  # pragma: no cover - offloading needs accelerate
        raise SwappruneError(
            "cannot fingerprint a model with offloaded weights without accelerate"
        ) from None
    with align_module_device(module):
        return getattr(module, name).detach().to("cpu", copy=True)


def _first_param(module: nn.Module) -> tuple[str, nn.Module, str]:
    for full, _ in module.named_parameters():
        owner_path, _, leaf = full.rpartition(".")
        owner = module.get_submodule(owner_path) if owner_path else module
        return full, owner, leaf
    raise SwappruneError(f"{type(module).__name__} has no parameters to fingerprint")


def _update(h, label: str, tensor: torch.Tensor) -> None:
    flat = tensor.reshape(-1)[:_MAX_ELEMENTS].contiguous().cpu()
    h.update(f"{label}|{tuple(tensor.shape)}|{tensor.dtype}|".encode())
    # A byte view works for every dtype (numpy has no bfloat16).
    h.update(flat.view(torch.uint8).numpy().tobytes())


@torch.no_grad()
def model_fingerprint(model: Any) -> dict[str, Any]:
    """The fingerprint of ``model``: ``{"config", "weights", "dtype", "num_layers"}``.

    Deterministic across loads of the same checkpoint in the same dtype;
    ``config`` and ``weights`` are 16-hex-digit SHA-256 prefixes.
    """
    stack = decoder_stack(model)
    h = hashlib.sha256()
    emb = model.get_input_embeddings()
    weight = _materialized(emb, "weight")
    _update(h, "embed", weight[:_EMBED_ROWS])
    for label, block in (("first", stack.blocks[0]), ("last", stack.blocks[-1])):
        name, owner, leaf = _first_param(block)
        _update(h, f"{label}:{name}", _materialized(owner, leaf))
    dtype = next(model.parameters()).dtype
    return {
        "config": _config_digest(model.config),
        "weights": h.hexdigest()[:16],
        "dtype": str(dtype).removeprefix("torch."),
        "num_layers": stack.num_layers,
    }


def fingerprint_difference(expected: dict | None, actual: dict | None) -> str | None:
    """What differs between two fingerprints (``None`` when they match or one is missing)."""
    if not expected or not actual:
        return None
    for key in ("num_layers", "config", "dtype", "weights"):
        if key in expected and key in actual and expected[key] != actual[key]:
            what = {
                "num_layers": "block count",
                "config": "config",
                "dtype": "dtype",
                "weights": "weights",
            }[key]
            return f"{what} {expected[key]} vs {actual[key]}"
    return None


def check_same_model(expected: dict | None, actual: dict | None, what: str) -> None:
    """Refuse an artifact measured on another model, in one line.

    Args:
        expected: the fingerprint recorded in the artifact (``None``: an older
            artifact without one; accepted).
        actual: the fingerprint of the model loaded now.
        what: the artifact, as the user knows it (``"plan plan.json"``).

    Raises:
        SwappruneError: the fingerprints differ; the message names the field.
    """
    diff = fingerprint_difference(expected, actual)
    if diff is not None:
        raise SwappruneError(
            f"{what} was made from a different model ({diff}); "
            "use the model it was made from, or redo it for this one"
        )


def short(fingerprint: dict | None) -> str:
    """A short printable form: ``config/weights``."""
    if not fingerprint:
        return "none"
    return f"{fingerprint.get('config', '?')}/{fingerprint.get('weights', '?')}"
