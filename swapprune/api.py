"""The in-memory Python API: ``swapprune.prune(model, tokenizer, budget=..., protocol=...)``.

The keyword arguments are the fields of :class:`~swapprune.config.SelectConfig`
and :class:`~swapprune.config.CalibrationConfig`, with the same names and
defaults as the CLI's flags and a recipe's keys. They go through the run's own
cut sequence (:func:`swapprune.pipeline.cut.cut`), so a call here selects on the
same windows, with the same policy, as the command line with the same settings.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from swapprune.config import QUICK, CalibrationConfig, RunConfig, SelectConfig
from swapprune.entry import entry_point, lines
from swapprune.errors import SwappruneError, did_you_mean
from swapprune.model.facts import ModelFacts
from swapprune.model.source import ModelSource
from swapprune.pipeline import checks, stages
from swapprune.pipeline.cut import cut as cut_sequence
from swapprune.pipeline.record import Steps, Wording
from swapprune.select.reuse import check_reused

#: The quick settings (:data:`swapprune.config.QUICK`) as this API's keyword arguments.
QUICK_KEYWORDS = ", ".join(
    f"{key.split('.')[1]}={value}"
    for key, value in QUICK.items()
    if key.split(".")[0] in ("calibration", "prune")
)


def _split(kwargs: dict[str, Any]) -> tuple[SelectConfig, CalibrationConfig]:
    sections = (SelectConfig, CalibrationConfig)
    names = {f.name: cls for cls in sections for f in dataclasses.fields(cls)}
    unknown = sorted(set(kwargs) - set(names))
    if unknown:
        raise SwappruneError(
            f"unknown setting '{unknown[0]}'{did_you_mean(unknown[0], names)}; settings are the "
            "fields of SelectConfig and CalibrationConfig"
        )
    by_cls: dict[type, dict] = {cls: {} for cls in sections}
    for k, v in kwargs.items():
        by_cls[names[k]][k] = v
    return SelectConfig(**by_cls[SelectConfig]), CalibrationConfig(**by_cls[CalibrationConfig])


@entry_point()
def plan_pruning(
    model,
    tokenizer=None,
    *,
    calibration=None,
    scores=None,
    heldout=None,
    model_id: str | None = None,
    progress: bool = True,
    say=None,
    **settings: Any,
):
    """Choose the blocks to remove or merge; returns ``(plan, scores)``. The model is unchanged.

    Args:
        model: a causal LM, in memory.
        tokenizer: its tokenizer, for the calibration windows (unless ``calibration``
            is given).
        calibration: windows to use instead of ``calib``/``prompts``/``tokens``
            (:class:`~swapprune.calibration.windows.Calibration`).
        scores: a :class:`~swapprune.engine.scores.ScoreResult` to reuse instead of probing.
        heldout: :class:`~swapprune.select.reference.Heldout` windows for the certificate and
            ``auto``'s search (default: cut from the calibration source with ``tokenizer``,
            none of them touching a calibration window; none without a tokenizer).
        model_id: recorded in the plan (default: the model's ``name_or_path``).
        progress: progress bars while probing.
        say: receives what the selection will compute and how long that should take, before
            it starts (the ``[estimate]`` lines), e.g. ``print``; ``None``: the ``swapprune``
            logger at INFO, silent unless logging is on.
        **settings: fields of :class:`~swapprune.config.SelectConfig` (``budget``,
            ``protocol``, ``strategy``, ``patch``, ...) and
            :class:`~swapprune.config.CalibrationConfig` (``prompts``, ``tokens``, ``seed``,
            ``adaptive``, ...).
    """
    plan, scores, _ = cut(
        model, tokenizer, calibration, scores, heldout, model_id, progress, settings, say
    )
    return plan, scores


def cut(
    model, tokenizer, calibration, scores, heldout, model_id, progress, settings: dict, say=None
):
    """The cut of ``settings`` on an in-memory model: ``(plan, scores, patches)``.

    What :func:`plan_pruning` and :func:`prune` run (and the llm-compressor modifier):
    ``settings`` are their keyword settings, checked here
    (:mod:`swapprune.pipeline.checks`); the cut itself is the run's own sequence
    (:func:`swapprune.pipeline.cut.cut`). ``patches`` are the linear patch's matrices
    (``settings["patch"] == "linear"``) for :func:`swapprune.edit.surgery.apply_plan`.
    """
    from swapprune.model.stack import decoder_stack  # imports torch

    select_cfg, calib_cfg = _split(settings)
    checks.check_selection(select_cfg, calib_cfg)
    cfg = RunConfig(calibration=calib_cfg, prune=select_cfg)
    facts = ModelFacts.from_config(model.config).with_layers(decoder_stack(model).num_layers)
    name = model_id or getattr(model, "name_or_path", "") or type(model).__name__
    selection = checks.check_model(cfg, facts) if select_cfg.plan is None else None
    loaded = stages.Loaded(model, tokenizer, ModelSource(name, name), facts, selection)
    if scores is None and select_cfg.scores:
        scores = stages.reuse_scores(select_cfg.scores, loaded)
    elif scores is not None and selection is not None:
        check_reused(scores, selection, "given as scores=")
    steps = Steps(lines(say), Wording(quick=QUICK_KEYWORDS), lines=True)
    done = cut_sequence(
        cfg, loaded, steps, calibration=calibration, scores=scores, heldout=heldout,
        progress=progress,
    )  # fmt: skip
    return done.plan, done.scores, done.patches


@entry_point()
def prune(model, tokenizer=None, budget: int | None = None, protocol: str = "interchange", **kw):
    """Prune an in-memory model; returns ``(pruned_model, plan)``.

    The model is edited in place (blocks removed or merged, a linear patch folded
    with ``patch="linear"``, config updated, ``layer_idx`` renumbered). Keyword
    arguments are those of :func:`plan_pruning`.

    Example:
        >>> model, plan = swapprune.prune(model, tok, budget=4, protocol="interchange")
    """
    from swapprune.edit.surgery import apply_plan  # imports torch

    calibration, scores = kw.pop("calibration", None), kw.pop("scores", None)
    heldout, model_id = kw.pop("heldout", None), kw.pop("model_id", None)
    progress, say = kw.pop("progress", True), kw.pop("say", None)
    settings = {"budget": budget, "protocol": protocol, **kw}
    chosen, _, patches = cut(
        model, tokenizer, calibration, scores, heldout, model_id, progress, settings, say
    )
    apply_plan(model, chosen, patches=patches)
    return model, chosen
