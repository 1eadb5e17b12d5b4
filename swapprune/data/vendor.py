"""Regenerate the vendored zero-shot data files from the offline originals.

Run once, by hand, when (re)vendoring: ``python swapprune/data/vendor.py SRC``
where ``SRC`` holds the original files (``lambada_openai/lambada_test.jsonl``,
``piqa/valid.jsonl`` + ``valid-labels.lst``, ``winogrande/dev.jsonl`` +
``dev-labels.lst``, ``arc_easy/test.json``, ``boolq/dev.jsonl``).

Each output is JSON Lines with exactly the fields of the Hugging Face data set
that lm-eval's official task reads, so the task YAMLs in ``swapprune/tasks``
keep lm-eval's ``doc_to_text``/``doc_to_target``/``doc_to_choice`` verbatim.
Package code never runs this; it only reads the outputs.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _labels(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split()


def _write_jsonl(name: str, rows: list[dict]) -> None:
    with open(HERE / name, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def vendor(src: Path) -> None:
    """Convert the originals under ``src`` into ``swapprune/data/*.jsonl``."""
    # LAMBADA (OpenAI): already {"text": ...}; keep byte-identical.
    shutil.copyfile(src / "lambada_openai/lambada_test.jsonl", HERE / "lambada_openai_test.jsonl")

    # PIQA -> baber/piqa fields: goal, sol1, sol2, label (int).
    piqa = _read_jsonl(src / "piqa/valid.jsonl")
    labels = _labels(src / "piqa/valid-labels.lst")
    assert len(piqa) == len(labels)
    _write_jsonl(
        "piqa_validation.jsonl",
        [
            {**{k: r[k] for k in ("goal", "sol1", "sol2")}, "label": int(y)}
            for r, y in zip(piqa, labels, strict=True)
        ],
    )

    # WinoGrande -> allenai/winogrande fields; answer stays the string "1"/"2".
    wino = _read_jsonl(src / "winogrande/dev.jsonl")
    labels = _labels(src / "winogrande/dev-labels.lst")
    assert [r["answer"] for r in wino] == labels, "winogrande labels disagree with the jsonl"
    keys = ("sentence", "option1", "option2", "answer")
    _write_jsonl("winogrande_validation.jsonl", [{k: r[k] for k in keys} for r in wino])

    # ARC-Easy: already ai2_arc fields; the numeric "1"-"4" answer keys are left as
    # they are because lm-eval maps answerKey through choices.label itself.
    arc = json.loads((src / "arc_easy/test.json").read_text(encoding="utf-8"))
    keys = ("id", "question", "choices", "answerKey")
    _write_jsonl("arc_easy_test.jsonl", [{k: r[k] for k in keys} for r in arc])

    # BoolQ -> SuperGLUE fields: question, passage, idx, label (1 = yes).
    boolq = _read_jsonl(src / "boolq/dev.jsonl")
    _write_jsonl(
        "boolq_validation.jsonl",
        [
            {
                "question": r["question"],
                "passage": r["passage"],
                "idx": i,
                "label": int(r["answer"]),
            }
            for i, r in enumerate(boolq)
        ],
    )


if __name__ == "__main__":
    vendor(Path(sys.argv[1]))
