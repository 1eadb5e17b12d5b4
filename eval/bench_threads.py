"""Torch threads on a small CPU: one fixed scoring command at 1 and 2 threads, idle and loaded.

Each measurement is a fresh ``swapprune score`` process (the CLI as a user runs it)
with ``OMP_NUM_THREADS`` set, on the demo model::

    swapprune score --pairs 20-21,...,25-26 --probes interchange --prompts 8 --tokens 64

The scoring seconds come from the written file's ``timing.seconds`` (model loading is
left out), with the process's wall and CPU time beside them. "Loaded" runs start
``--busy`` extra processes that spin a Python loop for the whole measurement, the way
a second job on the same machine would. The load average is recorded before each run.

Usage (repository root)::

    python eval/bench_threads.py --repeat 3 --json eval/threads.json
    python eval/bench_threads.py --threads 1,2,auto --busy 0,1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PAIRS = "20-21,21-22,22-23,23-24,24-25,25-26"
COMMAND = [
    "score",
    "--pairs",
    PAIRS,
    "--probes",
    "interchange",
    "--prompts",
    "8",
    "--tokens",
    "64",
    "--no-progress",
]
SPIN = "import time\nend = time.time() + {s}\nwhile time.time() < end:\n    pass\n"


def one_run(threads: str, out: Path) -> dict:
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if threads != "auto":
        env["OMP_NUM_THREADS"] = threads
    out.unlink(missing_ok=True)
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "swapprune", *COMMAND, "--output", str(out)],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    timing = json.loads(out.read_text())["timing"]
    line = next((x for x in proc.stderr.splitlines() if "threads" in x), "")
    return {
        "threads": threads,
        "score_s": round(timing["seconds"], 2),
        "block_evals": timing["block_evals"],
        "wall_s": round(wall, 2),
        "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 2),
        "loadavg_before": round(load, 2),
        "said": line.strip(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2", help="comma list: 1, 2, auto (swapprune picks)")
    ap.add_argument("--busy", default="0,1", help="comma list of extra spinning processes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "s.json"
        for busy in [int(x) for x in a.busy.split(",")]:
            spinners = [
                subprocess.Popen([sys.executable, "-c", SPIN.format(s=3600)]) for _ in range(busy)
            ]
            try:
                time.sleep(2 if busy else 0)  # let the spinners reach the run queue
                for rep in range(a.repeat):
                    for t in a.threads.split(","):  # alternate, so drift in load hits both
                        row = one_run(t, out) | {"busy": busy, "repeat": rep}
                        rows.append(row)
                        print(json.dumps(row), flush=True)
            finally:
                for p in spinners:
                    p.kill()
                    p.wait()
    print("\nbusy  threads  scoring s (median)  runs")
    for busy in sorted({r["busy"] for r in rows}):
        for t in a.threads.split(","):
            s = [r["score_s"] for r in rows if r["busy"] == busy and r["threads"] == t]
            print(f"{busy:>4}  {t:>7}  {statistics.median(s):>18.1f}  {s}")
    if a.json:
        Path(a.json).write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
