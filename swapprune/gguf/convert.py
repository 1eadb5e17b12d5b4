"""A GGUF model converted once to a plain Hugging Face directory in the user cache.

Loading a GGUF file through transformers parses it three times (config,
tokenizer, weights) and de-quantizes every tensor: 20-40 s for the 135M demo
model on a small CPU, paid by every command. :func:`converted_dir` pays it once:
the first call converts the file to ``config.json``, ``generation_config.json``,
the tokenizer files and ``model.safetensors`` (float32, which holds the
de-quantized values exactly), and later calls return that directory, which
``from_pretrained`` reads in about a second. The copy gives bitwise the same
logits as the direct GGUF load (``tests/test_gguf_cache.py``).

Location (see :func:`cache_root`): ``$SWAPPRUNE_CACHE`` if set, else
``$XDG_CACHE_HOME/swapprune``, else ``~/.cache/swapprune``. Under it::

    gguf/index.json                   file hashes, memoised by (path, size, mtime, ctime, inode)
    gguf/<sha256>-tf<V>-gguf<W>-v1/   one converted model
        swapprune-gguf.json           completion marker: every file's size and sha256
    gguf/<entry>.lock                 held while an entry is built

An entry is keyed by the GGUF file's content (sha256 of its bytes) and by the
transformers and gguf versions that converted it, so a renamed or copied file
reuses its entry, a file replaced in place does not, and an upgrade converts
again. Entries are built in a hidden staging directory and renamed into place
complete; one whose marker is missing, or whose files differ from the marker
(size, hash, a file too many or too few), is rebuilt and never used. Hashing
the 93 MB demo file takes ~0.15 s and a converted 540 MB copy ~1 s, so each
file's hash is memoised in ``index.json`` under its (size, mtime_ns, ctime_ns,
inode, device): a warm load only stats the files. Any write to a file changes
its ctime, which no tool can set back, so a changed file is always rehashed.
Deleting the cache directory is always safe; nothing prunes old entries.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib.metadata
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from swapprune.errors import SwappruneError
from swapprune.gguf.bounds import check_header_bounds
from swapprune.output.artifacts import locked, staging_dir, write_json_atomic

FORMAT = 1
MARKER = "swapprune-gguf.json"
INDEX = "index.json"
_CHUNK = 8 << 20


def cache_root() -> Path:
    """The swapprune cache directory, absolute (not created): see the module docstring."""
    explicit = os.environ.get("SWAPPRUNE_CACHE")
    if explicit:
        return Path(explicit).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "swapprune").absolute()


def gguf_cache_dir() -> Path:
    """Where converted GGUF models live: ``<cache_root>/gguf``."""
    return cache_root() / "gguf"


# ---------------------------------------------------------------- file hashes


def _signature(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _read_index(directory: Path) -> dict[str, Any]:
    try:
        data = json.loads((directory / INDEX).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_index(directory: Path, updates: dict[str, Any]) -> None:
    """Merge ``updates`` into the index; entries for files that are gone are dropped."""
    try:
        index = _read_index(directory)
        index.update(updates)
        index = {p: v for p, v in index.items() if os.path.exists(p)}
        write_json_atomic(directory / INDEX, index, indent=0)
    except OSError:
        pass  # only a memo: the next run hashes again


def _stream_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: str | os.PathLike, *, memo: bool = True) -> str:
    """sha256 of a file's bytes, memoised in the cache index by the file's stat signature.

    Args:
        path: the file.
        memo: look the hash up in (and record it to) ``gguf/index.json``.
    """
    path = Path(path).absolute()
    directory = gguf_cache_dir()
    key = str(path)
    signature = _signature(path.stat())
    if memo:
        hit = _read_index(directory).get(key)
        if isinstance(hit, dict) and hit.get("stat") == signature:
            return str(hit["sha256"])
    digest = _stream_sha256(path)
    # Record only if the file did not change while it was read.
    if memo and _signature(path.stat()) == signature and directory.is_dir():
        _write_index(directory, {key: {"stat": signature, "sha256": digest}})
    return digest


# ---------------------------------------------------------------- entries


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def entry_name(sha256: str) -> str:
    """Directory name of the entry for a GGUF file with content hash ``sha256``."""
    return f"{sha256}-tf{_version('transformers')}-gguf{_version('gguf')}-v{FORMAT}"


def entry_ok(entry: Path, sha256: str | None = None) -> bool:
    """Whether ``entry`` is a complete, unaltered conversion (of the file hashing to ``sha256``).

    Checks the marker, the exact set of files, each file's size and (memoised) sha256.
    """
    try:
        marker = json.loads((entry / MARKER).read_text())
        files = marker["files"]
        if marker.get("format") != FORMAT or not isinstance(files, dict):
            return False
        if sha256 is not None and marker["source"]["sha256"] != sha256:
            return False
        present = {p.name for p in entry.iterdir()} - {MARKER}
        if present != set(files) or "config.json" not in files:
            return False
        if not any(name.endswith(".safetensors") for name in files):
            return False
        for name, rec in files.items():
            path = entry / name
            if path.stat().st_size != rec["size"] or file_sha256(path) != rec["sha256"]:
                return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True


Convert = Callable[[Path, Path, bool], None]  # (gguf file, empty directory, progress)


def converted_dir(gguf_path: str | os.PathLike, convert: Convert, *, progress: bool = True) -> Path:
    """The cache entry holding ``gguf_path`` converted to a Hugging Face directory.

    Converts on first use (or when the entry is missing, partial or altered);
    concurrent callers wait for one conversion.

    Args:
        gguf_path: the ``.gguf`` file.
        convert: writes the de-quantized model into a directory
            (:func:`swapprune.model.load.convert_gguf`).
        progress: when converting, print one line to stderr and show the
            de-quantization progress bar.

    Returns:
        The entry directory, ready for ``from_pretrained``.

    Raises:
        OSError: the cache cannot be written (callers may load the GGUF directly).
        ValueError: transformers cannot load this GGUF file.
    """
    gguf_path = Path(gguf_path).absolute()
    directory = gguf_cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    sha = file_sha256(gguf_path)
    entry = directory / entry_name(sha)
    if entry_ok(entry, sha):
        return entry
    with locked(directory / f"{entry.name}.lock"):
        if entry_ok(entry, sha):  # converted by another process while this one waited
            return entry
        if progress:
            print(
                f"swapprune: converting {gguf_path.name} once into {entry} "
                "(later loads read the copy)",
                file=sys.stderr,
                flush=True,
            )
        _build(gguf_path, sha, entry, convert, progress)
    return entry


def lookup(gguf_path: str | os.PathLike) -> Path | None:
    """The complete cache entry of ``gguf_path`` if there is one; never converts."""
    try:
        gguf_path = Path(gguf_path).absolute()
        if not gguf_cache_dir().is_dir():
            return None
        sha = file_sha256(gguf_path)
    except OSError:
        return None
    entry = gguf_cache_dir() / entry_name(sha)
    return entry if entry_ok(entry, sha) else None


def _build(gguf_path: Path, sha: str, entry: Path, convert: Convert, progress: bool) -> None:
    start = time.perf_counter()
    with staging_dir(entry) as tmp:
        convert(gguf_path, tmp, progress)
        files = {}
        for p in sorted(tmp.iterdir()):
            files[p.name] = {"size": p.stat().st_size, "sha256": _stream_sha256(p)}
        marker = {
            "format": FORMAT,
            "source": {"name": gguf_path.name, "sha256": sha, "size": gguf_path.stat().st_size},
            "versions": {d: _version(d) for d in ("transformers", "gguf", "torch", "swapprune")},
            "convert_s": round(time.perf_counter() - start, 3),
            "files": files,
        }
        write_json_atomic(tmp / MARKER, marker, indent=1)
    # Memoise the hashes just computed under the final paths' stat (the rename kept them).
    _write_index(
        entry.parent,
        {
            str(entry / name): {"stat": _signature((entry / name).stat()), "sha256": rec["sha256"]}
            for name, rec in files.items()
        },
    )


# ---------------------------------------------------------------- conversion


@contextlib.contextmanager
def parse_once(quiet: bool = False) -> Iterator[None]:
    """Within the block, parse each GGUF file once instead of three times.

    transformers builds a ``GGUFReader`` for the config, another for the
    tokenizer and a third for the weights (most of the cost is the vocabulary
    fields), parses every metadata value each time, and builds a tensor-name
    map per submodule. Inside the block one reader per file, one metadata parse
    per file (handed out as copies) and one name map per architecture are
    shared; all are read-only, so only the time changes. With ``quiet`` the
    de-quantization progress bar (a bare tqdm) is off. Restored on exit; a hook
    whose target is missing in this transformers/gguf version is skipped.
    """
    import gguf  # imports gguf

    patches: list[tuple[Any, str, Any]] = []
    readers: dict[tuple[str, str], Any] = {}
    maps: dict[tuple[Any, int], Any] = {}
    metadata: dict[str, Any] = {}

    real_reader = getattr(gguf, "GGUFReader", None)
    if real_reader is not None:

        def reader(path, mode="r"):
            key = (os.fspath(path), mode)
            if key not in readers:
                readers[key] = real_reader(path, mode)
            return readers[key]

        patches.append((gguf, "GGUFReader", reader))

    real_map = getattr(gguf, "get_tensor_name_map", None)
    if real_map is not None:

        def name_map(arch, n_blocks):
            if (arch, n_blocks) not in maps:
                maps[arch, n_blocks] = real_map(arch, n_blocks)
            return maps[arch, n_blocks]

        patches.append((gguf, "get_tensor_name_map", name_map))

    gguf_utils: Any
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        gguf_utils = None
    real_load = getattr(gguf_utils, "load_gguf_checkpoint", None)
    if real_load is not None:

        def load_checkpoint(path, return_tensors=False, *args, **kwargs):
            if return_tensors or args or kwargs:
                return real_load(path, return_tensors, *args, **kwargs)
            key = os.fspath(path)
            if key not in metadata:
                metadata[key] = real_load(path, return_tensors=False)
            return copy.deepcopy(metadata[key])

        patches.append((gguf_utils, "load_gguf_checkpoint", load_checkpoint))
    real_tqdm = getattr(gguf_utils, "tqdm", None)
    if quiet and real_tqdm is not None:
        patches.append((gguf_utils, "tqdm", functools.partial(real_tqdm, disable=True)))

    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, hook in patches:
        setattr(owner, name, hook)
    try:
        yield
    finally:
        for owner, name, real in saved:
            setattr(owner, name, real)


def read_header(path: str | os.PathLike) -> dict[str, Any]:
    """The scalar metadata of a GGUF file's header (``gguf.GGUFReader``), by key.

    Arrays are left out (the vocabulary is most of the header); raises a one-line
    :class:`~swapprune.errors.SwappruneError` for a file that is not a readable GGUF.
    """
    import gguf  # imports gguf

    try:
        check_header_bounds(path)  # before the reader trusts counts the file cannot hold
        reader = gguf.GGUFReader(path, "r")
        out: dict[str, Any] = {}
        for key, f in reader.fields.items():
            if f.types and f.types[0] != gguf.GGUFValueType.ARRAY:
                out[key] = f.contents()
    except (OSError, ValueError, KeyError, IndexError, TypeError, OverflowError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SwappruneError(f"cannot read GGUF file {path}: {first}") from None
    return out


# ---------------------------------------------------------------- the GGUF marker


def clear_gguf_marker(model) -> bool:
    """Let a model dequantized from GGUF be saved; returns whether a marker was cleared.

    transformers dequantizes GGUF weights to float on load but keeps its GGUF
    quantizer attached, and ``save_pretrained`` refuses any model whose
    quantizer is not serializable. Other quantizers (bitsandbytes, ...) hold
    really quantized weights and are left alone.
    """
    quantizer = getattr(model, "hf_quantizer", None)
    method = getattr(getattr(quantizer, "quantization_config", None), "quant_method", None)
    if quantizer is None or str(getattr(method, "value", method)) != "gguf":
        return False
    model.hf_quantizer = None
    for attr in ("is_quantized", "quantization_method"):
        if attr in vars(model):
            delattr(model, attr)
    if getattr(model, "is_quantized", False):
        model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return True


@contextlib.contextmanager
def gguf_marker_cleared(model) -> Iterator[None]:
    """Clear the GGUF marker (see :func:`clear_gguf_marker`) for the block, then restore it."""
    saved = {
        k: vars(model)[k]
        for k in ("hf_quantizer", "is_quantized", "quantization_method")
        if k in vars(model)
    }
    config_q = getattr(model.config, "quantization_config", None)
    cleared = clear_gguf_marker(model)
    try:
        yield
    finally:
        if cleared:
            for k, v in saved.items():
                setattr(model, k, v)
            if config_q is not None:
                model.config.quantization_config = config_q
