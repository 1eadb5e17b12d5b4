"""The pipeline in one screen: ``run(config) -> RunResult``.

    read facts -> load -> calibrate -> score -> select -> edit -> heal -> save -> quantize

with evaluation at each point the configuration asks for. Every command is a
configuration handed to :func:`run` (``swapprune``/``prune``, ``score``,
``apply``, ``eval``, ``run``); ``compare`` calls the same stage functions in a
loop over configurations.

Everything a user can get wrong is checked before the weights load
(:meth:`RunConfig.check`, then :meth:`RunConfig.check_model` on the config
alone) and again against the loaded model. The output directory is built in a
hidden sibling and renamed into place at the end, so a failed run leaves no
directory that looks whole. It is a checkpoint that loads with plain
``from_pretrained`` plus ``plan.json``, ``mergekit.yaml``, ``README.md`` (model
card), ``provenance.json``, ``config.yaml`` (the resolved configuration),
``metrics.json``, ``scores.json`` (when probes were measured), ``eval/<point>.json``
and ``quantized/`` (when quantized).
"""

from __future__ import annotations

import contextlib
import copy
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swapprune.config import RunConfig
from swapprune.errors import SwappruneError

Say = Callable[[str], None]


@dataclass
class Loaded:
    """What the stages share once the model is loaded."""

    model: Any
    tokenizer: Any
    source: Any  # swapprune.loading.ModelSource
    facts: Any  # swapprune.architectures.ModelFacts


@dataclass
class RunResult:
    """What a run produced.

    Attributes:
        config: the configuration that ran.
        output: the written directory (or scores / eval file), if any.
        plan: the applied :class:`~swapprune.plan.PrunePlan` (identity if nothing was cut).
        scores: the probe scores measured or reused, if any.
        metrics: costs, timings, reports (as in ``metrics.json``).
        eval: evaluation results by point (``base``, ``pruned``, ...).
        model, tokenizer: the final in-memory model and its tokenizer.
    """

    config: RunConfig
    output: Path | None = None
    plan: Any = None
    scores: Any = None
    metrics: dict = field(default_factory=dict)
    eval: dict = field(default_factory=dict)
    model: Any = None
    tokenizer: Any = None
    source: Any = None


# -- stages ---------------------------------------------------------------------------------


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
    if adaptive(config):
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


# -- the run --------------------------------------------------------------------------------


def run(
    config: RunConfig,
    *,
    say: Say | None = None,
    progress: bool = True,
    command: list[str] | None = None,
) -> RunResult:
    """Run ``config``: every stage it names, in order.

    Args:
        config: the run (checked here if not already).
        say: receives one line per stage (``None``: silent).
        progress: show progress bars.
        command: recorded in the provenance (default: ``sys.argv``).
    """
    cfg = config.check()
    book = _Book(cfg, say or (lambda _: None), list(sys.argv) if command is None else command)
    facts = read_facts(cfg)
    if facts is not None:
        cfg.check_model(facts)  # budget, pairs, context: before the weights load
    loaded = book.stage("load", load, cfg, progress)
    cfg.check_model(loaded.facts)
    res = RunResult(cfg, model=loaded.model, tokenizer=loaded.tokenizer, source=loaded.source)
    book.metrics["num_layers"] = loaded.facts.num_layers
    model, tok = loaded.model, loaded.tokenizer

    scores = reuse_scores(cfg.prune.scores, loaded) if cfg.prune and cfg.prune.scores else None
    windows = book.stage("heal windows", _heal_windows, cfg, loaded) if cfg.heal else None
    teacher = copy.deepcopy(model).eval() if cfg.heal and cfg.heal.distill else None
    book.measure("base", model, tok, windows)

    calibration = None
    if cfg.score or (cfg.prune and cfg.prune.plan is None):
        calibration = book.stage("calibrate", calibrate, cfg, loaded)
        book.metrics["calibration"] = calibration.describe()
    if cfg.score:
        book.say(f"[score] {estimate(cfg, loaded, calibration).describe()}")
        scores = book.stage("score", score, cfg, loaded, calibration, progress)
        if scores is None:  # non-zero torchrun rank
            return res
    if scores is not None and cfg.prune and cfg.prune.scores:
        # Reused scores: record the calibration that produced them, not this run's settings.
        book.metrics["calibration"] = scores.meta.get("calibration")
        book.metrics["scores_reused_from"] = str(Path(cfg.prune.scores).absolute())
    if cfg.prune:
        plan, scores = book.stage("select", select, cfg, loaded, calibration, scores, progress)
    else:
        plan, scores = select(cfg, loaded, calibration, scores, progress)  # the identity plan
    res.plan, res.scores = plan, scores
    if cfg.prune and cfg.prune.plan is None:
        stability(cfg, loaded, plan, scores, book)
    if cfg.cost is not None and cfg.prune:
        cost = book.stage("cost", measure_cost, cfg, loaded, plan)
        book.metrics["cost"] = cost.to_dict() | {"summary": cost.summary()}
        if cost.warning:
            book.say(f"warning: {cost.warning}")

    if cfg.prune:
        from swapprune.surgery import apply_plan

        book.stage("edit", apply_plan, model, plan)
        book.measure("pruned", model, tok, None if cfg.heal else windows)
    if cfg.heal:
        from swapprune.healing import heal

        model, report = book.stage(
            "heal",
            heal,
            model,
            tok,
            cfg.heal,
            plan=plan,
            teacher=teacher,
            windows=windows,
            progress=lambda s: book.say(f"  {s}"),
        )
        del teacher
        res.model = model
        book.metrics["heal"] = report.to_dict()
        if cfg.prune:
            book.metrics["costs"]["pruned"]["heldout_ppl"] = report.heldout_ppl_before
        book.measure("healed", model, tok, None, heldout=report.heldout_ppl_after)
        book.metrics["recovery"] = recovery(book.metrics["costs"])

    with contextlib.ExitStack() as stack:
        directory = None
        if cfg.export:
            from swapprune.artifacts import staging_dir

            directory = stack.enter_context(staging_dir(cfg.export.output))
            book.stage(
                "save",
                book.save_model,
                directory,
                model,
                tok,
                plan,
                loaded.source,
                calibration,
                scores,
            )
        if cfg.quantize:
            from swapprune.quantization import quantize_model

            book.metrics["quantize"] = book.stage(
                "quantize", quantize_model, model, cfg.quantize
            ).to_dict()
            book.measure("quantized", model, tok, windows)
            if directory is not None:
                book.stage(
                    "save quantized", book.save_quantized, directory, model, tok, plan, calibration
                )
        book.metrics["total_s"] = round(time.perf_counter() - book.start, 2)
        if directory is not None:
            book.finish(directory, plan, scores)
    res.metrics, res.eval = book.metrics, book.results
    if cfg.export:
        res.output = Path(cfg.export.output).expanduser().absolute()
        book.say(f"[done] wrote {res.output}")
    elif cfg.score and cfg.score.output:
        res.output = Path(cfg.score.output).expanduser().absolute()
    if cfg.eval and cfg.eval.output:
        res.output = _write_eval(cfg.eval.output, book.results.get("base"), loaded.source.id)
    return res


