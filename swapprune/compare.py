"""``swapprune compare``: what each protocol costs at each budget, with a verdict.

Scores once, selects per method and budget, evaluates the unpruned model once
and every pruned variant in memory (a removal is a zero-copy view of the
model's own blocks), and pairs every two methods with a bootstrap over the
same windows / documents / examples. Evaluations and selections are cached
under ``DIR/cache`` by content, so a rerun or an added method redoes nothing
already done.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from swapprune.errors import SwappruneError
from swapprune.pipeline import CalibOptions, ModelOptions, load


@dataclass
class CompareJob:
    """Settings of one comparison (see ``swapprune compare --help``)."""

    out: str
    budgets: list[int]
    methods: list[str] = field(default_factory=lambda: ["interchange", "replacement"])
    strategy: str | None = None
    random_seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    tasks: list[str] = field(default_factory=lambda: ["wikitext2_ppl"])
    limit: int | None = None
    words: int = 5000
    max_length: int = 512
    eval_batch_size: int = 8
    pairs: str = "adjacent"
    model: ModelOptions = field(default_factory=ModelOptions)
    calib: CalibOptions = field(default_factory=CalibOptions)


def _key(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:20]


def _method_runs(job: CompareJob) -> list[tuple[str, str, int]]:
    """``(label, criterion, seed)`` for every method; ``random`` expands over its seeds."""
    runs = []
    for m in job.methods:
        if m == "random":
            runs += [(f"random:{s}", "random", s) for s in job.random_seeds]
        else:
            runs.append((m, m, job.calib.seed))
    return runs


@contextmanager
def variant(model, plan):
    """The pruned model of ``plan``, in memory: a view for removals, a copy for merges."""
    if plan.op == "remove":
        from swapprune.surgery import pruned_view

        with pruned_view(model, plan.kept) as view:
            yield view
    else:
        from swapprune.surgery import apply_plan

        yield apply_plan(copy.deepcopy(model), plan, log=lambda *_: None)


def run_compare(job: CompareJob) -> dict:
    """Run the comparison and write ``results.json``, ``results.md`` and plots into ``job.out``."""
    from tqdm.auto import tqdm

    from swapprune import criteria
    from swapprune.architectures import decoder_stack
    from swapprune.calibration import load_calibration
    from swapprune.engine.scores import ScoreResult
    from swapprune.engine.scoring import score
    from swapprune.evaluation import EvalResult, evaluate, resolve_tasks
    from swapprune.plan import PrunePlan
    from swapprune.pruning import PruneRequest, plan_pruning

    tasks = resolve_tasks(job.tasks)
    runs = _method_runs(job)
    requests = {label: PruneRequest(budget=1, protocol=crit, strategy=job.strategy, seed=seed)
                for label, crit, seed in runs}
    for r in requests.values():
        r.resolve()
    if not job.budgets or min(job.budgets) < 1:
        raise SwappruneError("--budgets must be positive integers, e.g. 1,3,5")
    out = Path(job.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "cache"
    cache.mkdir(exist_ok=True)

    model, tok, src = load(job.model, job.calib.progress)
    L = decoder_stack(model).num_layers
    for r in requests.values():
        for b in job.budgets:
            PruneRequest(**{**asdict(r), "budget": b}).validate(L)
    c = job.calib
    calibration = load_calibration(tok, c.calib, c.prompts, c.tokens, c.seed)
    protocols = sorted({p for _, crit, _ in runs for p in criteria.get(crit).protocols}
                       | {"replacement", "interchange"})
    t0 = time.perf_counter()
    scores = score(model, calibration=calibration, protocols=protocols, pairs=job.pairs,
                   positions=c.positions, batch_size=c.batch_size, model_id=src.id,
                   out=out / "scores.json", progress=c.progress, seed=c.seed)
    score_s = time.perf_counter() - t0
    eval_cfg = {"model": src.id, "tasks": tasks, "limit": job.limit, "words": job.words,
                "max_length": job.max_length, "dtype": str(next(model.parameters()).dtype)}

    def evaluated(kept, merged, m) -> tuple[EvalResult, float]:
        f = cache / f"eval-{_key({**eval_cfg, 'kept': kept, 'merged': merged})}.json"
        if f.exists():
            return EvalResult.from_json(f.read_text()), 0.0
        t = time.perf_counter()
        res = evaluate(m, tok, tasks, limit=job.limit, words=job.words,
                       max_length=job.max_length, batch_size=job.eval_batch_size)
        f.write_text(res.to_json())
        return res, time.perf_counter() - t

    total = 1 + len(job.budgets) * len(runs)
    bar = tqdm(total=total, desc="compare", disable=not c.progress, dynamic_ncols=True)
    bar.set_postfix_str("baseline")
    base, base_s = evaluated(list(range(L)), {}, model)
    bar.update()
    cells: dict[int, dict[str, dict]] = {}
    orders: dict[str, list[int]] = {}
    orders_meta: dict[str, dict] = {}
    for budget in job.budgets:
        for label, _crit, _seed in runs:
            bar.set_postfix_str(f"n={budget} {label}")
            req = PruneRequest(**{**asdict(requests[label]), "budget": budget})
            pkey = {"cal": calibration.describe(), "scores": scores.meta["calibration"],
                    "req": asdict(req), "positions": c.positions, "model": src.id}
            pf = cache / f"plan-{_key(pkey)}.json"
            t = time.perf_counter()
            if pf.exists():
                plan = PrunePlan.from_json(pf)
            elif label in orders:
                # An iterative selection at budget n is the first n removals of a larger one.
                plan = PrunePlan.from_removal(
                    L, orders[label][:budget], **{**orders_meta[label], "budget": budget})
                plan.to_json(pf)
            else:
                if (req.strategy or criteria.get(req.protocol).default_strategy) == "iterative":
                    req = PruneRequest(**{**asdict(req), "budget": max(job.budgets)})
                plan, _ = plan_pruning(model, tok, req, scores=scores, calibration=calibration,
                                       positions=c.positions, batch_size=c.batch_size,
                                       model_id=src.id, progress=False)
                if "order" in plan.scores:
                    orders[label] = plan.scores["order"]
                    orders_meta[label] = dict(protocol=plan.protocol, strategy=plan.strategy,
                                              model=plan.model, scores=plan.scores)
                    plan = PrunePlan.from_removal(
                        L, orders[label][:budget], **{**orders_meta[label], "budget": budget})
                plan.to_json(pf)
            select_s = time.perf_counter() - t
            with variant(model, plan) as m:
                res, eval_s = evaluated(plan.kept, plan.merged, m)
            cells.setdefault(budget, {})[label] = {
                "plan": plan, "result": res, "select_s": select_s, "eval_s": eval_s,
            }
            bar.update()
    bar.close()
    from swapprune.compare_report import build_results, write_markdown, write_plots

    results = build_results(job, src.id, L, base, cells, scores, tasks)
    results["timing"] = {"score_s": score_s, "baseline_eval_s": base_s,
                         "total_s": time.perf_counter() - t0}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    write_markdown(results, out / "results.md")
    write_plots(results, scores if isinstance(scores, ScoreResult) else None, out)
    return results
