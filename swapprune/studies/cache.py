"""A comparison's cache: entries named by the content that produced them, read or recomputed.

Every selection, evaluation, generation and fitted patch of ``swapprune compare``
is written under ``DIR/cache`` as ``KIND-<content key>.json`` (atomically, by the
caller); a rerun, or another comparison sharing the directory, finds it by the
same key. A truncated or foreign entry is deleted and recomputed, never trusted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from swapprune.errors import SwappruneError

T = TypeVar("T")


def content_key(obj) -> str:
    """A short hash of a JSON-serialisable description (keys sorted)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:20]


def cached(path: Path, read: Callable[[Path], T]) -> T | None:
    """The cached entry at ``path``, or ``None`` when it is missing or unreadable."""
    if not path.exists():
        return None
    try:
        return read(path)
    except (OSError, ValueError, KeyError, TypeError, SwappruneError):
        path.unlink(missing_ok=True)  # a truncated or foreign entry is recomputed
        return None