def _heal_windows(cfg: RunConfig, loaded: Loaded):
    from swapprune.healing import heal_windows

    assert cfg.heal is not None
    return heal_windows(loaded.tokenizer, cfg.heal, loaded.facts.context_length)


def _write_eval(path: str, result, model_id: str) -> Path:
    import json

    from swapprune.artifacts import write_json_atomic

    data = json.loads(result.to_json())
    data["model"] = model_id
    write_json_atomic(path, data)
    return Path(path).expanduser().absolute()


def recovery(costs: dict) -> dict:
    """Recovered fraction ``(pruned - healed) / (pruned - base)`` for each cost measured."""
    out: dict = {}
    for metric in costs.get("healed", {}):
        base, pruned, healed = (costs.get(p, {}).get(metric) for p in ("base", "pruned", "healed"))
        if None in (base, pruned, healed):
            continue
        gap = pruned - base
        out[metric] = {
            "base": base,
            "pruned": pruned,
            "healed": healed,
            "fraction": (pruned - healed) / gap if gap > 0 else None,
        }
    # Evaluation's WikiText-2 test perplexity is held out from all calibration text.
    out["primary"] = next((m for m in ("wikitext2_ppl", "heldout_ppl") if m in out), None)
    return out


class _Book:
    """Timings, metrics, evaluations at each point, and the files of the output directory."""

    def __init__(self, config: RunConfig, say: Say, command: list[str]):
        self.config, self.say, self.command = config, say, command
        self.metrics: dict = {"costs": {}, "eval": {}, "wall_s": {}}
        self.results: dict = {}
        self.start = time.perf_counter()

    def stage(self, name: str, fn, *args, **kwargs):
        t0 = time.perf_counter()
        self.say(f"[{name}] ...")
        out = fn(*args, **kwargs)
        dt = time.perf_counter() - t0
        self.metrics["wall_s"][name] = round(dt, 2)
        self.say(f"[{name}] done in {dt:.1f}s" + _summary(name, out))
        return out

    def measure(self, point: str, model, tok, windows, heldout: float | None = None) -> None:
        """Costs at ``point``: held-out heal windows (if healing) and the eval tasks (if asked)."""
        costs = self.metrics["costs"].setdefault(point, {})
        cfg = self.config
        if heldout is not None:
            costs["heldout_ppl"] = heldout
        elif windows is not None and cfg.heal is not None:
            from swapprune.healing import heldout_perplexity

            costs["heldout_ppl"] = self.stage(
                f"held-out ppl {point}", heldout_perplexity, model, windows, cfg.heal.batch_size
            )
        e = cfg.eval
        if e is None or (e.at is not None and point not in e.at):
            return
        res = self.stage(f"eval {point}", evaluate, cfg, model, tok)
        self.results[point] = res
        self.metrics["eval"][point] = {
            t: {m: {"value": v.value, "low": v.low, "high": v.high} for m, v in tr.metrics.items()}
            for t, tr in res.tasks.items()
        }
        ppl = res.tasks.get("swapprune_wikitext2_ppl")
        if ppl is not None:
            costs["wikitext2_ppl"] = ppl.metrics["perplexity"].value

    def provenance(self, calibration) -> dict:
        return {
            "command": self.command,
            "config": self.config.to_dict(),
            "calibration": self.metrics.get("calibration"),
            "scores_reused_from": self.metrics.get("scores_reused_from"),
            "heal": self.metrics.get("heal"),
        }

    def save_model(self, directory: Path, model, tok, plan, source, calibration, scores):
        from swapprune.checkpoint import write_checkpoint
        from swapprune.loading import resolve_dtype

        x = self.config.export
        assert x is not None
        ids = calibration.input_ids[:2] if calibration is not None else None
        dtype = resolve_dtype(x.save_dtype, "cpu") if x.save_dtype else None
        record = {k: self.metrics[k] for k in ("cost", "stability") if k in self.metrics}
        self.metrics["selfcheck"] = write_checkpoint(
            model,
            tok,
            plan,
            directory,
            save_dtype=dtype,
            provenance=self.provenance(calibration),
            base_model_id=source.id,
            selfcheck=x.selfcheck,
            check_ids=ids,
            card_extra=card_lines(self.metrics, plan),
            record=record,
        )
        return self.metrics["selfcheck"]

    def save_quantized(self, directory: Path, model, tok, plan, calibration):
        from swapprune.quantization import save_quantized

        assert self.config.quantize is not None
        ids = calibration.input_ids[:2] if calibration is not None else None
        prov = {"command": self.command, "config": self.config.to_dict(), "plan": plan.describe()}
        self.metrics["quantize"]["selfcheck"] = save_quantized(
            model,
            tok,
            directory / "quantized",
            config=self.config.quantize,
            provenance=prov,
            check_ids=ids,
            describe=plan.describe(),
            final_path="quantized",
        )

    def finish(self, directory: Path, plan, scores) -> None:
        from swapprune.artifacts import versions, write_json_atomic, write_text_atomic

        self.metrics.update(plan=plan.describe(), versions=versions())
        write_text_atomic(directory / "config.yaml", self.config.to_yaml())
        if scores is not None:
            scores.save(directory / "scores.json")
        write_json_atomic(directory / "metrics.json", self.metrics, indent=2)
        for point, res in self.results.items():
            (directory / "eval").mkdir(exist_ok=True)
            write_text_atomic(directory / "eval" / f"{point}.json", res.to_json(indent=1))


