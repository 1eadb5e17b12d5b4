"""Scoring inside llm-compressor's oneshot against the same scoring outside it.

A Llama of a given shape with seeded random weights (nothing is downloaded),
the same random token windows, ``plan_pruning`` outside and
``DepthPruningModifier`` inside ``oneshot``, alternated after a warm-up call;
prints a JSON record with both timings (wall and process CPU seconds), the
ratio of the best of each, and whether every plan was the same.

    .venv-llmc/bin/python recipes/llmcompressor/scoring_cost.py --shape smollm2 --device cuda
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

SHAPES = {
    "tiny": dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=8, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=512,
    ),
    "smollm2": dict(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True,
    ),
    "1b": dict(
        hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
        num_key_value_heads=4, vocab_size=32000,
    ),
}  # fmt: skip


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="smollm2")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--windows", default="64x128", help="N x T calibration windows")
    ap.add_argument("--out", type=Path, help="also write the record here (JSON)")
    args = ap.parse_args(argv)

    from llmcompressor import oneshot
    from torch.utils.data import DataLoader
    from transformers import AutoConfig, AutoModelForCausalLM

    from swapprune.calibration.windows import Calibration
    from swapprune.integrations.llmcompressor import DepthPruningModifier
    from swapprune.api import plan_pruning

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    from tiny_models import tiny_tokenizer  # oneshot wants a processor; the windows are ids

    n, t = (int(x) for x in args.windows.split("x"))
    cfg = AutoConfig.for_model("llama", max_position_embeddings=2048, **SHAPES[args.shape])
    budget = max(1, cfg.num_hidden_layers // 4)
    torch.manual_seed(0)
    saved = tempfile.mkdtemp()
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    model.save_pretrained(saved)  # oneshot reads the config back from name_or_path
    del model
    ids = torch.randint(3, cfg.vocab_size, (n, t), generator=torch.Generator().manual_seed(1))
    rows = [{"input_ids": r[None], "attention_mask": torch.ones_like(r)[None]} for r in ids]
    loader = DataLoader(rows, batch_size=None)  # type: ignore[arg-type]

    def load():
        m = AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32)
        return m.to(args.device).eval()

    def sync():
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    rec: dict = {"shape": args.shape, "device": args.device, "windows": [n, t],
                 "budget": budget, "torch": torch.__version__, "outside": [], "inside": []}  # fmt: skip
    with torch.no_grad():  # warm-up: kernels, allocator
        plan_pruning(load(), None, budget=budget, calibration=Calibration(ids[:8], "w", 0),
                     progress=False)  # fmt: skip
    plans = []
    for _ in range(args.repeats):
        model = load()
        sync()
        wall, cpu = time.perf_counter(), time.process_time()
        with torch.no_grad():
            plan, _ = plan_pruning(model, None, budget=budget, calibration=Calibration(ids, "w", 0),
                                   progress=False)  # fmt: skip
        sync()
        rec["outside"].append(
            {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
        )
        plans.append(plan.removed)
        model = load()
        mod = DepthPruningModifier(budget=budget, prompts=n, tokens=t)
        wall = time.perf_counter()
        oneshot(model=model, processor=tiny_tokenizer(), dataset=loader, recipe=[mod])
        sync()
        rec["inside"].append({"wall": mod.timings["plan"], "cpu": mod.timings["plan_cpu"],
                              "oneshot_total": time.perf_counter() - wall})  # fmt: skip
        plans.append(mod.plan.removed)
    rec["same_plan"] = all(p == plans[0] for p in plans)
    for clock in ("wall", "cpu"):
        best = {k: min(x[clock] for x in rec[k]) for k in ("inside", "outside")}
        rec[f"ratio_{clock}"] = best["inside"] / best["outside"]
    print(json.dumps(rec, indent=1))
    if args.out:
        args.out.write_text(json.dumps(rec, indent=1) + "\n")
    return rec


if __name__ == "__main__":
    main()
