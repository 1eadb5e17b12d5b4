"""Offline data loaders and formatting helpers for the swapprune lm-eval task pack.

lm-eval imports this file by path (``!function utils.x`` in the YAMLs), so it
must not import from ``swapprune``. Loaders read the vendored files under
``swapprune/data`` and return in-memory ``datasets.DatasetDict`` objects with the
same fields as the Hugging Face data sets that lm-eval's official tasks use;
building them in memory avoids both the network and the datasets cache.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import datasets

DATA = Path(__file__).resolve().parent.parent / "data"


def _jsonl(name: str, split: str) -> datasets.DatasetDict:
    with open(DATA / name, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return datasets.DatasetDict({split: datasets.Dataset.from_list(rows)})


# lm-eval calls custom_dataset(**metadata, **dataset_kwargs); the keyword
# arguments (task version etc.) are irrelevant to a fixed local file.
def load_lambada_openai(**_kwargs) -> datasets.DatasetDict:
    """LAMBADA (OpenAI preprocessing), test split."""
    return _jsonl("lambada_openai_test.jsonl", "test")


def load_piqa(**_kwargs) -> datasets.DatasetDict:
    """PIQA validation split (``goal``, ``sol1``, ``sol2``, ``label``)."""
    return _jsonl("piqa_validation.jsonl", "validation")


def load_winogrande(**_kwargs) -> datasets.DatasetDict:
    """WinoGrande (xl) validation split (``sentence``, ``option1/2``, ``answer``)."""
    return _jsonl("winogrande_validation.jsonl", "validation")


def load_arc_easy(**_kwargs) -> datasets.DatasetDict:
    """ARC-Easy test split in ``ai2_arc`` fields."""
    return _jsonl("arc_easy_test.jsonl", "test")


def load_boolq(**_kwargs) -> datasets.DatasetDict:
    """BoolQ validation split in SuperGLUE fields (``label`` 1 = yes)."""
    return _jsonl("boolq_validation.jsonl", "validation")


def wikitext_pages(text: str) -> list[str]:
    """Split a raw WikiText file into articles.

    Mirrors the ``EleutherAI/wikitext_document_level`` builder that lm-eval's
    ``wikitext`` task reads: a new page starts at every top-level heading line
    (``= Title =``), and pages that are only whitespace are dropped, except that
    the builder always yields the final page.
    """
    pages: list[str] = []
    lines: list[str] = []
    for line in text.split("\n"):
        rline = line.replace("= = =", "===").replace("= =", "==").strip()
        if rline.startswith("= ") and rline.strip().endswith(" ="):
            page = "\n".join(lines)
            if page.strip():
                pages.append(page)
            lines = []
        lines.append(line)
    pages.append("\n".join(lines))
    return pages


def load_wikitext(**_kwargs) -> datasets.DatasetDict:
    """WikiText-2 raw test split as one document per article (``page``)."""
    text = (DATA / "wiki.test.raw").read_text(encoding="utf-8")
    rows = [{"page": p} for p in wikitext_pages(text)]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


# --- Formatting: verbatim copies of lm-eval 0.4.13's task helpers, so that a
# lm-eval upgrade cannot silently change our prompts.


def wikitext_detokenizer(doc):
    """Copy of ``lm_eval/tasks/wikitext/preprocess_wikitext.wikitext_detokenizer``."""
    string = doc["page"]
    # contractions
    string = string.replace("s '", "s'")
    string = re.sub(r"/' [0-9]/", r"/'[0-9]/", string)
    # number separators
    string = string.replace(" @-@ ", "-")
    string = string.replace(" @,@ ", ",")
    string = string.replace(" @.@ ", ".")
    # punctuation
    string = string.replace(" : ", ": ")
    string = string.replace(" ; ", "; ")
    string = string.replace(" . ", ". ")
    string = string.replace(" ! ", "! ")
    string = string.replace(" ? ", "? ")
    string = string.replace(" , ", ", ")
    # double brackets
    string = re.sub(r"\(\s*([^\)]*?)\s*\)", r"(\1)", string)
    string = re.sub(r"\[\s*([^\]]*?)\s*\]", r"[\1]", string)
    string = re.sub(r"{\s*([^}]*?)\s*}", r"{\1}", string)
    string = re.sub(r"\"\s*([^\"]*?)\s*\"", r'"\1"', string)
    string = re.sub(r"'\s*([^']*?)\s*'", r"'\1'", string)
    # miscellaneous
    string = string.replace("= = = =", "====")
    string = string.replace("= = =", "===")
    string = string.replace("= =", "==")
    string = string.replace(" " + chr(176) + " ", chr(176))
    string = string.replace(" \n", "\n")
    string = string.replace("\n ", "\n")
    string = string.replace(" N ", " 1 ")
    string = string.replace(" 's", "'s")

    return string


def wikitext_process_results(doc, results):
    """Copy of ``preprocess_wikitext.process_results``: words/bytes of the raw page."""
    (loglikelihood,) = results
    _words = len(re.split(r"\s+", doc["page"]))
    _bytes = len(doc["page"].encode("utf-8"))
    return {
        "word_perplexity": (loglikelihood, _words),
        "byte_perplexity": (loglikelihood, _bytes),
        "bits_per_byte": (loglikelihood, _bytes),
    }


def winogrande_doc_to_text(doc):
    """Copy of ``preprocess_winogrande.doc_to_text`` (index of the right option)."""
    answer_to_num = {"1": 0, "2": 1}
    return answer_to_num[doc["answer"]]


def winogrande_doc_to_target(doc):
    """Copy of ``preprocess_winogrande.doc_to_target`` (text after the blank)."""
    idx = doc["sentence"].index("_") + 1
    return doc["sentence"][idx:].strip()


def winogrande_doc_to_choice(doc):
    """Copy of ``preprocess_winogrande.doc_to_choice`` (sentence prefix + option)."""
    idx = doc["sentence"].index("_")
    options = [doc["option1"], doc["option2"]]
    return [doc["sentence"][:idx] + opt for opt in options]
