"""The "next:" line of each command: a command that works as printed.

Each is the run's own configuration, changed where the next step differs, and
written back as a command line (:func:`swapprune.cli.argv.command_line`), so
it carries the model, the calibration windows, the scores file and the settings
that the run used. A step that has no command (an unpruned model evaluated on
its own) prints no "next:" line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from swapprune.cli.argv import changed, command_line, default_output, prune_command, prune_config
from swapprune.config import QUICK, EvalConfig, ModelConfig, RunConfig, SelectConfig
from swapprune.config.cells import cell_select
from swapprune.config.fields import default_of
from swapprune.model.arch import context_length
from swapprune.pipeline.record import Wording
from swapprune.pipeline.stages import cheaper_cut as next_cut
from swapprune.select.certificate import OWN
from swapprune.studies.compare import quick_job, quick_limit

if TYPE_CHECKING:
    from swapprune.pipeline.stages import NextCut

#: Writes a run as the command that runs it: a ``swapprune`` command line (the default), or
#: a recipe's ``--set`` overrides (:func:`swapprune.cli.recipe.recipe_writer`).
Write = Callable[[RunConfig], str]

#: Tasks the evaluation after a prune suggests: the matched contract, about a minute on a CPU.
EVAL_TASKS = ["wikitext2_ppl"]


def small_budget(num_layers: int) -> int:
    """A budget any strategy can meet on ``num_layers`` blocks (at most 4)."""
    return max(1, min(4, (num_layers - 1) // 4))


def eval_pruned(cfg: RunConfig, out: Path, context: int | None = None) -> str:
    """Evaluate the checkpoint against the model it came from, in one command (windows no
    longer than the model's ``context``)."""
    evaluation = EvalConfig(tasks=EVAL_TASKS, output=str(out / "eval.json"))
    if context is not None and context < evaluation.max_length:
        evaluation.max_length = context
    run = RunConfig(model=ModelConfig(name=str(out)), eval=evaluation)
    return command_line(run, "eval", extra=("--baseline", cfg.model.name))


def heldout_rerun(cfg: RunConfig, out: Path, windows: int, write: Write = command_line) -> str:
    """The cut certified again on more held-out windows, on the probes already measured."""
    assert cfg.prune is not None
    scores = out / "scores.json"
    run = changed(
        cfg,
        prune={"heldout_prompts": windows, **({"scores": str(scores)} if scores.is_file() else {})},
        export={"output": f"{out}-heldout{windows}", "overwrite": False},
    )
    return write(run)


#: The criterion that produces a set of each independent source; others: ``auto``.
SOURCE_CRITERION = {"bi": "bi"}


def better_cut(
    cfg: RunConfig, best: dict | None = None, patch: bool = False, write: Write = command_line
) -> str:
    """The command most likely to give a cheaper cut at the same budget.

    ``best``: the certificate's cheaper independent alternative, produced by its own
    criterion (Block Influence's set: ``--protocol bi``; the other protocol's choice: that
    protocol; a neighbour, the beam's or a landscape set: ``--protocol auto``, which may
    switch to any set of its reference). Without one, ``--protocol auto``. ``patch``: the
    cut cost more than the warning threshold, so a linear patch goes with it. When neither
    changes anything (an ``auto`` cut already patched), half the budget.
    """
    sel = cfg.prune
    assert sel is not None and sel.budget is not None
    if best is not None and best["source"] == "other protocol":
        protocol = "replacement" if sel.protocol == "interchange" else "interchange"
    elif best is not None:
        protocol = SOURCE_CRITERION.get(best["source"], "auto")
    else:
        protocol = "auto"
    linear = patch and sel.op == "remove" and sel.patch == "none"
    extra = {"patch": "linear"} if linear else {}
    if protocol == sel.protocol and not linear:
        return write(prune_config(cfg, max(1, sel.budget // 2), None))
    return write(prune_config(cfg, sel.budget, protocol, strategy=None, scores=None, **extra))


def advice(res, write: Write = command_line) -> str:
    """The one ``next:`` of a prune summary: the command most likely to give a better cut.

    The certificate's cheaper independent alternative, or a cut above the cost warning:
    :func:`better_cut` (with a linear patch for the latter). An applied plan that costs too
    much: a fresh selection at half its budget. A cut that is not certified for want of
    evidence: the same cut on twice the held-out windows. Otherwise: evaluate it.
    ``write`` writes a run that cuts again (a recipe's: its ``--set`` overrides).
    """
    cfg, out, plan = res.config, res.output, res.plan
    cert = plan.records.measured
    warned = bool((res.metrics.get("cost") or {}).get("warning"))
    best = cert.best if cert is not None and not cert.certified else None
    if best is not None and (best["source"] in OWN or best["gain_points"] <= 0):
        best = None
    selecting = cfg.prune is not None and cfg.prune.plan is None
    if selecting and (best is not None or warned):
        return better_cut(cfg, best, patch=warned, write=write)
    if warned:
        cut = next_cut(cfg, plan)
        if cut is not None:
            return cheaper_cut(cfg, cut, write)
    if selecting and cert is not None and not cert.certified:
        return heldout_rerun(cfg, out, 2 * cert.windows, write)
    context = None
    if res.model is not None:
        context = context_length(res.model.config)
    return eval_pruned(cfg, out, context)


def prune_from_scores(cfg: RunConfig, scores_path, scores) -> str:
    """Select on a scores file just written: same model and windows, a criterion it holds."""
    have = scores.protocols()
    protocol = "interchange" if "interchange" in have else (have[0] if have else "interchange")
    budget = small_budget(scores.num_layers)
    run = changed(
        cfg,
        score=None,
        prune={"budget": budget, "protocol": protocol, "scores": str(scores_path)},
        export={"output": default_output(cfg.model.name, protocol, budget)},
        cost={},
    )
    return command_line(run)


def prune_after_compare(job, results: dict, scores_path) -> str:
    """Write the checkpoint of the cheapest cut at the smallest budget compared."""
    entry = min(results["budgets"], key=lambda e: e["budget"])
    costs = {
        label: m["cost_pct"]
        for label, m in entry["methods"].items()
        if m.get("cost_pct") is not None and not label.startswith("random")
    }
    label = min(costs, key=lambda k: costs[k]) if costs else job.compare.criteria[0]
    cell, _, patch = label.partition("+")  # a patched cell: CRITERION[@...]+linear
    sel = cell_select(cell.split(":")[0] if cell.startswith("random") else cell)
    extra: dict = {"scores": str(scores_path)} if scores_path else {}
    if patch:
        extra["patch"] = patch
    for name in ("strategy", "op", "merge", "auto_shortlist"):  # what the entry's @-parts set
        value = getattr(sel, name)
        if value != default_of(SelectConfig, name):
            extra[name] = value
    run = RunConfig(model=job.run.model, calibration=job.run.calibration)
    return prune_command(run, entry["budget"], sel.protocol, **extra)


def compare_quick(job) -> str:
    """A comparison's quick settings, as its flags (``compare`` has no ``--quick``)."""
    c = quick_job(job).run.calibration
    return f"--prompts {c.prompts} --tokens {c.tokens} --limit {quick_limit(job)}"


def prune_after_validate(cfg: RunConfig, result: dict) -> str:
    """Prune with the criterion whose removability predicted the deletion cost best."""
    rows = {
        k: v["spearman"]
        for k, v in result["criteria"].items()
        if k not in ("random", "reverse") and v["spearman"] == v["spearman"]
    }
    best = max(rows, key=lambda k: rows[k]) if rows else "interchange"
    return prune_command(cfg, small_budget(result["num_layers"]), best)


def eval_next(cfg: RunConfig | None, baseline_given: bool) -> str | None:
    """After an evaluation: compare a checkpoint swapprune wrote against its base model."""
    if baseline_given or cfg is None:
        return None
    base = _base_of(cfg.model.name)
    if base is None:
        return None  # an unpruned model: nothing to compare it against
    return command_line(cfg, "eval", extra=("--baseline", base))


def _base_of(model: str) -> str | None:
    """The ``--model`` a swapprune checkpoint was made from (its provenance), if any."""
    try:
        prov = json.loads((Path(model) / "provenance.json").read_text())
        return prov["invocation"]["config"]["model"]["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def cheaper_cut(config: RunConfig, cut: NextCut, write: Write = command_line) -> str:
    """The command of a cheaper cut (:func:`swapprune.pipeline.stages.cheaper_cut`): the run's
    own configuration at its budget, criterion and patch, into its own directory."""
    extra = {"patch": cut.patch} if cut.patch is not None else {}
    return write(prune_config(config, cut.budget, cut.protocol, **extra))


def wording(quick: str = "--quick") -> Wording:
    """How the command line names what a run suggests: ``quick``, how its quick settings are
    asked for, and the command of a cheaper cut."""
    return Wording(quick=quick)


def recipe_quick(cfg: RunConfig) -> str:
    """A recipe's quick settings, as its ``--set`` overrides (the sections it has)."""
    return " ".join(f"--set {k}={v}" for k, v in QUICK.items() if getattr(cfg, k.split(".")[0]))
