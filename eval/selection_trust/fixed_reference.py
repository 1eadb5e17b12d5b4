"""Fixed interchange reference on the adaptive pool, scored in chunks of windows.

    OMP_NUM_THREADS=1 python eval/selection_trust/fixed_reference.py POOL TOKENS CHUNK OUT.json

Scores SmolLM2-135M's adjacent pairs (interchange, positions all, one torch thread)
on the first POOL windows of TOKENS tokens (WikiText-2 validation, seed 0: the same
pool ``eval/bench_adaptive.py --reference POOL`` draws from), CHUNK windows at a
time. After each chunk it writes the cumulative block evaluations, process CPU
time, wall time and the bootstrap stability of the greedy selection at budgets
2, 4 and 8 to OUT.json, and the per-window values to OUT.npz, so a run cut short
still leaves its smaller reference.
"""

import json
import sys
import time

import numpy as np
import torch

import swapprune
from swapprune.calibration.windows import Calibration, load_calibration
from swapprune.engine.probing import score
from swapprune.engine.scores import ScoreResult
from swapprune.output.artifacts import write_json_atomic
from swapprune.select.stability import selection_stability


def main() -> None:
    torch.set_num_threads(1)
    n_pool, n_tok, chunk, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    model, tok, _ = swapprune.load_model("smollm2-135m", progress=False)
    pool = load_calibration(tok, None, n_pool, n_tok, 0)
    vals: dict = {}
    meta = None
    rec: dict = {
        "pool": n_pool,
        "tokens": n_tok,
        "chunk": chunk,
        "positions": "all",
        "chunks": [],
        "note": "process_time CPU seconds on a shared 2-core machine",
    }
    evals, cpu_tot, wall_tot = 0, 0.0, 0.0
    for start in range(0, n_pool, chunk):
        sub = Calibration(pool.input_ids[start : start + chunk], pool.source, pool.seed)
        c, w = time.process_time(), time.perf_counter()
        s = score(
            model,
            calibration=sub,
            protocols=("interchange",),
            pairs="adjacent",
            positions="all",
            batch_size=8,
            progress=False,
        )
        cpu_tot += time.process_time() - c
        wall_tot += time.perf_counter() - w
        evals += s.meta["timing"]["block_evals"]
        meta = meta or dict(s.meta)
        for p, d in s.pairs.items():
            vals[p] = {k: np.concatenate([vals[p][k], v]) if p in vals else v for k, v in d.items()}
        full = ScoreResult(meta=dict(meta), pairs=dict(vals))
        r: dict = {
            "windows": start + sub.input_ids.shape[0],
            "block_evals": evals,
            "cpu_s": cpu_tot,
            "wall_s": wall_tot,
            "budgets": {},
        }
        for b in (2, 4, 8):
            st = selection_stability(full, "interchange", "greedy", b, n_boot=1000)
            r["budgets"][b] = {
                "chosen": st.chosen,
                "frequency": st.frequency,
                "alternatives": st.alternatives[:2],
            }
        rec["chunks"].append(r)
        np.savez(
            out.replace(".json", ".npz"),
            **{f"{p[0]}_{p[1]}_{k}": v for p, d in vals.items() for k, v in d.items()},
        )
        write_json_atomic(out, rec)
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
