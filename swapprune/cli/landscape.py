"""``swapprune landscape``: every removal set of a small budget, and where each criterion ranks.

Every refusal (a budget above 3 without ``--force``, a budget at or above the
depth, constraints that admit no set, a bad flag) is one line, exit status 2,
with nothing written, before the model loads when its facts can be read from
its config.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from math import comb
from pathlib import Path
from typing import Any

from swapprune.cli import say_to_stderr
from swapprune.cli.options import REQUIRED, _csv, add_common, add_section, section_from
from swapprune.config import CalibrationConfig, ModelConfig, RunConfig
from swapprune.config.select import HELDOUT_TOKENS
from swapprune.engine.estimate import duration
from swapprune.errors import SwappruneError, unknown_name
from swapprune.studies.landscape_picks import CRITERIA, PickSettings, run_criteria

EPILOG = """examples:
  swapprune landscape --budget 2 --bf16-screening --output land2/
  swapprune landscape --budget 3 --never-adjacent --top-k 10 --bf16-screening --output land3/
  swapprune landscape --budget 2 --calib eval/study_v3/calibration/part0.txt --output land/
  swapprune landscape --budget 2 --criteria bi,sleb,auto --rounds 8x64,16x128,16x256 --output land/
Every admissible set is screened on the calibration text (rounds of more and longer
windows; bfloat16 with --bf16-screening), the top-k refined in float32 on held-out
windows disjoint from them; every criterion picks on the same calibration windows.
landscape.json is written after each batch of sets: rerun the same line to resume."""

#: Calibration windows the criteria pick on, unless given (Study v3's setting).
PROMPTS, TOKENS = 16, 64


def kept_on_interrupt(args) -> str | None:
    """The sets evaluated so far stay in ``landscape.json``, which the same command resumes."""
    state = Path(args.output) / "landscape.json" if args.output else None
    if state is not None and state.is_file():
        return (
            f"partial files removed; the sets evaluated so far are in {state}, "
            "and the same command resumes from them"
        )
    return None


def add_arguments(p) -> None:
    add_section(p, ModelConfig, "model")
    add_section(
        p,
        CalibrationConfig,
        "calibration",
        title="calibration (the criteria's windows; the screening text)",
        skip=("adaptive", "target_frequency", "tranche"),
        defaults={"prompts": PROMPTS, "tokens": TOKENS},
    )
    g = p.add_argument_group("landscape")
    g.add_argument("--budget", type=int, help="blocks removed (at most 3 without --force)")
    g.add_argument("--output", help="directory of landscape.json and landscape.png (required)")
    g.add_argument("--top-k", type=int, default=20, help="sets refined on held-out windows")
    g.add_argument("--never-adjacent", action="store_true", help="only sets with no two neighbours")
    g.add_argument("--protect-first", type=int, default=0, help="never remove the first k blocks")
    g.add_argument("--protect-last", type=int, default=0, help="never remove the last k blocks")
    g.add_argument(
        "--serve",
        type=_csv(str),
        metavar="RUNTIME,...",
        help="only sets these runtimes serve in phase (swapprune list), or none",
    )
    g.add_argument(
        "--bf16-screening", action="store_true", help="screen in bfloat16 (refine in float32)"
    )
    g.add_argument(
        "--rounds",
        default="8x64,16x128",
        help="screening rounds, WINDOWSxTOKENS each (default: 8x64,16x128)",
    )
    g.add_argument(
        "--refine", help="held-out windows (default: 8x512, capped at the model's context)"
    )
    g.add_argument("--z", type=float, default=3.0, help="screening rule: one-sided z")
    g.add_argument(
        "--margin",
        type=float,
        default=0.005,
        help="screening rule: margin in nats per token within which two sets count as level",
    )
    g.add_argument("--min-keep", type=int, help="screening rule: floor (default: 4 x top-k)")
    g.add_argument(
        "--max-refine", type=int, help="screening rule: cap on the refined sets (default: none)"
    )
    g.add_argument(
        "--criteria",
        type=_csv(str),
        metavar="NAME,...",
        help="criteria to rank (default: all ten; none: no criteria)",
    )
    g.add_argument("--screen-calib", help="text the screening windows come from (default: --calib)")
    g.add_argument(
        "--refine-calib", help="text the held-out windows come from (default: screening's)"
    )
    g.add_argument("--bootstrap", type=int, default=1000, help="paired bootstrap resamples")
    g.add_argument("--batch-sets", type=int, default=32, help="sets per written batch")
    g.add_argument("--force", action="store_true", help="allow a budget above 3")
    p.set_defaults(**{REQUIRED: [("budget", "--budget"), ("output", "--output")]})
    add_common(p)


@dataclass
class Job:
    """A checked ``landscape`` command line."""

    run: RunConfig
    settings: Any
    criteria: list[str]
    output: Path
    args: argparse.Namespace


def job_of(args) -> Job:
    """Everything that needs neither the model's facts nor its weights."""
    from swapprune.select.constraints import check_names  # imports numpy
    from swapprune.select.landscape import parse_shape  # imports numpy
    from swapprune.studies.landscape import LandscapeSettings  # imports numpy

    cal = section_from(args, CalibrationConfig, "calibration", adaptive="off")
    run = RunConfig(model=section_from(args, ModelConfig, "model"), calibration=cal)
    from swapprune.pipeline.checks import check_config  # imports numpy

    check_config(run, study=True)
    if args.budget < 1:
        raise SwappruneError(f"budget must be >= 1, got {args.budget}")
    for name in ("top_k", "bootstrap", "batch_sets"):
        if getattr(args, name) < 1:
            raise SwappruneError(f"--{name.replace('_', '-')} must be >= 1")
    if args.protect_first < 0 or args.protect_last < 0:
        raise SwappruneError("--protect-first/--protect-last must be >= 0")
    check_names(args.serve)
    rounds = tuple(parse_shape(x) for x in args.rounds.split(",") if x.strip())
    if not rounds:
        raise SwappruneError("--rounds needs at least one WINDOWSxTOKENS")
    names = list(CRITERIA) if args.criteria is None else [c for c in args.criteria if c != "none"]
    from swapprune.select.spec import names as known  # imports numpy

    for c in names:
        if c not in known():
            raise unknown_name("criterion", c, known())
    settings = LandscapeSettings(
        budget=args.budget,
        top_k=args.top_k,
        rounds=rounds,
        refine=parse_shape(args.refine) if args.refine else (8, HELDOUT_TOKENS),
        z=args.z,
        margin=args.margin,
        min_keep=args.min_keep,
        max_refine=args.max_refine,
        bf16_screening=args.bf16_screening,
        batch_size=cal.batch_size,
        batch_sets=args.batch_sets,
        n_boot=args.bootstrap,
        seed=cal.seed,
    )
    settings.rule()  # refuses a bad z, margin or floor
    return Job(run, settings, names, Path(args.output), args)


