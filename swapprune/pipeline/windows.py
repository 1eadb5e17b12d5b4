"""The windows a run cuts from text: the calibration windows, and the held-out windows.

Functions of the configuration, the tokenizer and the model's context only, so that
they run with the tokenizer alone, before the weights load
(:func:`swapprune.pipeline.checks.check_text`: a text too short for them is refused
there), as well as after it (:func:`swapprune.pipeline.stages.calibrate` and
:func:`~swapprune.pipeline.stages.heldout`). Importing this module imports neither torch
nor transformers; its functions do.
"""

from __future__ import annotations

from typing import Any

from swapprune.config import RunConfig
from swapprune.select.reference import Heldout, PatchAware


def calibration(config: RunConfig, tokenizer, context: int | None):
    """The calibration windows of ``config.calibration`` (the pool, when probing in tranches)."""
    from swapprune.calibration.windows import load_calibration  # imports torch

    c = config.calibration
    return load_calibration(tokenizer, c.calib, c.prompts, c.tokens, c.seed, context)


def heldout(
    config: RunConfig, spec: Any, tokenizer, tokens: int, calibration, context: int | None = None
):
    """Held-out windows of the selection (:class:`~swapprune.select.reference.Heldout`), or ``None``.

    Built when the cut is certified or ``auto`` may verify, and a tokenizer can cut
    text: ``prune.heldout_prompts`` windows of ``tokens`` from ``heldout_calib``
    (default: the calibration source), none of them touching a scoring window;
    ``auto`` gets as many more for its search, touching neither.

    Args:
        config: the run; ``spec``: its checked selection spec.
        tokenizer: the model's tokenizer.
        tokens: tokens per held-out window (:func:`swapprune.pipeline.checks.heldout_tokens`).
        calibration: the scoring windows to stay clear of (``None``: none).
        context: the model's context length (caps the patch windows of ``--patch-aware``).
    """
    p = config.prune
    if spec is None or p is None or tokenizer is None:
        return None
    if not (spec.certify or spec.policy == "auto"):
        return None
    # lazy: the windows are torch tensors
    from swapprune.calibration.heldout import FIX, heldout_windows  # imports torch

    c = config.calibration
    source = p.heldout_calib or c.calib
    avoid = [calibration] if calibration is not None else []
    # auto's search needs its windows whether or not the cut is certified
    fix = FIX if spec.policy == "auto" else f"{FIX}, or cut without a certificate: --no-certify"
    certify = heldout_windows(tokenizer, source, p.heldout_prompts, tokens, c.seed, avoid, fix)
    verify = None
    if spec.policy == "auto":
        verify = heldout_windows(
            tokenizer, source, p.heldout_prompts, tokens, c.seed + 1, [*avoid, certify], fix
        )
    same = source == c.calib or (source is None and c.calib is None)
    text = certify.source
    scope = f"the calibration text ({text})" if same else f"{text}, not the calibration text"
    aware = None
    if p.patch_aware:
        held = [w for w in (certify, verify) if w is not None]
        tp = p.patch_tokens if context is None else min(p.patch_tokens, context)
        windows = patch_windows(config, tokenizer, tp, [*avoid, *held])
        aware = PatchAware(windows, p.patch_ridge)
        scope += (
            f", each set after its own linear patch ({windows.input_ids.shape[0]} patch windows)"
        )
    return Heldout(certify, verify, scope=scope, patch=aware)


def patch_windows(config: RunConfig, tokenizer, tokens: int, avoid: list):
    """The windows a linear patch is fitted on: ``patch_prompts`` x ``tokens`` of the
    calibration source, touching none of ``avoid`` (the scoring and held-out windows).

    The cut's own patch (:func:`swapprune.pipeline.stages.patch`) and patch-aware
    selection (:func:`heldout`) fit on these same windows.
    """
    from swapprune.calibration.heldout import heldout_windows  # imports torch

    p, c = config.prune, config.calibration
    assert p is not None
    fix = "lower --patch-prompts or --patch-tokens, or give a longer --calib"
    return heldout_windows(tokenizer, c.calib, p.patch_prompts, tokens, c.seed + 2, avoid, fix)
