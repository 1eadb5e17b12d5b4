"""The one configuration of a swapprune run: every stage's settings, validated once.

A run is ``load -> calibrate -> score -> select -> edit -> heal -> save ->
quantize -> evaluate``; :class:`RunConfig` holds one dataclass per stage. The
CLI flags, the Python API and the recipe YAML are three views of it:

* the CLI generates its options from the fields' metadata
  (:mod:`swapprune.cli.options`);
* ``swapprune.run(RunConfig(...))`` takes it directly;
* :func:`swapprune.recipe.load_config` reads a recipe YAML, applies ``--set key.sub=value``
  overrides, rejects unknown keys with a did-you-mean, and checks types.

:meth:`RunConfig.check` validates everything that needs no model (names,
ranges, files, output paths) and :meth:`RunConfig.check_model` everything that
needs only the model's config (budget vs depth, window length vs context), so
both run before any weights load. This module imports neither torch nor
transformers.

Old spellings (``--out``, ``--protocols`` for probes, ``model.spec``,
``prune.oracle_metric``) are accepted as deprecated aliases for one release.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swapprune.errors import SwappruneError, unknown_name

DTYPES = ("float32", "bfloat16", "float16")
POSITIONS = ("last", "all")
PROBES = ("replacement", "interchange", "deletion")
OPS = ("remove", "merge")
ORACLE_METRICS = ("ppl", "kl")
SCHEMES = ("int8", "int4")
POINTS = ("base", "pruned", "healed", "quantized")
NO_TEXT = (None, "", "none", "null")
_DEVICE = re.compile(r"^(cpu|auto|mps|meta|(cuda|xpu|npu)(:\d+)?)$")


def opt(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    factory: Any = None,
    flag: str | None = None,
    aliases: tuple[str, ...] = (),
    cli: bool = True,
    metavar: str | None = None,
    required: bool = False,
) -> Any:
    """A config field with the metadata the CLI and the recipe schema read.

    Args:
        default: the default value (omit for a required field).
        help: one line for ``--help`` and ``swapprune run --schema``.
        factory: ``default_factory`` for list defaults.
        flag: the CLI flag when it is not ``--field-name``.
        aliases: deprecated spellings (CLI flags starting with ``--``, or YAML keys).
        cli: whether the field has a CLI flag at all.
        metavar: the placeholder shown in ``--help``.
        required: required in practice although the dataclass has a default (checked by
            the section's ``check``; shown as REQUIRED in the schema).
    """
    meta = {
        "help": help,
        "flag": flag,
        "aliases": aliases,
        "cli": cli,
        "metavar": metavar,
        "required": required,
    }
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _positive(where: str, value: int | float | None, minimum: int | float = 1) -> None:
    if value is not None and value < minimum:
        raise SwappruneError(f"{where} must be >= {minimum}, got {value}")


def _choice(where: str, value: str | None, choices) -> None:
    if value is not None and value not in choices:
        raise unknown_name(where, value, choices)


def _check_text_file(where: str, source: str | None) -> None:
    if source and Path(source).suffix in (".txt", ".jsonl") and not Path(source).is_file():
        raise SwappruneError(f"{where}: file {source} not found")


# -- stages ---------------------------------------------------------------------------------


@dataclass
class ModelConfig:
    """Which model to load, and where."""

    name: str = opt(
        "smollm2-135m",
        "hub id, local directory, .gguf file or alias (smollm2-135m)",
        flag="--model",
        aliases=("spec",),
    )
    dtype: str | None = opt(None, "float32 (default), bfloat16 or float16")
    device: str | None = opt(None, "cpu, cuda, cuda:1, mps (default: cuda if present)")
    device_map: str | None = opt(None, "e.g. auto: accelerate places and offloads the weights")
    trust_remote_code: bool = opt(False, "allow model code from the hub")

    def check(self) -> None:
        _choice("dtype", self.dtype, DTYPES)
        if self.device is not None and not _DEVICE.match(self.device):
            raise SwappruneError(
                f"unknown device '{self.device}'; use cpu, cuda, cuda:N, mps or auto"
            )
        from swapprune.loading import resolve_source

        resolve_source(self.name)


@dataclass
class CalibrationConfig:
    """Unlabeled windows the probes and model-based criteria run on."""

    calib: str | None = opt(
        None,
        "wikitext2-valid (default, vendored), a .txt file, a .jsonl prompt set or a datasets name",
    )
    prompts: int = opt(64, "number of calibration windows")
    tokens: int = opt(128, "tokens per window")
    seed: int = opt(0, "window pick, bootstrap and random-criterion seed")
    positions: str = opt(
        "all",
        "where KL is measured: all positions (default) or the last "
        "(the paper's GPT-2/Pythia setting)",
    )
    batch_size: int = opt(8, "windows per forward pass")
    adaptive: str = opt(
        "auto",
        "score in tranches until the selection is stable: on, off, or "
        "auto (on for --protocol auto)",
    )
    target_frequency: float = opt(
        0.9, "adaptive: stop when the chosen set comes out in this share of bootstrap resamples"
    )
    tranche: int = opt(16, "adaptive: windows added per round")
    max_prompts: int = opt(128, "adaptive: never probe more windows than this")

    def check(self) -> None:
        _choice("adaptive", self.adaptive, ("auto", "on", "off"))
        if self.adaptive != "off":
            self.adaptive_settings().check()
        _choice("positions", self.positions, POSITIONS)
        _positive("prompts", self.prompts)
        _positive("tokens", self.tokens, 2)
        _positive("seed", self.seed, 0)
        _positive("batch_size", self.batch_size)
        _check_text_file("calib", self.calib)

    def adaptive_settings(self):
        """The :class:`~swapprune.adaptive.AdaptiveSettings` of these fields."""
        from swapprune.adaptive import AdaptiveSettings

        return AdaptiveSettings(
            target=self.target_frequency,
            tranche=self.tranche,
            max_windows=self.max_prompts,
            seed=self.seed,
        )

    def adaptive_for(self, protocol: str | None) -> bool:
        """Whether selection with criterion ``protocol`` scores adaptively."""
        return self.adaptive == "on" or (self.adaptive == "auto" and protocol == "auto")

    def describe(self) -> str:
        return (
            f"{self.prompts} windows x {self.tokens} tokens of {self.calib or 'wikitext2-valid'}"
            f", seed {self.seed}, {self.positions} positions"
        )


@dataclass
class ScoreConfig:
    """Measure the swap-KL probes once and keep them (``scores.json``)."""

    probes: list[str] = opt(
        help="probes: replacement, interchange, deletion",
        factory=lambda: ["replacement", "interchange"],
        aliases=("protocols", "--protocols"),
    )
    pairs: str = opt("adjacent", "pairs to probe: adjacent, all, gap:K or 3-4,7-9")
    bootstrap: int = opt(1000, "bootstrap resamples for the CIs")
    cache_gb: float = opt(4.0, "memory for cached hidden states, GB")
    output: str | None = opt(
        None, "scores JSON to write (resumed if it exists)", flag="--output", aliases=("--out",)
    )

    def check(self) -> None:
        if not self.probes:
            raise SwappruneError("give at least one probe: replacement, interchange, deletion")
        for p in self.probes:
            _choice("probe", p, PROBES)
        _positive("bootstrap", self.bootstrap)
        if not self.cache_gb > 0:
            raise SwappruneError(f"cache_gb must be > 0, got {self.cache_gb}")
        if self.output is not None:
            from swapprune.artifacts import check_output_file

            check_output_file(self.output, "--output")


@dataclass
class SelectConfig:
    """Choose the blocks to remove or merge, at a budget (or apply a saved plan)."""

    budget: int | None = opt(
        None, "number of blocks to remove or merge (unless a plan is applied)", required=True
    )
    protocol: str = opt(
        "interchange",
        "criterion: interchange, replacement, bi, angular, sleb, ... (swapprune list)",
    )
    strategy: str | None = opt(
        None, "selection strategy (default: the criterion's own; swapprune list)"
    )
    op: str = opt("remove", "remove or merge")
    merge: str = opt("average", "merge rule for op merge: average or laco")
    protect_first: int = opt(0, "never remove the first k blocks")
    protect_last: int = opt(0, "never remove the last k blocks")
    oracle: str = opt(
        "ppl", "metric of oracle queries (beam, sleb): ppl or kl", aliases=("oracle_metric",)
    )

    max_oracle_calls: int = opt(400, "cap on oracle calls of beam search")
    beam_seeds: int = opt(
        12,
        "beam search: seed candidates taken from the criterion (the paper: "
        "top 12 interchange candidates)",
    )
    scores: str | None = opt(None, "reuse a scores.json instead of probing")
    stability_threshold: float = opt(
        0.5,
        "warn when the chosen set comes out in fewer bootstrap "
        "resamples of the calibration windows than this",
    )
    plan: str | None = opt(None, "apply this plan.json instead of selecting", cli=False)

    def check(self) -> None:
        if self.plan is not None:
            if not Path(self.plan).is_file():
                raise SwappruneError(f"plan file {self.plan} not found")
            return
        if self.budget is None:
            raise SwappruneError("a budget is required: --budget N (blocks to remove or merge)")
        self.request().resolve()
        if self.scores is not None and not Path(self.scores).is_file():
            raise SwappruneError(f"scores file {self.scores} not found")
        _positive("max_oracle_calls", self.max_oracle_calls)
        _positive("beam_seeds", self.beam_seeds)
        if not 0 < self.stability_threshold <= 1:
            raise SwappruneError(
                f"stability_threshold must be in (0, 1], got {self.stability_threshold}"
            )

    def request(self, seed: int = 0):
        """The :class:`swapprune.pruning.PruneRequest` of these settings."""
        from swapprune.pruning import PruneRequest

        return PruneRequest(
            budget=self.budget if self.budget is not None else 1,
            protocol=self.protocol,
            strategy=self.strategy,
            op=self.op,
            merge=self.merge,
            protect_first=self.protect_first,
            protect_last=self.protect_last,
            seed=seed,
            oracle_metric=self.oracle,
            beam_calls=self.max_oracle_calls,
            beam_seeds=self.beam_seeds,
        )


@dataclass
class HealConfig:
    """LoRA healing, merged back into the weights."""

    rank: int = opt(16, "LoRA rank r")
    alpha: float = opt(32.0, "LoRA alpha (scale = alpha / rank)")
    dropout: float = opt(0.05, "dropout on the LoRA input, in [0, 1)")
    target_modules: list[str] | None = opt(
        None,
        "module names to adapt (peft suffix match, e.g. "
        "[q_proj, v_proj]); default: every linear "
        "projection inside the decoder blocks",
    )
    near_cuts: bool = opt(False, "adapt only the kept blocks next to a removed/merged block")
    steps: int = opt(200, "optimizer steps")
    lr: float = opt(2e-4, "peak learning rate (linear warmup, linear decay)")
    batch_size: int = opt(4, "windows per step")
    calib: str | None = opt(
        "wikitext2-valid",
        "training text: wikitext2-valid (vendored), a .txt file or a .jsonl prompt set",
    )
    prompts: int = opt(256, "training windows")
    tokens: int = opt(256, "tokens per window")
    heldout: int = opt(
        16, "further windows of the same text, never trained on: held-out perplexity"
    )
    seed: int = opt(0, "window pick, batch order and LoRA init seed")
    distill: float = opt(
        0.0,
        "weight of the KL(teacher || student) loss against the unpruned "
        "model, in [0, 1]; > 0 keeps a copy of the unpruned model",
    )
    gradient_checkpointing: bool = opt(False, "trade compute for activation memory")

    def check(self) -> None:
        if self.calib in NO_TEXT:
            raise SwappruneError(
                "heal needs calibration text: set heal.calib to wikitext2-valid (default), "
                "a .txt file or a .jsonl prompt set"
            )
        for name in ("rank", "steps", "batch_size", "prompts", "heldout"):
            _positive(f"heal.{name}", getattr(self, name))
        _positive("heal.tokens", self.tokens, 8)
        _positive("heal.seed", self.seed, 0)
        if not 0 <= self.dropout < 1:
            raise SwappruneError(f"heal.dropout must be in [0, 1), got {self.dropout}")
        if not 0 <= self.distill <= 1:
            raise SwappruneError(f"heal.distill must be in [0, 1], got {self.distill}")
        if not self.lr > 0 or not self.alpha > 0:
            raise SwappruneError("heal.lr and heal.alpha must be > 0")
        _check_text_file("heal.calib", self.calib)


@dataclass
class QuantizeConfig:
    """Weight-only quantization with optimum-quanto."""

    scheme: str = opt("int8", "weight format: " + ", ".join(SCHEMES))
    include: list[str] | None = opt(
        None, "fnmatch patterns of module names to quantize (default: every linear layer)"
    )
    exclude: list[str] = opt(
        help="fnmatch patterns of module names left in float (default keeps "
        "the LM head, often tied to the embeddings)",
        factory=lambda: ["lm_head"],
    )
    selfcheck: bool = opt(True, "reload the saved model and compare logits before keeping it")

    def check(self) -> None:
        import importlib.util

        _choice("quantization scheme", self.scheme, SCHEMES)
        if importlib.util.find_spec("optimum.quanto") is None:
            raise SwappruneError("quantization needs optimum-quanto: pip install optimum-quanto")


@dataclass
class EvalConfig:
    """lm-eval tasks on the in-memory model at each point of the run."""

    tasks: list[str] = opt(
        help="task names or aliases (swapprune list); wikitext2_ppl is the matched contract",
        factory=lambda: ["wikitext2_ppl"],
    )
    limit: int | None = opt(None, "examples / perplexity windows per task (quick checks only)")
    words: int = opt(5000, "words of WikiText-2 test for wikitext2_ppl (contract: 5000)")
    max_length: int = opt(512, "context (perplexity window) in tokens; stride is half")
    batch_size: int = opt(8, "sequences per forward pass")
    bootstrap: int = opt(1000, "bootstrap resamples for the CIs")
    at: list[str] | None = opt(
        None,
        "points to evaluate: base, pruned, healed, quantized (default: every one that runs)",
        cli=False,
    )
    output: str | None = opt(None, "eval JSON to write", flag="--output", aliases=("--out",))

    def check(self) -> None:
        from swapprune.evaluation.names import resolve_tasks

        self.tasks = resolve_tasks(self.tasks)
        for p in self.at or ():
            _choice("eval.at entry", p, POINTS)
        _positive("words", self.words)
        _positive("max_length", self.max_length, 2)
        _positive("eval batch_size", self.batch_size)
        _positive("limit", self.limit)
        _positive("bootstrap", self.bootstrap)
        if self.output is not None:
            from swapprune.artifacts import check_output_file

            check_output_file(self.output, "--output")


@dataclass
class CostConfig:
    """What the cut cost: base vs pruned WikiText-2 perplexity, measured after selection."""

    windows: int | None = opt(
        8, "windows of the matched contract to score (the first N; 0: all of them)"
    )
    threshold: float = opt(0.5, "warn when dPPL exceeds this (0.5 = +50%)")

    def check(self) -> None:
        if self.windows is not None and self.windows != 0 and self.windows < 2:
            raise SwappruneError(f"cost windows must be 0 (all) or >= 2, got {self.windows}")
        if not self.threshold > 0:
            raise SwappruneError(f"cost threshold must be > 0, got {self.threshold}")


@dataclass
class ExportConfig:
    """Where the checkpoint (or run directory) goes."""

    output: str = opt(
        help="directory to write: a checkpoint that loads with from_pretrained",
        flag="--output",
        aliases=("--out",),
    )
    save_dtype: str | None = opt(None, "dtype of the saved weights (default: as loaded)")
    overwrite: bool = opt(False, "replace an output directory that swapprune wrote earlier")
    selfcheck: bool = opt(True, "reload + logits + cached-generation check before the rename")

    def check(self, protect: tuple[str, ...] = ()) -> None:
        from swapprune.artifacts import check_output_dir

        _choice("save_dtype", self.save_dtype, DTYPES)
        check_output_dir(self.output, self.overwrite, protect=protect)


@dataclass(kw_only=True)
class CompareConfig:
    """``swapprune compare``: the cost of each criterion at each budget, with paired verdicts."""

    budgets: list[int] = opt(help="budgets to compare", factory=lambda: [1, 3, 5])
    criteria: list[str] = opt(
        help="criteria to compare (swapprune list), e.g. interchange,replacement,bi,sleb,random",
        factory=lambda: ["interchange", "replacement"],
        aliases=("--protocols",),
    )
    strategy: str | None = opt(
        None, "selection strategy for every criterion (default: each criterion's own)"
    )
    random_seeds: list[int] = opt(
        help="seeds of the random baseline", factory=lambda: list(range(10))
    )
    pairs: str = opt("adjacent", "pairs to probe")
    scores: str | None = opt(None, "reuse a scores.json instead of probing")
    output: str = opt(
        help="directory for results.json, results.md, plots and cache (a rerun reuses its cache)",
        flag="--output",
        aliases=("--out",),
    )

    def check(self) -> None:
        from swapprune.artifacts import check_name, check_output_dir, written_by_swapprune

        if not self.budgets or min(self.budgets) < 1:
            raise SwappruneError("budgets must be positive integers, e.g. 1,3,5")
        if not self.criteria:
            raise SwappruneError("give at least one criterion to compare")
        if "random" in self.criteria and not self.random_seeds:
            raise SwappruneError("the random baseline needs at least one seed")
        for c in self.criteria:
            SelectConfig(budget=1, protocol=c, strategy=self.strategy).request().resolve()
        if self.scores is not None and not Path(self.scores).is_file():
            raise SwappruneError(f"scores file {self.scores} not found")
        out = Path(self.output)
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
            check_output_dir(self.output)


@dataclass
class RunConfig:
    """A whole run. A stage left ``None`` is skipped."""

    model: ModelConfig = opt(help="the model to compress", factory=ModelConfig)
    calibration: CalibrationConfig = opt(help="probe/criterion windows", factory=CalibrationConfig)
    score: ScoreConfig | None = opt(None, "measure and keep probes")
    prune: SelectConfig | None = opt(None, "select and remove/merge blocks")
    heal: HealConfig | None = opt(None, "LoRA healing, merged")
    quantize: QuantizeConfig | None = opt(None, "weight quantization")
    eval: EvalConfig | None = opt(None, "evaluation at each point")
    cost: CostConfig | None = opt(None, "quick base-vs-pruned perplexity after selection")
    export: ExportConfig | None = opt(None, "write the checkpoint / run directory")

    def check(self) -> RunConfig:
        """Validate every stage and their combination; touches no model. Returns ``self``."""
        for f in dataclasses.fields(self):
            stage = getattr(self, f.name)
            if stage is None:
                continue
            if isinstance(stage, ExportConfig):
                stage.check(protect=self._inputs())
            else:
                stage.check()
        if self.cost is not None and self.prune is None:
            raise SwappruneError("cost measures a cut: it needs a prune stage")
        if self.heal is not None and self.heal.near_cuts and self.prune is None:
            raise SwappruneError("heal.near_cuts needs a prune stage")
        if self.eval is not None:
            ran = self.points()
            for p in self.eval.at or ():
                if p not in ran:
                    raise SwappruneError(f"eval.at names '{p}' but that stage does not run")
        if not any((self.score, self.prune, self.heal, self.quantize, self.eval, self.export)):
            raise SwappruneError(
                "the run does nothing: add a score, prune, heal, quantize, eval or export stage"
            )
        return self

    def _inputs(self) -> tuple[str, ...]:
        """Local paths the run reads, which no output may replace."""
        paths = [self.model.name]
        if self.prune is not None:
            paths += [p for p in (self.prune.scores, self.prune.plan) if p]
        return tuple(p for p in paths if Path(p).expanduser().exists())

    def check_model(self, facts) -> None:
        """Checks that need only the model's config (:class:`~swapprune.architectures.ModelFacts`)."""
        if self.prune is not None and self.prune.plan is None:
            self.prune.request(self.calibration.seed).validate(facts.num_layers)
        if self.score is not None and self.score.pairs:
            from swapprune.engine.plans import parse_pairs

            parse_pairs(self.score.pairs, facts.num_layers)
        ctx = facts.context_length
        if ctx is not None and self.calibration.tokens > ctx:
            raise SwappruneError(
                f"tokens {self.calibration.tokens} exceeds the model's context length {ctx}"
            )
        if ctx is not None and self.eval is not None and self.eval.max_length > ctx:
            raise SwappruneError(
                f"eval max_length {self.eval.max_length} exceeds the model's context length {ctx}"
            )

    def points(self) -> list[str]:
        """Points of the run at which a model exists, in order."""
        stage = {"pruned": self.prune, "healed": self.heal, "quantized": self.quantize}
        return ["base"] + [p for p in POINTS[1:] if stage[p] is not None]

    def to_dict(self) -> dict:
        """The resolved configuration (defaults filled in), skipped stages left out."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def stage_class(name: str) -> type:
    """The dataclass of stage ``name`` (``prune`` -> :class:`SelectConfig`)."""
    hint = typing.get_type_hints(RunConfig)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def deprecated(old: str, new: str) -> None:
    """Tell the user once that ``old`` is a deprecated spelling of ``new``."""
    if (old, new) not in _WARNED:
        _WARNED.add((old, new))
        print(f"swapprune: warning: '{old}' is deprecated; use '{new}'", file=sys.stderr)


_WARNED: set[tuple[str, str]] = set()
