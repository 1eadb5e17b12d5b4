"""The stages of a run, each a function of the configuration and what came before.

``read_facts`` (the model's config, no weights) -> ``load`` -> ``calibrate`` ->
``score`` (with its cost ``estimate``) or ``reuse_scores`` -> ``select`` ->
``stability`` and ``measure_cost`` -> ``evaluate``. :func:`swapprune.pipeline.run`
calls them in order; ``swapprune compare`` calls them in a loop over
configurations.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from swapprune.config import RunConfig
from swapprune.errors import SwappruneError


@dataclass
class Loaded:
    """What the stages share once the model is loaded."""

    model: Any
    tokenizer: Any
    source: Any  # swapprune.loading.ModelSource
    facts: Any  # swapprune.architectures.ModelFacts


def read_facts(config: RunConfig):
    """:class:`~swapprune.architectures.ModelFacts` from the model's config alone (no weights).

    Returns ``None`` when the config cannot be read cheaply (an offline hub id,
    remote code); the same checks then run right after loading.
    """
    from swapprune.loading import resolve_source

    src = resolve_source(config.model.name)
    if src.gguf_file:
        # transformers parses the whole GGUF for its config; a converted copy is read instead.
        src = _converted(src)
        if src is None:
            return None
    try:
        from transformers import AutoConfig

        from swapprune.architectures import ModelFacts

        cfg = AutoConfig.from_pretrained(src.path, trust_remote_code=config.model.trust_remote_code)
        return ModelFacts.from_config(cfg)
    except Exception:  # offline hub id, remote code, odd config: checked after loading instead
        return None


def _converted(src):
    """The cached converted copy of a GGUF source, if one exists (see :mod:`swapprune.loading`)."""
    try:
        from swapprune.gguf_cache import cached_source
    except ImportError:
        return None
    return cached_source(src)


def load(config: RunConfig, progress: bool = True) -> Loaded:
    """Load the model and tokenizer; model facts are read from the loaded config."""
    from swapprune.architectures import ModelFacts, decoder_stack
    from swapprune.loading import load_model

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
    stack_layers = decoder_stack(model).num_layers
    if stack_layers != facts.num_layers:  # a config whose count key disagrees with the modules
        facts = ModelFacts(
            facts.model_type,
            stack_layers,
            facts.context_length,
            facts.hidden_size,
            facts.layer_types,
        )
    return Loaded(model, tok, source, facts)


def adaptive(config: RunConfig) -> bool:
    """Whether this run's selection scores adaptively (a pool of windows, used in tranches)."""
    p = config.prune
    return bool(
        p
        and p.plan is None
        and not p.scores
        and config.score is None
        and config.calibration.adaptive_for(p.protocol)
    )


def calibrate(config: RunConfig, loaded: Loaded):
    """The calibration windows of ``config.calibration`` (the whole pool when adaptive)."""
    from swapprune.calibration import load_calibration

    c = config.calibration
    prompts = c.max_prompts if adaptive(config) else c.prompts
    return load_calibration(
        loaded.tokenizer, c.calib, prompts, c.tokens, c.seed, loaded.facts.context_length
    )


