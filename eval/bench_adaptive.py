"""Adaptive calibration vs fixed window counts on SmolLM2-135M (interchange, greedy).

For each budget: the chosen set and its bootstrap frequency with a fixed small
run (default 16 windows), with a fixed reference run (default 64 windows), and
after adaptive calibration (tranches of 16 from the reference's pool, target
0.9); the adaptive run's block evaluations and CPU time against the reference's,
and whether it reached the reference's selection.

    python eval/bench_adaptive.py --out eval/adaptive.json

All runs use the same window length and positions mode; the adaptive pool is
the reference's windows, so "same selection" compares like with like. Times
are process CPU seconds (``time.process_time``) in one process: on a shared
machine ratios are meaningful, absolute values less so.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import swapprune
from swapprune.calibration.windows import Calibration, load_calibration
from swapprune.engine.probing import score
from swapprune.output.artifacts import write_json_atomic
from swapprune.select.adaptive import AdaptiveSettings, adaptive_score
from swapprune.select.stability import selection_stability


def fixed(model, calib: Calibration, args) -> dict:
    cpu, wall = time.process_time(), time.perf_counter()
    s = score(
        model,
        calibration=calib,
        protocols=("interchange",),
        pairs="adjacent",
        positions=args.positions,
        batch_size=args.batch_size,
        progress=False,
    )
    out = {
        "windows": calib.input_ids.shape[0],
        "block_evals": s.meta["timing"]["block_evals"],
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.perf_counter() - wall,
        "budgets": {},
    }
    for b in args.budgets:
        st = selection_stability(s, "interchange", "greedy", b, n_boot=args.n_boot)
        out["budgets"][b] = {
            "chosen": st.chosen,
            "frequency": st.frequency,
            "alternatives": st.alternatives[:2],
        }
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--budgets", default="2,4,8")
    p.add_argument("--small", type=int, default=16, help="windows of the fixed small run")
    p.add_argument("--reference", type=int, default=64, help="windows of the fixed reference")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--tranche", type=int, default=16)
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--positions", default="all")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--skip-reference", action="store_true")
    p.add_argument("--skip-small", action="store_true")
    args = p.parse_args(argv)
    args.budgets = [int(b) for b in args.budgets.split(",")]
    torch.set_num_threads(args.threads)
    model, tok, _ = swapprune.load_model("smollm2-135m", progress=False)
    result: dict = {
        "settings": {k: v for k, v in vars(args).items()},
        "model": "smollm2-135m",
        "note": "CPU times on a shared machine; process_time in one process",
    }
    if not args.skip_small:
        small = load_calibration(tok, None, args.small, args.tokens, 0)
        result["fixed_small"] = fixed(model, small, args)
        print("fixed small", json.dumps(result["fixed_small"]), flush=True)
    pool = load_calibration(tok, None, args.reference, args.tokens, 0)
    if not args.skip_reference:
        result["reference"] = fixed(model, pool, args)
        print("reference", json.dumps(result["reference"]), flush=True)
    result["adaptive"] = {}
    for b in args.budgets:
        settings = AdaptiveSettings(
            target=args.target, tranche=args.tranche, max_windows=args.reference, n_boot=args.n_boot
        )
        cpu = time.process_time()
        res = adaptive_score(
            model,
            criteria=("interchange",),
            strategy="greedy",
            budget=b,
            settings=settings,
            calibration=pool,
            positions=args.positions,
            batch_size=args.batch_size,
        )
        st = res.stability["interchange"]
        rec = {
            "windows": res.scores.num_windows(),
            "stopped": res.stopped,
            "rounds": res.rounds,
            "pair_windows": res.pair_windows,
            "block_evals": res.block_evals,
            "cpu_s": time.process_time() - cpu,
            "chosen": st.chosen,
            "frequency": st.frequency,
        }
        ref = result.get("reference")
        if ref:
            rec["same_as_reference"] = st.chosen == ref["budgets"][b]["chosen"]
            rec["block_eval_ratio"] = res.block_evals / ref["block_evals"]
            rec["cpu_ratio"] = rec["cpu_s"] / ref["cpu_s"]
        result["adaptive"][b] = rec
        print("adaptive", b, json.dumps(rec), flush=True)
        write_json_atomic(args.out, result)
    write_json_atomic(args.out, result)


if __name__ == "__main__":
    main()
