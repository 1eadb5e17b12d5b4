"""The cells of a comparison: what each ``--criteria`` entry selects, and how it is measured.

A cell is one entry of ``CompareConfig.criteria`` at one budget. The entry names
the criterion and, optionally, its own strategy, a merge instead of a removal,
or ``auto``'s control shortlist (:func:`swapprune.config.cells.cell_select`);
the cell's label is the entry as written (``random`` expands over its seeds as
``random:S``). Every cell's settings are the comparison's shared ones
(``CompareJob.select``) with the entry's own on top.

:class:`Cells` makes each cell on one loaded model: its selection goes through the
run's cut sequence (:func:`swapprune.pipeline.cut.cut`) on the comparison's shared
calibration windows and probe scores, and :class:`Meter` evaluates the cell's model
(a zero-copy view for a removal, a copy for a merge or a patch) and its greedy
agreement with the unpruned model. Selections, evaluations, generations and fitted
patches are cached under ``DIR/cache`` by content (:mod:`swapprune.studies.cache`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swapprune.config import RunConfig, SelectConfig
from swapprune.config.cells import cell_select
from swapprune.evaluation import EvalResult, evaluate
from swapprune.evaluation import generative as g
from swapprune.evaluation.names import EXTENDED_PPL
from swapprune.output.artifacts import locked, write_text_atomic
from swapprune.pipeline import stages
from swapprune.pipeline.checks import check_model
from swapprune.pipeline.cut import cut
from swapprune.pipeline.record import Steps
from swapprune.plan import PrunePlan
from swapprune.stats.verdicts import cut_key
from swapprune.studies.cache import cached, content_key

if TYPE_CHECKING:
    from swapprune.pipeline.stages import Loaded
    from swapprune.studies.compare_job import CompareJob


def criterion_of(entry: str) -> str:
    """The criterion an entry or label names (``bi`` of ``bi@greedy``, ``random`` of ``random:3``)."""
    return entry.split("@", 1)[0].split(":", 1)[0]


def is_random(label: str) -> bool:
    """Whether a label is one seed of a random baseline (a control, never compared pairwise)."""
    return criterion_of(label) == "random"


def method_runs(job: CompareJob) -> list[tuple[str, str, int]]:
    """``(label, entry, seed)`` for every method; a random entry expands over its seeds."""
    runs = []
    for entry in job.compare.criteria:
        if criterion_of(entry) == "random":
            runs += [(f"{entry}:{s}", entry, s) for s in job.compare.random_seeds]
        else:
            runs.append((entry, entry, job.calib.seed))
    return runs


def method_config(job: CompareJob, entry: str, seed: int, budget: int) -> RunConfig:
    """The run configuration of one cell: the shared settings with this entry's ``prune`` section."""
    own = cell_select(entry, job.compare.strategy)
    # compare measures every cell's cost itself; only auto, whose decision is the
    # certificate's incumbent-challenger rule, certifies.
    prune = dataclasses.replace(
        job.select or SelectConfig(),
        budget=budget,
        protocol=own.protocol,
        strategy=own.strategy,
        op=own.op,
        merge=own.merge,
        auto_shortlist=own.auto_shortlist,
        certify=own.protocol == "auto",
    )
    calibration = dataclasses.replace(job.run.calibration, seed=seed)
    return dataclasses.replace(job.run, calibration=calibration, prune=prune)


def cell_specs(job: CompareJob, runs, facts) -> dict:
    """``(label, budget) -> SelectionSpec`` of every cell, checked against the model's facts."""
    specs = {}
    for label, entry, seed in runs:
        for b in job.compare.budgets:
            specs[label, b] = check_model(method_config(job, entry, seed, b), facts)
    return specs


def merge_key(plan) -> dict:
    """What, besides the kept blocks, makes a cell's model: the merges and their rule.

    A removal has none (``{}``, the cache keys of every earlier comparison); two merge
    cells with the same groups and different rules are different models.
    """
    if not plan.merged:
        return {}
    return {"groups": {str(k): v for k, v in plan.merged.items()}, "rule": plan.merge}


def model_key(plan) -> str:
    """The identity of a cell's model for its verdicts: blocks, merges and rule, patch."""
    key = cut_key(plan.kept, plan.merged)
    if plan.merged:
        key += f"|rule:{plan.merge}"
    if plan.patch:  # the same blocks with a fitted map folded in: another model
        key += f"|patch:{plan.patch.get('sha256') or plan.patch.get('kind')}"
    return key


@contextmanager
def variant(model, plan):
    """The pruned model of ``plan``, in memory: a view for removals, a copy for merges."""
    if plan.op == "remove":
        from swapprune.edit.surgery import pruned_view  # imports torch

        with pruned_view(model, plan.kept) as view:
            yield view
    else:
        from swapprune.edit.surgery import apply_plan  # imports torch

        yield apply_plan(copy.deepcopy(model), plan, log=lambda *_: None)


