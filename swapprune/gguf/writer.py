"""Write a pruned GGUF: the kept blocks' tensors byte for byte, renumbered, with consistent metadata.

:func:`write_pruned_gguf` reads the source GGUF with ``gguf.GGUFReader`` and
writes a new file with ``gguf.GGUFWriter``:

- every tensor of a kept block is copied unchanged (its raw bytes, in its own
  quantization type) under its new name ``blk.<new>.<rest>``; tensors outside
  the blocks (embeddings, output norm, LM head) are copied as they are;
- ``{arch}.block_count`` becomes the kept count, and every other
  ``{arch}.*`` array whose length is the old block count (per-layer head
  counts, feed-forward lengths, sliding-window lists) keeps the kept blocks'
  entries, in order: llama.cpp reads such arrays without checking their length
  against the block count, so a stale entry would silently apply to the wrong
  layer;
- all other metadata (the tokenizer, chat template, rope settings) is copied
  with its value type, strings byte for byte.

Only removal plans are accepted: a merge changes weights, and the point of this
writer is to keep the source's quantization exactly, so a merge plan is refused
in one line (write the safetensors checkpoint for merges; quantize it anew).

The file is built under a hidden temporary name in the destination directory,
optionally checked (``check``), and only then renamed into place: a failure
leaves nothing behind.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from swapprune.errors import SwappruneError
from swapprune.output.artifacts import apply_umask
from swapprune.output.writers import is_write_error, write_error
from swapprune.plan import PrunePlan
from swapprune.serving.rules import GGUF_SWA_LIST

# GGUF architectures the writer handles: their per-layer state is the blk.N tensors and the
# per-layer metadata arrays only, and transformers loads them for the self-check.
WRITABLE_ARCHS = ("llama", "qwen2", "qwen3", "gemma2", "gemma3")
# Arch-prefixed keys whose value counts or indexes layers in a way a renumbering would break.
INDEX_KEYS = (
    "leading_dense_block_count",
    "nextn_predict_layers",
    "attention.shared_kv_layers",
    "full_attention_interval",
    "interleave_moe_layer_step",
)
# Arch-prefixed arrays that are never per layer, whatever their length.
NOT_PER_LAYER = ("rope.dimension_sections",)
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")


@dataclass
class GGUFRecord:
    """What :func:`write_pruned_gguf` wrote (for ``provenance.json`` and the model card)."""

    path: str
    source: str
    arch: str
    bytes_before: int
    bytes_after: int
    blocks_before: int
    blocks_after: int
    removed: list[int]
    tensors_before: int
    tensors_after: int
    tensor_types: dict[str, int]  # quantization type -> tensors written
    trimmed_keys: list[str]  # per-layer arrays cut to the kept blocks
    write_s: float = 0.0
    selfcheck: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def card_line(self) -> str:
        """One model-card line: the file, its size before and after, the types kept."""
        types = ", ".join(f"{k} x{v}" for k, v in sorted(self.tensor_types.items()))
        return (
            f"- **GGUF**: `{Path(self.path).name}`, {_mb(self.bytes_before)} -> "
            f"{_mb(self.bytes_after)} ({self.blocks_before} -> {self.blocks_after} blocks; "
            f"kept tensors copied byte for byte: {types})"
        )


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def read_gguf(path: str | os.PathLike) -> Any:
    """Open a GGUF file with ``gguf.GGUFReader``; a missing, truncated or corrupt file is one line.

    Raises:
        SwappruneError: the file cannot be read as a complete GGUF.
    """
    from gguf import GGUFReader  # imports gguf

    path = Path(path)
    if not path.is_file():
        raise SwappruneError(f"GGUF file {path} does not exist")
    try:
        reader = GGUFReader(path)
    except (ValueError, IndexError, KeyError, TypeError, OSError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SwappruneError(
            f"{path} is not a readable GGUF file (truncated or corrupt: {reason})"
        ) from None
    # A file cut short fails above: the reader maps each tensor's bytes and reshapes them.
    return reader


def field_value(fld: Any) -> tuple[Any, Any, Any]:
    """``(value, type, sub_type)`` of a reader field, strings as raw bytes (copied exactly)."""
    from gguf import GGUFValueType as T  # imports gguf

    main = fld.types[0]
    if main == T.ARRAY:
        if len(fld.types) > 2:
            raise SwappruneError(f"GGUF key {fld.name} is a nested array, which is not supported")
        sub = fld.types[-1]
        if sub == T.STRING:
            return [bytes(fld.parts[i]) for i in fld.data], main, sub
        return fld.contents(), main, sub
    if main == T.STRING:
        return bytes(fld.parts[fld.data[0]]), main, None
    return fld.contents(), main, None


def gguf_metadata(reader: Any, *, tokenizer: bool = False) -> dict[str, Any]:
    """Plain ``{key: value}`` metadata of a GGUF (strings decoded), for the serving view.

    Args:
        reader: a ``GGUFReader``.
        tokenizer: include the (large) ``tokenizer.*`` arrays.
    """
    out: dict[str, Any] = {}
    for name, fld in reader.fields.items():
        if name.startswith("GGUF.") or (not tokenizer and name.startswith("tokenizer.")):
            continue
        value = fld.contents()
        out[name] = value
    return out


def prunable(reader: Any, path: Path) -> tuple[str, int]:
    """``(arch, block_count)`` of an open GGUF the writer can prune; one-line error otherwise."""
    arch_field = reader.fields.get("general.architecture")
    if arch_field is None:
        raise SwappruneError(f"{path} has no general.architecture key; not a model GGUF")
    arch = str(arch_field.contents())
    if arch not in WRITABLE_ARCHS:
        raise SwappruneError(
            f"GGUF output does not support architecture '{arch}' (supported: "
            f"{', '.join(WRITABLE_ARCHS)}); write the safetensors checkpoint instead"
        )
    count = reader.fields.get(f"{arch}.block_count")
    if count is None:
        raise SwappruneError(f"{path} has no {arch}.block_count key")
    for key in INDEX_KEYS:
        if f"{arch}.{key}" in reader.fields:
            raise SwappruneError(
                f"{path} sets {arch}.{key}, which indexes layers; GGUF output cannot renumber it"
            )
    return arch, int(count.contents())


def check_source(path: str | os.PathLike) -> tuple[str, int]:
    """``(arch, block_count)`` of a GGUF the writer can prune; one-line error otherwise.

    For validating a ``--gguf`` request before the model loads.
    """
    return prunable(read_gguf(path), Path(path))


def refuse_merge(plan: PrunePlan) -> None:
    """Refuse a merge plan for GGUF output, in one line (callable when the request is validated).

    A merge changes the kept blocks' weights, so their quantized bytes cannot be
    copied; re-quantizing would silently change the source's quantization. The
    writer refuses instead: merges go to the safetensors checkpoint.
    """
    if plan.op != "remove" or plan.merged:
        raise SwappruneError(
            "GGUF output copies the kept blocks' quantized bytes unchanged, so it takes removal "
            "plans only; a merge changes weights (write the safetensors checkpoint for merges)"
        )


def write_pruned_gguf(
    source: str | os.PathLike,
    plan: PrunePlan,
    out: str | os.PathLike,
    *,
    overwrite: bool = False,
    check: Callable[[Path], dict[str, Any]] | None = None,
    sliding_layers: Sequence[bool] | None = None,
) -> GGUFRecord:
    """Write ``source`` with the blocks ``plan`` removes left out, as ``out``.

    Args:
        source: the unpruned GGUF file.
        plan: a removal plan for its block count.
        out: the pruned file to write (its directory is created if needed).
        overwrite: replace an existing ``out``.
        check: called with the finished temporary file before it is renamed
            into place (the self-check); it raises to refuse the file, and its
            result is stored in the record.
        sliding_layers: per kept block, whether it uses the sliding window; written
            as the per-layer list ``{arch}.attention.sliding_window_pattern``
            (replacing any), which llama.cpp b11434 reads instead of deriving the
            pattern from the index. Older llama.cpp builds and transformers' GGUF
            loader ignore it, so it does not make an out-of-phase cut pass the
            self-check (see :mod:`swapprune.serving.view`).

    Returns:
        What was written (sizes, counts, trimmed keys, the check's result).

    Raises:
        SwappruneError: a truncated or corrupt source, an architecture the writer
            cannot handle, a merge plan, a plan for another block count, or an
            ``out`` that exists (without ``overwrite``) or is the source. Nothing
            is written in any of these cases.
    """
    from gguf import GGUFValueType, GGUFWriter  # imports gguf

    start = time.perf_counter()
    src, dst = Path(source).absolute(), Path(out).absolute()
    if dst == src or (dst.exists() and src.exists() and dst.samefile(src)):
        raise SwappruneError(f"GGUF output {dst} is the source file")
    if dst.exists() and not overwrite:
        raise SwappruneError(f"GGUF output {dst} exists (pass overwrite to replace it)")
    if dst.is_dir():
        raise SwappruneError(f"GGUF output {dst} is a directory")
    refuse_merge(plan)
    reader = read_gguf(src)
    arch, old_n = prunable(reader, src)
    if plan.num_layers != old_n:
        raise SwappruneError(f"plan is for {plan.num_layers} blocks but {src} has {old_n}")
    if sliding_layers is not None and len(sliding_layers) != len(plan.kept):
        raise SwappruneError(
            f"sliding_layers has {len(sliding_layers)} entries for {len(plan.kept)} kept blocks"
        )
    swa_key = f"{arch}.{GGUF_SWA_LIST}"
    new_slot = {old: new for new, old in enumerate(plan.kept)}

    renamed: list[tuple[str, Any]] = []
    seen_blocks: set[int] = set()
    for t in reader.tensors:
        m = _BLOCK.fullmatch(t.name)
        if m is None:
            renamed.append((t.name, t))
            continue
        old = int(m.group(1))
        if old >= old_n:
            raise SwappruneError(f"{src}: tensor {t.name} is beyond {arch}.block_count={old_n}")
        seen_blocks.add(old)
        if old in new_slot:
            renamed.append((f"blk.{new_slot[old]}.{m.group(2)}", t))
    missing = sorted(set(plan.kept) - seen_blocks)
    if missing:
        raise SwappruneError(f"{src}: kept blocks {missing} have no tensors")

    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.partial-", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    trimmed: list[str] = []
    try:
        writer = GGUFWriter(tmp, arch, endianess=reader.endianess)
        for name, fld in reader.fields.items():
            if name.startswith("GGUF.") or name == "general.architecture":
                continue  # the header, and the key the writer adds itself
            if name == "general.alignment":
                writer.add_custom_alignment(int(fld.contents()))
                continue
            if name == swa_key and sliding_layers is not None:
                continue  # replaced below
            value, vtype, sub = field_value(fld)
            if name == f"{arch}.block_count":
                value = len(plan.kept)
            elif (
                vtype == GGUFValueType.ARRAY
                and name.startswith(f"{arch}.")
                and name.removeprefix(f"{arch}.") not in NOT_PER_LAYER
                and len(value) == old_n
            ):
                value = [value[i] for i in plan.kept]
                trimmed.append(name)
            if vtype == GGUFValueType.ARRAY and not value:
                continue  # GGUFWriter cannot write an empty array (nor can one carry meaning)
            writer.add_key_value(name, value, vtype, sub_type=sub)
        if sliding_layers is not None:
            writer.add_array(swa_key, [bool(v) for v in sliding_layers])
        for name, t in renamed:
            writer.add_tensor(
                name, t.data, raw_dtype=t.tensor_type, tensor_endianess=reader.endianess
            )
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.flush()
        expected = writer.fout[0].tell() if writer.fout else None
        writer.close()
        # numpy's tofile loses an error of its last buffered write: the size tells
        if expected is not None and tmp.stat().st_size < expected:
            raise OSError(f"{expected} requested and {tmp.stat().st_size} written")
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        write_s = time.perf_counter() - start
        record = GGUFRecord(
            path=str(dst),
            source=str(src),
            arch=arch,
            bytes_before=src.stat().st_size,
            bytes_after=tmp.stat().st_size,
            blocks_before=old_n,
            blocks_after=len(plan.kept),
            removed=list(plan.removed),
            tensors_before=len(reader.tensors),
            tensors_after=len(renamed),
            tensor_types=dict(Counter(t.tensor_type.name for _, t in renamed)),
            trimmed_keys=trimmed,
            write_s=round(write_s, 3),
        )
        if check is not None:
            record.selfcheck = check(tmp)
        apply_umask(tmp)
        os.replace(tmp, dst)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if is_write_error(e):
            raise write_error(dst, e, sum(int(t.n_bytes) for _, t in renamed)) from None
        raise
    return record
