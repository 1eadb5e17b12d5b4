"""The stages of a run, each a function of the configuration and what came before.

:func:`swapprune.pipeline.checks.check` (the configuration, then the model's facts read
without weights) -> ``load`` -> ``calibrate`` -> ``score`` or ``reuse_scores`` -> ``heldout``
-> ``select`` -> ``stability`` -> ``patch`` -> ``measure_cost`` -> ``evaluate``;
:mod:`swapprune.pipeline.forecast` says what the probing and selection will compute, and
how long that takes, before they start. :func:`swapprune.pipeline.sequence.run` calls them in
order, the cut's part through :func:`swapprune.pipeline.cut.cut`, which ``swapprune.prune``
and ``swapprune compare``'s cells call too.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swapprune import evaluation
from swapprune.config import RunConfig
from swapprune.engine import sharding
from swapprune.engine.scores import ScoreResult
from swapprune.errors import SwappruneError
from swapprune.evaluation.cost import base_side_cached, pruning_cost
from swapprune.model.facts import ModelFacts
from swapprune.model.load import load_model
from swapprune.output import placement
from swapprune.pipeline import checks, windows
from swapprune.pipeline.checks import Checked
from swapprune.plan import PrunePlan
from swapprune.select import select as choose
from swapprune.select.reuse import check_reused
from swapprune.select.spec import names
from swapprune.select.stability import plan_stability

# model.stack, model.fingerprint, calibration.heldout and edit/ import torch: they are
# imported inside the stages that use them, so that checking a run imports no torch.

__all__ = [
    "Checked",
    "Loaded",
    "NextCut",
    "calibrate",
    "cheaper_cut",
    "evaluate",
    "heldout",
    "load",
    "measure_cost",
    "model_bytes",
    "output_state",
    "patch",
    "reuse_scores",
    "score",
    "select",
    "stability",
]


@dataclass
class Loaded:
    """What the stages share once the model is loaded.

    Attributes:
        model, tokenizer: the model (eval mode) and its tokenizer.
        source: :class:`~swapprune.model.load.ModelSource`.
        facts: :class:`~swapprune.model.facts.ModelFacts` of the loaded model.
        selection: the checked selection spec, or ``None`` without a selection.
    """

    model: Any
    tokenizer: Any
    source: Any
    facts: Any
    selection: Any = None


def output_state(config: RunConfig):
    """What the export path holds now (``False`` without an export): see
    :func:`swapprune.output.placement.output_state`."""
    if config.export is None:
        return False
    return placement.output_state(Path(config.export.output).expanduser().absolute())


def model_bytes(model, config: RunConfig) -> int:
    """Bytes of the saved weights (at the export dtype), for a full-disk message."""
    import torch  # imports torch

    x = config.export
    dtype = getattr(torch, x.save_dtype) if x is not None and x.save_dtype else None
    return sum(
        p.numel() * (dtype.itemsize if dtype is not None else p.element_size())
        for p in model.parameters()
    )


def load(config: RunConfig, checked: Checked | None = None, progress: bool = True) -> Loaded:
    """Load the model and tokenizer; the selection is re-checked only if the facts differ."""
    from swapprune.model.stack import decoder_stack  # imports torch

    m = config.model
    model, tok, source = load_model(
        m.name,
        dtype=m.dtype,
        device=m.device,
        device_map=m.device_map,
        trust_remote_code=m.trust_remote_code,
        progress=progress,
    )
    facts = ModelFacts.from_config(model.config)
    depth = decoder_stack(model).num_layers
    if depth != facts.num_layers:  # a config whose count key disagrees with the modules
        facts = facts.with_layers(depth)
    checked = checked or Checked(None, None)
    selection = checked.selection
    if checked.facts is None or checked.facts.num_layers != facts.num_layers:
        selection = checks.check_model(config, facts)
    return Loaded(model, tok, source, facts, selection)


def calibrate(config: RunConfig, loaded: Loaded):
    """The calibration windows of ``config.calibration`` (the pool, when probing in tranches)."""
    return windows.calibration(config, loaded.tokenizer, loaded.facts.context_length)


def heldout(config: RunConfig, loaded: Loaded, calibration):
    """Held-out windows of the selection (:class:`~swapprune.select.reference.Heldout`), or
    ``None``: :func:`swapprune.pipeline.windows.heldout` on the loaded model's tokenizer."""
    p = config.prune
    if p is None:
        return None
    tokens = checks.heldout_tokens(p, loaded.facts.context_length)
    ctx = loaded.facts.context_length
    return windows.heldout(config, loaded.selection, loaded.tokenizer, tokens, calibration, ctx)


