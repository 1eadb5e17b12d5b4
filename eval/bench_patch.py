"""The linear patch on SmolLM2-135M: matched cost with and without it, against LoRA healing.

For each criterion (``--criteria``) and budget, the cut is the criterion's removal:
interchange and replacement on fixed 64 x 128 probes (``--scores``: the
``fixed-interchange`` probes of ``bench_certificate.py``, so nothing is probed for
them here), BI and SLEB on 64 x 128 windows of the default calibration text. Each
cut is then scored on the matched contract (WikiText-2 test, first 5,000 words,
512/256 windows: 23 windows), three ways:

* ``plain``: the blocks removed, nothing else;
* ``patch``: the linear patch (``--patch linear`` defaults: 32 windows x 256 tokens
  of the calibration source, none of them a scoring window, ridge 1e-3) fitted and
  folded into the block before each removed span: no training;
* ``heal`` (interchange at ``--heal-budgets`` only): LoRA healing of the plain cut with the
  library's defaults except ``--heal-steps`` (peft, rank 16, batch 4 x 256 tokens).

Recovery is the share of the plain cut's dPPL that the patch (or healing) removes.
CPU seconds are this process's (one thread), for the fit (or the training) alone.

    python eval/bench_patch.py --criteria interchange,bi --heal-steps 30 --out eval/patch

Cells already in ``patch.json`` are kept, so a stopped run resumes where it was.

Run it from a checkout that does not change while it runs (the modules load lazily).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch
from matched import matched_cost  # eval/matched.py: the script's own folder is on sys.path

import swapprune
from swapprune.api import plan_pruning
from swapprune.output.artifacts import write_json_atomic


def _recovery(plain: dict, other: dict) -> float:
    return 1.0 - other["dppl_pct"] / plain["dppl_pct"]


def _plan(model, tok, criterion: str, b: int, scores, cal):
    """The criterion's cut: interchange and replacement on ``--scores``, the rest probe."""
    if criterion in ("interchange", "replacement"):
        kw = dict(scores=scores, calibration=cal, adaptive="off")
    else:
        kw = dict(prompts=64, tokens=128)
    plan, _ = plan_pruning(model, tok, budget=b, protocol=criterion, certify=False,
                           progress=False, **kw)  # fmt: skip
    return plan


def _load(path: Path) -> dict:
    """The cells written so far (a file of the interchange-only layout reads as its cells)."""
    if not path.is_file():
        return {"cells": {}}
    out = json.loads(path.read_text())
    if "cells" not in out:
        out = {"settings": out.get("settings"), "cells": {"interchange": out.get("budgets", {})}}
    return out


def run(args) -> dict:
    from swapprune.calibration.heldout import heldout_windows
    from swapprune.calibration.windows import load_calibration
    from swapprune.config import HealConfig
    from swapprune.edit.healing import heal
    from swapprune.edit.patch import RIDGE, fit_patches, patch_record
    from swapprune.edit.surgery import apply_plan
    from swapprune.engine.scores import ScoreResult

    torch.set_num_threads(1)
    model, tok, _ = swapprune.load_model("smollm2-135m", progress=False)
    scores = ScoreResult.load(args.scores)
    cal = load_calibration(tok, None, 64, 128, args.seed)
    patch_windows = heldout_windows(tok, None, 32, 256, args.seed + 2, [cal])
    path = Path(args.out) / "patch.json"
    out = _load(path)
    out.setdefault("runs", []).append(vars(args).copy())
    for criterion in args.criteria:
        cells = out["cells"].setdefault(criterion, {})
        for b in args.budgets:
            heal_it = b in args.heal_budgets and criterion == "interchange"
            row = cells.get(str(b))
            if row is not None and ("heal" in row or not heal_it):
                continue  # resumed: this cell is done
            plan = _plan(model, tok, criterion, b, scores, cal)
            if row is None:
                row = {"removed": plan.removed, "plain": matched_cost(model, tok, plan)}
                t = time.process_time()
                patches, record = fit_patches(model, plan.removed, patch_windows.input_ids)
                fit_cpu = time.process_time() - t
                plan.patch = patch_record(patches, RIDGE, patch_windows.describe(), record)
                patched = apply_plan(copy.deepcopy(model), plan, patches=patches)
                row["patch"] = matched_cost(model, tok, pruned=patched) | {
                    "fit_cpu_s": fit_cpu,
                    "block_evals": record.get("block_evals"),
                }
                row["patch"]["recovery"] = _recovery(row["plain"], row["patch"])
                del patched
                plan.patch = None
            if heal_it:
                healed = apply_plan(copy.deepcopy(model), plan)
                t = time.process_time()
                healed, _ = heal(healed, tok, HealConfig(steps=args.heal_steps), plan=plan)
                heal_cpu = time.process_time() - t
                row["heal"] = matched_cost(model, tok, pruned=healed) | {
                    "train_cpu_s": heal_cpu,
                    "steps": args.heal_steps,
                }
                row["heal"]["recovery"] = _recovery(row["plain"], row["heal"])
                del healed
            cells[str(b)] = row
            write_json_atomic(path, out, indent=1)
            done = {k: row[k].get("dppl_pct") for k in ("plain", "patch", "heal") if k in row}
            print(criterion, b, json.dumps(done), flush=True)
    return out


def report(out: dict) -> str:
    lines = [
        "| criterion | n | removed | plain dPPL % [CI] | patched dPPL % [CI] | patch recovery | fit CPU s "
        "| healed dPPL % | heal recovery | heal CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(c: dict) -> str:
        return f"{c['dppl_pct']:.1f} [{c['ci_pct'][0]:.1f}, {c['ci_pct'][1]:.1f}]"

    cells = [(c, b, row) for c, rows in out["cells"].items() for b, row in rows.items()]
    for c, b, row in sorted(cells, key=lambda x: (int(x[1]), x[0])):
        h = row.get("heal")
        lines.append(
            f"| {c} | {b} | {row['removed']} | {f(row['plain'])} | {f(row['patch'])} | "
            f"{100 * row['patch']['recovery']:.0f}% | {row['patch']['fit_cpu_s']:.0f} | "
            + (f"{f(h)} | {100 * h['recovery']:.0f}% | {h['train_cpu_s']:.0f} |" if h else "- | - | - |")
        )  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    p.add_argument("--budgets", type=ints, default=[2, 4, 8])
    p.add_argument("--criteria", type=lambda s: s.split(","), default=["interchange"])
    p.add_argument("--heal-budgets", type=ints, default=[4])
    p.add_argument("--heal-steps", type=int, default=100)
    p.add_argument("--scores", default="eval/certificate/fixed-interchange-scores.json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="eval/patch")
    p.add_argument("--report", action="store_true", help="rewrite REPORT.md from patch.json")
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "patch.json"
    out = _load(path) if args.report else run(args)
    text = report(out)
    (Path(args.out) / "REPORT.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