def prefix(full, budget: int):
    """Budget ``n`` of an iterative selection: the first ``n`` removals of a larger one."""
    order = full.records.order
    assert order is not None  # only an iterative selection's plan has one
    return PrunePlan.from_removal(
        full.num_layers,
        order.first(budget),
        protocol=full.protocol,
        strategy=full.strategy,
        model=full.model,
        scores=full.scores,
        records=full.records,
        budget=budget,
    )


class Meter:
    """A cell's model measured: its evaluation on the comparison's tasks and its greedy
    agreement with the unpruned model (``CompareConfig.generative``), each once.

    Entries are cached by what makes the model (kept blocks, merges, patch) and how it
    is measured; comparisons that share a cache evaluate each model once (a second
    process waits for the first and reads its result). The unpruned model's
    continuations are computed on first need, on the intact model (:meth:`prime`).
    """

    def __init__(self, job: CompareJob, model, tokenizer, model_id: str, cache: Path):
        self.job, self.model, self.tokenizer, self.cache = job, model, tokenizer, cache
        e = job.eval
        self.eval_cfg: dict[str, Any] = {
            "model": model_id,
            "tasks": e.tasks,
            "limit": job.limit,
            "words": job.words,
            "max_length": job.max_length,
            "dtype": str(next(model.parameters()).dtype),
        }
        if EXTENDED_PPL in e.tasks:  # keeps the keys of comparisons without it unchanged
            self.eval_cfg["per_article"] = e.per_article
        self.gen_cfg = {k: self.eval_cfg[k] for k in ("model", "dtype")}
        self.gen_cfg["setting"] = [g.N_PROMPTS, g.PROMPT_TOKENS, g.NEW_TOKENS]
        self.reference: list = []  # the base model's continuations, computed on first need

    @property
    def reference_seconds(self) -> float | None:
        return self.reference[0].seconds if self.reference else None

    def _gen_file(self, kept, merged) -> Path:
        key = content_key({**self.gen_cfg, "kept": kept, "merged": merged})
        return self.cache / f"gen-{key}.json"

    def _read_gen(self, f: Path) -> dict | None:
        return cached(f, lambda p: json.loads(p.read_text()))

    def prime(self, kept, merged) -> None:
        """The base model's continuations, if this cut needs them; call it on the intact model."""
        if not self.job.compare.generative or self.reference:
            return
        if self._read_gen(self._gen_file(kept, merged)) is None:
            self.reference.append(g.reference_continuations(self.model, self.tokenizer))

    def measured(self, kept, merged, m) -> tuple[EvalResult, float, dict | None]:
        """``(result, eval_s, generative)`` of the cell model ``m``."""
        res, eval_s = self.evaluated(kept, merged, m)
        return res, eval_s, self.generated(kept, merged, m)

    def generated(self, kept, merged, m) -> dict | None:
        if not self.job.compare.generative:
            return None
        f = self._gen_file(kept, merged)
        hit = self._read_gen(f)
        if hit is not None:
            return hit
        self.prime(kept, merged)  # a patched cell's copy: the base model is intact here
        ref = self.reference[0]
        gen = g.generative_cost(self.model, self.tokenizer, pruned=m, reference=ref).to_dict()
        write_text_atomic(f, json.dumps(gen))
        return gen

    def evaluated(self, kept, merged, m) -> tuple[EvalResult, float]:
        key = content_key({**self.eval_cfg, "kept": kept, "merged": merged})
        f = self.cache / f"eval-{key}.json"
        hit = cached(f, lambda p: EvalResult.from_json(p.read_text()))
        if hit is not None:
            return hit, 0.0
        # Comparisons that share a cache (several calibration seeds, say) evaluate each
        # model once: a second process waits for the first and reads its result.
        with locked(f.with_name(f.name + ".lock")):
            hit = cached(f, lambda p: EvalResult.from_json(p.read_text()))
            if hit is not None:
                return hit, 0.0
            return self._evaluate_into(f, m)

    def _evaluate_into(self, f: Path, m) -> tuple[EvalResult, float]:
        e, t = self.job.eval, time.perf_counter()
        res = evaluate(
            m,
            self.tokenizer,
            e.tasks,
            limit=self.job.limit,
            words=self.job.words,
            max_length=self.job.max_length,
            batch_size=e.batch_size,
            n_boot=e.bootstrap,
            per_article=e.per_article,
        )
        write_text_atomic(f, res.to_json())
        return res, time.perf_counter() - t


