"""Is SmolLM2's low BoolQ accuracy the model or the prompt/label mapping?

Scores the first ``--limit`` BoolQ validation examples twice and compares:

* **direct**: plain ``transformers``, no lm-eval: the prompt of lm-eval's own
  ``boolq`` task (``{passage}\\nQuestion: {question}?\\nAnswer:``), then the summed
  log-probability of the continuations `` no`` and `` yes``; the answer is the
  larger. Labels come from the original BoolQ file (``answer``: true/false) in
  ``../shared/data/boolq/dev.jsonl`` when present, else from the vendored copy.
* **swapprune_boolq**: the packaged lm-eval task on the same examples.

Prints the label balance, both accuracies, how often each answers "no", the
agreement between the two, and the accuracy of always answering "yes"/"no".
Writes the figures as JSON with ``--json``.

    python eval/boolq_check.py --limit 100 --json eval/study/boolq_check.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def check(model, tok, limit: int = 100) -> dict:
    """The figures above for the first ``limit`` examples (the model is not modified)."""
    from swapprune.evaluation import evaluate

    vendored = [
        json.loads(line)
        for line in (ROOT / "swapprune/data/boolq_validation.jsonl").read_text().splitlines()
    ][:limit]
    original = ROOT.parent / "shared/data/boolq/dev.jsonl"
    if original.exists():
        raw = [json.loads(line) for line in original.read_text().splitlines()][:limit]
        assert [r["question"] for r in raw] == [r["question"] for r in vendored]
        labels = [int(r["answer"]) for r in raw]
        label_source = "original BoolQ dev.jsonl (answer field)"
        mapping_ok = labels == [r["label"] for r in vendored]
    else:
        labels = [r["label"] for r in vendored]
        label_source, mapping_ok = "vendored", None
    direct = []
    with torch.no_grad():
        for r in vendored:
            ctx = tok(f"{r['passage']}\nQuestion: {r['question']}?\nAnswer:").input_ids
            lls = []
            for choice in (" no", " yes"):
                cont = tok(choice, add_special_tokens=False).input_ids
                ids = torch.tensor([ctx + cont])
                logp = torch.log_softmax(model(ids).logits[0, :-1].double(), -1)
                tgt = ids[0, 1:]
                lls.append(float(logp[len(ctx) - 1 :].gather(1, tgt[len(ctx) - 1 :, None]).sum()))
            direct.append(int(lls[1] > lls[0]))
    res = evaluate(model, tok, ["swapprune_boolq"], limit=limit)
    task = res.tasks["swapprune_boolq"]
    correct = [int(x) for x in task.units["acc"]]
    harness = [lab if ok else 1 - lab for lab, ok in zip(labels, correct, strict=True)]
    n = len(labels)
    return {
        "examples": n,
        "label_source": label_source,
        "vendored_labels_match_original": mapping_ok,
        "share_yes_labels": sum(labels) / n,
        "direct_acc": sum(int(p == y) for p, y in zip(direct, labels, strict=True)) / n,
        "direct_share_no": 1 - sum(direct) / n,
        "harness_acc": task.metrics["acc"].value,
        "harness_share_no": 1 - sum(harness) / n,
        "agreement_direct_vs_harness": sum(
            int(a == b) for a, b in zip(direct, harness, strict=True)
        )
        / n,
        "always_yes_acc": sum(labels) / n,
        "always_no_acc": 1 - sum(labels) / n,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    from swapprune.model.load import load_model

    model, tok, _ = load_model("smollm2-135m", progress=False)
    out = {
        "model": "smollm2-135m (SmolLM2-135M-Instruct, Q4_1 GGUF, dequantized to float32)",
        **check(model, tok, args.limit),
    }
    for k, v in out.items():
        print(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
