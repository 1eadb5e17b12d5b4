"""Calibration windows to and from llm-compressor's ``oneshot`` data (no llm-compressor import)."""

from __future__ import annotations

import torch
from loguru import logger
from torch.utils.data import DataLoader

from swapprune.calibration.windows import Calibration, load_calibration
from swapprune.config import CalibrationConfig
from swapprune.config.fields import default_of
from swapprune.errors import SwappruneError

ONESHOT = "oneshot"


def _real_rows(loader):
    """Each sample's real tokens (``attention_mask`` drops padding on either side), in order."""
    for batch in loader:
        ids = torch.as_tensor(batch["input_ids"])
        mask = batch.get("attention_mask") if hasattr(batch, "get") else None
        if ids.dim() == 1:
            ids = ids[None]
        mask = torch.ones_like(ids) if mask is None else torch.as_tensor(mask).reshape(ids.shape)
        for row, keep in zip(ids, mask):
            yield row[keep.bool()].to("cpu", torch.long)


def windows_from_dataloader(loader, samples: int | None, tokens: int | None) -> Calibration:
    """Token windows ``[N, T]`` from a oneshot calibration dataloader.

    With ``tokens`` set: the first ``samples`` samples with at least ``tokens`` real
    tokens, cut to that length (fewer is a warning, none an error). With ``tokens``
    left ``None`` the data decides: among the first ``samples`` samples, ``T`` is the
    lower median of their lengths (capped at CalibrationConfig's default), and the
    samples reaching ``T`` are kept, so at least half of them. ``samples`` ``None``:
    CalibrationConfig's default count.
    """
    n = samples or default_of(CalibrationConfig, "prompts")
    rows: list[torch.Tensor] = []
    seen = 0
    if tokens is None:
        first = []
        for row in _real_rows(loader):
            first.append(row)
            if len(first) == n:
                break
        seen = len(first)
        lengths = sorted(r.numel() for r in first)
        t = (
            min(default_of(CalibrationConfig, "tokens"), lengths[(len(lengths) - 1) // 2])
            if first
            else 0
        )
        rows = [r[:t] for r in first if t >= 2 and r.numel() >= t]
        tokens = t
    else:
        for row in _real_rows(loader):
            seen += 1
            if row.numel() >= tokens:
                rows.append(row[:tokens])
            if len(rows) == n:
                break
    if not rows:
        raise SwappruneError(
            f"none of oneshot's {seen} calibration samples has {max(tokens, 2)} tokens: lower "
            f"tokens, raise oneshot's max_seq_length, or set calib='wikitext2-valid'"
        )
    if len(rows) < n and samples is not None:
        logger.warning(
            "DepthPruningModifier: {} of {} oneshot samples have >= {} tokens; scoring on "
            "{} windows, not {}",
            len(rows),
            seen,
            tokens,
            len(rows),
            n,
        )
    return Calibration(torch.stack(rows), f"{ONESHOT}-dataloader", 0)


def windows_line(windows, prompts: int | None, tokens: int | None) -> str:
    """What the modifier scores on, and which of its counts followed oneshot's data."""
    n, t = windows.input_ids.shape
    followed = [f for f, v in (("prompts", prompts), ("tokens", tokens)) if v is None]
    line = f"{n} windows x {t} tokens from oneshot's data"
    if followed:
        line += (
            f" ({' and '.join(followed)} unset, so taken from that data: its samples, at the "
            "length most of them reach; set them to choose)"
        )
    return line


def calibration_dataloader(
    tokenizer,
    source: str | None = None,
    samples: int | None = None,
    tokens: int | None = None,
    seed: int = 0,
):
    """swapprune's calibration windows as a DataLoader to hand to ``oneshot(dataset=...)``.

    The pruning modifier then scores on exactly the windows ``swapprune.prune``
    would use, and quantization modifiers that need data calibrate on the same.
    ``samples`` and ``tokens`` default to CalibrationConfig's.
    """
    cal = load_calibration(
        tokenizer,
        source,
        samples or default_of(CalibrationConfig, "prompts"),
        tokens or default_of(CalibrationConfig, "tokens"),
        seed,
    )
    rows = [
        {"input_ids": r[None], "attention_mask": torch.ones_like(r)[None]} for r in cal.input_ids
    ]
    return DataLoader(rows, batch_size=None)  # type: ignore[arg-type]  # a list is a map dataset
