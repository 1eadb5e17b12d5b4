"""The settings of each stage of a run, one dataclass per stage.

Every field is declared once, with its default and help text (:func:`~swapprune.config.fields.opt`);
the CLI flags, the recipe YAML and the Python API are views of these classes.
Each ``check`` reads the section alone (types, ranges, choices among fixed names);
whatever needs a registry, the disk, the hub, an optional package or the model's facts
is checked in :mod:`swapprune.pipeline.checks`. Imports nothing of the package outside
:mod:`swapprune.config` but its constants and errors.
"""

from __future__ import annotations

from dataclasses import dataclass

from swapprune import defaults
from swapprune.config.fields import (
    DEVICE,
    DTYPES,
    NO_TEXT,
    POINTS,
    POSITIONS,
    SCHEMES,
    choice,
    opt,
    positive,
)
from swapprune.defaults import CONTRACT_MAX_LENGTH, CONTRACT_WORDS, N_BOOT, PROBES
from swapprune.errors import SwappruneError


@dataclass
class ModelConfig:
    """Which model to load, and where."""

    name: str = opt(
        "smollm2-135m",
        "hub id, local directory, .gguf file or alias (smollm2-135m)",
        flag="--model",
    )
    dtype: str | None = opt(None, "float32 (default), bfloat16 or float16")
    device: str | None = opt(None, "cpu, cuda, cuda:1, mps (default: cuda if present)")
    device_map: str | None = opt(None, "e.g. auto: accelerate places and offloads the weights")
    trust_remote_code: bool = opt(False, "allow model code from the hub")

    def check(self) -> None:
        choice("dtype", self.dtype, DTYPES)
        if self.device is not None and not DEVICE.match(self.device):
            raise SwappruneError(
                f"unknown device '{self.device}'; use cpu, cuda, cuda:N, mps or auto"
            )


@dataclass
class CalibrationConfig:
    """Unlabeled windows the probes and model-based criteria run on."""

    calib: str | None = opt(
        None,
        "wikitext2-valid (default, vendored), a .txt file, a .jsonl prompt set or a datasets name",
    )
    prompts: int = opt(
        defaults.CALIBRATION_PROMPTS,
        "calibration windows; probing in tranches (--adaptive): at most this many, in "
        "tranches of --tranche",
    )
    tokens: int = opt(defaults.CALIBRATION_TOKENS, "tokens per window")
    seed: int = opt(0, "window pick, bootstrap and random-criterion seed")
    positions: str = opt(
        "all",
        "where KL is measured: all positions (default) or the last "
        "(the paper's GPT-2/Pythia setting)",
    )
    batch_size: int = opt(8, "windows per forward pass")
    adaptive: str = opt(
        "auto",
        "probe in tranches of windows until the cut is certified: on, off, or auto (on for "
        "the swap criteria and --protocol auto, when the cut is certified)",
    )
    target_frequency: float = opt(
        0.9,
        "adaptive without a certificate (--no-certify): stop when the chosen set comes out in "
        "this share of bootstrap resamples",
    )
    tranche: int = opt(8, "adaptive: windows added per round (the first round probes every pair)")

    def check(self) -> None:
        choice("adaptive", self.adaptive, ("auto", "on", "off"))
        choice("positions", self.positions, POSITIONS)
        positive("prompts", self.prompts)
        positive("tokens", self.tokens, 2)
        positive("seed", self.seed, 0)
        positive("batch_size", self.batch_size)

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
    )
    pairs: str = opt("adjacent", "pairs to probe: adjacent, all, gap:K or 3-4,7-9")
    bootstrap: int = opt(N_BOOT, "bootstrap resamples for the CIs")
    cache_gb: float = opt(4.0, "memory for cached hidden states, GB")
    output: str | None = opt(None, "scores JSON to write (resumed if it exists)", flag="--output")

    def check(self) -> None:
        if not self.probes:
            raise SwappruneError("give at least one probe: replacement, interchange, deletion")
        for p in self.probes:
            choice("probe", p, PROBES)
        positive("bootstrap", self.bootstrap)
        if not self.cache_gb > 0:
            raise SwappruneError(f"cache_gb must be > 0, got {self.cache_gb}")


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
            positive(f"heal.{name}", getattr(self, name))
        positive("heal.tokens", self.tokens, 8)
        positive("heal.seed", self.seed, 0)
        if not 0 <= self.dropout < 1:
            raise SwappruneError(f"heal.dropout must be in [0, 1), got {self.dropout}")
        if not 0 <= self.distill <= 1:
            raise SwappruneError(f"heal.distill must be in [0, 1], got {self.distill}")
        if not self.lr > 0 or not self.alpha > 0:
            raise SwappruneError("heal.lr and heal.alpha must be > 0")


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
    selfcheck: bool = opt(
        True,
        "reload the saved model and compare logits before keeping it",
        off="keep the quantized model without reloading it to compare logits",
    )

    def check(self) -> None:
        choice("quantization scheme", self.scheme, SCHEMES)


