"""Shared oracle answers: the model-based selections of one comparison, with and without.

``swapprune compare`` runs SLEB (iterative), SLEB one-shot and ``auto`` on the
same calibration windows. Each asks the model for the calibration perplexity
of pruned variants; many of the variants are the same (SLEB one-shot's scores
are SLEB's first step, ``auto`` at budget 3 repeats its budget-2 beam). This
benchmark makes the selections a comparison makes, once with every selection
on its own oracle and once inside :func:`~swapprune.engine.oracle.shared_oracles`,
and prints for each: oracle queries, variants actually measured, process CPU
seconds, and whether the selections are identical.

    python eval/bench_oracle.py --prompts 16 --tokens 64

Times are process CPU seconds in one process (one thread by default): the
ratio is what to read on a shared machine.
"""

from __future__ import annotations

import argparse
import time

import torch

from swapprune.api import plan_pruning
from swapprune.calibration.windows import load_calibration
from swapprune.engine import oracle as oracle_mod
from swapprune.engine.probing import score
from swapprune.model.load import load_model

CELLS = [("sleb", 3), ("sleb-oneshot", 2), ("sleb-oneshot", 3), ("auto", 2), ("auto", 3)]


def selections(model, calib, scores, shared: bool) -> dict:
    """The cells of a comparison (SLEB once at the largest budget, as compare does)."""
    out: dict = {"removed": {}}
    key = oracle_mod._windows_key
    if not shared:  # every oracle its own key: counted as usual, nothing shared
        oracle_mod._windows_key = lambda *a: object()
    try:
        cpu = time.process_time()
        with oracle_mod.shared_oracles() as counts:
            for crit, n in CELLS:
                plan, _ = plan_pruning(
                    model,
                    None,
                    budget=n,
                    protocol=crit,
                    scores=scores,
                    calibration=calib,
                    progress=False,
                )
                out["removed"][f"{crit}@{n}"] = list(plan.removed)
        out["cpu_s"] = time.process_time() - cpu
    finally:
        oracle_mod._windows_key = key
    out["queries"], out["computed"] = counts.asked, counts.computed
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, tok, _ = load_model(args.model)
    calib = load_calibration(tok, None, args.prompts, args.tokens, 0)
    scores = score(
        model,
        calibration=calib,
        protocols=("replacement", "interchange"),
        pairs="adjacent",
        progress=False,
    )
    alone = selections(model, calib, scores, shared=False)
    shared = selections(model, calib, scores, shared=True)
    print(f"{args.model}: {args.prompts} windows x {args.tokens} tokens, {args.threads} thread(s)")
    print("| oracles | queries | variants measured | CPU s |")
    print("|---|---|---|---|")
    for name, r in (("one per selection", alone), ("shared", shared)):
        print(f"| {name} | {r['queries']} | {r['computed']} | {r['cpu_s']:.1f} |")
    print(
        f"ratio shared / one per selection: variants {shared['computed'] / alone['computed']:.2f}, "
        f"CPU {shared['cpu_s'] / alone['cpu_s']:.2f}; "
        f"same selections: {shared['removed'] == alone['removed']}"
    )
    for cell, removed in shared["removed"].items():
        print(f"  {cell}: {removed}")


if __name__ == "__main__":
    main()