def card_lines(metrics: dict, plan) -> list[str]:
    """Model card lines: what the cut cost, how stable the selection is, what auto decided."""
    lines: list[str] = []
    cost = metrics.get("cost")
    if cost:
        lines += [
            "## What the cut cost",
            "",
            f"- {cost['summary'].removeprefix('cost: ')} (95% paired bootstrap CI "
            "over windows of the matched contract).",
            *([f"- **Warning**: {cost['warning']}"] if cost.get("warning") else []),
            "",
        ]
    stab = metrics.get("stability")
    if stab:
        lines += [
            "## Stability of the selection",
            "",
            f"- {stab['summary'].removeprefix('stability: ')}.",
            *([f"- **{stab['warning']}**"] if stab.get("warning") else []),
            "",
        ]
    auto = plan.scores.get("auto") if isinstance(plan.scores, dict) else None
    if auto:
        from swapprune.auto import decision_lines

        lines += [
            "## Regime and action (--protocol auto)",
            "",
            *[f"- {line}" for line in decision_lines(auto)],
            "",
        ]
    return lines


def _summary(name: str, out) -> str:
    if name == "select" and isinstance(out, tuple) and hasattr(out[0], "describe"):
        return f": {out[0].describe()}"
    if name == "cost" and hasattr(out, "summary"):
        return f": {out.summary().removeprefix('cost: ')}"
    if name.startswith("held-out") and isinstance(out, float):
        return f": {out:.3f}"
    if name.startswith("eval ") and hasattr(out, "tasks"):
        first = {t: next(iter(tr.metrics.items()), None) for t, tr in out.tasks.items()}
        return ": " + ", ".join(f"{t} {m[0]} {m[1].value:.4g}" for t, m in first.items() if m)
    return ""
