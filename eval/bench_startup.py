"""Fixed cost of each command on the demo model: process start to first scoring work, and total.

Every figure comes from a fresh process, so imports, the GGUF conversion
cache and model loading are counted as a user pays them:

* **commands**: ``swapprune --help``, ``swapprune list`` and ``swapprune score
  --model smollm2-135m --pairs 28-29 --prompts 8 --tokens 64 --positions last
  --out X``, cold (an empty ``$SWAPPRUNE_CACHE``: the first use converts the
  GGUF) and warm (the same cache). For ``score`` the child process records when
  ``load_model`` starts and returns and when scoring starts (the first call of
  ``swapprune.engine.sharding.score_sharded`` or ``swapprune.engine.probing.score``),
  through an import hook that wraps those functions, so the CLI is run as is;
* **library**: ``load_model("smollm2-135m")`` in a fresh interpreter, cold and
  warm, with the imports timed separately;
* **imports**: ``python -X importtime -c "import M"`` for the entry points, and
  which heavy libraries (torch, transformers, lm-eval, numpy) each one pulls in;
* **self-check**: ``save_checkpoint`` of the model with 2 blocks removed, split
  into reference logits, writing, and the self-check's reload, logits and
  cached-generation check.

Usage (from the repository root, venv active; see eval/BENCHMARKS.md)::

    python eval/bench_startup.py                  # everything, 3 warm repeats
    python eval/bench_startup.py --repeat 5 --json startup.json
    python eval/bench_startup.py --sections commands,library
    python eval/bench_startup.py --threads 1        # on a CPU shared with other jobs

Wall times on a shared machine include time other processes hold the cores;
the CPU time of the child (user + system) is printed next to them, and the
load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCORE_ARGS = [
    "score",
    "--model",
    "{model}",
    "--pairs",
    "28-29",
    "--prompts",
    "8",
    "--tokens",
    "64",
    "--positions",
    "last",
    "--output",
    "{out}",
]
HEAVY = ("torch", "transformers", "lm_eval", "numpy")
IMPORTS = (
    "swapprune",
    "swapprune.errors",
    "swapprune.config",
    "swapprune.model.load",
    "swapprune.gguf.convert",
    "swapprune.evaluation",
    "swapprune.cli",
    "swapprune.output.checkpoint",
    "swapprune.engine.probing",
)
# Functions whose first call marks an event in the child (module -> {function: event}).
HOOKS = {
    "swapprune.model.load": {"load_model": "load"},
    "swapprune.engine.sharding": {"score_sharded": "score"},
    "swapprune.engine.probing": {"score": "score"},
}


# ---------------------------------------------------------------- child side


def _child(marks: str, argv: list[str]) -> int:
    """Run the swapprune CLI with ``argv``, recording when hooked functions start and return."""
    import importlib.abc
    import importlib.util

    def mark(event: str) -> None:
        with open(marks, "a") as f:
            f.write(json.dumps({"event": event, "t": time.time()}) + "\n")

    mark("main")
    seen: set[str] = set()

    def wrap(module, name: str, event: str) -> None:
        real = getattr(module, name, None)
        if real is None:
            return

        def wrapped(*args, **kwargs):
            first = event not in seen
            seen.add(event)
            if first:
                mark(f"{event}_start")
            try:
                return real(*args, **kwargs)
            finally:
                if first:
                    mark(f"{event}_end")

        setattr(module, name, wrapped)

    class Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname not in HOOKS:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
            loader = spec.loader
            exec_module = loader.exec_module

            def exec_and_wrap(module):
                exec_module(module)
                for name, event in HOOKS[fullname].items():
                    wrap(module, name, event)

            loader.exec_module = exec_and_wrap
            return spec

    sys.meta_path.insert(0, Hook())
    sys.argv = ["swapprune", *argv]
    from swapprune.cli import main

    try:
        code = main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    mark("exit")
    return int(code or 0)


# ---------------------------------------------------------------- parent side


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> dict:
    """Run ``cmd``; wall and CPU seconds, exit code, stderr tail."""
    cpu0, t0 = _cpu_children(), time.time()
    p = subprocess.run(
        cmd,
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
    )
    return {
        "t0": t0,
        "wall": time.time() - t0,
        "cpu": _cpu_children() - cpu0,
        "rc": p.returncode,
        "stderr": p.stderr[-2000:],
    }


THREADS: int | None = None  # --threads: OMP/MKL threads of every child process


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ, SWAPPRUNE_CACHE=str(cache), TOKENIZERS_PARALLELISM="false")
    env.pop("SWAPPRUNE_GGUF_CACHE", None)
    if THREADS:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(THREADS)
    return env


def _swapprune() -> list[str]:
    exe = Path(sys.executable).with_name("swapprune")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "swapprune"]


def command_runs(model: str, repeat: int, timeout: float) -> list[dict]:
    rows = []
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    cache = work / "cache"
    try:
        for name, argv in (("--help", ["--help"]), ("list", ["list"])):
            for i in range(repeat):
                r = _run(_swapprune() + argv, _env(cache), timeout)
                rows.append(
                    {"command": f"swapprune {name}", "state": "warm" if i else "first", **_strip(r)}
                )
        for i in range(repeat + 1):
            out = work / f"scores-{i}.json"
            marks = work / f"marks-{i}.jsonl"
            argv = [a.format(model=model, out=out) for a in SCORE_ARGS]
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--child",
                str(marks),
                "--",
                *argv,
            ]
            r = _run(cmd, _env(cache), timeout)
            events = {}
            if marks.exists():
                for line in marks.read_text().splitlines():
                    e = json.loads(line)
                    events.setdefault(e["event"], e["t"] - r["t0"])
            rows.append(
                {
                    "command": "swapprune score",
                    "state": "warm" if i else "cold",
                    **_strip(r),
                    "events": events,
                }
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def _strip(r: dict) -> dict:
    out = {k: v for k, v in r.items() if k not in ("t0", "stderr")}
    if r["rc"] != 0:
        out["stderr"] = r["stderr"]
    return out


LIBRARY_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
t2 = time.perf_counter()
from swapprune.model.load import load_model
t3 = time.perf_counter()
model, tok, source = load_model(sys.argv[1], progress=False)
t4 = time.perf_counter()
print(json.dumps({"import_torch": t1 - t0, "import_transformers": t2 - t1,
                  "import_loading": t3 - t2, "load_model": t4 - t3,
                  "converted": source.converted is not None}))
"""


