"""The extended contract: every article outside the matched contract's words, by article."""

import pytest
import torch
from tiny_models import tiny_model, tiny_tokenizer

from swapprune.evaluation import EvalResult, evaluate
from swapprune.evaluation.extended import (
    contract_windows,
    held_out_articles,
    split_articles,
)
from swapprune.evaluation.perplexity import TEST_TEXT, first_words
from swapprune.stats.clustered import clustered_ci_ppl

WORDS_PER_ARTICLE = 120


def _corpus(n_articles: int = 6) -> str:
    """A WikiText-shaped text whose every word is unique, so a window's text locates it.

    Article 3 holds a heading-shaped line after a text line, as "Constant k
    filter" does in the real split: it must not start an article.
    """
    lines, i = [" "], 0
    for k in range(n_articles):
        body = " ".join(f"w{i + j}" for j in range(WORDS_PER_ARTICLE))
        i += WORDS_PER_ARTICLE
        lines += [f" = Title {k} = ", " ", f" {body} "]
        if k == 3:
            lines += [" = 1 henry and capacitance C = ", " more text of article 3 "]
        lines += [" "]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def test_windows_never_touch_the_first_words_and_cover_every_later_article(tok):
    text = _corpus()
    skip = 300  # ends inside article 2: articles 0 and 1 lie wholly inside it
    cut = len(first_words(text, skip))
    assert [a.title for a in split_articles(text)] == [f"Title {k}" for k in range(6)]
    held = held_out_articles(text, skip)
    assert [a.index for a in held] == [2, 3, 4, 5] and held[0].start == cut
    windows = contract_windows(tok, text, skip, max_length=64, per_article=2)
    assert {w.article for w in windows.windows} == {2, 3, 4, 5} and not windows.skipped
    spans = []
    for w in windows.windows:
        read = tok.decode(w.context + w.target, skip_special_tokens=True)
        at = text.find(read)
        assert at >= cut and text.find(read, at + 1) == -1  # after the cut, and unique
        art = held[[a.index for a in held].index(w.article)]
        assert art.start <= at and at + len(read) <= art.end
        assert len(w.context) == len(w.target) == 32
        spans.append((at, at + len(read)))
    spans.sort()
    assert all(e <= s for (_, e), (s, _) in zip(spans, spans[1:]))  # windows never overlap


def test_the_real_split_has_60_articles_and_59_outside_the_matched_contract(tok):
    text = TEST_TEXT.read_text(encoding="utf-8")
    articles = split_articles(text)
    assert len(articles) == 60 and articles[0].title == "Robert Boulter"
    held = held_out_articles(text)
    assert len(held) == 59 and held[0].title == "Du Fu"
    assert held[0].start == len(first_words(text, 5000))
    windows = contract_windows(tok, text, max_length=64)
    assert {w.article for w in windows.windows} == {a.index for a in held}


def test_extended_task_keeps_articles_and_a_clustered_ci(tok):
    torch.set_num_threads(1)
    model = tiny_model("llama")
    res = evaluate(model, tok, ["wikitext2_ext"], max_length=64, n_boot=200)
    t = res.tasks["swapprune_wikitext2_ext"]
    assert len(t.units["nll"]) == len(t.units["tokens"]) == len(t.units["article"]) == 59
    assert t.info["n_articles"] == 59 and t.info["cluster"] == "article"
    m = t.metrics["perplexity"]
    assert m.low < m.value < m.high and "article-clustered" in m.ci
    again = clustered_ci_ppl(t.units["nll"], t.units["tokens"], t.units["article"], n_boot=200)
    assert (again.estimate, again.low, again.high) == pytest.approx((m.value, m.low, m.high))
    # Window 0's NLL is the model's own loss on its scored half.
    w = contract_windows(tok, TEST_TEXT.read_text(encoding="utf-8"), max_length=64).windows[0]
    ids = torch.tensor([w.context + w.target])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].double(), -1)
    nll = -logp[len(w.context) - 1 :].gather(1, ids[0, len(w.context) :, None]).sum().item()
    assert t.units["nll"][0] == pytest.approx(nll, rel=1e-4)
    back = EvalResult.from_json(res.to_json()).tasks["swapprune_wikitext2_ext"]
    assert back.units["article"] == t.units["article"]
    assert t.units["article"] == sorted(set(t.units["article"]))  # one window per article
