"""Study v4 (confirmatory): the certificate's coverage against the exact landscapes.

    OMP_NUM_THREADS=1 PYTHONPATH=. python eval/study_v4/run.py cuts --seeds 0,1,2,3,4
    OMP_NUM_THREADS=1 PYTHONPATH=. python eval/study_v4/run.py landscape --budget 2 --text eval
    OMP_NUM_THREADS=1 PYTHONPATH=. python eval/study_v4/run.py contracts
    OMP_NUM_THREADS=1 PYTHONPATH=. python eval/study_v4/run.py n8
    OMP_NUM_THREADS=1 PYTHONPATH=. python eval/study_v4/run.py report

The design is fixed in ``PLAN.md`` (committed before the run). Every step is resumable:
a cut, a landscape or a set's contract evaluation already in ``results/`` is read back,
not redone. Steps may run side by side (two processes on the 2-core machine).

- ``cuts``: each seed's cuts at n = 2 and 3 by interchange, replacement, bi, sleb and auto,
  through the Python API (the run's own cut sequence), certificate on; each cut's plan
  (with its certificate) and CPU time in ``results/cuts/``.
- ``landscape``: ``swapprune landscape`` screened on the calibration text (seed 0's part)
  or on the evaluation text (the extended contract's articles), into
  ``results/landscape-<text>-n<n>/``.
- ``contracts``: every set the study needs (the landscapes' refined sets, every cut) on
  all windows of both contracts, float32, from cached prefixes
  (:class:`swapprune.engine.exhaustive.SetEvaluator` with the contracts' scored spans);
  ``results/contracts.json``. ``--refined eval`` leaves out the calibration-text
  landscape's refined sets (the criteria's picks on it are still evaluated).
- ``n8``: seed 0 at n = 8: the five cuts and the search reference (beam + local search).
- ``report``: ``analysis.py`` over all of it -> ``REPORT.md``, ``study.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results"
CALIBRATION = ROOT / "eval" / "study_v3" / "calibration"

# -- the design (PLAN.md) --------------------------------------------------------------
MODEL = "smollm2-135m"
SEEDS = [0, 1, 2, 3, 4]
BUDGETS = [2, 3]
CRITERIA = ["interchange", "replacement", "bi", "sleb", "auto"]
WINDOWS, TOKENS = 16, 64
HELDOUT = 8  # x 512 tokens: 4 choose, 4 measure
TOP_K = 20


def part(seed: int) -> Path:
    return CALIBRATION / f"part{seed}.txt"


def settings(seed: int, budget: int, criterion: str) -> dict:
    return dict(
        budget=budget,
        protocol=criterion,
        calib=str(part(seed)),
        prompts=WINDOWS,
        tokens=TOKENS,
        seed=seed,
        adaptive="off",
        heldout_prompts=HELDOUT,
    )


def _load():
    import swapprune

    model, tok, _source = swapprune.load_model(MODEL, device="cpu")
    return model, tok


def _write(path: Path, data) -> None:
    from swapprune.output.artifacts import write_json_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, data, indent=1)


# -- cuts --------------------------------------------------------------------------------
def run_cuts(seeds, budgets, criteria) -> None:
    import swapprune

    model, tok = _load()
    for seed in seeds:
        for criterion in criteria:
            scores = None  # one criterion's probes serve its budgets (same windows)
            for budget in budgets:
                f = RESULTS / "cuts" / f"seed{seed}" / f"n{budget}-{criterion}.json"
                if f.is_file():
                    continue
                cpu, wall = time.process_time(), time.perf_counter()
                plan, scores = swapprune.plan_pruning(
                    model, tok, scores=scores, progress=False, **settings(seed, budget, criterion)
                )
                _write(
                    f,
                    {
                        "seed": seed,
                        "budget": budget,
                        "criterion": criterion,
                        "plan": plan.to_dict(),
                        "cpu_s": time.process_time() - cpu,
                        "wall_s": time.perf_counter() - wall,
                        "probes_reused": budget != budgets[0],
                    },
                )
                print(f"[cuts] seed {seed} n={budget} {criterion}: {plan.removed}", flush=True)


# -- landscapes -------------------------------------------------------------------------
def eval_text() -> Path:
    """The extended contract's text: the 59 held-out WikiText-2 test articles, as a file."""
    from swapprune.evaluation.extended import held_out_articles
    from swapprune.evaluation.perplexity import TEST_TEXT

    out = RESULTS / "eval_text.txt"
    if not out.is_file():
        text = TEST_TEXT.read_text(encoding="utf-8")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(text[a.start : a.end] for a in held_out_articles(text)))
    return out