def score(config: RunConfig, loaded: Loaded, calibration, progress: bool = True):
    """Probe the model (``config.score``); with an output file, flushed and resumable.

    Returns ``None`` on a non-zero rank of a ``torchrun`` job.
    """
    from swapprune.engine.sharding import score_sharded

    s, c = config.score, config.calibration
    assert s is not None
    return score_sharded(
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


def estimate(config: RunConfig, loaded: Loaded, calibration):
    """The cost of ``config.score`` on this machine, before it runs."""
    from swapprune.engine.plans import parse_pairs
    from swapprune.estimate import estimate_scoring

    s = config.score
    assert s is not None
    pairs = parse_pairs(s.pairs, loaded.facts.num_layers) if s.pairs else []
    return estimate_scoring(
        loaded.model, calibration.input_ids, pairs, s.probes, config.calibration.batch_size
    )


def reuse_scores(path: str, loaded: Loaded):
    """A scores file from an earlier run, refused if it belongs to another model."""
    from swapprune.engine.scores import ScoreResult

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
    return scores


def _same_model(expected, loaded: Loaded, what: str) -> None:
    """Refuse an artifact whose recorded model fingerprint differs from the loaded model's."""
    if not expected:
        return  # written before artifacts carried fingerprints: only the depth is checked
    from swapprune.fingerprint import check_same_model, model_fingerprint

    check_same_model(expected, model_fingerprint(loaded.model), what)


def select(config: RunConfig, loaded: Loaded, calibration, scores, progress: bool = True):
    """The plan: read from ``prune.plan``, chosen by the criterion, or the identity plan.

    Returns:
        ``(plan, scores)``: scores the criterion measured itself, or those given.
    """
    from swapprune.plan import PrunePlan

    L = loaded.facts.num_layers
    p = config.prune
    if p is None:
        return PrunePlan.from_removal(L, [], model=loaded.source.id), scores
    plan, scores = _select(config, loaded, calibration, scores, progress)
    if plan.fingerprint is None:
        from swapprune.fingerprint import model_fingerprint

        plan.fingerprint = model_fingerprint(loaded.model)
    return plan, scores


def _select(config: RunConfig, loaded: Loaded, calibration, scores, progress: bool):
    from swapprune.plan import PrunePlan
    from swapprune.pruning import plan_pruning

    L = loaded.facts.num_layers
    p = config.prune
    assert p is not None
    if p.plan is not None:
        plan = PrunePlan.from_json(p.plan)
        if plan.num_layers != L:
            raise SwappruneError(
                f"plan {p.plan} is for a {plan.num_layers}-block model; {config.model.name} has {L}"
            )
        _same_model(getattr(plan, "fingerprint", None), loaded, f"plan {p.plan}")
        return plan, scores
    c = config.calibration
    request = p.request(c.seed)
    kwargs = dict(
        calibration=calibration,
        positions=c.positions,
        batch_size=c.batch_size,
        model_id=loaded.source.id,
        progress=progress,
    )
    # Scores already measured on these windows (compare's shared probes) are used as they
    # are; adaptive calibration only decides how many windows to probe when none are.
    if adaptive(config) and scores is None:
        if p.protocol == "auto":
            from swapprune.auto import plan_auto

            return plan_auto(
                loaded.model,
                loaded.tokenizer,
                request,
                tokens=c.tokens,
                adaptive=c.adaptive_settings(),
                **kwargs,
            )
        from swapprune.adaptive import adaptive_score
        from swapprune.selection import Constraints

        res = adaptive_score(
            loaded.model,
            loaded.tokenizer,
            criteria=(p.protocol,),
            strategy=p.strategy,
            budget=request.budget,
            constraints=Constraints(loaded.facts.num_layers, p.protect_first, p.protect_last),
            settings=c.adaptive_settings(),
            tokens=c.tokens,
            **{k: v for k, v in kwargs.items() if k != "progress"},
        )
        scores = res.scores
        plan, scores = plan_pruning(
            loaded.model, loaded.tokenizer, request, scores=scores, **kwargs
        )
        plan.scores["adaptive"] = res.to_dict()
        return plan, scores
    return plan_pruning(loaded.model, loaded.tokenizer, request, scores=scores, **kwargs)


def stability(config: RunConfig, loaded: Loaded, plan, scores, book=None):
    """Bootstrap the calibration windows behind ``plan``'s selection; recorded in the plan.

    Returns the :class:`~swapprune.stability.Stability`, or ``None`` for selections that
    cannot be resampled from scores (model-measured criteria, model-querying strategies).
    """
    from swapprune.selection import Constraints
    from swapprune.stability import plan_stability

    p = config.prune
    assert p is not None
    cons = Constraints(loaded.facts.num_layers, p.protect_first, p.protect_last)
    stab = plan_stability(
        plan, scores, cons, seed=config.calibration.seed, threshold=p.stability_threshold
    )
    if stab is None:
        return None
    plan.scores["stability"] = stab.to_dict()
    if book is not None:
        book.metrics["stability"] = stab.to_dict() | {"summary": stab.summary()}
        book.say(stab.summary())
        warning = stab.warning()
        if warning:
            book.say(warning)
            book.metrics["stability"]["warning"] = warning
    return stab


def measure_cost(config: RunConfig, loaded: Loaded, plan):
    """Base vs pruned perplexity on the first windows of the matched contract."""
    from swapprune.cost import pruning_cost

    c = config.cost
    assert c is not None
    windows = c.windows or None
    if plan.op == "remove":
        return pruning_cost(
            loaded.model, loaded.tokenizer, plan, windows=windows, threshold=c.threshold
        )
    from swapprune.surgery import apply_plan

    merged = apply_plan(copy.deepcopy(loaded.model), plan, log=lambda *_: None)
    return pruning_cost(
        loaded.model, loaded.tokenizer, pruned=merged, windows=windows, threshold=c.threshold
    )


def evaluate(config: RunConfig, model, tokenizer):
    """Run ``config.eval``'s tasks on an in-memory model."""
    from swapprune.evaluation import evaluate as run_tasks

    e = config.eval
    assert e is not None
    return run_tasks(
        model,
        tokenizer,
        e.tasks,
        limit=e.limit,
        words=e.words,
        max_length=e.max_length,
        batch_size=e.batch_size,
        n_boot=e.bootstrap,
    )
