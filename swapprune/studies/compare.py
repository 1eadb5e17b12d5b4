"""``swapprune compare``: what each criterion costs at each budget, with a verdict.

A loop over cells: for every cell (a ``--criteria`` entry at a budget,
:mod:`swapprune.studies.compare_cells`) the run's configuration with that
``prune`` section goes through the run's own cut sequence, on one loaded model,
one calibration and one set of probe scores. The unpruned model is evaluated once
and every pruned variant in memory (a removal is a zero-copy view of the model's own
blocks, a merge a copy); the base model's greedy continuations are computed once and
every cell's agreement with them measured (``CompareConfig.generative``). Every two
methods are paired with a bootstrap over the same windows, articles or examples, and
judged (:mod:`swapprune.studies.compare_report`). Evaluations, generations and
selections are cached under ``DIR/cache`` by content (written atomically, and a
corrupt entry is recomputed), so a rerun or an added method redoes nothing already
done.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from tqdm.auto import tqdm

from swapprune.config import ScoreConfig, quick_of
from swapprune.output.artifacts import provenance, staged_files, write_json_atomic
from swapprune.pipeline import checks, stages
from swapprune.pipeline import forecast as fc
from swapprune.pipeline.record import Steps, Wording
from swapprune.select.reuse import check_reused
from swapprune.studies.compare_cells import Cells, cell_specs, method_runs, variant
from swapprune.studies.compare_job import CompareJob
from swapprune.studies.compare_plots import write_plots
from swapprune.studies.compare_report import build_results, write_markdown

__all__ = ["QUICK_LIMIT", "CompareJob", "run_compare", "variant"]

#: Contract windows of a quick comparison (``--limit``): a first look, not the contract.
QUICK_LIMIT = 6


def run_compare(job: CompareJob, progress: bool = True, say=None, quick: str | None = None) -> dict:
    """Run the comparison and write ``results.json``, ``results.md`` and plots into the output.

    Args:
        job: the comparison.
        progress: progress bars.
        say: receives the lines of the estimate before the probes start (``None``: silent).
        quick: how the quick settings (:func:`quick_job`) are asked for, when the estimate
            names them (default: the settings themselves).
    """
    from swapprune.engine.oracle import shared_oracles  # imports torch

    checks.check_compare(job.compare)
    checked = checks.check(job.run, study=True)
    runs = method_runs(job)
    # Every cell's request is checked once, before the weights load when the facts allow.
    specs = cell_specs(job, runs, checked.facts) if checked.facts is not None else None
    out = Path(job.compare.output)
    cache = out / "cache"

    loaded = stages.load(job.run, checked, progress)
    L = loaded.facts.num_layers
    if specs is None or checked.facts is None or checked.facts.num_layers != L:
        specs = cell_specs(job, runs, loaded.facts)
    calibration = stages.calibrate(job.run, loaded)
    probes = sorted(
        {p for spec in specs.values() for p in spec.probes} | {"replacement", "interchange"}
    )
    steps = Steps(say, Wording(quick=quick or _quick_words(job)))
    if steps.announces:
        forecast = fc.comparison(job, loaded.facts, loaded.tokenizer, probes, specs)
        faster = fc.comparison(quick_job(job), loaded.facts, loaded.tokenizer, probes, specs)
        steps.forecast("compare", forecast, faster, loaded.model, calibration, job.calib.batch_size)
    t0 = time.perf_counter()
    cache.mkdir(parents=True, exist_ok=True)
    scores = _scores(job, loaded, calibration, probes, specs, out, progress)
    score_s = time.perf_counter() - t0
    cells = Cells(job, loaded, specs, calibration, scores, cache)

    bar = tqdm(
        total=1 + len(job.compare.budgets) * len(runs),
        desc="compare",
        disable=not progress,
        dynamic_ncols=True,
    )
    bar.set_postfix_str("baseline")
    base, base_s = cells.meter.evaluated(list(range(L)), {}, loaded.model)
    bar.update()
    table: dict[int, dict[str, dict]] = {}
    # SLEB, SLEB one-shot and auto query the same windows: one oracle memory for all of them
    with shared_oracles() as oracle:
        for budget in job.compare.budgets:
            for label, entry, seed in runs:
                bar.set_postfix_str(f"n={budget} {label}")
                table.setdefault(budget, {}).update(cells.measure(label, entry, seed, budget))
                bar.update()
    bar.close()

    results = build_results(job, loaded.source.id, L, base, table, scores, job.eval.tasks)
    results["timing"] = {
        "score_s": score_s,
        "baseline_eval_s": base_s,
        "generative_reference_s": cells.meter.reference_seconds,
        "total_s": time.perf_counter() - t0,
        "oracle_queries": oracle.asked,
        "oracle_computed": oracle.computed,
    }
    with staged_files(out) as report:  # the report's files appear together, or none
        write_json_atomic(report / "results.json", results)
        write_markdown(results, report / "results.md")
        write_plots(results, scores, report)
        write_json_atomic(
            report / "provenance.json",
            provenance(
                base_model=loaded.source.id,
                invocation={
                    "config": job.run.to_dict(),
                    "compare": dataclasses.asdict(job.compare),
                },
            ),
            indent=2,
        )
    return results


def _scores(job: CompareJob, loaded, calibration, probes, specs, out: Path, progress: bool):
    """The probes every cell reads: reused from ``--scores`` (refused when a cell's probe is
    missing), or measured once on the shared windows into ``OUT/scores.json``."""
    if job.compare.scores:
        scores = stages.reuse_scores(job.compare.scores, loaded)
        for spec in specs.values():  # a cell must not probe again what the file lacks
            check_reused(scores, spec, job.compare.scores, flag="--criteria")
        return scores
    score = dataclasses.replace(
        job.run.score or ScoreConfig(),
        probes=probes,
        pairs=job.compare.pairs,
        output=str(out / "scores.json"),
    )
    return stages.score(dataclasses.replace(job.run, score=score), loaded, calibration, progress)


def quick_job(job: CompareJob) -> CompareJob:
    """The comparison at the quick settings: :data:`swapprune.config.QUICK`'s windows and
    :data:`QUICK_LIMIT` contract windows (unless a limit is set)."""
    run = quick_of(job.run)
    run = dataclasses.replace(run, eval=dataclasses.replace(job.eval, limit=quick_limit(job)))
    return dataclasses.replace(job, run=run)


def quick_limit(job: CompareJob) -> int:
    """The contract windows of a quick comparison: its own ``--limit``, else :data:`QUICK_LIMIT`."""
    return job.eval.limit or QUICK_LIMIT


def _quick_words(job: CompareJob) -> str:
    c = quick_job(job).run.calibration
    return f"prompts {c.prompts}, tokens {c.tokens}, limit {quick_limit(job)}"
