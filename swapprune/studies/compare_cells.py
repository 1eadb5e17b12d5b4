"""The cells of a comparison: what each ``--criteria`` entry selects, and how it is measured.

A cell is one entry of ``CompareConfig.criteria`` at one budget. The entry names
the criterion and, optionally, its own strategy, a merge instead of a removal,
or ``auto``'s control shortlist (:func:`swapprune.config.studies.cell_select`);
the cell's label is the entry as written (``random`` expands over its seeds as
``random:S``). Every cell's settings are the comparison's shared ones
(``CompareJob.select``) with the entry's own on top.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

from swapprune.config import RunConfig, SelectConfig
from swapprune.config.cells import cell_select
from swapprune.pipeline.checks import check_model

if TYPE_CHECKING:
    from swapprune.studies.compare import CompareJob


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
    from swapprune.stats.verdicts import cut_key

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
        from swapprune.edit.surgery import pruned_view

        with pruned_view(model, plan.kept) as view:
            yield view
    else:
        from swapprune.edit.surgery import apply_plan

        yield apply_plan(copy.deepcopy(model), plan, log=lambda *_: None)


def prefix(full, budget: int):
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


def patched_cell(job, loaded, plan, entry, seed, kind, calibration, measured, cache) -> dict:
    """The cell of ``plan`` with a ``kind`` patch: fitted (cached), folded into a copy, scored.

    ``measured(kept, merged, model)`` returns the cell's ``(result, eval_s, generative)``.
    """
    from swapprune.edit.patch import load_patches, save_patches
    from swapprune.edit.surgery import apply_plan
    from swapprune.pipeline import stages
    from swapprune.plan import PrunePlan
    from swapprune.studies.cache import cached, content_key

    cfg = method_config(job, entry, seed, plan.budget or len(plan.removed))
    assert cfg.prune is not None
    prune = dataclasses.replace(cfg.prune, patch=kind)
    cfg = dataclasses.replace(cfg, prune=prune)
    key = {"kept": plan.kept, "patch": kind, "cal": calibration.describe(), "seed": seed,
           "prompts": prune.patch_prompts, "tokens": prune.patch_tokens,
           "ridge": prune.patch_ridge, "model": loaded.source.id}  # fmt: skip
    d = cache / f"patch-{content_key(key)}"
    meta = d / "plan.json"
    t = time.perf_counter()
    cut = cached(meta, PrunePlan.from_json)
    patches = load_patches(cut, d) if cut is not None else None
    if patches is None:
        cut = PrunePlan.from_dict(plan.to_dict())
        patches = stages.patch(cfg, loaded, cut, calibration)
        d.mkdir(parents=True, exist_ok=True)
        assert cut.patch is not None
        cut.patch["sha256"] = save_patches(patches, d)
        cut.to_json(meta)
    fit_s = time.perf_counter() - t
    assert cut is not None and cut.patch is not None  # read back, or fitted just now
    edited = apply_plan(copy.deepcopy(loaded.model), cut, lambda *_: None, patches)
    res, eval_s, gen = measured(cut.kept, {"patch": cut.patch["sha256"]}, edited)
    return {
        "plan": cut,
        "result": res,
        "select_s": fit_s,
        "eval_s": eval_s,
        "generative": gen,
        "entry": entry,  # the label (criterion+kind) says it is patched
    }
