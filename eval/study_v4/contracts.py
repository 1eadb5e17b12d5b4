"""Both evaluation contracts for many removal sets at once, float32, from cached prefixes.

The windows are exactly those of ``swapprune eval``'s tasks: the matched contract's
sliding windows over the first 5,000 words of WikiText-2 test (512 tokens, stride 256)
and the extended contract's one 512-token window per held-out article, second half
scored (:mod:`swapprune.evaluation.perplexity`, :mod:`swapprune.evaluation.extended`).
Each set's summed NLL over each window's scored tokens is computed by
:class:`swapprune.engine.exhaustive.SetEvaluator` (the kept blocks walked as a trie from
the base model's cached states), so a set costs only its blocks after its first removal.
``tests/test_study_v4.py`` checks it against lm-eval's scoring of the same windows on a
tiny model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch


def contract_windows(tok, words: int | None = None, max_length: int | None = None) -> dict:
    """``{contract: {"ids": [[...]], "score_from": [...], "clusters": [...]}}`` in order.

    ``words`` and ``max_length`` default to the contracts' (5,000 words, 512 tokens).
    """
    from swapprune.defaults import CONTRACT_MAX_LENGTH as MAX_LENGTH
    from swapprune.defaults import CONTRACT_WORDS as WORDS
    from swapprune.evaluation.extended import contract_windows as ext_windows
    from swapprune.evaluation.perplexity import (
        TEST_TEXT,
        first_words,
        sliding_windows,
        tokenize,
    )

    words, max_length = words or WORDS, max_length or MAX_LENGTH
    text = TEST_TEXT.read_text(encoding="utf-8")
    ids = tokenize(tok, first_words(text, words))
    matched = sliding_windows(len(ids), max_length, max_length // 2)
    ext = ext_windows(tok, text, skip_words=words, max_length=max_length, per_article=1)
    return {
        "matched": {
            "ids": [ids[w.begin : w.end] for w in matched],
            "score_from": [w.split - w.begin for w in matched],
            "clusters": list(range(len(matched))),
        },
        "extended": {
            "ids": [w.context + w.target for w in ext.windows],
            "score_from": [len(w.context) for w in ext.windows],
            "clusters": [w.article for w in ext.windows],
        },
    }


def key(s) -> str:
    return ",".join(map(str, sorted(s)))


class ContractSets:
    """Per-window NLL of sets on both contracts, remembered in a JSON file (resumable)."""

    def __init__(self, model, tok, path: Path, batch_size: int = 4, **window_settings):
        from swapprune.engine.exhaustive import SetEvaluator

        self.path = path
        self.windows = contract_windows(tok, **window_settings)
        self.data = json.loads(path.read_text()) if path.is_file() else {}
        self.evaluators = {}
        for name, w in self.windows.items():
            # windows of one length per evaluator (the matched contract's last one is shorter)
            groups: dict[int, list[int]] = {}
            for i, row in enumerate(w["ids"]):
                groups.setdefault(len(row), []).append(i)
            evs = []
            for _length, rows in sorted(groups.items()):
                ids = torch.tensor([w["ids"][i] for i in rows], dtype=torch.long)
                ev = SetEvaluator(
                    model, ids, batch_size, score_from=[w["score_from"][i] for i in rows]
                )
                evs.append((rows, ev))
            self.evaluators[name] = evs
            entry = self.data.setdefault(name, {"sets": {}})
            entry["clusters"] = w["clusters"]
            entry["tokens"] = [len(r) - s for r, s in zip(w["ids"], w["score_from"])]
            if "base" not in entry:
                entry["base"] = self._evaluate(name, [()])[()].tolist()
        self._save()

    def has(self, s) -> bool:
        return all(key(s) in self.data[n]["sets"] for n in self.windows)

    def _evaluate(self, name: str, sets) -> dict:
        n = len(self.windows[name]["ids"])
        out = {tuple(sorted(s)): np.zeros(n) for s in sets}
        for rows, ev in self.evaluators[name]:
            got = ev.evaluate([tuple(sorted(s)) for s in sets])
            for s, v in got.items():
                out[s][rows] = v
        return out

    def evaluate(self, sets) -> None:
        for name in self.windows:
            for s, v in self._evaluate(name, sets).items():
                self.data[name]["sets"][key(s)] = v.tolist()
        self._save()

    def _save(self) -> None:
        from swapprune.output.artifacts import write_json_atomic

        write_json_atomic(self.path, self.data)