def run_landscape(budget: int, text: str) -> None:
    out = RESULTS / f"landscape-{text}-n{budget}"
    argv = [sys.executable, "-m", "swapprune", "landscape", "--model", MODEL,
            "--budget", str(budget), "--calib", str(part(0)), "--prompts", str(WINDOWS),
            "--tokens", str(TOKENS), "--seed", "0", "--top-k", str(TOP_K), "--bf16-screening",
            "--output", str(out), "--no-progress"]  # fmt: skip
    if text == "eval":
        # The criteria pick on the same calibration windows as in the calibration-text
        # landscape: their sets are read from there and ranked among these costs.
        src = str(eval_text())
        argv += ["--screen-calib", src, "--refine-calib", src, "--criteria", "none"]
    cpu0 = os.times()
    subprocess.run(argv, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    cpu1 = os.times()
    note = RESULTS / f"landscape-{text}-n{budget}" / "process.json"
    _write(note, {"children_cpu_s": (cpu1.children_user - cpu0.children_user)
                  + (cpu1.children_system - cpu0.children_system)})  # fmt: skip


# -- the contracts ----------------------------------------------------------------------
def needed_sets(refined=("calib", "eval")) -> dict[int, set[tuple[int, ...]]]:
    """Every set the analysis reads on the contracts, by budget (the refined sets of the
    landscapes screened on the texts in ``refined`` only; every criterion's pick)."""
    out: dict[int, set] = {}
    for f in sorted((RESULTS / "cuts").rglob("*.json")):
        d = json.loads(f.read_text())
        out.setdefault(d["budget"], set()).add(tuple(d["plan"]["removed"]))
    for f in sorted(RESULTS.glob("landscape-*/landscape.json")):
        state = json.loads(f.read_text())
        budget = state["settings"]["budget"]
        text = f.parent.name.split("-")[1]  # landscape-<text>-n<n>
        if state.get("complete") and text in refined:
            for row in state["result"]["refined"]:
                out.setdefault(budget, set()).add(tuple(row["set"]))
        # the criteria pick before the screening starts: a stopped landscape has them too
        for c in state.get("criteria", {}).values():
            if c.get("set") is not None:
                out.setdefault(budget, set()).add(tuple(c["set"]))
    for method in study_v3_sets().values():  # Study v3's regret, against the true best
        for s in method.values():
            out.setdefault(3, set()).add(tuple(s))
    n8 = RESULTS / "n8.json"
    if n8.is_file():
        d = json.loads(n8.read_text())
        for s in [*d["cuts"].values(), d["search"]["set"]]:
            out.setdefault(8, set()).add(tuple(s))
    return out


def study_v3_sets() -> dict[str, dict[int, list[int]]]:
    """Study v3's sets at n = 3: method -> seed -> removed blocks."""
    d = json.loads((ROOT / "eval" / "study_v3" / "study.json").read_text())
    ext = d["contracts"]["swapprune_wikitext2_ext"]["methods"]
    return {m: {int(k): v["removed"] for k, v in r["per_seed"].items()} for m, r in ext.items()}


def run_contracts(budgets=None, batch: int = 8, refined=("calib", "eval")) -> None:
    """Every needed set of ``budgets`` (default: all) on both contracts, in batches."""
    from contracts import ContractSets  # eval/study_v4/contracts.py

    model, tok = _load()
    cs = ContractSets(model, tok, RESULTS / "contracts.json")
    for budget, sets in sorted(needed_sets(refined).items()):
        if budgets is not None and budget not in budgets:
            continue
        todo = sorted(s for s in sets if not cs.has(s))
        for i in range(0, len(todo), batch):
            cs.evaluate(todo[i : i + batch])
            print(f"[contracts] n={budget}: {min(i + batch, len(todo))}/{len(todo)}", flush=True)


# -- n = 8 ------------------------------------------------------------------------------
def run_n8() -> None:
    from search import search_reference  # eval/study_v4/search.py

    import swapprune

    f = RESULTS / "n8.json"
    data = json.loads(f.read_text()) if f.is_file() else {"cuts": {}, "records": {}}
    model, tok = _load()
    for criterion in CRITERIA:
        if criterion in data["cuts"]:
            continue
        cpu = time.process_time()
        plan, _ = swapprune.plan_pruning(model, tok, progress=False, **settings(0, 8, criterion))
        data["cuts"][criterion] = list(plan.removed)
        data["records"][criterion] = {"plan": plan.to_dict(), "cpu_s": time.process_time() - cpu}
        _write(f, data)
    if "search" not in data:
        cpu = time.process_time()
        found = search_reference(model, tok, 8, part(0))
        data["search"] = found | {"cpu_s": time.process_time() - cpu}
        _write(f, data)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("step", choices=["cuts", "landscape", "contracts", "n8", "report"])
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    ap.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    ap.add_argument("--criteria", default=",".join(CRITERIA))
    ap.add_argument("--budget", type=int, default=2)
    ap.add_argument("--text", choices=["calib", "eval"], default="calib")
    ap.add_argument("--refined", default="calib,eval",
                    help="contracts: the refined sets of these texts' landscapes")  # fmt: skip
    a = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    if a.step == "cuts":
        run_cuts([int(x) for x in a.seeds.split(",")], [int(x) for x in a.budgets.split(",")],
                 a.criteria.split(","))  # fmt: skip
    elif a.step == "landscape":
        run_landscape(a.budget, a.text)
    elif a.step == "contracts":
        run_contracts({int(x) for x in a.budgets.split(",")}, refined=tuple(a.refined.split(",")))
    elif a.step == "n8":
        run_n8()
    else:
        from report import write_report  # eval/study_v4/report.py

        write_report(RESULTS, HERE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
