"""Calibration windows: the unlabeled token windows every probe runs on.

Default source: the WikiText-2 raw **validation** text vendored in the package
(the test split is kept for evaluation). The default of 64 windows x 128
tokens sits inside the paper's 100 x 64-128 range; with the default
``positions=all`` every window gives 128 KL samples (``last``: one).
``eval/README.md`` has the measurements behind the defaults.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from swapprune.calibration.tokens import encode
from swapprune.defaults import CALIBRATION_SOURCE as DEFAULT_SOURCE
from swapprune.errors import SwappruneError


@dataclass
class Calibration:
    """Token windows ``input_ids`` ``[N, T]`` and where they came from.

    ``spans``: for windows cut from a text, the ``[start, end)`` positions of each
    window's text tokens in the text's token ids (held-out windows avoid them);
    for a ``.jsonl`` prompt set, the record indices used, as ``[i, i + 1)``.
    """

    input_ids: torch.Tensor
    source: str
    seed: int
    spans: list[tuple[int, int]] | None = None

    def describe(self) -> dict:
        n, t = self.input_ids.shape
        digest = hashlib.sha256(self.input_ids.numpy().astype(np.int64).tobytes()).hexdigest()
        return {
            "source": self.source,
            "prompts": n,
            "tokens": t,
            "seed": self.seed,
            "sha256": digest[:16],
        }


def vendored_text(name: str) -> str:
    """Text of a file in ``swapprune/data`` (``wiki.valid.raw``, ``wiki.test.raw``)."""
    return resources.files("swapprune.data").joinpath(name).read_text(encoding="utf-8")


def bos_ids(tokenizer) -> list[int]:
    """``[bos]`` if the tokenizer adds one by default, else ``[]``."""
    ids = tokenizer("a").input_ids
    bos = tokenizer.bos_token_id
    return [bos] if bos is not None and ids and ids[0] == bos else []


def windows_from_text(
    text: str, tokenizer, prompts: int, tokens: int, seed: int, source: str
) -> Calibration:
    """Cut ``text`` into non-overlapping windows of ``tokens`` and pick ``prompts`` of them.

    Windows get the tokenizer's BOS first when it adds one by default (Gemma
    needs it); the pick is a seeded sample, kept in text order.
    """
    bos = bos_ids(tokenizer)
    body = tokens - len(bos)
    ids = encode(tokenizer, text, add_special_tokens=False)
    available = len(ids) // body
    if available < prompts:
        raise SwappruneError(
            f"calibration text '{source}' has {len(ids)} tokens: only {available} windows of "
            f"{tokens} tokens, {prompts} asked; lower --prompts or --tokens"
        )
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.choice(available, size=prompts, replace=False)) * body
    rows = [bos + ids[s : s + body] for s in starts]
    spans = [(int(s), int(s) + body) for s in starts]
    return Calibration(torch.tensor(rows, dtype=torch.long), source, seed, spans)


def windows_from_jsonl(
    path: Path, tokenizer, prompts: int | None, tokens: int, skip: Collection[int] = ()
) -> Calibration:
    """The first ``prompts`` records' ``text``, tokenized with default special tokens, cut to ``tokens``.

    ``prompts`` ``None``: every record with at least ``tokens`` tokens, shorter ones
    skipped (the held-out pick); ``skip``: 0-based record indices to leave out.
    """
    rows: list[list[int]] = []
    used: list[tuple[int, int]] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if len(rows) == prompts:
                break
            if not line.strip() or lineno - 1 in skip:
                continue
            try:
                rec = json.loads(line)
                text = rec["text"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise SwappruneError(
                    f"{path}:{lineno}: expected a JSON object with a 'text' field"
                ) from None
            ids = tokenizer(text).input_ids
            if len(ids) < tokens and prompts is None:
                continue
            if len(ids) < tokens:
                raise SwappruneError(
                    f"{path}:{lineno}: record {len(rows)} has {len(ids)} tokens, fewer than "
                    f"--tokens {tokens}; lower --tokens or drop the record"
                )
            rows.append(ids[:tokens])
            used.append((lineno - 1, lineno))
    if prompts is not None and len(rows) < prompts:
        raise SwappruneError(f"{path} has {len(rows)} records, {prompts} asked; lower --prompts")
    return Calibration(torch.tensor(rows, dtype=torch.long), str(path), 0, used)


def load_calibration(
    tokenizer,
    source: str | None,
    prompts: int,
    tokens: int,
    seed: int = 0,
    max_positions: int | None = None,
) -> Calibration:
    """Resolve ``--calib`` into windows.

    Args:
        tokenizer: the model's tokenizer.
        source: ``None``/``wikitext2-valid`` (vendored default), a ``.txt`` file, a
            ``.jsonl`` prompt set, or ``datasets`` name ``NAME[:CONFIG[:SPLIT]]``
            (needs a hub; its ``text`` column is joined and windowed).
        prompts, tokens, seed: ``N`` windows of ``T`` tokens, picked deterministically.
        max_positions: the model's context length; ``tokens`` above it is an error.
    """
    if prompts < 1 or tokens < 2:
        raise SwappruneError("--prompts must be >= 1 and --tokens >= 2")
    if max_positions is not None and tokens > max_positions:
        raise SwappruneError(
            f"--tokens {tokens} exceeds the model's context of {max_positions} tokens"
        )
    source = source or DEFAULT_SOURCE
    path = Path(source)
    if path.suffix == ".jsonl":
        if not path.is_file():
            raise SwappruneError(f"calibration file {path} not found")
        return windows_from_jsonl(path, tokenizer, prompts, tokens)
    return windows_from_text(source_text(source), tokenizer, prompts, tokens, seed, source)


def source_text(source: str) -> str:
    """The text behind a text source: the vendored default, a ``.txt`` file, a ``datasets`` name."""
    if source == DEFAULT_SOURCE:
        return vendored_text("wiki.valid.raw")
    path = Path(source)
    if path.suffix == ".txt" or path.is_file():
        if not path.is_file():
            raise SwappruneError(f"calibration file {path} not found")
        return path.read_text(encoding="utf-8")
    return _from_datasets(source)


def _from_datasets(name: str) -> str:
    parts = name.split(":")
    try:
        import datasets
    except ImportError:
        raise SwappruneError(
            f"'{name}' is not a file, and the datasets package is missing"
        ) from None
    try:
        ds = datasets.load_dataset(
            parts[0],
            parts[1] if len(parts) > 1 else None,
            split=parts[2] if len(parts) > 2 else "train",
        )
    except Exception as e:  # hub/network errors come in many types
        raise SwappruneError(
            f"cannot load calibration data set '{name}': {type(e).__name__}: {e}"
        ) from None
    if "text" not in ds.column_names:
        raise SwappruneError(
            f"calibration data set '{name}' has no 'text' column (columns: "
            f"{', '.join(ds.column_names)})"
        )
    return "\n".join(t for t in ds["text"] if t)