def score(config: RunConfig, loaded: Loaded, calibration, progress: bool = True):
    """Probe the model (``config.score``); with an output file, flushed and resumable.

    Returns ``None`` on a non-zero rank of a ``torchrun`` job.
    """
    s, c = config.score, config.calibration
    assert s is not None
    return sharding.score_sharded(
        loaded.model,
        loaded.tokenizer,
        s.output,
        calibration=calibration,
        protocols=s.probes,
        pairs=s.pairs,
        positions=c.positions,
        batch_size=c.batch_size,
        cache_gb=s.cache_gb,
        n_boot=s.bootstrap,
        seed=c.seed,
        model_id=loaded.source.id,
        progress=progress,
    )


def reuse_scores(path: str, loaded: Loaded, config: RunConfig | None = None):
    """A scores file from an earlier run, refused if it belongs to another model or lacks a
    probe the selection reads."""
    scores = ScoreResult.load(path)
    if scores.meta.get("incomplete"):
        raise SwappruneError(
            f"scores file {path} is from a run that did not finish; rerun "
            f"'swapprune score --output {path}' with its settings to complete it"
        )
    if scores.num_layers != loaded.facts.num_layers:
        raise SwappruneError(
            f"scores file {path} is for a {scores.num_layers}-block model; "
            f"this model has {loaded.facts.num_layers}"
        )
    _same_model(scores.meta.get("fingerprint"), loaded, f"scores file {path}")
    if loaded.selection is not None:
        check_reused(scores, loaded.selection, path, config)
    return scores


def _same_model(expected, loaded: Loaded, what: str) -> None:
    """Refuse an artifact whose recorded model fingerprint differs from the loaded model's."""
    if not expected:
        return  # written before artifacts carried fingerprints: only the depth is checked
    from swapprune.model.fingerprint import check_same_model, model_fingerprint  # imports torch

    check_same_model(expected, model_fingerprint(loaded.model), what)


def select(
    config: RunConfig,
    loaded: Loaded,
    calibration,
    scores,
    progress: bool = True,
    heldout=None,
):
    """The plan: read from ``prune.plan``, chosen by :func:`swapprune.select.select`, or identity.

    ``heldout``: the windows of :func:`heldout` (certificate, ``auto``'s search).

    Returns:
        ``(plan, scores)``: scores the selection measured itself, or those given.
    """
    L = loaded.facts.num_layers
    p = config.prune
    if p is None:
        return PrunePlan.from_removal(L, [], model=loaded.source.id), scores
    if p.plan is not None:
        plan = PrunePlan.from_json(p.plan)
        if plan.num_layers != L:
            raise SwappruneError(
                f"plan {p.plan} is for a {plan.num_layers}-block model; {config.model.name} has {L}"
            )
        _same_model(plan.fingerprint, loaded, f"plan {p.plan}")
        return plan, scores
    if p.landscape:  # its sets join the certificate's reference: they must be this model's
        state = json.loads(Path(p.landscape).read_text())
        _same_model(
            (state.get("model") or {}).get("fingerprint"), loaded, f"landscape {p.landscape}"
        )
    plan, scores = choose(
        loaded.model,
        loaded.selection,
        calibration,
        scores,
        heldout=heldout,
        model_id=loaded.source.id,
        progress=progress,
    )
    if plan.fingerprint is None:
        from swapprune.model.fingerprint import model_fingerprint  # imports torch

        plan.fingerprint = model_fingerprint(loaded.model)
    return plan, scores


def stability(config: RunConfig, loaded: Loaded, plan, scores, book=None):
    """Bootstrap the calibration windows behind ``plan``'s selection; recorded in the plan.

    Returns the :class:`~swapprune.select.stability.Stability`, or ``None`` for selections
    that cannot be resampled from scores (model-measured criteria, model-querying strategies).
    """
    spec = loaded.selection
    stab = plan_stability(
        plan, scores, spec.constraints, seed=spec.seed, threshold=spec.stability_threshold
    )
    if stab is None:
        return None
    stab.keep(plan.removed)  # the certificate may have kept another set than the criterion's
    plan.records.stability = stab
    if book is not None:
        book.metrics["stability"] = stab.to_dict() | {"summary": stab.summary()}
        book.say(stab.summary())
        # The certificate is the headline: a certified cut needs no frequency warning.
        warning = plan.records.stability_warning()
        if warning:
            book.say(warning)
            book.metrics["stability"]["warning"] = warning
    return stab


