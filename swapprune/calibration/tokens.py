"""Token ids of long texts, memoised on disk per (tokenizer, text).

Tokenizing the vendored WikiText-2 validation text (1.1 MB) takes about 0.75 s
of CPU on a small machine, and every run that calibrates pays it again for the
same ids. :func:`encode` keeps them in ``<cache_root>/tokens/<key>.npy``, where
the key hashes the text, the special-token flag, the fast tokenizer's full
serialisation (``tokenizer.json``: vocabulary, merges, normaliser, added
tokens) and the ``tokenizers`` version that produced the ids. Any change to one
of them is a new key; nothing else can make a cached entry wrong.

An entry is written atomically (temp file + rename). One that cannot be read,
or whose stored key or length disagrees, is recomputed and rewritten, never
used. A slow (pure Python) tokenizer has no serialisation to key on, so its ids
are never cached; ``SWAPPRUNE_TOKEN_CACHE=0`` turns the cache off. The cache
shares its root with the GGUF conversions (:func:`swapprune.gguf.convert.cache_root`);
deleting it is always safe.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from pathlib import Path

import numpy as np

from swapprune.gguf.convert import cache_root
from swapprune.output.artifacts import read_keyed_npz, write_keyed_npz

FORMAT = 1


def _key(tokenizer, text: str, add_special_tokens: bool) -> str | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not getattr(tokenizer, "is_fast", False):
        return None
    try:
        serial = backend.to_str()
        version = importlib.metadata.version("tokenizers")
    except Exception:  # an unusual backend: do not cache rather than guess
        return None
    h = hashlib.sha256()
    for part in (f"v{FORMAT}", version, str(add_special_tokens), serial, text):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def cache_dir() -> Path:
    """``<cache_root>/tokens`` (not created)."""
    return cache_root() / "tokens"


def _read(path: Path, key: str) -> list[int] | None:
    arrays = read_keyed_npz(path, key)
    if arrays is None:
        return None
    try:
        ids = arrays["ids"]
        if ids.ndim != 1 or int(arrays["n"]) != ids.shape[0]:
            return None
        return ids.tolist()
    except Exception:  # foreign contents: recomputed
        return None


def _write(path: Path, key: str, ids: list[int]) -> None:
    arr = np.asarray(ids, dtype=np.int64)
    write_keyed_npz(path, key, {"n": np.array(arr.shape[0]), "ids": arr})


def encode(tokenizer, text: str, add_special_tokens: bool) -> list[int]:
    """``tokenizer(text, add_special_tokens=...).input_ids``, read from the cache when present."""
    key = None
    if os.environ.get("SWAPPRUNE_TOKEN_CACHE", "1") != "0":
        key = _key(tokenizer, text, add_special_tokens)
    if key is None:
        return list(tokenizer(text, add_special_tokens=add_special_tokens).input_ids)
    path = cache_dir() / f"{key[:32]}.npz"
    ids = _read(path, key)
    if ids is not None:
        return ids
    ids = list(tokenizer(text, add_special_tokens=add_special_tokens).input_ids)
    try:
        _write(path, key, ids)
    except OSError:  # a read-only or full cache never fails the run
        pass
    return ids
