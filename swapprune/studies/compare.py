"""``swapprune compare``: what each criterion costs at each budget, with a verdict.

A loop over configurations: for every cell (a ``--criteria`` entry,
:mod:`swapprune.studies.compare_cells`) and budget, the run's configuration
with that ``prune`` section goes through the pipeline's own stages
(:func:`swapprune.pipeline.stages.select`), on one loaded model, one calibration and
one set of probe scores. The unpruned model is evaluated once and every pruned
variant in memory (a removal is a zero-copy view of the model's own blocks, a
merge a copy); the base model's greedy continuations are computed once and
every cell's agreement with them measured (``CompareConfig.generative``).
Every two methods are paired with a bootstrap over the same windows, articles
or examples, and judged by :mod:`swapprune.studies.compare_verdicts`.
Evaluations, generations and selections are cached under ``DIR/cache`` by
content (written atomically, and a corrupt entry is recomputed), so a rerun or
an added method redoes nothing already done.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

from swapprune.config import CalibrationConfig, CompareConfig, EvalConfig, RunConfig, SelectConfig
from swapprune.studies.cache import cached, content_key
from swapprune.studies.compare_cells import (
    cell_specs,
    merge_key,
    method_config,
    method_runs,
    patched_cell,
    prefix,
    variant,
)

__all__ = ["CompareJob", "run_compare", "variant"]


@dataclass
class CompareJob:
    """One comparison: the shared run settings and the comparison's own.

    Attributes:
        run: model, calibration, probes (``score``) and evaluation (``eval``) settings.
        compare: budgets, criteria, strategy, random seeds, patches, output directory.
        select: the selection settings every cell shares.
    """

    run: RunConfig
    compare: CompareConfig
    #: settings every cell's selection shares (held-out and patch windows, protection...);
    #: budget, criterion, strategy and whether it certifies are the cell's own.
    select: SelectConfig | None = None

    # Read by the report (contract section).
    @property
    def limit(self):
        return self.eval.limit

    @property
    def words(self):
        return self.eval.words

    @property
    def max_length(self):
        return self.eval.max_length

    @property
    def calib(self) -> CalibrationConfig:
        return self.run.calibration

    @property
    def strategy(self):
        return self.compare.strategy

    @property
    def eval(self) -> EvalConfig:
        assert self.run.eval is not None
        return self.run.eval

    def check(self) -> CompareJob:
        from swapprune.pipeline import checks

        checks.check_config(self.run, study=True)
        checks.check_compare(self.compare)
        return self


def run_compare(job: CompareJob, progress: bool = True, say=None) -> dict:
    """Run the comparison and write ``results.json``, ``results.md`` and plots into the output.

    ``say``: receives the lines of the estimate before the probes start (``None``: silent).
    """
    from tqdm.auto import tqdm

    from swapprune.engine.oracle import shared_oracles
    from swapprune.evaluation import EvalResult, evaluate
    from swapprune.evaluation.names import EXTENDED_PPL
    from swapprune.output.artifacts import locked, provenance, write_json_atomic, write_text_atomic
    from swapprune.pipeline import checks, stages
    from swapprune.plan import PrunePlan

    checks.check_compare(job.compare)
    checked = checks.check(job.run, study=True)
    tasks = job.eval.tasks
    runs = method_runs(job)
    # Every cell's request is checked once, before the weights load when the facts allow.
    specs = cell_specs(job, runs, checked.facts) if checked.facts is not None else None
    out = Path(job.compare.output)
    cache = out / "cache"

    loaded = stages.load(job.run, checked, progress)
    L = loaded.facts.num_layers
    if specs is None or checked.facts.num_layers != L:
        specs = cell_specs(job, runs, loaded.facts)
    model, tok, src = loaded.model, loaded.tokenizer, loaded.source
    calibration = stages.calibrate(job.run, loaded)
    probes = sorted(
        {p for spec in specs.values() for p in spec.probes} | {"replacement", "interchange"}
    )
    if say is not None:
        _forecast(job, loaded, calibration, probes, specs, say)
    t0 = time.perf_counter()
    cache.mkdir(parents=True, exist_ok=True)
    if job.compare.scores:
        from swapprune.select.reuse import check_reused

        scores = stages.reuse_scores(job.compare.scores, loaded)
        for spec in specs.values():  # a cell must not probe again what the file lacks
            check_reused(scores, spec, job.compare.scores, flag="--criteria")
    else:
        score_cfg = dataclasses.replace(
            job.run,
            score=dataclasses.replace(
                job.run.score or _default_score(),
                probes=probes,
                pairs=job.compare.pairs,
                output=str(out / "scores.json"),
            ),
        )
        scores = stages.score(score_cfg, loaded, calibration, progress)
    score_s = time.perf_counter() - t0
    eval_cfg = {
        "model": src.id,
        "tasks": tasks,
        "limit": job.limit,
        "words": job.words,
        "max_length": job.max_length,
        "dtype": str(next(model.parameters()).dtype),
    }
    if EXTENDED_PPL in tasks:  # keeps the keys of comparisons without it unchanged
        eval_cfg["per_article"] = job.eval.per_article
    reference: list = []  # the base model's continuations, computed on first need

    from swapprune.evaluation import generative as g

    gen_cfg = {k: eval_cfg[k] for k in ("model", "dtype")}
    gen_cfg["setting"] = [g.N_PROMPTS, g.PROMPT_TOKENS, g.NEW_TOKENS]

    def gen_file(kept, merged) -> Path:
        return cache / f"gen-{content_key({**gen_cfg, 'kept': kept, 'merged': merged})}.json"

    def read_gen(f: Path) -> dict | None:
        return cached(f, lambda p: json.loads(p.read_text()))

    def prime(kept, merged) -> None:
        """The base model's continuations, if this cut needs them; call it on the intact model."""
        if job.compare.generative and not reference and read_gen(gen_file(kept, merged)) is None:
            reference.append(g.reference_continuations(model, tok))

    def generated(kept, merged, m) -> dict | None:
        if not job.compare.generative:
            return None
        f = gen_file(kept, merged)
        hit = read_gen(f)
        if hit is not None:
            return hit
        prime(kept, merged)  # a patched cell's copy: the base model is intact here
        gen = g.generative_cost(model, tok, pruned=m, reference=reference[0]).to_dict()
        write_text_atomic(f, json.dumps(gen))
        return gen

    def measured(kept, merged, m) -> tuple[EvalResult, float, dict | None]:
        res, eval_s = evaluated(kept, merged, m)
        return res, eval_s, generated(kept, merged, m)

    def evaluated(kept, merged, m) -> tuple[EvalResult, float]:
        f = cache / f"eval-{content_key({**eval_cfg, 'kept': kept, 'merged': merged})}.json"
        hit = cached(f, lambda p: EvalResult.from_json(p.read_text()))
        if hit is not None:
            return hit, 0.0
        # Comparisons that share a cache (several calibration seeds, say) evaluate each
        # model once: a second process waits for the first and reads its result.
        with locked(f.with_name(f.name + ".lock")):
            return _evaluate_into(f, m)

    def _evaluate_into(f: Path, m) -> tuple[EvalResult, float]:
        hit = cached(f, lambda p: EvalResult.from_json(p.read_text()))
        if hit is not None:
            return hit, 0.0
        t = time.perf_counter()
        res = evaluate(
            m,
            tok,
            tasks,
            limit=job.limit,
            words=job.words,
            max_length=job.max_length,
            batch_size=job.eval.batch_size,
            n_boot=job.eval.bootstrap,
            per_article=job.eval.per_article,
        )
        write_text_atomic(f, res.to_json())
        return res, time.perf_counter() - t

    orders: dict[str, PrunePlan] = {}  # iterative selections, made once at the largest budget

    heldouts: dict = {}  # one set of held-out windows per seed, shared by its auto cells

    def choose(label: str, entry: str, seed: int, budget: int) -> PrunePlan:
        cfg = method_config(job, entry, seed, budget)
        cell = dataclasses.replace(loaded, selection=specs[label, budget])
        assert cfg.prune is not None
        if seed not in heldouts and cfg.prune.protocol == "auto":
            heldouts[seed] = stages.heldout(cfg, cell, calibration)
        return stages.select(cfg, cell, calibration, scores, False, heldouts.get(seed))[0]

    def selected(label: str, crit: str, seed: int, budget: int) -> PrunePlan:
        """One cell's selection; an iterative one is the prefix of its largest-budget order."""
        if label in orders:
            return prefix(orders[label], budget)
        if specs[label, budget].strategy.name == "iterative":
            full = choose(label, crit, seed, max(job.compare.budgets))
            if "order" in full.scores:
                orders[label] = full
                return prefix(full, budget)
        return choose(label, crit, seed, budget)

    total = 1 + len(job.compare.budgets) * len(runs)
    bar = tqdm(total=total, desc="compare", disable=not progress, dynamic_ncols=True)
    bar.set_postfix_str("baseline")
    base, base_s = evaluated(list(range(L)), {}, model)
    bar.update()
    cells: dict[int, dict[str, dict]] = {}
    # SLEB, SLEB one-shot and auto query the same windows: one oracle memory for all of them
    with shared_oracles() as oracle:
        for budget in job.compare.budgets:
            for label, crit, seed in runs:
                bar.set_postfix_str(f"n={budget} {label}")
                prune = method_config(job, crit, seed, budget).prune
                assert prune is not None
                pkey = {
                    "cal": calibration.describe(),
                    "scores": scores.meta.get("calibration"),
                    "req": dataclasses.asdict(prune) | {"seed": seed},
                    "positions": job.calib.positions,
                    "model": src.id,
                }
                pf = cache / f"plan-{content_key(pkey)}.json"
                t = time.perf_counter()
                plan = cached(pf, PrunePlan.from_json)
                if plan is None:
                    plan = selected(label, crit, seed, budget)
                    plan.to_json(pf)
                select_s = time.perf_counter() - t
                merged = merge_key(plan)
                prime(plan.kept, merged)  # before the view replaces the base's blocks
                with variant(model, plan) as m:
                    res, eval_s, gen = measured(plan.kept, merged, m)
                cells.setdefault(budget, {})[label] = {
                    "plan": plan,
                    "result": res,
                    "select_s": select_s,
                    "eval_s": eval_s,
                    "generative": gen,
                    "entry": crit,
                }
                for kind in (k for k in job.compare.patches if k != "none"):
                    if plan.op != "remove" or not plan.removed or min(plan.removed) == 0:
                        continue  # nothing to fold into (a merge, or a span at block 0)
                    cells[budget][f"{label}+{kind}"] = patched_cell(
                        job, loaded, plan, crit, seed, kind, calibration, measured, cache
                    )
                bar.update()
    bar.close()
    from swapprune.studies.compare_plots import write_plots
    from swapprune.studies.compare_report import build_results, write_markdown

    results = build_results(job, src.id, L, base, cells, scores, tasks)
    results["timing"] = {
        "score_s": score_s,
        "baseline_eval_s": base_s,
        "generative_reference_s": reference[0].seconds if reference else None,
        "total_s": time.perf_counter() - t0,
        "oracle_queries": oracle.asked,
        "oracle_computed": oracle.computed,
    }
    write_json_atomic(out / "results.json", results)
    write_markdown(results, out / "results.md")
    write_plots(results, scores, out)
    write_json_atomic(
        out / "provenance.json",
        provenance(
            base_model=src.id,
            invocation={"config": job.run.to_dict(), "compare": dataclasses.asdict(job.compare)},
        ),
        indent=2,
    )
    return results


def _forecast(job: CompareJob, loaded, calibration, probes, specs, say) -> None:
    """Say what the comparison will compute and how long it takes (and its quick look)."""
    from swapprune.pipeline import forecast as fc

    quick_run = fc.quick_of(job.run)
    limit = job.eval.limit or QUICK_LIMIT
    quick_run = dataclasses.replace(quick_run, eval=dataclasses.replace(job.eval, limit=limit))
    quick_job = dataclasses.replace(job, run=quick_run)
    plan = fc.comparison(job, loaded.facts, loaded.tokenizer, probes, specs)
    quick = fc.comparison(quick_job, loaded.facts, loaded.tokenizer, probes, specs)
    c = quick_run.calibration
    plan.quick_flag = f"--prompts {c.prompts} --tokens {c.tokens} --limit {limit}"
    fc.announce(plan, loaded.model, calibration, job.calib.batch_size, say, quick)


#: Contract windows of a quick comparison (``--limit``): a first look, not the contract.
QUICK_LIMIT = 6


def _default_score():
    from swapprune.config import ScoreConfig

    return ScoreConfig()
