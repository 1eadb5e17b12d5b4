"""One small function per CLI command: build the request, call the library, print."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from swapprune.errors import SwappruneError


def add_parsers(sub) -> None:
    """Sub-commands defined outside cli.py (evaluation, comparison, recipes)."""
    for mod in ("swapprune.eval_cli", "swapprune.recipe_cli"):
        try:
            __import__(mod, fromlist=["add_parsers"]).add_parsers(sub)
        except ModuleNotFoundError:
            pass


from swapprune.cli import calib_opts_from as _calib_opts  # noqa: E402
from swapprune.cli import model_opts_from as _model_opts  # noqa: E402


def cmd_prune(a) -> int:
    from swapprune.pipeline import PruneJob, run_prune
    from swapprune.pruning import PruneRequest

    req = PruneRequest(
        budget=a.budget, protocol=a.protocol, strategy=a.strategy, op=a.op, merge=a.merge,
        protect_first=a.protect_first, protect_last=a.protect_last, seed=a.seed,
        oracle_metric=a.oracle, beam_calls=a.max_oracle_calls,
    )
    job = PruneJob(output=a.output, request=req, model=_model_opts(a), calib=_calib_opts(a),
                   scores=a.scores, overwrite=a.overwrite, save_dtype=a.save_dtype,
                   selfcheck=not a.no_selfcheck)
    res = run_prune(job)
    plan = res["plan"]
    verb = "merged" if plan.op == "merge" else "removed"
    detail = plan.merged if plan.op == "merge" else plan.removed
    print(f"{verb} blocks {detail} of {plan.num_layers} by {plan.protocol}/{plan.strategy}; "
          f"kept {len(plan.kept)}")
    if res["scores"] is not None and res["scores"].pairs:
        reg = res["scores"].to_dict()["summary"].get("regime")
        if reg:
            print(f"regime: {reg['call']} (median adjacent d_repl {reg['median_replacement']:.3g}, "
                  f"d_inter {reg['median_interchange']:.3g}, I/R {reg['median_ir']:.2f}): {reg['advice']}")
    sc = res["selfcheck"]
    if sc:
        print(f"self-check: reload logits max diff {sc.get('logits_max_abs_diff', 'n/a')}, "
              f"generate with cache == without: {sc.get('generate_cache_equal', 'n/a')}")
    print(f"checkpoint: {res['output']}")
    return 0


def cmd_score(a) -> int:
    from swapprune.calibration import load_calibration
    from swapprune.engine.plans import parse_protocols
    from swapprune.pipeline import load

    parse_protocols(a.protocols)
    out = Path(a.out)
    if out.is_dir():
        raise SwappruneError(f"--out {out} is a directory; give a file name like scores.json")
    model, tok, src = load(_model_opts(a), not a.no_progress)
    from swapprune.architectures import decoder_stack
    from swapprune.engine.plans import parse_pairs

    parse_pairs(a.pairs, decoder_stack(model).num_layers)  # range errors before calibration
    ctx = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    calibration = load_calibration(tok, a.calib, a.prompts, a.tokens, a.seed, ctx)
    kwargs = dict(calibration=calibration, protocols=a.protocols, pairs=a.pairs,
                  positions=a.positions, batch_size=a.batch_size, cache_gb=a.cache_gb,
                  n_boot=a.bootstrap, seed=a.seed, model_id=src.id, progress=not a.no_progress)
    from swapprune.engine.sharding import score_sharded

    result = score_sharded(model, tok, out, **kwargs)
    if result is None:  # a non-zero rank of a torchrun job
        return 0
    d = result.to_dict()
    t = d.get("timing", {})
    print(f"scored {len(d['pairs'])} pairs, {len(d['deletion'])} layers on "
          f"{d['calibration']['prompts']}x{d['calibration']['tokens']} tokens "
          f"({d['positions']} positions) in {t.get('seconds', 0):.1f}s, "
          f"{t.get('block_evals', 0)} block evaluations")
    reg = d["summary"].get("regime")
    if reg:
        print(f"regime: {reg['call']}: {reg['advice']}")
    print(f"wrote {out}")
    return 0


def cmd_apply(a) -> int:
    from swapprune.architectures import decoder_stack
    from swapprune.artifacts import check_output_dir
    from swapprune.checkpoint import save_checkpoint
    from swapprune.pipeline import load, save_dtype
    from swapprune.plan import PrunePlan
    from swapprune.surgery import apply_plan

    plan = PrunePlan.from_json(a.plan)
    check_output_dir(a.output, a.overwrite)
    model, tok, src = load(_model_opts(a))
    L = decoder_stack(model).num_layers
    if L != plan.num_layers:
        raise SwappruneError(f"plan {a.plan} is for a {plan.num_layers}-block model; {a.model} has {L}")
    apply_plan(model, plan)
    save_checkpoint(model, tok, plan, a.output, save_dtype=save_dtype(a.save_dtype),
                    overwrite=a.overwrite, provenance={"command": list(sys.argv)},
                    base_model_id=src.id, selfcheck=not a.no_selfcheck)
    print(f"applied {a.plan}: kept {plan.kept}; checkpoint: {a.output}")
    return 0


def cmd_list(a) -> int:
    from swapprune import criteria
    from swapprune.engine.plans import PROTOCOLS
    from swapprune.merging import MERGES
    from swapprune.selection import STRATEGIES

    rows = {
        "protocols (probes)": list(PROTOCOLS),
        "criteria (--protocol)": criteria.names(),
        "strategies (--strategy)": [n + (":W" if n == "beam" else ":G" if n == "spaced" else "")
                                    for n in STRATEGIES.names()],
        "merge rules (--merge)": MERGES.names(),
    }
    try:
        from swapprune.evaluation import ALIASES, NATIVE_TASKS, PACK_DIR

        pack = sorted(p.stem for p in PACK_DIR.glob("*.yaml"))
        rows["evaluation tasks"] = sorted(set(NATIVE_TASKS) | set(pack))
        rows["task aliases"] = [f"{k}={v}" for k, v in sorted(ALIASES.items())]
    except ImportError:
        pass
    for k, v in rows.items():
        print(f"{k}: {', '.join(v)}")
    return 0


HANDLERS = {"prune": cmd_prune, "score": cmd_score, "apply": cmd_apply, "list": cmd_list}


def dispatch(args: argparse.Namespace) -> int:
    handler = HANDLERS.get(args.command) or getattr(args, "handler", None)
    if handler is None:
        raise SwappruneError(f"command '{args.command}' is not available")
    return handler(args)


def dumps(obj) -> str:
    return json.dumps(obj, indent=1)