def admissible_of(job: Job, facts):
    """The admissible sets on this model; one line when the budget or constraints refuse."""
    from swapprune.select.constraints import resolve  # imports numpy
    from swapprune.select.landscape import MAX_BUDGET, Admissible  # imports numpy
    from swapprune.studies.landscape_estimate import estimate_seconds  # imports numpy

    a, L, n = job.args, facts.num_layers, job.settings.budget
    if n >= L:
        raise SwappruneError(f"budget {n} would remove every block: the model has {L}")
    serve = resolve(a.serve, facts)
    adm = Admissible(
        L, n, a.protect_first, a.protect_last, a.never_adjacent,
        serve.in_phase if serve is not None else None,
    )  # fmt: skip
    if n > MAX_BUDGET and not a.force:
        secs = estimate_seconds(facts, adm.upper_count(), job.settings)
        when = f", about {duration(sum(secs.values()))} of CPU time at one thread" if secs else ""
        raise SwappruneError(
            f"budget {n} means C({L},{n}) = {comb(L, n):,} removal sets to screen{when}; "
            f"give --force to run it, or a budget of at most {MAX_BUDGET}"
        )
    ctx = facts.context_length
    if not a.refine and ctx is not None and job.settings.refine[1] > ctx:
        job.settings = replace(job.settings, refine=(job.settings.refine[0], ctx))
    for _w, t in (*job.settings.rounds, job.settings.refine):
        if ctx is not None and t > ctx:
            raise SwappruneError(f"windows of {t} tokens exceed the model's context of {ctx}")
    if not adm.sets():
        raise SwappruneError(
            f"no removal set of {n} of {L} blocks is admissible ({adm.describe()})"
        )
    return adm, serve


