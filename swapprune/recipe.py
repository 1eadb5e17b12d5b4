"""Recipes: one YAML file describing a whole compression run, validated once at the edge.

A recipe has optional stages, run in this order::

    model -> calibration -> score -> prune -> heal -> quantize -> eval -> export

Every stage is a dataclass whose fields carry help text (``swapprune run
--schema`` prints them). :func:`load_recipe` reads the YAML, applies
``--set key.sub=value`` overrides and validates everything that needs no model:
unknown keys (with a did-you-mean), types, names (criteria, strategies, merge
rules, quantization schemes, eval tasks), files and the output directory. The
budget is checked against the layer count as soon as the model's config is
read (see :mod:`swapprune.recipe_run`).

A stage set to ``null`` (or left empty) is skipped; ``{}`` runs it with defaults.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swapprune.errors import SwappruneError, did_you_mean
from swapprune.healing import HealConfig
from swapprune.quantization import QuantizeConfig

POINTS = ("base", "pruned", "healed", "quantized")


def _help(text: str) -> dict:
    return {"help": text}


@dataclass
class ModelStage:
    """Which model to load, and where."""

    spec: str = field(default="smollm2-135m", metadata=_help(
        "hub id, local directory, .gguf file or alias (smollm2-135m)"))
    dtype: str | None = field(default=None, metadata=_help("float32 (default), bfloat16, float16"))
    device: str | None = field(default=None, metadata=_help("cpu, cuda, cuda:1 (default: cuda if present)"))
    device_map: str | None = field(default=None, metadata=_help("e.g. auto: accelerate places the weights"))
    trust_remote_code: bool = field(default=False, metadata=_help("allow model code from the hub"))

    def check(self) -> None:
        from swapprune.loading import resolve_dtype, resolve_source

        resolve_dtype(self.dtype, "cpu")
        resolve_source(self.spec)


@dataclass
class CalibrationStage:
    """Windows the probes and model-based criteria run on (not the healing text)."""

    calib: str | None = field(default=None, metadata=_help(
        "wikitext2-valid (default, vendored), a .txt file, a .jsonl prompt set or a datasets name"))
    prompts: int = field(default=64, metadata=_help("number of windows"))
    tokens: int = field(default=128, metadata=_help("tokens per window"))
    seed: int = field(default=0, metadata=_help("window pick, bootstrap and random-criterion seed"))
    positions: str = field(default="all", metadata=_help("where KL is measured: last or all"))
    batch_size: int = field(default=8, metadata=_help("windows per forward pass"))

    def check(self) -> None:
        if self.positions not in ("last", "all"):
            raise _bad("calibration.positions", self.positions, ("last", "all"))
        if self.prompts < 1 or self.tokens < 2 or self.batch_size < 1:
            raise SwappruneError("calibration.prompts/batch_size must be >= 1 and tokens >= 2")
        _check_file("calibration.calib", self.calib)


@dataclass
class ScoreStage:
    """Measure swap-KL probes once and keep them (``scores.json``); prune reuses them."""

    protocols: list[str] = field(default_factory=lambda: ["replacement", "interchange"],
                                 metadata=_help("probes: replacement, interchange, deletion"))
    pairs: str = field(default="adjacent", metadata=_help("adjacent, all, gap:K or 3-4,7-9"))
    bootstrap: int = field(default=1000, metadata=_help("bootstrap resamples for the CIs"))
    cache_gb: float = field(default=4.0, metadata=_help("memory for cached hidden states"))

    def check(self) -> None:
        from swapprune.engine.plans import parse_protocols

        parse_protocols(",".join(self.protocols))


@dataclass
class PruneStage:
    """Select blocks at a budget and remove or merge them."""

    budget: int = field(metadata=_help("number of blocks to remove or merge (required)"))
    protocol: str = field(default="interchange", metadata=_help(
        "criterion: interchange, replacement, deletion, bi, angular, sleb, random, reverse"))
    strategy: str | None = field(default=None, metadata=_help(
        "greedy (default), spaced:G, contiguous, beam:W, iterative (default for sleb)"))
    op: str = field(default="remove", metadata=_help("remove or merge"))
    merge: str = field(default="average", metadata=_help("merge rule for op merge: average, laco"))
    protect_first: int = field(default=0, metadata=_help("never remove the first k blocks"))
    protect_last: int = field(default=0, metadata=_help("never remove the last k blocks"))
    oracle_metric: str = field(default="ppl", metadata=_help("metric of beam/sleb queries: ppl, kl"))
    max_oracle_calls: int = field(default=400, metadata=_help("cap for beam search"))
    scores: str | None = field(default=None, metadata=_help("reuse a scores.json instead of probing"))

    def request(self, seed: int = 0):
        from swapprune.pruning import PruneRequest

        return PruneRequest(
            budget=self.budget, protocol=self.protocol, strategy=self.strategy, op=self.op,
            merge=self.merge, protect_first=self.protect_first, protect_last=self.protect_last,
            seed=seed, oracle_metric=self.oracle_metric, beam_calls=self.max_oracle_calls)

    def check(self) -> None:
        self.request().resolve()
        if self.scores is not None and not Path(self.scores).is_file():
            raise SwappruneError(f"prune.scores: file {self.scores} not found")


@dataclass
class EvalStage:
    """lm-eval tasks run on the in-memory model at each point of the run."""

    tasks: list[str] = field(default_factory=lambda: ["wikitext2_ppl"], metadata=_help(
        "task names or aliases (swapprune list); wikitext2_ppl is the matched contract"))
    limit: int | None = field(default=None, metadata=_help(
        "examples per task / perplexity windows (quick checks only)"))
    words: int = field(default=5000, metadata=_help("words of WikiText-2 test for wikitext2_ppl"))
    max_length: int = field(default=512, metadata=_help("context (perplexity window) in tokens"))
    batch_size: int = field(default=8, metadata=_help("sequences per forward pass"))
    bootstrap: int = field(default=1000, metadata=_help("bootstrap resamples for the CIs"))
    at: list[str] | None = field(default=None, metadata=_help(
        "points to evaluate: base, pruned, healed, quantized (default: every one that runs)"))

    def check(self) -> None:
        from swapprune.evaluation import resolve_tasks

        self.tasks = resolve_tasks(self.tasks)
        for p in self.at or ():
            if p not in POINTS:
                raise _bad("eval.at entry", p, POINTS)
        if self.words < 1 or self.max_length < 2 or self.batch_size < 1:
            raise SwappruneError("eval.words/batch_size must be >= 1 and max_length >= 2")
        if self.limit is not None and self.limit < 1:
            raise SwappruneError(f"eval.limit must be >= 1, got {self.limit}")


@dataclass
class ExportStage:
    """Where the run directory goes: recipe, plan, metrics, model/ and quantized/."""

    output: str = field(metadata=_help("run directory to write (required)"))
    save_dtype: str | None = field(default=None, metadata=_help("dtype of saved weights (default: as loaded)"))
    overwrite: bool = field(default=False, metadata=_help("replace a non-empty run directory"))
    selfcheck: bool = field(default=True, metadata=_help("reload + generate self-check of model/"))

    def check(self) -> None:
        from swapprune.artifacts import check_output_dir
        from swapprune.loading import resolve_dtype

        if self.save_dtype is not None:
            resolve_dtype(self.save_dtype, "cpu")
        check_output_dir(self.output, self.overwrite)


@dataclass
class Recipe:
    """A whole run. Stages left ``None`` are skipped (``model`` and ``calibration`` use defaults)."""

    model: ModelStage = field(default_factory=ModelStage, metadata=_help("the model to compress"))
    calibration: CalibrationStage = field(default_factory=CalibrationStage,
                                          metadata=_help("probe/criterion windows"))
    score: ScoreStage | None = field(default=None, metadata=_help("measure and keep probes"))
    prune: PruneStage | None = field(default=None, metadata=_help("select and remove/merge blocks"))
    heal: HealConfig | None = field(default=None, metadata=_help("LoRA healing, merged"))
    quantize: QuantizeConfig | None = field(default=None, metadata=_help("weight quantization"))
    eval: EvalStage | None = field(default=None, metadata=_help("evaluation at each point"))
    export: ExportStage | None = field(default=None, metadata=_help("write the run directory"))

    def check(self) -> None:
        """Validate every stage and their combination; no model is touched."""
        for f in dataclasses.fields(self):
            stage = getattr(self, f.name)
            if stage is not None:
                stage.check()
        if self.heal is not None:
            _check_file("heal.calib", self.heal.calib)
            if self.heal.near_cuts and self.prune is None:
                raise SwappruneError("heal.near_cuts needs a prune stage")
        if self.eval is not None:
            ran = self.points()
            for p in self.eval.at or ():
                if p not in ran:
                    raise SwappruneError(f"eval.at names '{p}' but that stage does not run")
        if not any((self.score, self.prune, self.heal, self.quantize, self.eval, self.export)):
            raise SwappruneError("the recipe does nothing: add a score/prune/heal/quantize/eval/export stage")

    def points(self) -> list[str]:
        """Points of the run at which a model exists, in order."""
        stage = {"pruned": self.prune, "healed": self.heal, "quantized": self.quantize}
        return ["base"] + [p for p in POINTS[1:] if stage[p] is not None]

    def to_dict(self) -> dict:
        """The resolved recipe (defaults filled in), stages that do not run left out."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# -- loading and validation ---------------------------------------------------------------


