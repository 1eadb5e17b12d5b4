"""Study v3 (confirmatory): one resumable command, then the analysis.

    OMP_NUM_THREADS=1 PYTHONPATH=. python eval/study_v3/run.py            # run + analyse
    OMP_NUM_THREADS=1 PYTHONPATH=. python eval/study_v3/run.py --report-only

The design is fixed in ``eval/study_v3/PLAN.md`` (committed before the run). Seed k
runs one ``swapprune compare`` (:func:`swapprune.studies.compare.run_compare`)
calibrated on ``calibration/part<k>.txt`` (War and Peace, part k) and caches its
output under ``results/seed<k>/``; all seeds share one evaluation cache
(``results/cache``), so a set chosen on several seeds is evaluated once. A seed
whose ``results.json`` exists is not rerun. The analysis (:func:`analyse`) reads
the per-window units of every cut back from that cache and writes
``REPORT.md`` and ``study.json`` next to this file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

# -- the design (PLAN.md) --------------------------------------------------------------
SEEDS = [0, 1, 2, 3, 4]
BUDGETS = [3]
CRITERIA = ["interchange", "replacement", "bi", "sleb", "auto"]
WINDOWS, TOKENS = 16, 64
TASKS = ["wikitext2_ppl", "wikitext2_ext"]
WORDS, MAX_LENGTH, PER_ARTICLE = 5000, 512, 1
MARGIN = 2.0  # dPPL points, TOST
N_BOOT = 2000
BOOT_SEED = 0


def part(seed: int) -> Path:
    return HERE / "calibration" / f"part{seed}.txt"


def job(seed: int):
    from swapprune.config import (
        CalibrationConfig,
        CompareConfig,
        EvalConfig,
        ModelConfig,
        RunConfig,
    )
    from swapprune.studies.compare import CompareJob

    return CompareJob(
        run=RunConfig(
            model=ModelConfig("smollm2-135m", device="cpu"),
            calibration=CalibrationConfig(
                calib=str(part(seed)),
                prompts=WINDOWS,
                tokens=TOKENS,
                seed=seed,
                positions="all",
                batch_size=8,
                adaptive="off",
            ),
            eval=EvalConfig(
                tasks=list(TASKS), words=WORDS, max_length=MAX_LENGTH, per_article=PER_ARTICLE
            ),
        ),
        compare=CompareConfig(
            output=str(RESULTS / f"seed{seed}"),
            budgets=list(BUDGETS),
            criteria=list(CRITERIA),
            margin=MARGIN,
            generative=True,
        ),
    )


def seed_done(seed: int) -> bool:
    f = RESULTS / f"seed{seed}" / "results.json"
    if not f.exists():
        return False
    r = json.loads(f.read_text())
    return [e["budget"] for e in r["budgets"]] == BUDGETS and all(
        set(e["methods"]) >= set(CRITERIA) for e in r["budgets"]
    )


def run_seed(seed: int) -> dict:
    """Run (or resume) seed ``seed``; its wall and CPU time go to ``seed<k>/times.json``."""
    import torch

    from swapprune.studies.compare import run_compare

    torch.set_num_threads(1)
    d = RESULTS / f"seed{seed}"
    d.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cache").mkdir(exist_ok=True)
    link = d / "cache"
    if not link.exists():
        link.symlink_to(Path("..") / "cache")
    t, c = time.perf_counter(), time.process_time()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    run_compare(job(seed), progress=False)
    times = {
        "started": started,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.perf_counter() - t, 1),
        "cpu_s": round(time.process_time() - c, 1),
        "threads": torch.get_num_threads(),
        "load_average_end": list(os.getloadavg()),
    }
    (d / "times.json").write_text(json.dumps(times, indent=1) + "\n")
    print(
        f"[study3] seed {seed}: {times['wall_s']:.0f} s wall, {times['cpu_s']:.0f} CPU-s",
        flush=True,
    )
    return times


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="seeds to run (default 0-4)")
    p.add_argument("--report-only", action="store_true", help="analyse the seeds that finished")
    p.add_argument("--no-report", action="store_true", help="run the seeds, skip the analysis")
    args = p.parse_args()
    if not args.report_only:
        for k in [int(s) for s in args.seeds.split(",")]:
            if seed_done(k):
                print(f"[study3] seed {k}: cached", flush=True)
                continue
            run_seed(k)
    if not args.no_report:
        from analysis import analyse_dir  # eval/study_v3/analysis.py

        analyse_dir(RESULTS, HERE)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