@dataclass
class EvalConfig:
    """lm-eval tasks on the in-memory model at each point of the run."""

    tasks: list[str] = opt(
        help="task names or aliases (swapprune list); wikitext2_ppl is the matched contract, "
        "wikitext2_ext the extended one (one window from each later article, article-clustered "
        "CIs): --tasks wikitext2_ppl,wikitext2_ext reports both",
        factory=lambda: ["wikitext2_ppl"],
    )
    limit: int | None = opt(None, "examples / perplexity windows per task (quick checks only)")
    words: int = opt(
        CONTRACT_WORDS, f"words of WikiText-2 test for wikitext2_ppl (contract: {CONTRACT_WORDS})"
    )
    max_length: int = opt(
        CONTRACT_MAX_LENGTH, "context (perplexity window) in tokens; stride is half"
    )
    per_article: int = opt(
        1,
        "wikitext2_ext: windows per article (1: 59 windows, about 164 CPU-s per SmolLM2-135M "
        "model on one thread; 2: twice that)",
    )
    batch_size: int = opt(8, "sequences per forward pass")
    bootstrap: int = opt(N_BOOT, "bootstrap resamples for the CIs")
    at: list[str] | None = opt(
        None,
        "points to evaluate: base, pruned, healed, quantized (default: every one that runs)",
        cli=False,
    )
    output: str | None = opt(None, "eval JSON to write", flag="--output")

    def check(self) -> None:
        for p in self.at or ():
            choice("eval.at entry", p, POINTS)
        positive("words", self.words)
        positive("max_length", self.max_length, 2)
        positive("per_article", self.per_article)
        positive("eval batch_size", self.batch_size)
        positive("limit", self.limit)
        positive("bootstrap", self.bootstrap)


@dataclass
class CostConfig:
    """What the cut cost: base vs pruned WikiText-2 perplexity, measured after selection."""

    windows: int | None = opt(
        8, "windows of the matched contract to score (the first N; 0: all of them)"
    )
    threshold: float = opt(0.5, "warn when dPPL exceeds this (0.5 = +50%)")
    generative: bool = opt(
        True,
        "also measure greedy-continuation agreement with the unpruned model (32 LAMBADA "
        "prompts x 32 tokens; SmolLM2-135M, one CPU thread: about 40 s)",
    )

    def check(self) -> None:
        if self.windows is not None and self.windows != 0 and self.windows < 2:
            raise SwappruneError(f"cost windows must be 0 (all) or >= 2, got {self.windows}")
        if not self.threshold > 0:
            raise SwappruneError(f"cost threshold must be > 0, got {self.threshold}")


#: ``--gguf`` settings.
GGUF_MODES = ("auto", "on", "off")


@dataclass
class ExportConfig:
    """Where the checkpoint (or run directory) goes."""

    output: str = opt(
        help="directory to write: a checkpoint that loads with from_pretrained",
        flag="--output",
    )
    save_dtype: str | None = opt(None, "dtype of the saved weights (default: as loaded)")
    overwrite: bool = opt(False, "replace an output directory that swapprune wrote earlier")
    selfcheck: bool = opt(
        True,
        "reload + logits + cached-generation check before the rename",
        off="write the checkpoint without reloading it to compare logits and cached generation",
    )
    gguf: str = opt(
        "auto",
        "also write model.gguf, the kept blocks' tensors copied in the source's quantization: "
        "auto = when the input is a .gguf and the cut is a plain removal; on; off",
        metavar="{auto,on,off}",
    )

    def check(self) -> None:
        choice("save_dtype", self.save_dtype, DTYPES)
        choice("--gguf setting", self.gguf, GGUF_MODES)