def patch(config: RunConfig, loaded: Loaded, plan, calibration, heldout=None):
    """Fit the linear patch of ``plan``'s removed spans (``prune.patch``); returns the matrices.

    The patch windows (``patch_prompts`` x ``patch_tokens`` of the calibration source)
    touch neither the scoring nor the held-out windows. ``plan.patch`` records the fit;
    a plan read from a file (``apply``) brings its own matrices instead.
    """
    p = config.prune
    assert p is not None
    if plan.patch is not None and p.plan is not None:
        from swapprune.edit.patch import load_patches  # imports torch

        return load_patches(plan, Path(p.plan).parent)
    from swapprune.edit.patch import fit_patches, patch_record  # imports torch

    c = config.calibration
    if heldout is not None and heldout.patch is not None:  # patch-aware: the same windows
        cut = heldout.patch.windows
        known = heldout.fitted(plan.removed)
        if known is not None:  # the certificate fitted this set on every patch window
            reused = {"block_evals": 0, "block_tokens": 0, "reused": "the certificate's fit"}
            plan.patch = patch_record(known, p.patch_ridge, cut.describe(), reused)
            return known
    else:
        if loaded.tokenizer is None:
            raise SwappruneError("a linear patch needs calibration text: pass a tokenizer")
        ctx = loaded.facts.context_length
        tokens = p.patch_tokens if ctx is None else min(p.patch_tokens, ctx)
        held = heldout.windows() if heldout else ()
        avoid = [w for w in (calibration, *held) if w is not None]
        cut = windows.patch_windows(config, loaded.tokenizer, tokens, avoid)
    patches, compute = fit_patches(
        loaded.model, plan.removed, cut.input_ids, c.batch_size, p.patch_ridge
    )
    plan.patch = patch_record(patches, p.patch_ridge, cut.describe(), compute)
    return patches


@dataclass(frozen=True)
class NextCut:
    """A cheaper cut to try when one costs too much: the run's selection with these changed.

    The front end writes it as the command that runs it (the CLI: a ``swapprune``
    command line, :func:`swapprune.cli.next_steps.cheaper_cut`).

    Attributes:
        budget: blocks to remove.
        protocol: the criterion or policy (``None``: the run's own).
        patch: the patch kind (``None``: the run's own).
    """

    budget: int
    protocol: str | None = None
    patch: str | None = None


def cheaper_cut(config: RunConfig, plan) -> NextCut | None:
    """What to try when a cut costs too much: half the budget; at budget 1 the verified
    selection (auto), then a linear patch. An applied plan is selected again by its criterion."""
    applied = config.prune is None or config.prune.plan is not None
    protocol = (plan.protocol if plan.protocol in names() else "interchange") if applied else None
    budget = plan.budget or len(plan.removed)
    if budget > 1:
        return NextCut(budget // 2, protocol)
    if (protocol or (config.prune.protocol if config.prune else "")) != "auto":
        return NextCut(1, "auto")
    if config.prune is not None and config.prune.patch == "none":
        return NextCut(1, None, "linear")
    return None


def cost_base_cached(config: RunConfig, loaded: Loaded) -> bool:
    """Whether the cost check will read the base model's side from the cache."""
    c = config.cost
    if c is None or loaded.tokenizer is None:
        return False
    return base_side_cached(loaded.model, loaded.tokenizer, c.windows or None, c.generative)


def measure_cost(config: RunConfig, loaded: Loaded, plan, patches=None):
    """Base vs pruned perplexity on the first windows of the matched contract.

    With ``cost.generative`` the record also holds the greedy-continuation agreement
    (:mod:`swapprune.evaluation.generative`). With a linear patch the pruned model is the
    patched one, and the record also holds the cost of the plain removal. A warning says
    what to try in words; the command line's summary turns it into one command.
    """
    c = config.cost
    assert c is not None
    windows = c.windows or None
    gen = c.generative
    if plan.op == "remove" and not patches:
        return pruning_cost(
            loaded.model, loaded.tokenizer, plan, windows=windows, threshold=c.threshold,
            generative=gen,
        )  # fmt: skip
    from swapprune.edit.surgery import apply_plan  # imports torch

    edited = apply_plan(copy.deepcopy(loaded.model), plan, log=lambda *_: None, patches=patches)
    cost = pruning_cost(
        loaded.model, loaded.tokenizer, pruned=edited, windows=windows, threshold=c.threshold,
        generative=gen,
    )  # fmt: skip
    if patches:
        # The plain removal's perplexity only: its generation is not what the run keeps.
        plain = pruning_cost(
            loaded.model, loaded.tokenizer, plan.kept, windows=windows, generative=False
        )
        cost.unpatched = plain.to_dict()
    return cost


def evaluate(config: RunConfig, model, tokenizer):
    """Run ``config.eval``'s tasks on an in-memory model."""
    e = config.eval
    assert e is not None
    return evaluation.evaluate(
        model,
        tokenizer,
        e.tasks,
        limit=e.limit,
        words=e.words,
        max_length=e.max_length,
        batch_size=e.batch_size,
        n_boot=e.bootstrap,
        per_article=e.per_article,
    )
