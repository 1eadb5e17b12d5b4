"""The bytes a load needs, from the files' headers alone, against the machine's room.

Before any weights load, :func:`plan_load` counts the model's parameters from what is
cheap to read: a GGUF header's tensor shapes, the JSON headers of a directory's
``*.safetensors`` files, or, for a hub id, its ``config.json`` (an estimate). It compares

* the weights in the run's dtype with the memory this process may still use (the
  smaller of ``MemAvailable`` and the cgroup's limit), and
* for a GGUF file not yet converted, the float32 conversion cache with the free disk
  where the cache lives (``$SWAPPRUNE_CACHE``), and the conversion's float32 weights
  with the memory,

and either lets the run go, chooses a dtype that fits (bfloat16, when the dtype is the
default and float32 does not fit), or refuses in one line with both figures and the
ways out. It imports neither torch nor transformers.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from swapprune.errors import SwappruneError
from swapprune.gguf.bounds import check_header_bounds
from swapprune.output.writers import size

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
#: Room kept beyond the weights: activations, the tokenizer, the interpreter.
MARGIN = 1.25
_ST_BYTES = {
    "F64": 8,
    "F32": 4,
    "BF16": 2,
    "F16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}


def gguf_parameters(path: str | os.PathLike) -> int | None:
    """The number of weights in a GGUF file, from its tensor infos (a header walk that
    skips the vocabulary; ``None`` for a big-endian file)."""
    return check_header_bounds(path)


def safetensors_parameters(directory: Path) -> int | None:
    """The number of weights in a directory's ``*.safetensors`` files (their headers)."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, t in header.items():
            if name != "__metadata__" and t.get("dtype") in _ST_BYTES:
                total += int(math.prod(t["shape"]))
    return total


def config_parameters(config: dict) -> int | None:
    """An estimate of a decoder's weights from its ``config.json`` (embeddings, attention
    with its key/value heads, a gated MLP), or ``None`` when the config lacks the sizes."""
    text = config.get("text_config") or config
    h = text.get("hidden_size") or text.get("n_embd")
    layers = text.get("num_hidden_layers") or text.get("n_layer")
    vocab = text.get("vocab_size")
    if not (h and layers and vocab):
        return None
    inter = text.get("intermediate_size") or 4 * h
    heads = text.get("num_attention_heads") or 1
    kv = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or h // heads
    attn = h * heads * head_dim * 2 + h * kv * head_dim * 2
    mlp = 3 * h * inter
    experts = text.get("num_local_experts") or text.get("num_experts") or 1
    embed = vocab * h * (1 if text.get("tie_word_embeddings", True) else 2)
    return int(embed + layers * (attn + experts * mlp))


def available_memory() -> int | None:
    """The bytes this process may still allocate: ``MemAvailable``, capped by the cgroup."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        if limit != "max":
            found.append(int(limit) - used)
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def free_disk(path: Path) -> int | None:
    """Free bytes on the disk that holds ``path`` (or its nearest existing parent)."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


@dataclass(frozen=True)
class LoadPlan:
    """What the load will need and do.

    Attributes:
        parameters: the model's weights (``None``: not countable before the load).
        dtype: the dtype to load in (the configured one, or the one chosen to fit).
        note: a line for the user when the plan differs from the configuration.
    """

    parameters: int | None
    dtype: str | None
    note: str | None = None


def count_parameters(source) -> int | None:
    """The weights of a :class:`~swapprune.model.source.ModelSource`, from headers."""
    path = Path(source.path)
    if source.gguf_file:
        return gguf_parameters(path / source.gguf_file)
    if path.is_dir():
        n = safetensors_parameters(path)
        if n is not None:
            return n
        config = path / "config.json"
        return config_parameters(json.loads(config.read_text())) if config.is_file() else None
    return None  # a hub id not on disk: its files are not read before the load


def plan_load(
    source,
    dtype: str | None,
    *,
    cache_dir: Path | None = None,
    cached: bool = True,
    memory: int | None = None,
    disk: int | None = None,
    on_gpu: bool = False,
) -> LoadPlan:
    """Check that the load fits; choose bfloat16 when only the default dtype does not.

    Args:
        source: the model's :class:`~swapprune.model.source.ModelSource`.
        dtype: the configured dtype (``None``: the default, float32).
        cache_dir: where a GGUF's conversion cache lives; ``cached``: its entry exists.
        memory, disk: the room (default: :func:`available_memory`, :func:`free_disk`).
        on_gpu: the weights go to an accelerator: only the conversion (on the CPU, in
            float32) and its cache are checked here.

    Raises:
        SwappruneError: the load cannot fit, in one line with both figures.
    """
    n = count_parameters(source)
    if n is None:
        return LoadPlan(None, dtype)
    memory = available_memory() if memory is None else memory
    chosen = dtype or "float32"
    if source.gguf_file and not cached:
        need = n * BYTES["float32"]
        room = disk if disk is not None else (free_disk(cache_dir) if cache_dir else None)
        if room is not None and need > room:
            raise SwappruneError(
                f"converting {source.gguf_file} needs a float32 cache of {size(need)} in "
                f"{cache_dir}, which has {size(room)} free; set SWAPPRUNE_CACHE to a "
                f"directory on a disk with room"
            )
        if memory is not None and need * MARGIN > memory:
            raise SwappruneError(
                f"converting {source.gguf_file} to float32 needs about {size(need * MARGIN)} "
                f"of memory, {size(memory)} available; convert it on a larger machine once "
                f"(the cache in SWAPPRUNE_CACHE is then read from disk)"
            )
    if memory is None or on_gpu:
        return LoadPlan(n, dtype)
    weights = n * BYTES[chosen] * MARGIN
    if weights <= memory:
        return LoadPlan(n, dtype)
    half = n * BYTES["bfloat16"] * MARGIN
    if dtype is None and half <= memory:
        return LoadPlan(
            n,
            "bfloat16",
            f"[memory] float32 weights need about {size(weights)}, {size(memory)} available: "
            f"loading in bfloat16 (about {size(half)}); --dtype float32 insists",
        )
    ways = "--device-map auto (offload to disk)"
    if chosen == "float32":
        ways = f"--dtype bfloat16 (about {size(half)}) or {ways}"
    raise SwappruneError(
        f"the weights need about {size(weights)} of memory in {chosen} ({n:,} parameters), "
        f"{size(memory)} available; try {ways}"
    )
