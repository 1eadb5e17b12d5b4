"""The linear patch on SmolLM2-135M: matched cost with and without it, against LoRA healing.

For each budget the cut is the interchange-guided removal on fixed 64 x 128
probes (``--scores``: the ``fixed-interchange`` probes of ``bench_certificate.py``,
so nothing is probed here). Each cut is then scored on the matched contract
(WikiText-2 test, first 5,000 words, 512/256 windows: 23 windows), three ways:

* ``plain``: the blocks removed, nothing else;
* ``patch``: the linear patch (``--patch linear`` defaults: 32 windows x 256 tokens
  of the calibration source, none of them a scoring window, ridge 1e-3) fitted and
  folded into the block before each removed span: no training;
* ``heal`` (``--heal-budgets`` only): LoRA healing of the plain cut with the
  library's defaults except ``--heal-steps`` (peft, rank 16, batch 4 x 256 tokens).

Recovery is the share of the plain cut's dPPL that the patch (or healing) removes.
CPU seconds are this process's (one thread), for the fit (or the training) alone.

    python eval/bench_patch.py --out eval/patch

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


def run(args) -> dict:
    from swapprune.calibration.heldout import heldout_windows
    from swapprune.calibration.windows import load_calibration
    from swapprune.config import HealConfig
    from swapprune.edit.healing import heal
    from swapprune.edit.patch import RIDGE
    from swapprune.edit.patch_fit import fit_patches
    from swapprune.edit.patch_io import patch_record
    from swapprune.edit.surgery import apply_plan
    from swapprune.engine.scores import ScoreResult

    torch.set_num_threads(1)
    model, tok, _ = swapprune.load_model("smollm2-135m", progress=False)
    scores = ScoreResult.load(args.scores)
    cal = load_calibration(tok, None, 64, 128, args.seed)
    patch_windows = heldout_windows(tok, None, 32, 256, args.seed + 2, [cal])
    out: dict = {"settings": vars(args).copy(), "budgets": {}}
    path = Path(args.out) / "patch.json"
    for b in args.budgets:
        plan, _ = plan_pruning(model, tok, budget=b, protocol="interchange", scores=scores,
                               calibration=cal, adaptive="off", certify=False, progress=False)  # fmt: skip
        row: dict = {"removed": plan.removed, "plain": matched_cost(model, tok, plan)}
        t = time.process_time()
        patches, record = fit_patches(model, plan.removed, patch_windows.input_ids)
        fit_cpu = time.process_time() - t
        plan.patch = patch_record(patches, RIDGE, patch_windows.describe(), record)
        patched = apply_plan(copy.deepcopy(model), plan, patches=patches)
        row["patch"] = matched_cost(model, tok, pruned=patched) | {
            "fit_cpu_s": fit_cpu,
            "block_evals": record.get("block_evals"),
            "recovery": None,
        }
        row["patch"]["recovery"] = _recovery(row["plain"], row["patch"])
        del patched
        if b in args.heal_budgets:
            plan.patch = None
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
        out["budgets"][str(b)] = row
        write_json_atomic(path, out, indent=1)
        print(
            b,
            json.dumps({k: row[k].get("dppl_pct") for k in ("plain", "patch", "heal") if k in row}),
        )
    return out


def report(out: dict) -> str:
    lines = [
        "| n | removed | plain dPPL % [CI] | patched dPPL % [CI] | patch recovery | fit CPU s "
        "| healed dPPL % | heal recovery | heal CPU s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def f(c: dict) -> str:
        return f"{c['dppl_pct']:.1f} [{c['ci_pct'][0]:.1f}, {c['ci_pct'][1]:.1f}]"

    for b, row in out["budgets"].items():
        h = row.get("heal")
        lines.append(
            f"| {b} | {row['removed']} | {f(row['plain'])} | {f(row['patch'])} | "
            f"{100 * row['patch']['recovery']:.0f}% | {row['patch']['fit_cpu_s']:.0f} | "
            + (f"{f(h)} | {100 * h['recovery']:.0f}% | {h['train_cpu_s']:.0f} |" if h else "- | - | - |")
        )  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    p.add_argument("--budgets", type=ints, default=[2, 4, 8])
    p.add_argument("--heal-budgets", type=ints, default=[4])
    p.add_argument("--heal-steps", type=int, default=100)
    p.add_argument("--scores", default="eval/certificate/fixed-interchange-scores.json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="eval/patch")
    p.add_argument("--report", action="store_true", help="rewrite REPORT.md from patch.json")
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "patch.json"
    out = json.loads(path.read_text()) if args.report else run(args)
    text = report(out)
    (Path(args.out) / "REPORT.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
