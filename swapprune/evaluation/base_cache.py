"""The unpruned model's side of the cost check, memoised on disk per model and setting.

Every cut's cost check scores the base model on the contract's first windows and
generates its greedy continuations of the LAMBADA prompts. Both depend on the base
model and the setting only, not on the cut: on SmolLM2-135M with one CPU thread they
take about 12 s and 14 s of every run, the same numbers each time. :func:`base_side`
keeps them in ``<cache_root>/base/<key>.json`` and ``.npz``.

The key hashes:

* the model's **state digest** (:func:`state_digest`): every parameter and buffer by
  name, shape and dtype, and a strided sample of its bytes (up to :data:`SAMPLE`
  elements spread over the whole tensor), so a fine-tune, a merged adapter, a cast or
  a removed block is a new key; the config digest of
  :func:`~swapprune.model.fingerprint.model_fingerprint` besides;
* the device type, and the torch, transformers and lm-eval versions;
* the setting: what is measured, its parameters, and a digest of the text.

A model whose weights are not all on a device (offloaded to ``meta``) is not cached.
An entry is written atomically; one that cannot be read, or whose stored key
disagrees, is recomputed and rewritten, never used. ``SWAPPRUNE_BASE_CACHE=0`` turns
the cache off; deleting it is always safe. The record of a cost says whether its base
side was read from the cache (``base_cached``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from swapprune.gguf.convert import cache_root
from swapprune.output.artifacts import read_keyed_npz, write_keyed_npz

FORMAT = 1
#: Elements of each tensor that enter the state digest, spread evenly over it.
SAMPLE = 4096


def enabled() -> bool:
    """Whether the cache is on (``SWAPPRUNE_BASE_CACHE`` is not ``0``)."""
    return os.environ.get("SWAPPRUNE_BASE_CACHE", "1") != "0"


def cache_dir() -> Path:
    """``<cache_root>/base`` (not created)."""
    return cache_root() / "base"


def state_digest(model) -> str | None:
    """A digest of every parameter and buffer of ``model`` (``None``: some are offloaded)."""
    import torch  # imports torch

    h = hashlib.sha256()
    with torch.no_grad():
        for kind, items in (("p", model.named_parameters()), ("b", model.named_buffers())):
            for name, t in items:
                if t.device.type == "meta":
                    return None
                flat = t.detach().reshape(-1)
                step = max(1, flat.numel() // SAMPLE)
                part = flat[::step][:SAMPLE].contiguous().cpu()
                h.update(f"{kind}|{name}|{tuple(t.shape)}|{t.dtype}|".encode())
                h.update(part.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def key(model, what: str, setting: dict[str, Any]) -> str | None:
    """The cache key of ``what`` measured on ``model`` with ``setting`` (``None``: not cached)."""
    import torch  # imports torch

    from swapprune.model.fingerprint import _config_digest  # imports torch

    digest = state_digest(model)
    if digest is None:
        return None
    device = next(model.parameters()).device.type
    parts = [
        f"v{FORMAT}", what, digest, _config_digest(model.config), device, torch.__version__,
        _version("transformers"), _version("lm_eval"), json.dumps(setting, sort_keys=True),
    ]  # fmt: skip
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def text_digest(text: str) -> str:
    """A digest of a text, for a setting."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _path(what: str, k: str) -> Path:
    return cache_dir() / f"{what}-{k[:32]}.npz"


def has(model, what: str, setting: dict[str, Any]) -> bool:
    """Whether the cache holds a readable entry of ``what`` for ``model`` and ``setting``."""
    k = key(model, what, setting) if enabled() else None
    return k is not None and read_keyed_npz(_path(what, k), k) is not None


def base_side(
    model,
    what: str,
    setting: dict[str, Any],
    compute: Callable[[], Any],
    dump: Callable[[Any], dict[str, np.ndarray]],
    load: Callable[[dict[str, np.ndarray]], Any],
) -> tuple[Any, bool]:
    """``(compute(), False)``, or the same value read from the cache and ``True``.

    ``dump`` turns the value into named arrays, ``load`` turns them back; the value
    read is what ``load(dump(compute()))`` gives.
    """
    k = key(model, what, setting) if enabled() else None
    if k is None:
        return compute(), False
    path = _path(what, k)
    stored = read_keyed_npz(path, k)  # missing, truncated or foreign: None, computed below
    if stored is not None:
        return load(stored), True
    value = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_keyed_npz(path, k, dump(value))
    except OSError:  # a cache that cannot be written is no cache, not an error
        pass
    return value, False
