"""``swapprune_wikitext2_ext``: perplexity over every article of WikiText-2 test, by article.

The matched contract (:mod:`swapprune.evaluation.perplexity`) scores the first
5,000 words of the test split: 23 windows from two articles. This contract
scores the rest of the split, article by article, so that a bootstrap can
resample articles:

* **Articles.** An article starts at a level-1 heading line (`` = Title = ``)
  that follows a blank line, and runs to the next one. The split has 62 such
  heading-shaped lines, but two of them (`` = 1 rad / s and a nominal impedance
  k = `` and `` = 1 henry and capacitance C = ``) are formula fragments inside
  "Constant k filter" and follow text, not a blank line: the split holds **60
  articles**. (``swapprune_wikitext`` keeps lm-eval's 62-page split, which cuts
  that article in three.)
* **Held out from the matched contract.** The text up to the end of the first
  ``skip_words`` (5,000) words is dropped. Robert Boulter lies wholly inside it;
  Du Fu contributes its remainder; **59 articles** remain. Every window lies in
  the text the matched contract never scores, whatever its window settings.
* **Windows.** Each article's remaining text is tokenised on its own (with
  BOS if the tokenizer adds one by default) and cut into consecutive,
  non-overlapping chunks of ``max_length`` (512) tokens; an incomplete last
  chunk is dropped. Of an article's ``C`` chunks, ``K = per_article`` are kept,
  centred in ``K`` equal strata: chunk ``floor((j + 1/2) C / K)`` for
  ``j < K`` (the middle chunk for the default ``K = 1``; all chunks when
  ``C <= K``). A window reads its chunk and scores the second half (256 tokens)
  given the first, so every scored token has 256 to 511 tokens of context: the
  same as every window of the matched contract after its first.
* **Why one window per article.** A model's evaluation time is set by its
  number of windows (2.8 CPU-seconds per 512-token window for SmolLM2-135M,
  one thread, measured below); its information mostly by the number of
  articles, because windows of one article are correlated. For the same time,
  one window from each of 59 articles tells more than two from each of 30.
  With one window per article the article bootstrap draws the same units as a
  window bootstrap; with ``per_article=2`` (twice the time) it keeps the CI
  honest about the within-article correlation.
* **Units.** One unit per window, columns ``nll`` (summed negative
  log-likelihood in nats of its scored tokens), ``tokens`` (how many) and
  ``article`` (the article's index among the 60, 0 = Robert Boulter).
* **Metric.** Token-level perplexity ``exp(sum nll / sum tokens)`` with a 95%
  article-clustered bootstrap CI (:func:`swapprune.stats.clustered.clustered_ci`).

Measured on SmolLM2-135M, one thread, on this project's shared 2-core CPU
(load average 4-6 from other work): 59 windows, 15,104 scored tokens (2.6x
the matched contract's 5,903), **164 CPU-seconds per model** (232 s of wall
time under that load); measured alongside, the matched contract took 65
CPU-seconds (101 s), and ``per_article=2`` (116 windows) 329 CPU-seconds.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from swapprune.errors import SwappruneError
from swapprune.evaluation.names import EXTENDED_PPL
from swapprune.evaluation.perplexity import TEST_TEXT, Window, first_words, tokenize
from swapprune.evaluation.results import Metric, TaskResult
from swapprune.stats import bootstrap
from swapprune.stats.clustered import clustered_ci_ppl

#: Windows kept per article.
PER_ARTICLE = 1
#: Words of the test text left to the matched contract.
SKIP_WORDS = 5000

_HEADING = re.compile(r"^ = [^=].* = $")


@dataclass(frozen=True)
class Article:
    """A character span ``text[start:end]`` of one article (or its held-out part).

    Attributes:
        index: Position of the article in the split (0-based).
        title: Its heading.
        start, end: Character offsets in the raw text.
    """

    index: int
    title: str
    start: int
    end: int


def split_articles(text: str) -> list[Article]:
    """The articles of a raw WikiText file (see the module docstring for the rule).

    Text before the first heading (the file's leading blank line) belongs to no article.
    """
    starts: list[tuple[int, str]] = []
    offset, previous_blank = 0, True
    for line in text.split("\n"):
        if previous_blank and _HEADING.match(line):
            starts.append((offset, line.strip(" =")))
        previous_blank = line.strip() == ""
        offset += len(line) + 1
    ends = [s for s, _ in starts[1:]] + [len(text)]
    return [Article(i, t, s, e) for i, ((s, t), e) in enumerate(zip(starts, ends, strict=True))]


def held_out_articles(text: str, skip_words: int = SKIP_WORDS) -> list[Article]:
    """The parts of the articles after the first ``skip_words`` words (non-empty ones)."""
    cut = len(first_words(text, skip_words)) if skip_words else 0
    out = []
    for a in split_articles(text):
        start = max(a.start, cut)
        if text[start : a.end].strip():
            out.append(Article(a.index, a.title, start, a.end))
    return out


def article_windows(n_tokens: int, max_length: int, per_article: int) -> list[Window]:
    """Up to ``per_article`` non-overlapping windows over one article's tokens, centred in strata.

    Args:
        n_tokens: Tokens of the article.
        max_length: Tokens a window reads; it scores the last ``max_length - max_length // 2``.
        per_article: Windows to keep at most.

    Returns:
        Windows in token order (none if the article is shorter than one window).
    """
    chunks = n_tokens // max_length
    if chunks == 0:
        return []
    k = min(per_article, chunks)
    keep = [int((j + 0.5) * chunks / k) for j in range(k)]
    return [
        Window(c * max_length, c * max_length + max_length // 2, (c + 1) * max_length) for c in keep
    ]


@dataclass(frozen=True)
class ArticleWindow:
    """One window: the model reads ``context + target`` and is scored on ``target``.

    Attributes:
        article: Index of the article it comes from.
        context: Token ids read as context (the chunk's first half).
        target: Token ids scored (the chunk's second half).
    """

    article: int
    context: list[int]
    target: list[int]


@dataclass(frozen=True)
class ContractWindows:
    """The windows of the extended contract, and what they were cut from.

    Attributes:
        windows: In article order, then token order.
        titles: Article index -> title, for every held-out article.
        skipped: Held-out articles shorter than one window.
    """

    windows: list[ArticleWindow]
    titles: dict[int, str]
    skipped: list[int]


def contract_windows(
    tokenizer,
    text: str,
    skip_words: int = SKIP_WORDS,
    max_length: int = 512,
    per_article: int = PER_ARTICLE,
) -> ContractWindows:
    """Tokenise each held-out article and cut its windows (see the module docstring)."""
    if per_article < 1:
        raise SwappruneError(f"per_article must be >= 1, got {per_article}")
    windows, titles, skipped = [], {}, []
    for art in held_out_articles(text, skip_words):
        ids = tokenize(tokenizer, text[art.start : art.end])
        titles[art.index] = art.title
        spans = article_windows(len(ids), max_length, per_article)
        if not spans:
            skipped.append(art.index)
        windows += [
            ArticleWindow(art.index, ids[w.begin : w.split], ids[w.split : w.end]) for w in spans
        ]
    return ContractWindows(windows, titles, skipped)


def run_wikitext2_extended(
    lm,
    tokenizer,
    skip_words: int = SKIP_WORDS,
    max_length: int = 512,
    per_article: int = PER_ARTICLE,
    limit: int | None = None,
    text: str | None = None,
    n_boot: int = bootstrap.N_BOOT,
) -> TaskResult:
    """Evaluate ``swapprune_wikitext2_ext``.

    Args:
        lm: lm-eval ``HFLM`` wrapping the model, with ``max_length >= max_length``.
        tokenizer: The model's Hugging Face tokenizer.
        skip_words: Words at the start of the text left to the matched contract.
        max_length: Window length in tokens (the second half is scored).
        per_article: Windows per article at most.
        limit: Score only the first ``limit`` windows (quick checks only).
        text: Override of the raw text (tests); defaults to WikiText-2 test.
        n_boot: Bootstrap resamples for the CI.

    Returns:
        Perplexity with an article-clustered CI, and per-window ``nll``,
        ``tokens`` and ``article``.

    Raises:
        SwappruneError: On a model context shorter than a window, or no window.
    """
    if lm.max_length < max_length:
        raise SwappruneError(f"model max_length {lm.max_length} < window length {max_length}")
    start = time.perf_counter()
    source = TEST_TEXT.read_text(encoding="utf-8") if text is None else text
    cut = contract_windows(tokenizer, source, skip_words, max_length, per_article)
    windows = cut.windows[:limit] if limit is not None else cut.windows
    if not windows:
        raise SwappruneError("no article is long enough for one window; shorten max_length")
    # One call, so that lm-eval batches windows across articles; a None request
    # string keeps its response cache out of it, as in perplexity.score_windows.
    requests = [(None, w.context, w.target) for w in windows]
    nll = [-lp for lp, _greedy in lm._loglikelihood_tokens(requests, disable_tqdm=True)]
    tokens = [len(w.target) for w in windows]
    articles = [w.article for w in windows]
    ci = clustered_ci_ppl(nll, tokens, articles, n_boot=n_boot)
    used = sorted(set(articles))
    metric = Metric(
        value=ci.estimate,
        low=ci.low,
        high=ci.high,
        higher_is_better=False,
        units=["nll", "tokens"],
        statistic="ppl",
        ci=f"article-clustered percentile bootstrap ({n_boot} resamples of {len(used)} articles)",
    )
    return TaskResult(
        task=EXTENDED_PPL,
        unit="window",
        unit_ids=list(range(len(windows))),
        units={"nll": nll, "tokens": tokens, "article": articles},
        metrics={"perplexity": metric},
        info={
            "skip_words": skip_words,
            "max_length": max_length,
            "scored_per_window": max_length - max_length // 2,
            "per_article": per_article,
            "cluster": "article",
            "n_articles": len(used),
            "articles": {str(i): cut.titles[i] for i in used},
            "skipped_articles": cut.skipped,
            "n_windows": len(windows),
            "scored_tokens": sum(tokens),
            "wall_s": time.perf_counter() - start,
        },
    )
