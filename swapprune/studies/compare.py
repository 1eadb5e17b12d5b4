"""``swapprune compare``: what each criterion costs at each budget, with a verdict.

A loop over configurations: for every criterion and budget, the run's
configuration with that ``prune`` section goes through the pipeline's own
stages (:func:`swapprune.stages.select`), on one loaded model, one
calibration and one set of probe scores. The unpruned model is evaluated once
and every pruned variant in memory (a removal is a zero-copy view of the
model's own blocks); every two methods are paired with a bootstrap over the
same windows / documents / examples. Evaluations and selections are cached
under ``DIR/cache`` by content (written atomically, and a corrupt entry is
recomputed), so a rerun or an added method redoes nothing already done.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from swapprune.config import CalibrationConfig, CompareConfig, EvalConfig, RunConfig, SelectConfig
from swapprune.errors import SwappruneError


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
        self.run.check(study=True)
        self.compare.check()
        return self


def _key(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:20]


def _method_runs(job: CompareJob) -> list[tuple[str, str, int]]:
    """``(label, criterion, seed)`` for every method; ``random`` expands over its seeds."""
    runs = []
    for m in job.compare.criteria:
        if m == "random":
            runs += [(f"random:{s}", "random", s) for s in job.compare.random_seeds]
        else:
            runs.append((m, m, job.calib.seed))
    return runs


def method_config(job: CompareJob, criterion: str, seed: int, budget: int) -> RunConfig:
    """The run configuration of one cell: the shared settings with this ``prune`` section."""
    # compare measures every cell's cost itself; only auto, whose decision is the
    # certificate's incumbent-challenger rule, certifies.
    prune = dataclasses.replace(
        job.select or SelectConfig(),
        budget=budget,
        protocol=criterion,
        strategy=job.compare.strategy,
        certify=criterion == "auto",
    )
    calibration = dataclasses.replace(job.run.calibration, seed=seed)
    return dataclasses.replace(job.run, calibration=calibration, prune=prune)


@contextmanager
def variant(model, plan):
    """The pruned model of ``plan``, in memory: a view for removals, a copy for merges."""
    if plan.op == "remove":
        from swapprune.edit.surgery import pruned_view

        with pruned_view(model, plan.kept) as view:
            yield view
    else:
        from swapprune.edit.surgery import apply_plan

        yield apply_plan(copy.deepcopy(model), plan, log=lambda *_: None)


def _cached(path: Path, read):
    """The cached entry at ``path``, or ``None`` when it is missing or unreadable."""
    if not path.exists():
        return None
    try:
        return read(path)
    except (OSError, ValueError, KeyError, TypeError, SwappruneError):
        path.unlink(missing_ok=True)  # a truncated or foreign entry is recomputed
        return None


def run_compare(job: CompareJob, progress: bool = True, say=None) -> dict:
    """Run the comparison and write ``results.json``, ``results.md`` and plots into the output.

    ``say``: receives the lines of the estimate before the probes start (``None``: silent).
    """
    from tqdm.auto import tqdm

    from swapprune import stages
    from swapprune.engine.oracle import shared_oracles
    from swapprune.evaluation import EvalResult, evaluate
    from swapprune.output.artifacts import locked, provenance, write_json_atomic, write_text_atomic
    from swapprune.plan import PrunePlan

    job.compare.check()
    checked = stages.check(job.run, study=True)
    tasks = job.eval.tasks
    runs = _method_runs(job)
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

    def evaluated(kept, merged, m) -> tuple[EvalResult, float]:
        f = cache / f"eval-{_key({**eval_cfg, 'kept': kept, 'merged': merged})}.json"
        hit = _cached(f, lambda p: EvalResult.from_json(p.read_text()))
        if hit is not None:
            return hit, 0.0
        # Comparisons that share a cache (several calibration seeds, say) evaluate each
        # model once: a second process waits for the first and reads its result.
        with locked(f.with_name(f.name + ".lock")):
            return _evaluate_into(f, m)

    def _evaluate_into(f: Path, m) -> tuple[EvalResult, float]:
        hit = _cached(f, lambda p: EvalResult.from_json(p.read_text()))
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
        )
        write_text_atomic(f, res.to_json())
        return res, time.perf_counter() - t

    orders: dict[str, PrunePlan] = {}  # iterative selections, made once at the largest budget

    heldouts: dict = {}  # one set of held-out windows per seed, shared by its auto cells

    def choose(label: str, crit: str, seed: int, budget: int) -> PrunePlan:
        cfg = method_config(job, crit, seed, budget)
        cell = dataclasses.replace(loaded, selection=specs[label, budget])
        if seed not in heldouts and crit == "auto":
            heldouts[seed] = stages.heldout(cfg, cell, calibration)
        return stages.select(cfg, cell, calibration, scores, False, heldouts.get(seed))[0]

    def selected(label: str, crit: str, seed: int, budget: int) -> PrunePlan:
        """One cell's selection; an iterative one is the prefix of its largest-budget order."""
        if label in orders:
            return _prefix(orders[label], budget)
        if specs[label, budget].strategy.name == "iterative":
            full = choose(label, crit, seed, max(job.compare.budgets))
            if "order" in full.scores:
                orders[label] = full
                return _prefix(full, budget)
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
                pf = cache / f"plan-{_key(pkey)}.json"
                t = time.perf_counter()
                plan = _cached(pf, PrunePlan.from_json)
                if plan is None:
                    plan = selected(label, crit, seed, budget)
                    plan.to_json(pf)
                select_s = time.perf_counter() - t
                with variant(model, plan) as m:
                    res, eval_s = evaluated(plan.kept, plan.merged, m)
                cells.setdefault(budget, {})[label] = {
                    "plan": plan,
                    "result": res,
                    "select_s": select_s,
                    "eval_s": eval_s,
                }
                for kind in (k for k in job.compare.patches if k != "none"):
                    if plan.op != "remove" or not plan.removed or min(plan.removed) == 0:
                        continue  # nothing to fold into (a merge, or a span at block 0)
                    cells[budget][f"{label}+{kind}"] = patched_cell(
                        job, loaded, plan, crit, seed, kind, calibration, evaluated, cache
                    )
                bar.update()
    bar.close()
    from swapprune.studies.compare_plots import write_plots
    from swapprune.studies.compare_report import build_results, write_markdown

    results = build_results(job, src.id, L, base, cells, scores, tasks)
    results["timing"] = {
        "score_s": score_s,
        "baseline_eval_s": base_s,
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
    from swapprune import forecast as fc

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


def _prefix(full, budget: int):
    """Budget ``n`` of an iterative selection: the first ``n`` removals of a larger one."""
    from swapprune.plan import PrunePlan

    order = full.scores["order"]
    return PrunePlan.from_removal(
        full.num_layers,
        order[:budget],
        protocol=full.protocol,
        strategy=full.strategy,
        model=full.model,
        scores=full.scores,
        budget=budget,
    )


def patched_cell(job, loaded, plan, crit, seed, kind, calibration, evaluated, cache) -> dict:
    """The cell of ``plan`` with a ``kind`` patch: fitted (cached), folded into a copy, scored."""
    from swapprune import stages
    from swapprune.edit.patch_io import load_patches, save_patches
    from swapprune.edit.surgery import apply_plan
    from swapprune.plan import PrunePlan

    cfg = method_config(job, crit, seed, plan.budget or len(plan.removed))
    assert cfg.prune is not None
    prune = dataclasses.replace(cfg.prune, patch=kind)
    cfg = dataclasses.replace(cfg, prune=prune)
    key = {"kept": plan.kept, "patch": kind, "cal": calibration.describe(), "seed": seed,
           "prompts": prune.patch_prompts, "tokens": prune.patch_tokens,
           "ridge": prune.patch_ridge, "model": loaded.source.id}  # fmt: skip
    d = cache / f"patch-{_key(key)}"
    meta = d / "plan.json"
    t = time.perf_counter()
    cut = _cached(meta, PrunePlan.from_json)
    patches = load_patches(cut, d) if cut is not None else None
    if patches is None:
        cut = PrunePlan.from_dict(plan.to_dict())
        patches = stages.patch(cfg, loaded, cut, calibration)
        d.mkdir(parents=True, exist_ok=True)
        assert cut.patch is not None
        cut.patch["sha256"] = save_patches(patches, d)
        cut.to_json(meta)
    fit_s = time.perf_counter() - t
    edited = apply_plan(copy.deepcopy(loaded.model), cut, lambda *_: None, patches)
    assert cut.patch is not None
    res, eval_s = evaluated(cut.kept, {"patch": cut.patch["sha256"]}, edited)
    return {"plan": cut, "result": res, "select_s": fit_s, "eval_s": eval_s}


def cell_specs(job: CompareJob, runs, facts) -> dict:
    """``(label, budget) -> SelectionSpec`` of every cell, checked against the model's facts."""
    specs = {}
    for label, crit, seed in runs:
        for b in job.compare.budgets:
            specs[label, b] = method_config(job, crit, seed, b).check_model(facts)
    return specs
