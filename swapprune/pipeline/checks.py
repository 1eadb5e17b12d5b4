"""Every check of a run that needs more than its configuration, in one place, before torch.

:mod:`swapprune.config` checks what a configuration says on its own: types, ranges,
choices among fixed names, and how the sections combine. What needs anything else
is checked here, once, at the edge (the run, the studies, the Python API, the
llm-compressor modifier, a recipe as it is read), before any weights load:

* the registries: criterion, strategy, merge-rule, task and serving-runtime names;
* the disk: input files, output files and directories (no output may replace an input);
* the hub: whether the model resolves;
* optional packages: optimum-quanto for quantization;
* the model's facts, read from its ``config.json`` or GGUF header
  (:func:`read_facts`): the budget against the depth, window lengths against the
  context, the probe pairs, the patch windows and the ``--serve`` constraint, from which
  the frozen :class:`~swapprune.select.spec.SelectionSpec` is built
  (:func:`selection_spec`).

:func:`check` runs all of them for a run, without torch or transformers. A run then
cuts its windows with the tokenizer alone (:func:`check_text`), so that a text too short
for them is refused before the weights load too; only that check imports them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swapprune.config import (
    CalibrationConfig,
    CompareConfig,
    RunConfig,
    ScoreConfig,
    SelectConfig,
    ValidateConfig,
)
from swapprune.config.cells import cell_select
from swapprune.config.select import HELDOUT_TOKENS
from swapprune.engine.orders import parse_pairs
from swapprune.engine.scores import ScoreResult
from swapprune.errors import SwappruneError
from swapprune.evaluation.names import resolve_tasks
from swapprune.gguf.convert import gguf_cache_dir, lookup
from swapprune.gguf.decision import GGUFOutput, gguf_output
from swapprune.model.arch import ARCHITECTURES
from swapprune.model.facts import ModelFacts
from swapprune.model.facts import read_facts as facts_of_source
from swapprune.model.footprint import plan_load
from swapprune.model.load import tokenizer_alone
from swapprune.model.source import check_resolvable, resolve_source
from swapprune.output.artifacts import (
    check_name,
    check_output_dir,
    check_output_file,
    written_by_swapprune,
)
from swapprune.pipeline import windows
from swapprune.select import constraints, criteria
from swapprune.select.reuse import check_reused
from swapprune.select.spec import SelectionSpec, adaptive_settings, build, resolve


@dataclass(frozen=True)
class TextWindows:
    """The windows a selection runs on, cut before the weights load (:func:`check_text`).

    Attributes:
        calibration: the calibration windows (the pool, when probing in tranches).
        heldout: the held-out windows (:class:`~swapprune.select.reference.Heldout`), or
            ``None`` when the selection needs none.
        context_length: the model's context they were cut for.
    """

    calibration: Any
    heldout: Any
    context_length: int | None


@dataclass
class Checked:
    """A configuration checked before any weights load.

    Attributes:
        facts: the model's facts from its config alone, or ``None`` when they cannot be
            read cheaply (the checks then run right after loading).
        selection: the frozen :class:`~swapprune.select.spec.SelectionSpec` (if selecting
            and the facts were read).
    """

    facts: ModelFacts | None
    selection: SelectionSpec | None
    notes: tuple[str, ...] = ()


def check(config: RunConfig, study: bool = False) -> Checked:
    """Everything that needs no weights: the configuration, then the model's facts.

    Args:
        config: the run.
        study: a ``compare`` or ``validate`` run, which brings its own work.
    """
    check_config(config, study)
    room = check_room(config)
    facts = read_facts(config)
    selection = check_model(config, facts) if facts is not None else None
    p = config.prune
    if p is not None and p.plan is None and p.scores:
        # Reading the file costs little next to loading the model that it would not fit.
        scores = check_scores_file(p.scores, facts)
        if selection is not None:
            check_reused(scores, selection, p.scores, config)
    return Checked(facts, selection, (room,) if room else ())


def check_room(config: RunConfig) -> str | None:
    """The load against this machine's memory and disk (:func:`~swapprune.model.footprint.plan_load`).

    A dtype chosen to fit (bfloat16, when the default float32 does not) is set in
    ``config.model.dtype``; returns the line that says so, or ``None``. Skipped with
    ``--device-map`` (accelerate places the weights) and remote code.
    """
    m = config.model
    if m.device_map is not None or m.trust_remote_code:
        return None
    source = resolve_source(m.name)
    cache_dir, cached = None, True
    if source.gguf_file:
        cache_dir = gguf_cache_dir()
        cached = lookup(Path(source.path) / source.gguf_file) is not None
    on_gpu = m.device not in (None, "cpu") or (
        m.device is None and Path("/proc/driver/nvidia").exists()
    )
    plan = plan_load(source, m.dtype, cache_dir=cache_dir, cached=cached, on_gpu=on_gpu)
    if plan.dtype != m.dtype:
        m.dtype = plan.dtype
    return plan.note


def check_config(config: RunConfig, study: bool = False) -> RunConfig:
    """What needs no model: the configuration on its own, then the names, files, hub and
    packages it refers to. Resolves ``eval.tasks``' aliases in place; returns ``config``.

    A run that may write ``model.gguf`` reads the source GGUF's metadata here.
    """
    config.check(study)
    check_resolvable(config.model.name)
    _check_calibration(config.calibration)
    if config.score is not None:
        _check_score(config.score)
    if config.prune is not None:
        _check_selection(config.prune, config.calibration)
    if config.heal is not None:
        _text_file("heal.calib", config.heal.calib)
    if config.quantize is not None and importlib.util.find_spec("optimum.quanto") is None:
        raise SwappruneError("quantization needs optimum-quanto: pip install optimum-quanto")
    if config.eval is not None:
        config.eval.tasks = resolve_tasks(config.eval.tasks)
        if config.eval.output is not None:
            check_output_file(config.eval.output, "--output")
            check_writable(config.eval.output, "--output")
    if config.export is not None:
        x = config.export
        check_output_dir(x.output, x.overwrite, protect=_inputs(config))
        check_writable(x.output, "--output")
        gguf_output(config)  # refuses --gguf on that cannot be met
    return config


def check_selection(select: SelectConfig, calibration: CalibrationConfig) -> None:
    """A selection's settings without a run around them (the Python API, the modifier):
    the sections on their own, then the names and files they refer to."""
    calibration.check()
    _check_calibration(calibration)
    select.check()
    _check_selection(select, calibration)


def check_compare(compare: CompareConfig) -> None:
    """``swapprune compare``'s own settings: every cell's names, the scores file, the output."""
    compare.check()
    for entry in compare.criteria:
        _check_selection(cell_select(entry, compare.strategy), CalibrationConfig())
    if compare.scores is not None:
        if not Path(compare.scores).is_file():
            raise SwappruneError(f"scores file {compare.scores} not found")
        check_scores_file(compare.scores)
    out = Path(compare.output)
    check_name(out)
    if out.is_dir() and any(out.iterdir()):
        # An earlier comparison is resumed (its cache is reused); anything else is refused.
        if not ((out / "cache").is_dir() or written_by_swapprune(out)):
            raise SwappruneError(
                f"output directory {out} is not empty and holds no comparison; choose another"
            )
        if not os.access(out, os.W_OK | os.X_OK):
            raise SwappruneError(f"output directory {out} is not writable")
    else:
        check_output_dir(compare.output)
    check_writable(compare.output, "--output")


def check_validate(validate: ValidateConfig) -> None:
    """``swapprune validate``'s own settings: the criteria's names, the target, the output."""
    validate.check()
    for name in validate.criteria:
        criteria.get(name)
    target = validate.target
    if target not in ("wikitext2-test", "calibration") and not Path(target).is_file():
        raise SwappruneError(f"--target file {target} not found")
    check_output_dir(validate.output)
    check_writable(validate.output, "--output")


# -- the model's facts ---------------------------------------------------------------------


def read_facts(config: RunConfig) -> ModelFacts | None:
    """:class:`~swapprune.model.facts.ModelFacts` from the model's config alone, or ``None``."""
    if config.model.trust_remote_code:
        return None  # the config class itself may come with the remote code
    return facts_of_source(resolve_source(config.model.name))