class Cells:
    """The cells of one comparison, on one loaded model, calibration and set of probe scores.

    :meth:`measure` makes one cell (and its patched cells): its selection, read from the
    cache or made by the cut sequence (an iterative one once, at the largest budget, and
    cut to each smaller one), then its model measured by :attr:`meter`.
    """

    def __init__(self, job: CompareJob, loaded: Loaded, specs: dict, calibration, scores, cache):
        self.job, self.loaded, self.specs = job, loaded, specs
        self.calibration, self.scores, self.cache = calibration, scores, cache
        self.meter = Meter(job, loaded.model, loaded.tokenizer, loaded.source.id, cache)
        self.orders: dict[str, PrunePlan] = {}  # iterative selections, at the largest budget
        self.heldouts: dict = {}  # one set of held-out windows per seed, shared by its auto cells

    def measure(self, label: str, entry: str, seed: int, budget: int) -> dict[str, dict]:
        """The cell ``label`` at ``budget``, and its patched cells: label -> cell record."""
        prune = method_config(self.job, entry, seed, budget).prune
        assert prune is not None
        key = {
            "cal": self.calibration.describe(),
            "scores": self.scores.meta.get("calibration"),
            "req": dataclasses.asdict(prune) | {"seed": seed},
            "positions": self.job.calib.positions,
            "model": self.loaded.source.id,
        }
        f = self.cache / f"plan-{content_key(key)}.json"
        t = time.perf_counter()
        plan = cached(f, PrunePlan.from_json)
        if plan is None:
            plan = self._selected(label, entry, seed, budget)
            plan.to_json(f)
        select_s = time.perf_counter() - t
        merged = merge_key(plan)
        self.meter.prime(plan.kept, merged)  # before the view replaces the base's blocks
        with variant(self.loaded.model, plan) as m:
            res, eval_s, gen = self.meter.measured(plan.kept, merged, m)
        out = {label: _record(plan, res, select_s, eval_s, gen, entry)}
        for kind in (k for k in self.job.compare.patches if k != "none"):
            if plan.op != "remove" or not plan.removed or min(plan.removed) == 0:
                continue  # nothing to fold into (a merge, or a span at block 0)
            out[f"{label}+{kind}"] = self._patched(plan, entry, seed, kind)
        return out

    def _selected(self, label: str, entry: str, seed: int, budget: int) -> PrunePlan:
        """One cell's selection; an iterative one is the prefix of its largest-budget order."""
        if label in self.orders:
            return prefix(self.orders[label], budget)
        if self.specs[label, budget].strategy.name == "iterative":
            full = self._chosen(label, entry, seed, max(self.job.compare.budgets))
            if full.records.order is not None:
                self.orders[label] = full
                return prefix(full, budget)
        return self._chosen(label, entry, seed, budget)

    def _chosen(self, label: str, entry: str, seed: int, budget: int) -> PrunePlan:
        cfg = method_config(self.job, entry, seed, budget)
        assert cfg.prune is not None
        cell = dataclasses.replace(self.loaded, selection=self.specs[label, budget])
        done = cut(
            cfg, cell, Steps(), calibration=self.calibration, scores=self.scores,
            heldout=self.heldouts.get(seed), progress=False, fit_patch=False,
        )  # fmt: skip
        if cfg.prune.protocol == "auto":
            self.heldouts.setdefault(seed, done.heldout)
        return done.plan

    def _patched(self, plan, entry: str, seed: int, kind: str) -> dict:
        """The cell of ``plan`` with a ``kind`` patch: fitted (cached), folded into a copy, scored."""
        from swapprune.edit.patch import load_patches, save_patches  # imports torch
        from swapprune.edit.surgery import apply_plan  # imports torch

        loaded, calibration = self.loaded, self.calibration
        cfg = method_config(self.job, entry, seed, plan.budget or len(plan.removed))
        assert cfg.prune is not None
        prune = dataclasses.replace(cfg.prune, patch=kind)
        cfg = dataclasses.replace(cfg, prune=prune)
        key = {"kept": plan.kept, "patch": kind, "cal": calibration.describe(), "seed": seed,
               "prompts": prune.patch_prompts, "tokens": prune.patch_tokens,
               "ridge": prune.patch_ridge, "model": loaded.source.id}  # fmt: skip
        d = self.cache / f"patch-{content_key(key)}"
        meta = d / "plan.json"
        t = time.perf_counter()
        patched = cached(meta, PrunePlan.from_json)
        patches = load_patches(patched, d) if patched is not None else None
        if patches is None:
            patched = PrunePlan.from_dict(plan.to_dict())
            patches = stages.patch(cfg, loaded, patched, calibration)
            d.mkdir(parents=True, exist_ok=True)
            assert patched.patch is not None
            patched.patch["sha256"] = save_patches(patches, d)
            patched.to_json(meta)
        fit_s = time.perf_counter() - t
        assert patched is not None and patched.patch is not None  # read back, or fitted now
        edited = apply_plan(copy.deepcopy(loaded.model), patched, lambda *_: None, patches)
        res, eval_s, gen = self.meter.measured(
            patched.kept, {"patch": patched.patch["sha256"]}, edited
        )
        # The label (criterion+kind) says it is patched.
        return _record(patched, res, fit_s, eval_s, gen, entry)


def _record(plan, result, select_s: float, eval_s: float, generative, entry: str) -> dict:
    """A cell as the report reads it."""
    return {
        "plan": plan,
        "result": result,
        "select_s": select_s,
        "eval_s": eval_s,
        "generative": generative,
        "entry": entry,
    }
