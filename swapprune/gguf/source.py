"""The source GGUF of a run, read once: can it be pruned, and what does its metadata say?

A run that writes ``model.gguf`` checks its source before the model loads
(:func:`~swapprune.gguf.writer.check_source`) and later needs the
source's metadata again (whether llama.cpp will find a per-layer list in it, its
sliding window). ``gguf.GGUFReader`` parses every metadata value, the
vocabulary included (about 4 s for a 49k-token vocabulary), so the small
result of that one parse is remembered per file version: in the process, and
on disk in ``<cache>/gguf/sources.json`` under the file's stat signature (size,
mtime, ctime, inode, device; the same key as the hash memo of
:mod:`swapprune.gguf.convert`), so a warm run's pre-load check only stats the
file. A memo that cannot be read or written is ignored. The reader itself is
not kept: it maps the whole file.

No torch here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swapprune.errors import SwappruneError
from swapprune.gguf import writer
from swapprune.gguf.convert import _signature, gguf_cache_dir
from swapprune.output.artifacts import write_json_atomic


@dataclass(frozen=True)
class GGUFSource:
    """A source GGUF the writer can prune.

    Attributes:
        path: the file (absolute).
        arch: ``general.architecture``.
        block_count: ``{arch}.block_count``.
        metadata: ``{key: value}`` without the tokenizer arrays (the serving view's input).
    """

    path: Path
    arch: str
    block_count: int
    metadata: dict[str, Any] = field(compare=False, hash=False, repr=False)


# (path, size, mtime_ns) -> the summary, or the one-line refusal it raised.
_SEEN: dict[tuple[str, int, int], GGUFSource | SwappruneError] = {}


def inspect_source(path: str | os.PathLike) -> GGUFSource:
    """The prunable source ``path`` (parsed once per file version).

    Raises:
        SwappruneError: the file is missing, truncated or corrupt, or its
            architecture or metadata cannot be pruned (the writer's own refusal).
    """
    p = Path(path).expanduser().absolute()
    try:
        st = p.stat()
    except OSError:
        raise SwappruneError(f"GGUF file {p} does not exist") from None
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _SEEN:
        found = _recall(p, st)
        if found is None:
            try:
                reader = writer.read_gguf(p)
                arch, count = writer.prunable(reader, p)
                found = GGUFSource(p, arch, count, writer.gguf_metadata(reader))
            except SwappruneError as e:
                found = e
            _remember(p, st, found)
        _SEEN[key] = found
    found = _SEEN[key]
    if isinstance(found, SwappruneError):
        raise SwappruneError(str(found))
    return found


SOURCES = "sources.json"


def _memo_path() -> Path:
    return gguf_cache_dir() / SOURCES


def _recall(path: Path, st: os.stat_result) -> GGUFSource | SwappruneError | None:
    """The on-disk memo of ``path`` at this stat signature, or ``None``."""
    try:
        hit = json.loads(_memo_path().read_text()).get(str(path))
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(hit, dict) or hit.get("stat") != _signature(st):
        return None
    try:
        if "error" in hit:
            return SwappruneError(str(hit["error"]))
        return GGUFSource(path, str(hit["arch"]), int(hit["block_count"]), dict(hit["metadata"]))
    except (KeyError, TypeError, ValueError):
        return None


def _remember(path: Path, st: os.stat_result, found: GGUFSource | SwappruneError) -> None:
    """Record ``found`` for ``path`` if the file did not change while it was read."""
    try:
        if _signature(path.stat()) != _signature(st) or not gguf_cache_dir().is_dir():
            return
        if isinstance(found, SwappruneError):
            entry: dict[str, Any] = {"stat": _signature(st), "error": str(found)}
        else:
            entry = {
                "stat": _signature(st),
                "arch": found.arch,
                "block_count": found.block_count,
                "metadata": found.metadata,
            }
        json.dumps(entry)  # a value JSON cannot hold: no memo
        try:
            memo = json.loads(_memo_path().read_text())
        except (OSError, ValueError):
            memo = {}
        memo = memo if isinstance(memo, dict) else {}
        memo[str(path)] = entry
        memo = {k: v for k, v in memo.items() if os.path.exists(k)}
        write_json_atomic(_memo_path(), memo, indent=0)
    except (OSError, TypeError, ValueError):
        pass  # only a memo: the next run parses again
