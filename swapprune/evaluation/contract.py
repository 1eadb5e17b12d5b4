"""The paper's matched WikiText-2 perplexity contract, in one place.

WikiText-2 raw **test**, the text up to its 5,000th word, windows of 512 tokens
moved by 256 (half a window), token-level perplexity, 95% bootstrap CIs over
windows (Garcia 2026, section 4). Every other module reads these constants.
"""

from __future__ import annotations

from swapprune import defaults

#: The task that runs the contract (:mod:`swapprune.evaluation.perplexity`).
TASK = "swapprune_wikitext2_ppl"
#: Words of WikiText-2 test scored.
WORDS = defaults.CONTRACT_WORDS
#: Window (context) length in tokens.
MAX_LENGTH = defaults.CONTRACT_MAX_LENGTH
#: Vendored text of the test split (``swapprune/data``).
TEXT_FILE = "wiki.test.raw"


def stride(max_length: int = MAX_LENGTH) -> int:
    """Tokens a window moves by: half of it."""
    return max_length // 2


def describe(words: int = WORDS, max_length: int = MAX_LENGTH, windows: int | None = None) -> dict:
    """The contract as recorded in results (``windows``: how many were scored)."""
    out = {"words": words, "max_length": max_length, "stride": stride(max_length)}
    if windows is not None:
        out["windows"] = windows
    return out
