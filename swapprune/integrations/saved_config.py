"""Keep a pruned config through llm-compressor's ``save_pretrained``, which rewrites it.

llm-compressor's save rewrites ``config.json`` from the *original* model's file
(for vLLM compatibility) and patches back only the fields it edits itself,
which would restore the unpruned layer count and ``layer_types``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from loguru import logger

from swapprune.output.artifacts import write_text_atomic


def changed_keys(before: dict, after: dict) -> list[tuple[str, ...]]:
    """Paths of the config entries the surgery changed (top level and ``text_config``)."""
    paths: list[tuple[str, ...]] = [
        (k,) for k in after if k != "text_config" and before.get(k) != after[k]
    ]
    inner_b, inner_a = before.get("text_config"), after.get("text_config")
    if isinstance(inner_b, dict) and isinstance(inner_a, dict):
        paths += [("text_config", k) for k in inner_a if inner_b.get(k) != inner_a[k]]
    return paths


def keep_config_on_save(model, paths: list[tuple[str, ...]]) -> None:
    """Make ``model.save_pretrained`` write the pruned config, not the original one.

    llm-compressor's save rewrites ``config.json`` from the *original* model's
    file (for vLLM compatibility) and patches back only the fields it edits
    itself, which would restore the unpruned layer count and ``layer_types``.
    This wraps the (already wrapped) method and writes the entries the surgery
    changed back into the saved file, with the values the model has at save time.
    """
    if not paths:
        return
    inner = model.save_pretrained

    @functools.wraps(inner)
    def save_pretrained(save_directory, *args, **kwargs):
        result = inner(save_directory, *args, **kwargs)
        _patch_saved_config(Path(save_directory) / "config.json", model.config.to_dict(), paths)
        return result

    # llm-compressor must not wrap it a second time.
    setattr(save_pretrained, "_overridden", True)  # noqa: B010
    model.save_pretrained = save_pretrained


def _patch_saved_config(path: Path, current: dict, paths: list[tuple[str, ...]]) -> None:
    if not path.is_file():  # another rank wrote it, or nothing was saved
        return
    saved = json.loads(path.read_text(encoding="utf-8"))
    changed = False
    for key_path in paths:
        src, dst = current, saved
        for part in key_path[:-1]:
            src, dst = src.get(part, {}), dst.setdefault(part, {})
        key = key_path[-1]
        if key in src and dst.get(key) != src[key]:
            logger.info("{}: {}: {} -> {}", path.name, ".".join(key_path), dst.get(key), src[key])
            dst[key] = src[key]
            changed = True
    if changed:
        write_text_atomic(path, json.dumps(saved, indent=2, sort_keys=True) + "\n")
