"""``swapprune compare``: the cost of each criterion at each budget, with paired verdicts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from swapprune.cli import say_to_stderr
from swapprune.cli.options import add_common, add_section, section_from
from swapprune.config import (
    CalibrationConfig,
    CompareConfig,
    EvalConfig,
    ModelConfig,
    RunConfig,
    ScoreConfig,
    SelectConfig,
)

#: SelectConfig fields a comparison passes to every cell (criterion and budget vary).
CELL_FIELDS = ("patch_", "heldout_", "certify_", "protect_", "oracle", "max_oracle", "beam_")

EPILOG = """examples:
  swapprune compare --budgets 1,3,5 --output cmp/
  swapprune compare --budgets 2,4 --criteria interchange,replacement,bi,sleb,random --output cmp/
  swapprune compare --scores scores.json --budgets 1,2 --limit 6 --output quick/   # quick look
  swapprune compare --budgets 2,3 --criteria interchange,interchange@ranked,bi,bi@greedy --output cmp/
  swapprune compare --budgets 2 --tasks wikitext2_ppl,wikitext2_ext --margin 2 --output cmp/
Cost = relative change of the first task's metric vs the unpruned model (dPPL% for
wikitext2_ppl, the paper's matched contract); wikitext2_ext adds the extended contract (one
window from each of 59 later articles, article-clustered; about 164 CPU-s per model on
SmolLM2-135M with one thread). Verdicts: better, tie (equivalent within +-margin, TOST),
or inconclusive (MDD); a rerun reuses cmp/cache."""


def add_arguments(p) -> None:
    add_section(p, ModelConfig, "model")
    add_section(p, CalibrationConfig, "calibration")
    add_section(p, CompareConfig, "compare", title="comparison", required=("output",))
    add_section(p, ScoreConfig, "score", title="probes", skip=("probes", "pairs", "output"))
    keep = {f.name for f in dataclasses.fields(SelectConfig) if f.name.startswith(CELL_FIELDS)}
    skip = tuple(f.name for f in dataclasses.fields(SelectConfig) if f.name not in keep)
    add_section(p, SelectConfig, "prune", title="every cell's selection", skip=skip)
    add_section(
        p,
        EvalConfig,
        "eval",
        title="evaluation",
        prefix="eval",
        prefixed=("batch_size", "bootstrap"),
        skip=("output",),
    )
    add_common(p)


def kept_on_interrupt(args) -> str | None:
    """The cells measured so far stay in the output's cache, which the same command reuses."""
    cache = Path(getattr(args, "compare.output")) / "cache"
    if cache.is_dir() and any(cache.iterdir()):
        return f"partial files removed; the cells finished so far are in {cache}, and the same command reuses them"
    return None


def run(args) -> int:
    from swapprune.studies.compare import CompareJob, run_compare  # imports numpy, tqdm

    job = CompareJob(
        run=RunConfig(
            model=section_from(args, ModelConfig, "model"),
            calibration=section_from(args, CalibrationConfig, "calibration"),
            score=section_from(args, ScoreConfig, "score"),
            eval=section_from(args, EvalConfig, "eval"),
        ),
        compare=section_from(args, CompareConfig, "compare"),
        select=section_from(args, SelectConfig, "prune"),
    )
    from swapprune.cli.next_steps import compare_quick  # imports numpy, tqdm

    res = run_compare(
        job, progress=not args.no_progress, say=say_to_stderr(args), quick=compare_quick(job)
    )
    out = Path(job.compare.output)
    print((out / "results.md").read_text())
    t = res["timing"]
    print(f"scoring {t['score_s']:.0f}s, total {t['total_s']:.0f}s; wrote {out}/results.json")
    if t.get("oracle_queries"):
        print(
            f"model-based selections: {t['oracle_computed']} pruned variants measured for "
            f"{t['oracle_queries']} queries (the rest answered from memory)"
        )
    from swapprune.cli.next_steps import prune_after_compare  # imports numpy, tqdm

    scores = job.compare.scores or (
        out / "scores.json" if (out / "scores.json").is_file() else None
    )
    print(f"next: {prune_after_compare(job, res, scores)}")
    return 0
