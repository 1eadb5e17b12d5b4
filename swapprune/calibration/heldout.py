"""Held-out windows: long windows of the calibration source that no scoring window touches.

A cut is certified (:mod:`swapprune.select.certificate`) on windows the probes
never saw, so the certificate does not chase the scoring windows' noise. From
a text source they are the ``tokens``-long chunks of the text's token ids that
intersect no scoring window (the whole window pool when selection probes in
tranches); from a ``.jsonl`` prompt set, records the scoring windows did not
use. Default length 512 tokens (capped at the model's context): long windows
measure what a pruned model does to long-range predictions, which 64-token
scoring windows cannot.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from swapprune.calibration.tokens import encode
from swapprune.calibration.windows import (
    DEFAULT_SOURCE,
    Calibration,
    bos_ids,
    source_text,
    windows_from_jsonl,
)
from swapprune.errors import SwappruneError

#: Offset of the held-out pick's seed from the scoring windows' (a different stream).
SEED_OFFSET = 1_000_003
#: What gives the held-out windows enough text, as the refusal names it.
FIX = "lower --heldout-prompts (at least 4) or --heldout-tokens, or give a longer --heldout-calib"


def heldout_windows(
    tokenizer,
    source: str | None,
    prompts: int,
    tokens: int,
    seed: int,
    avoid: Sequence[Calibration] = (),
    fix: str = FIX,
) -> Calibration:
    """``prompts`` windows of ``tokens`` tokens of ``source`` that share no token with ``avoid``.

    Args:
        tokenizer: the model's tokenizer.
        source: the calibration source (``None``: the vendored WikiText-2 validation text).
        prompts, tokens: how many windows, how long (BOS included when the tokenizer adds one).
        seed: the pick's seed.
        avoid: windows to stay clear of (the scoring windows, other held-out windows),
            by their ``spans``; windows of another source are disjoint by construction.
        fix: the settings that fix a source too short, for the refusal.

    Raises:
        SwappruneError: the source has too few windows outside the scoring ones.
    """
    source = source or DEFAULT_SOURCE
    forbidden: list[tuple[int, int]] = []
    for cal in avoid:
        if cal.source != source:
            continue
        if cal.spans is None:
            raise SwappruneError(
                f"the scoring windows of {source} carry no positions: held-out windows could "
                "overlap them; give a held-out source (--heldout-calib)"
            )
        forbidden += cal.spans
    if Path(source).suffix == ".jsonl":
        return _from_records(Path(source), tokenizer, prompts, tokens, forbidden, fix)
    bos = bos_ids(tokenizer)
    body = tokens - len(bos)
    ids = encode(tokenizer, source_text(source), add_special_tokens=False)
    spans = sorted(forbidden)
    free = [k for k in range(len(ids) // body) if not _hits(k * body, (k + 1) * body, spans)]
    if len(free) < prompts:
        raise SwappruneError(
            f"held-out source {source} has {len(free)} window{'s' if len(free) != 1 else ''} "
            f"of {tokens} tokens outside the scoring windows, {prompts} asked; {fix}"
        )
    rng = np.random.default_rng(seed + SEED_OFFSET)
    starts = np.sort(rng.choice(free, size=prompts, replace=False)) * body
    rows = [bos + ids[s : s + body] for s in starts]
    return Calibration(
        torch.tensor(rows, dtype=torch.long),
        source,
        seed,
        [(int(s), int(s) + body) for s in starts],
    )


def _hits(start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    """Whether ``[start, end)`` intersects any of ``spans``."""
    return any(s < end and start < e for s, e in spans)


def _from_records(
    path: Path, tokenizer, prompts: int, tokens: int, used, fix: str = FIX
) -> Calibration:
    """Records the scoring windows did not use, each with at least ``tokens`` tokens."""
    taken = {a for a, _ in used}
    every = windows_from_jsonl(path, tokenizer, None, tokens, skip=taken)
    if every.input_ids.shape[0] < prompts:
        raise SwappruneError(
            f"held-out source {path} has {every.input_ids.shape[0]} unused records of "
            f"{tokens} tokens, {prompts} asked; {fix}"
        )
    assert every.spans is not None
    return Calibration(every.input_ids[:prompts], str(path), 0, every.spans[:prompts])