def load_recipe(path: str | Path | None, overrides: list[str] | None = None,
                data: dict | None = None) -> Recipe:
    """Read a recipe YAML (or ``data``), apply ``key.sub=value`` overrides and validate it.

    Raises:
        SwappruneError: unreadable file, unknown key, wrong type, unknown name,
            impossible setting, unusable output directory.
    """
    import yaml

    if data is None:
        p = Path(path)
        if not p.is_file():
            raise SwappruneError(f"recipe {path} not found")
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise SwappruneError(f"recipe {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise SwappruneError(f"recipe {path} must be a mapping of stages, got {type(data).__name__}")
    for item in overrides or ():
        apply_override(data, item)
    recipe = build(Recipe, data, "")
    recipe.check()
    return recipe


def apply_override(data: dict, item: str) -> None:
    """Set ``key.sub=value`` in ``data``; the value is parsed as YAML (``3``, ``true``, ``[a, b]``)."""
    import yaml

    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise SwappruneError(f"--set expects key.sub=value, got '{item}'")
    parts = key.strip().split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise SwappruneError(f"--set {key}: '{'.'.join(parts[: i + 1])}' is not a section")
    try:
        node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        node[parts[-1]] = raw


def build(cls, data: Any, where: str):
    """Build dataclass ``cls`` from ``data``: unknown keys, missing keys and types are errors."""
    label = where or "recipe"
    if not isinstance(data, dict):
        raise SwappruneError(f"{label} must be a mapping, got {_kind(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            raise SwappruneError(
                f"unknown key '{_join(where, str(key))}'{did_you_mean(str(key), fields)}; "
                f"allowed in {label}: {', '.join(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, f in fields.items():
        missing = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if name not in data:
            if missing:
                raise SwappruneError(f"{_join(where, name)} is required ({f.metadata.get('help', '')})")
            continue
        kwargs[name] = _coerce(data[name], hints[name], _join(where, name))
    return cls(**kwargs)


def _coerce(value: Any, tp, where: str):
    """Check ``value`` against annotation ``tp``; returns it (nested stages built)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is not type(None):
                return _coerce(value, a, where)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    if typing.get_origin(tp) is list:
        if isinstance(value, str):  # --set eval.tasks=piqa,boolq
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise SwappruneError(f"{where} must be a list, got {_kind(value)}")
        return [_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }[tp]
    if not ok:
        shown = f" {value!r}" if isinstance(value, (str, int, float)) else ""
        raise SwappruneError(f"{where} must be {_TYPE_WORDS[tp]}, got {_kind(value)}{shown}")
    return float(value) if tp is float else value


_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", type(None): "null"}.get(type(value), type(value).__name__)


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _bad(what: str, value: str, choices) -> SwappruneError:
    from swapprune.errors import unknown_name

    return unknown_name(what, value, choices)


def _check_file(what: str, source: str | None) -> None:
    if source and Path(source).suffix in (".txt", ".jsonl") and not Path(source).is_file():
        raise SwappruneError(f"{what}: file {source} not found")


def describe_schema() -> str:
    """Every stage and field with its default and help text (``swapprune run --schema``)."""
    lines = []
    for stage in dataclasses.fields(Recipe):
        cls = typing.get_args(typing.get_type_hints(Recipe)[stage.name])[:1] or ()
        cls = cls[0] if cls else typing.get_type_hints(Recipe)[stage.name]
        lines.append(f"{stage.name}:  # {stage.metadata['help']}")
        for f in dataclasses.fields(cls):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            shown = "REQUIRED" if default is dataclasses.MISSING else json.dumps(default)
            lines.append(f"  {f.name + ': ' + shown:<36} # {f.metadata.get('help', '')}")
    return "\n".join(lines)