def run(args) -> int:
    from swapprune.pipeline import stages  # imports numpy
    from swapprune.studies.landscape_estimate import estimate_seconds  # imports numpy

    job = job_of(args)
    say = say_to_stderr(args)
    from swapprune.pipeline.checks import read_facts  # imports numpy

    facts = read_facts(job.run)
    checked = admissible_of(job, facts) if facts is not None else None
    if checked is not None and facts is not None:
        secs = estimate_seconds(facts, len(checked[0].sets()), job.settings)
        if secs:
            say(
                f"[estimate] landscape at one thread: about {duration(sum(secs.values()))} "
                f"of CPU time ({', '.join(f'{k} {duration(v)}' for k, v in secs.items())}), "
                "before the criteria"
            )
    loaded = stages.load(job.run, None, progress=not args.no_progress)
    adm, serve = checked if checked is not None else admissible_of(job, loaded.facts)
    state = _run(job, loaded, adm, serve, say)
    for line in state["result"]["summary"]:
        print(line)
    for stage, c in state["compute"].items():
        tokens = f", {c['block_tokens']:,} block-tokens" if c.get("block_tokens") else ""
        print(f"  {stage}: {c['cpu_s']:.0f} CPU-s{tokens}")
    print(f"wrote {job.output}/landscape.json and landscape.png")
    return 0


def _run(job: Job, loaded, adm, serve, say):
    from swapprune.calibration.heldout import heldout_windows  # imports torch, numpy
    from swapprune.pipeline import stages  # imports numpy
    from swapprune.select.reference import Heldout  # imports numpy
    from swapprune.studies.landscape import build_windows, run_landscape  # imports numpy

    a, s = job.args, job.settings
    calibration = stages.calibrate(job.run, loaded)
    windows = build_windows(loaded.tokenizer, s, calibration, a.screen_calib, a.refine_calib)
    heldout = None
    if "auto" in job.criteria:  # auto's beam searches on windows of its own
        ctx = loaded.facts.context_length
        tokens = HELDOUT_TOKENS if ctx is None else min(HELDOUT_TOKENS, ctx)
        avoid = [calibration, *windows.rounds, windows.refine]
        verify = heldout_windows(
            loaded.tokenizer, calibration.source, 8, tokens, calibration.seed + 1999, avoid
        )
        heldout = Heldout(verify, verify)
    picks = PickSettings(
        budget=s.budget,
        protect_first=a.protect_first,
        protect_last=a.protect_last,
        serve=a.serve,
        batch_size=job.run.calibration.batch_size,
        positions=job.run.calibration.positions,
        scores_path=job.output / "scores.json",
        heldout=heldout,
    )
    job.output.mkdir(parents=True, exist_ok=True)
    return run_landscape(
        loaded.model,
        s,
        windows,
        adm,
        job.output,
        criteria=lambda done: run_criteria(
            loaded.model,
            loaded.tokenizer,
            calibration,
            picks,
            job.criteria,
            done,
            loaded.source.id,
            not a.no_progress,
        ),  # fmt: skip
        criteria_names=job.criteria,
        model_id=loaded.source.id,
        constraints={"serve": list(serve.runtimes) if serve is not None else None},
        progress=not a.no_progress,
        say=say,
    )