def check_model(config: RunConfig, facts: ModelFacts) -> SelectionSpec | None:
    """Checks that need only the model's facts; returns the selection spec (if selecting)."""
    p, ctx = config.prune, facts.context_length
    spec = None
    if p is not None and p.plan is None:
        gguf = gguf_output(config) if config.export is not None else None
        spec = selection_spec(p, config.calibration, facts, bool(config.score), gguf)
    if config.score is not None and config.score.pairs:
        parse_pairs(config.score.pairs, facts.num_layers)
    if p is not None and p.plan is None and p.certify:
        heldout_tokens(p, ctx)
    if p is not None and p.plan is None and p.patch != "none":
        check_patch_windows(p, facts)
    if ctx is not None and config.calibration.tokens > ctx:
        raise SwappruneError(
            f"tokens {config.calibration.tokens} exceeds the model's context length {ctx}"
        )
    if ctx is not None and config.eval is not None and config.eval.max_length > ctx:
        raise SwappruneError(
            f"eval max_length {config.eval.max_length} exceeds the model's context length {ctx}"
        )
    return spec


def selection_spec(
    select: SelectConfig,
    calibration: CalibrationConfig,
    facts: ModelFacts,
    scores_given: bool = False,
    gguf: GGUFOutput | None = None,
) -> SelectionSpec:
    """The checked, frozen spec of a selection on this model.

    Args:
        select, calibration: the configuration sections.
        facts: the model's facts (its depth, family, layer types).
        scores_given: probes come from elsewhere (a ``score`` stage, ``compare``'s
            shared probes): no adaptive tranches then.
        gguf: the run's resolved ``--gguf``, on which ``--serve``'s default depends.

    Raises:
        SwappruneError: a budget the model's depth, the strategy or ``--serve`` cannot meet.
    """
    serve = constraints.resolve(select.serve, facts, gguf)  # a budget it cannot meet is refused
    spec = build(select, calibration, facts.num_layers, scores_given, serve)
    if select.landscape:
        top = landscape_sets(select.landscape, facts.num_layers, spec.budget, select.landscape_sets)
        spec = dataclasses.replace(spec, landscape=tuple(top))
    return spec


