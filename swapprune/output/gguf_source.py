"""The source GGUF of a run, read once: can it be pruned, and what does its metadata say?

A run that writes ``model.gguf`` checks its source before the model loads
(:func:`~swapprune.output.gguf_writer.check_source`) and later needs the
source's metadata again (whether llama.cpp will find a per-layer list in it, its
sliding window). ``gguf.GGUFReader`` parses every metadata value, the
vocabulary included (about 4 s for a 49k-token vocabulary), so the small
result of that one parse is remembered per file, keyed by its size and
modification time. The reader itself is not kept: it maps the whole file.

No torch here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swapprune.errors import SwappruneError


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
    from swapprune.output.gguf_writer import gguf_metadata, prunable, read_gguf

    p = Path(path).expanduser().absolute()
    try:
        st = p.stat()
    except OSError:
        raise SwappruneError(f"GGUF file {p} does not exist") from None
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _SEEN:
        try:
            reader = read_gguf(p)
            arch, count = prunable(reader, p)
            _SEEN[key] = GGUFSource(p, arch, count, gguf_metadata(reader))
        except SwappruneError as e:
            _SEEN[key] = e
    found = _SEEN[key]
    if isinstance(found, SwappruneError):
        raise SwappruneError(str(found))
    return found
