"""``swapprune_wikitext2_ppl``: sliding-window perplexity on WikiText-2 test.

The contract: the raw WikiText-2 test text up to the end of its 5,000th
whitespace-separated word, tokenised once with the model's tokenizer (with
BOS if the tokenizer adds one by default), scored in windows of ``max_length``
tokens moved by ``stride`` (half a window). Every window scores only the tokens
the previous one did not; the first scores all its tokens but the first. This
is the standard Hugging Face sliding-window perplexity.

The windows are defined in token space, so they cannot be written as lm-eval
text documents (re-tokenising decoded text need not give the same tokens).
Instead each window becomes one token-level loglikelihood request
``(context ids, continuation ids)`` passed to ``HFLM._loglikelihood_tokens``, the
same entry point lm-eval's own ``loglikelihood_rolling`` uses for its windows.
lm-eval batches the windows, runs the forward passes and returns each window's
summed log-probability.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from swapprune.calibration.tokens import encode
from swapprune.errors import SwappruneError
from swapprune.evaluation import contract
from swapprune.evaluation.names import WIKITEXT2_PPL
from swapprune.evaluation.results import Metric, TaskResult
from swapprune.stats import bootstrap

TEST_TEXT = Path(__file__).resolve().parent.parent / "data" / contract.TEXT_FILE


@dataclass(frozen=True)
class Window:
    """The model reads ``ids[begin:end]`` and is scored on ``ids[split:end]``."""

    begin: int
    split: int
    end: int


def first_words(text: str, words: int | None) -> str:
    """Return ``text`` up to the end of its ``words``-th whitespace-separated word.

    The raw text (newlines, leading whitespace) is kept as is; ``None`` keeps all.
    """
    if words is None:
        return text
    if words <= 0:
        raise SwappruneError(f"words must be positive, got {words}")
    for i, m in enumerate(re.finditer(r"\S+", text), start=1):
        if i == words:
            return text[: m.end()]
    raise SwappruneError(f"text has fewer than {words} words")


def sliding_windows(n_tokens: int, max_length: int, stride: int) -> list[Window]:
    """Windows of the Hugging Face sliding-window perplexity recipe.

    Args:
        n_tokens: Length of the token sequence.
        max_length: Tokens the model reads per window.
        stride: Distance between window starts, ``0 < stride <= max_length``.

    Returns:
        Windows whose scored spans tile ``[1, n_tokens)`` exactly once.
    """
    if not 0 < stride <= max_length:
        raise SwappruneError(f"stride must be in (0, {max_length}], got {stride}")
    if n_tokens < 2:
        raise SwappruneError("need at least 2 tokens to score a perplexity")
    windows, prev_end = [], 0
    for begin in range(0, n_tokens, stride):
        end = min(begin + max_length, n_tokens)
        # The first token of a window has no context inside it: never scored.
        windows.append(Window(begin, max(prev_end, begin + 1), end))
        prev_end = end
        if end == n_tokens:
            break
    return windows


def score_windows(lm, ids: list[int], windows: list[Window]) -> list[float]:
    """Summed NLL (nats) of each window's scored tokens, computed by lm-eval.

    Args:
        lm: An lm-eval ``TemplateLM`` (``HFLM``) whose ``max_length`` covers a window.
        ids: The full token sequence.
        windows: Windows over ``ids``.
    """
    # A None request string keeps lm-eval's response cache out of it, as in
    # its own loglikelihood_rolling.
    requests = [(None, ids[w.begin : w.split], ids[w.split : w.end]) for w in windows]
    results = lm._loglikelihood_tokens(requests, disable_tqdm=True)
    return [-logprob for logprob, _greedy in results]


def tokenize(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` with the tokenizer's default special tokens (BOS)."""
    return encode(tokenizer, text, add_special_tokens=True)


def run_wikitext2_ppl(
    lm,
    tokenizer,
    words: int | None = contract.WORDS,
    max_length: int = contract.MAX_LENGTH,
    limit: int | None = None,
    text: str | None = None,
    n_boot: int = bootstrap.N_BOOT,
) -> TaskResult:
    """Evaluate ``swapprune_wikitext2_ppl``.

    Args:
        lm: lm-eval ``HFLM`` wrapping the model, with ``max_length >= max_length``.
        tokenizer: The model's Hugging Face tokenizer.
        words: Words of the test text to keep (None: all).
        max_length: Window length in tokens; the stride is half of it.
        limit: Score only the first ``limit`` windows (for quick checks).
        text: Override of the raw text (tests); defaults to WikiText-2 test.
        n_boot: Bootstrap resamples for the CI.

    Returns:
        Perplexity with a CI bootstrapped over windows, and per-window values.
    """
    if lm.max_length < max_length:
        # lm-eval would silently cut the window's left end off.
        raise SwappruneError(f"model max_length {lm.max_length} < window length {max_length}")
    start = time.perf_counter()
    source = TEST_TEXT.read_text(encoding="utf-8") if text is None else text
    ids = tokenize(tokenizer, first_words(source, words))
    stride = contract.stride(max_length)
    windows = sliding_windows(len(ids), max_length, stride)
    if limit is not None:
        windows = windows[:limit]
    nll = score_windows(lm, ids, windows)
    tokens = [w.end - w.split for w in windows]
    ci = bootstrap.ci_ppl(nll, tokens, n_boot=n_boot)
    metric = Metric(
        value=ci.estimate,
        low=ci.low,
        high=ci.high,
        higher_is_better=False,
        units=["nll", "tokens"],
        statistic="ppl",
        ci=f"percentile bootstrap over windows ({n_boot})",
    )
    bos = getattr(tokenizer, "bos_token_id", None)
    return TaskResult(
        task=WIKITEXT2_PPL,
        unit="window",
        unit_ids=list(range(len(windows))),
        units={"nll": nll, "tokens": tokens},
        metrics={"perplexity": metric},
        info={
            "words": words,
            "max_length": max_length,
            "stride": stride,
            "n_tokens": len(ids),
            "scored_tokens": sum(tokens),
            "starts_with_bos": bos is not None and bool(ids) and ids[0] == bos,
            "n_windows": len(windows),
            "wall_s": time.perf_counter() - start,
        },
    )