def landscape_sets(path: str, num_layers: int, budget: int, count: int) -> list[tuple[int, ...]]:
    """The top ``count`` refined sets of a finished ``landscape.json``, cheapest first.

    Refused in one line: a file that is not a finished landscape, or one of another
    depth or budget (its model's fingerprint is checked once the model loads).
    """
    try:
        state = json.loads(Path(path).read_text())
        refined = state["result"]["refined"]
        budget_of, depth = state["settings"]["budget"], state["constraints"]["describe"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SwappruneError(f"--landscape {path} is not a finished landscape.json: {e}") from None
    if budget_of != budget:
        raise SwappruneError(
            f"--landscape {path} is of budget {budget_of}; this cut removes {budget}"
        )
    sets = [tuple(sorted(int(b) for b in r["set"])) for r in refined]
    if any(len(s) != budget or max(s) >= num_layers for s in sets):
        raise SwappruneError(
            f"--landscape {path} holds sets of another model ({depth}); this one has "
            f"{num_layers} blocks"
        )
    return sets[:count]


def heldout_tokens(select: SelectConfig, context: int | None) -> int:
    """Tokens per held-out window: as set, else 512 capped at the model's context."""
    if select.heldout_tokens is not None:
        if context is not None and select.heldout_tokens > context:
            raise SwappruneError(
                f"heldout_tokens {select.heldout_tokens} exceeds the model's context length "
                f"{context}"
            )
        return select.heldout_tokens
    return HELDOUT_TOKENS if context is None else min(HELDOUT_TOKENS, context)


def check_patch_windows(select: SelectConfig, facts: ModelFacts) -> None:
    """A full linear patch needs at least as many patch tokens as the residual width."""
    spec = ARCHITECTURES.get(facts.model_type)
    if spec is not None and spec.mlp_out is None:
        raise SwappruneError(
            f"model_type '{facts.model_type}' has no single module that ends its MLP branch "
            "(a mixture of experts): a linear patch cannot be folded; use --patch none"
        )
    full = spec is None or spec.mlp_out_kind in ("linear", "conv1d")
    tokens = select.patch_prompts * (
        select.patch_tokens
        if facts.context_length is None
        else min(select.patch_tokens, facts.context_length)
    )
    if full and facts.hidden_size and tokens < facts.hidden_size:
        raise SwappruneError(
            f"a linear patch needs at least as many patch tokens as the hidden size "
            f"({facts.hidden_size}); {select.patch_prompts} x {select.patch_tokens} windows hold "
            f"{tokens}: raise --patch-prompts or --patch-tokens"
        )


# -- the sections' names and files ---------------------------------------------------------


def _check_calibration(c: CalibrationConfig) -> None:
    if c.adaptive == "on":
        adaptive_settings(c).check()
    _text_file("calib", c.calib)


def _check_score(s: ScoreConfig) -> None:
    if s.output is not None:
        check_output_file(s.output, "--output")
        check_writable(s.output, "--output")


# -- the text the windows are cut from ------------------------------------------------------


def check_text(config: RunConfig, checked: Checked) -> TextWindows | None:
    """Whether the texts hold the windows the run asks: the calibration windows of its
    probes or selection, and the held-out windows of the certificate and of ``auto``'s
    search outside them.

    The one check that needs the tokenizer, so the run makes it after :func:`check`,
    still before the weights load: the tokenizer is read alone, from the model's files,
    and the windows are cut as the run would cut them (:mod:`swapprune.pipeline.windows`),
    which the run then uses. ``None`` (nothing cut) when the run cuts no windows, the
    facts are unknown, or the tokenizer comes only with the weights: the same refusals
    then come right after the load, before any forward pass.
    """
    p, facts, spec = config.prune, checked.facts, checked.selection
    selecting = p is not None and p.plan is None and spec is not None
    if facts is None or not (selecting or config.score is not None):
        return None
    tokenizer = tokenizer_alone(resolve_source(config.model.name))
    if tokenizer is None:
        return None
    ctx = facts.context_length
    calibration = windows.calibration(config, tokenizer, ctx)
    heldout = None
    if selecting:
        assert p is not None
        tokens = heldout_tokens(p, ctx)
        heldout = windows.heldout(config, spec, tokenizer, tokens, calibration, ctx)
    return TextWindows(calibration, heldout, ctx)


# -- a scores file to reuse -----------------------------------------------------------------


def check_scores_file(path: str, facts: ModelFacts | None = None) -> ScoreResult:
    """A scores file read in full before the model loads: every value in shape
    (:meth:`~swapprune.engine.scores.ScoreResult.from_dict`), a finished run, and, when the
    model's facts are known, as many blocks as the model. Returns the scores."""
    scores = ScoreResult.load(path)
    if scores.meta.get("incomplete"):
        raise SwappruneError(
            f"scores file {path} is from a run that did not finish; rerun "
            f"'swapprune score --output {path}' with its settings to complete it"
        )
    if facts is not None and scores.num_layers != facts.num_layers:
        raise SwappruneError(
            f"scores file {path} is for a {scores.num_layers}-block model; "
            f"this model has {facts.num_layers}"
        )
    return scores


# -- the disk: whether an output can be written ---------------------------------------------


def check_writable(target: str | os.PathLike, what: str) -> None:
    """Refuse an output whose directory takes no new file, by creating and removing one there.

    Every output is written beside its final place and renamed into it (a checkpoint's
    hidden ``.NAME.partial-*`` sibling, a file's temporary twin), so the probe goes where
    that is made: the target's parent, or the nearest ancestor that exists (the parents
    are created on the way). Permission bits say too little: root passes every
    ``os.access`` test, and ``/proc``, a read-only mount or a full quota refuse the file
    all the same.
    """
    out = Path(target).expanduser().absolute()
    where = out.parent
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        fd, probe = tempfile.mkstemp(prefix=".swapprune-probe-", dir=where)
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise SwappruneError(
            f"{what} {target} cannot be written: creating a file in {where} fails ({reason})"
        ) from None
    os.close(fd)
    os.unlink(probe)


def _check_selection(select: SelectConfig, calibration: CalibrationConfig) -> None:
    """The plan or scores file, the criterion, strategy and merge rule, the runtimes."""
    if select.plan is not None:
        if not Path(select.plan).is_file():
            raise SwappruneError(f"plan file {select.plan} not found")
        return
    resolve(select, calibration)
    if select.scores is not None and not Path(select.scores).is_file():
        raise SwappruneError(f"scores file {select.scores} not found")
    if select.landscape is not None and not Path(select.landscape).is_file():
        raise SwappruneError(f"landscape file {select.landscape} not found")
    constraints.check_names(select.serve)
    if select.op == "merge" and select.serve not in (None, [constraints.NONE]):
        raise SwappruneError(
            "--serve keeps a removal in phase; it does not combine with --op merge"
        )
    _text_file("heldout_calib", select.heldout_calib)


def _text_file(where: str, source: str | None) -> None:
    if source and Path(source).suffix in (".txt", ".jsonl") and not Path(source).is_file():
        raise SwappruneError(f"{where}: file {source} not found")


def _inputs(config: RunConfig) -> tuple[str, ...]:
    """Local paths the run reads, which no output may replace."""
    paths = [config.model.name]
    if config.prune is not None:
        paths += [p for p in (config.prune.scores, config.prune.plan) if p]
    return tuple(p for p in paths if Path(p).expanduser().exists())
