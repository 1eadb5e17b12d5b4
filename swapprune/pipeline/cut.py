"""The cut sequence, in one place: ``calibrate -> held-out -> forecast -> select -> patch``.

Every cut goes through :func:`cut`: the run (:func:`swapprune.pipeline.sequence.run`),
the Python API (:func:`swapprune.api.cut`, and the llm-compressor modifier through it)
and each cell of ``swapprune compare``. The caller has checked the configuration and
the model's facts (:mod:`swapprune.pipeline.checks`; the spec is ``loaded.selection``)
and may bring what it shares between cuts: the calibration windows, the probe scores,
the held-out windows. How each step is run and said is the caller's
:class:`~swapprune.pipeline.record.Steps`: the run's times and records them, the API's
and a comparison's cells run them as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swapprune.config import RunConfig
from swapprune.errors import SwappruneError
from swapprune.pipeline import forecast as fc
from swapprune.pipeline import stages
from swapprune.pipeline.record import Steps


@dataclass
class Cut:
    """What a cut produced.

    Attributes:
        plan: the :class:`~swapprune.plan.PrunePlan` (read from ``prune.plan``, or chosen).
        scores: the probe scores the selection read (measured, reused or given).
        patches: the linear patch's matrices (``None`` without a patch).
        calibration: the calibration windows the selection ran on (``None`` if none).
        heldout: the held-out windows (:class:`~swapprune.select.reference.Heldout`), if any.
    """

    plan: Any
    scores: Any = None
    patches: Any = None
    calibration: Any = None
    heldout: Any = None


def cut(
    config: RunConfig,
    loaded: stages.Loaded,
    steps: Steps,
    *,
    calibration=None,
    scores=None,
    heldout=None,
    progress: bool = True,
    stability: bool = False,
    fit_patch: bool = True,
) -> Cut:
    """The cut of ``config.prune`` on the loaded model (which stays as it is).

    A selection: its calibration windows (unless given, and only if it runs anything on
    them), the held-out windows (unless given), the forecast (when ``steps`` says one),
    the selection, its bootstrap (``stability``) and the linear patch's fit (``fit_patch``).
    A plan read from a file: the plan, and its own patch matrices.

    Args:
        config: the run; ``config.prune`` is the cut.
        loaded: the model, its tokenizer and facts, and the checked selection spec.
        steps: runs and says each step.
        calibration, scores, heldout: what the caller shares between cuts.
        progress: progress bars while probing.
        stability: bootstrap the calibration windows behind the choice (the run's record).
        fit_patch: fit the patch the settings ask for (a comparison measures each patch
            kind as a cell of its own).
    """
    p = config.prune
    assert p is not None
    spec, selecting = loaded.selection, p.plan is None
    if selecting:
        if calibration is None and spec.needs_windows:
            if loaded.tokenizer is None:
                raise SwappruneError("selection needs calibration windows: pass a tokenizer")
            calibration = steps.stage("calibrate", stages.calibrate, config, loaded)
        if heldout is None:
            # Cutting the held-out windows can still fail on bad input: before the timed pass.
            heldout = steps.stage("held-out windows", stages.heldout, config, loaded, calibration)
        if steps.announces:
            given = scores is not None
            cached = stages.cost_base_cached(config, loaded)
            forecast = fc.selection(config, loaded.facts, spec, given, base_cached=cached)
            quick = fc.quick_selection(config, loaded.facts, given)
            batch = config.calibration.batch_size
            steps.forecast("prune", forecast, quick, loaded.model, calibration, batch)
    plan, scores = steps.stage(
        "select", stages.select, config, loaded, calibration, scores, progress, heldout
    )
    steps.metrics.update(plan.records.to_dict("certificate", "compute"))
    if selecting and stability:
        stages.stability(config, loaded, plan, scores, steps)
    patches = None
    if fit_patch and (p.patch != "none" or plan.patch is not None):
        patches = steps.stage("patch", stages.patch, config, loaded, plan, calibration, heldout)
        steps.metrics["patch"] = plan.patch
    return Cut(plan, scores, patches, calibration, heldout)