def library_runs(model: str, repeat: int, timeout: float) -> list[dict]:
    rows = []
    work = Path(tempfile.mkdtemp(prefix="bench-startup-lib-"))
    try:
        for i in range(repeat + 1):
            cpu0 = _cpu_children()
            p = subprocess.run(
                [sys.executable, "-c", LIBRARY_CHILD, model],
                env=_env(work),
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            row = {
                "state": "warm" if i else "cold",
                "cpu": _cpu_children() - cpu0,
                "rc": p.returncode,
            }
            if p.returncode == 0:
                row.update(json.loads(p.stdout.strip().splitlines()[-1]))
            else:
                row["stderr"] = p.stderr[-2000:]
            rows.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def import_runs(timeout: float) -> list[dict]:
    rows = []
    for module in IMPORTS:
        code = (
            f"import sys, time; t = time.perf_counter(); import {module}; "
            f"d = time.perf_counter() - t; "
            f"print(d, ','.join(m for m in {HEAVY!r} if m in sys.modules))"
        )
        p = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if p.returncode != 0:
            rows.append({"module": module, "error": p.stderr.strip().splitlines()[-1]})
            continue
        seconds, heavy = (p.stdout.strip().split(" ") + [""])[:2]
        top = {}
        for line in p.stderr.splitlines()[1:]:
            parts = [x.strip() for x in line.split("|")]
            if len(parts) == 3 and parts[1].isdigit() and not parts[2].startswith(" "):
                name = parts[2]
                if "." not in name:
                    top[name] = int(parts[1]) / 1e6
        biggest = sorted(top.items(), key=lambda kv: -kv[1])[:3]
        rows.append(
            {
                "module": module,
                "seconds": float(seconds),
                "heavy": heavy,
                "biggest": [f"{n} {s:.2f}s" for n, s in biggest],
            }
        )
    return rows


SELFCHECK_CHILD = """
import json, sys, tempfile, time
import torch
from swapprune.output import checkpoint
from swapprune.model.load import load_model
from swapprune.plan import PrunePlan
from swapprune.edit.surgery import apply_plan

model, tok, source = load_model(sys.argv[1], progress=False)
plan = PrunePlan.from_removal(model.config.num_hidden_layers, [10, 20])
apply_plan(model, plan, log=lambda _: None)
times = {}
for name in ("_reference_logits", "_save_model", "_selfcheck"):
    real = getattr(checkpoint, name)
    def timed(*a, _real=real, _name=name, **k):
        t = time.perf_counter()
        try:
            return _real(*a, **k)
        finally:
            times[_name] = time.perf_counter() - t
    setattr(checkpoint, name, timed)
rows = []
for selfcheck in (False, True, True):
    times.clear()
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        r = checkpoint.save_checkpoint(model, tok, plan, d + "/out", provenance={},
                                       base_model_id=source.id, selfcheck=selfcheck)
        total = time.perf_counter() - t
    rows.append({"selfcheck": selfcheck, "total": total,
                 "reference_logits": times.get("_reference_logits", 0.0),
                 "write": times.get("_save_model", 0.0),
                 "selfcheck_s": times.get("_selfcheck", 0.0),
                 **{k: r[k] for k in ("reload_s", "logits_s", "generate_s") if k in r}})
print(json.dumps(rows))
"""


def selfcheck_runs(model: str, timeout: float) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="bench-startup-sc-"))
    try:
        cpu0 = _cpu_children()
        # Warm the cache first so the child's time is the save, not the conversion.
        subprocess.run(
            [sys.executable, "-c", LIBRARY_CHILD, model],
            env=_env(work),
            cwd=ROOT,
            capture_output=True,
            timeout=timeout,
        )
        p = subprocess.run(
            [sys.executable, "-c", SELFCHECK_CHILD, model],
            env=_env(work),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if p.returncode != 0:
        return [{"error": p.stderr[-2000:]}]
    rows = json.loads(p.stdout.strip().splitlines()[-1])
    rows[-1]["cpu_all_children"] = _cpu_children() - cpu0
    return rows


# ---------------------------------------------------------------- report


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def print_commands(rows: list[dict]) -> None:
    print("\n## Commands (fresh process each; seconds from process start)\n")
    print(
        "| command | run | load_model start | load_model end | scoring starts | total wall "
        "| CPU | rc |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ev = r.get("events", {})
        print(
            f"| {r['command']} | {r['state']} | {_fmt(ev.get('load_start'))} "
            f"| {_fmt(ev.get('load_end'))} | {_fmt(ev.get('score_start'))} | {r['wall']:.2f} "
            f"| {r['cpu']:.2f} | {r['rc']} |"
        )
    for r in rows:
        if r["rc"] != 0:
            print(f"\n{r['command']} ({r['state']}) failed:\n{r.get('stderr', '')}")
    score = [r for r in rows if r["command"] == "swapprune score" and r["rc"] == 0]
    warm = [r["events"].get("score_start") for r in score if r["state"] == "warm"]
    warm = [w for w in warm if w is not None]
    if warm:
        print(
            f"\nscore: fixed cost (start -> scoring) cold "
            f"{_fmt(score[0]['events'].get('score_start')) if score[0]['state'] == 'cold' else '-'}"
            f" s, warm median {statistics.median(warm):.2f} s (min {min(warm):.2f})"
        )
    for name in ("swapprune --help", "swapprune list"):
        walls = [r["wall"] for r in rows if r["command"] == name and r["rc"] == 0]
        if walls:
            print(f"{name}: median {statistics.median(walls):.2f} s (min {min(walls):.2f})")


def print_library(rows: list[dict]) -> None:
    print("\n## Library: load_model in a fresh interpreter (seconds)\n")
    print(
        "| run | import torch | import transformers | import swapprune.model.load | load_model "
        "| CPU (process) |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        if r["rc"] != 0:
            print(f"| {r['state']} | failed: {r.get('stderr', '')[-200:]} |")
            continue
        print(
            f"| {r['state']} | {r['import_torch']:.2f} | {r['import_transformers']:.2f} "
            f"| {r['import_loading']:.3f} | {r['load_model']:.2f} | {r['cpu']:.2f} |"
        )


def print_imports(rows: list[dict]) -> None:
    print("\n## Imports: python -c 'import M' (seconds, fresh interpreter)\n")
    print("| module | import | heavy libraries loaded | largest top-level imports |")
    print("|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['module']} | error: {r['error']} | | |")
            continue
        print(
            f"| {r['module']} | {r['seconds']:.3f} | {r['heavy'] or 'none'} "
            f"| {', '.join(r['biggest'])} |"
        )


def print_selfcheck(rows: list[dict]) -> None:
    print("\n## save_checkpoint, 2 blocks removed (seconds, one process)\n")
    if rows and "error" in rows[0]:
        print(rows[0]["error"])
        return
    print(
        "| self-check | total | reference logits | write | self-check | reload | logits "
        "| cached generation |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {'on' if r['selfcheck'] else 'off'} | {r['total']:.2f} "
            f"| {r['reference_logits']:.2f} | {r['write']:.2f} | {r['selfcheck_s']:.2f} "
            f"| {_fmt(r.get('reload_s'))} | {_fmt(r.get('logits_s'))} "
            f"| {_fmt(r.get('generate_s'))} |"
        )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(argv[1], argv[3:] if argv[2:3] == ["--"] else argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--repeat", type=int, default=3, help="warm runs of each command")
    ap.add_argument("--sections", default="commands,library,imports,selfcheck")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per child process")
    ap.add_argument("--json", help="also write every figure here")
    ap.add_argument("--threads", type=int, help="OMP/MKL threads in every child (default: torch's)")
    a = ap.parse_args(argv)
    global THREADS
    THREADS = a.threads
    sections = set(a.sections.split(","))
    report: dict = {
        "loadavg_start": os.getloadavg(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "threads": a.threads,
    }
    print(
        f"# bench_startup: model {a.model}, {os.cpu_count()} CPUs, "
        f"threads {a.threads or 'default'}, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    if "imports" in sections:
        report["imports"] = import_runs(a.timeout)
        print_imports(report["imports"])
    if "commands" in sections:
        report["commands"] = command_runs(a.model, a.repeat, a.timeout)
        print_commands(report["commands"])
    if "library" in sections:
        report["library"] = library_runs(a.model, a.repeat, a.timeout)
        print_library(report["library"])
    if "selfcheck" in sections:
        report["selfcheck"] = selfcheck_runs(a.model, a.timeout)
        print_selfcheck(report["selfcheck"])
    report["loadavg_end"] = os.getloadavg()
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
