"""Depth pruning as an llm-compressor modifier: prune blocks, then quantize, in one recipe.

:class:`DepthPruningModifier` does all its work when the recipe is initialized,
before any modifier after it sees the model: it scores the blocks with any
swapprune criterion, selects ``budget`` of them and removes or merges them with
the same planner and surgery as ``swapprune.prune``
(:func:`swapprune.select.core.plan_pruning`, :func:`swapprune.edit.surgery.apply_plan`).
The modifiers that follow (``QuantizationModifier``, GPTQ, AWQ, ...) see a model
whose block list, config (layer count, ``layer_types``) and ``layer_idx``
already agree, so their per-layer pipelines and the saved checkpoint do too.

Example:
    >>> from llmcompressor import oneshot
    >>> from llmcompressor.modifiers.quantization import QuantizationModifier
    >>> from swapprune.integrations.llmcompressor import DepthPruningModifier
    >>> recipe = [
    ...     DepthPruningModifier(budget=8, protocol="interchange"),
    ...     QuantizationModifier(targets="Linear", scheme="W8A16", ignore=["lm_head"]),
    ... ]
    >>> oneshot(model=model, processor=tok, dataset=loader, recipe=recipe)

Importing this module also registers the class with llm-compressor's
``ModifierFactory``, so a YAML recipe can name ``DepthPruningModifier`` once
the module has been imported (llm-compressor only discovers modifiers inside
its own package).
"""

from __future__ import annotations

import functools
import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:
    from llmcompressor.core import State
    from llmcompressor.modifiers import Modifier, ModifierFactory
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        "swapprune.integrations.llmcompressor needs llm-compressor: "
        "pip install 'swapprune[llmcompressor]'"
    ) from err

import torch
from loguru import logger
from pydantic import Field, PrivateAttr, model_validator

from swapprune.calibration.windows import DEFAULT_PROMPTS, DEFAULT_TOKENS, Calibration
from swapprune.config import SelectConfig
from swapprune.errors import SwappruneError
from swapprune.select.core import PruneRequest

__all__ = ["DepthPruningModifier", "windows_from_dataloader", "calibration_dataloader"]

ONESHOT = "oneshot"


class DepthPruningModifier(Modifier):
    """Remove or merge ``budget`` decoder blocks chosen by a swapprune criterion.

    Names (criterion, strategy, operation, merge rule) are checked when the
    modifier is built; the budget is checked against the model's block count
    when the recipe is initialized, before the first forward pass.

    Calibration windows: by default the first ``calibration_samples`` samples
    of oneshot's calibration data that have at least ``calibration_tokens``
    tokens (cut to that length); without a oneshot dataset, swapprune's own
    calibration source (``calibration``, default the vendored WikiText-2
    validation text), which needs a tokenizer.
    """

    budget: int = Field(description="Blocks to remove (or absorb by merging).")
    protocol: str = Field("interchange", description="Criterion name: `swapprune list`.")
    strategy: str | None = Field(None, description="Selection strategy; None: the criterion's.")
    op: str = Field("remove", description="`remove` drops the blocks; `merge` folds them.")
    merge: str = Field("average", description="Merge rule when op='merge'.")
    protect_first: int = Field(0, description="The first k blocks are never removed.")
    protect_last: int = Field(0, description="The last k blocks are never removed.")
    seed: int = 0
    oracle_metric: str = Field("ppl", description="Oracle of model-queried strategies: ppl|kl.")
    beam_calls: int = Field(400, description="Oracle-call cap of the beam strategy.")
    calibration: str | None = Field(
        None,
        description="None: oneshot's calibration data if it has any, else swapprune's "
        "default text; 'oneshot': oneshot's data only; else a swapprune --calib source.",
    )
    calibration_samples: int = Field(DEFAULT_PROMPTS, ge=1, description="Windows N.")
    calibration_tokens: int = Field(DEFAULT_TOKENS, ge=2, description="Tokens per window T.")
    positions: str = Field("all", description="KL positions of the swap probes: all|last.")
    batch_size: int = Field(8, ge=1, description="Windows per forward pass while scoring.")
    tokenizer: str | None = Field(
        None,
        description="Tokenizer for text calibration without oneshot data; "
        "None: the model's name_or_path.",
    )
    plan_path: str | None = Field(None, description="Write the prune plan (JSON) here.")

    _plan: Any = PrivateAttr(None)
    _scores: Any = PrivateAttr(None)
    _timings: dict = PrivateAttr(default_factory=dict)
    _calibration_info: dict = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check_names(self):
        # Every name resolves now, at the edge, so a typo fails before oneshot loads data.
        self.request().resolve()
        if self.protocol == "auto" and self.op != "remove":
            raise SwappruneError("protocol 'auto' removes blocks; it does not merge (op='remove')")
        if self.positions not in ("all", "last"):
            raise SwappruneError(f"positions must be 'all' or 'last', got {self.positions!r}")
        return self

    def request(self) -> PruneRequest:
        """The :class:`~swapprune.select.core.PruneRequest` these fields describe.

        Built through the CLI's own :class:`~swapprune.config.SelectConfig`, so a
        request is made one way everywhere.
        """
        return SelectConfig(
            budget=self.budget,
            protocol=self.protocol,
            strategy=self.strategy,
            op=self.op,
            merge=self.merge,
            protect_first=self.protect_first,
            protect_last=self.protect_last,
            oracle=self.oracle_metric,
            max_oracle_calls=self.beam_calls,
        ).request(self.seed)

    @property
    def plan(self):
        """The :class:`~swapprune.plan.PrunePlan` applied (None before initialization)."""
        return self._plan

    @property
    def scores(self):
        """The probe scores behind the plan (None for criteria that need none)."""
        return self._scores

    @property
    def calibration_info(self) -> dict:
        """Source, window count and length, and digest of the windows scored on."""
        return dict(self._calibration_info)

    @property
    def timings(self) -> dict:
        """Seconds spent: ``{"calibration", "plan", "surgery"}`` wall and ``*_cpu`` process time."""
        return dict(self._timings)

    def on_initialize(self, state: State, **kwargs) -> bool:
        from swapprune.edit.surgery import apply_plan
        from swapprune.model.stack import decoder_stack
        from swapprune.select.core import plan_pruning

        model = state.model
        _refuse_prepared_model(model)
        request = self.request()
        # Budget against the block count, before the first forward pass.
        crit, strategy, _ = request.validate(decoder_stack(model).num_layers)

        calibration = None
        if crit.protocols or crit.needs_model or strategy.queries_model:
            with _timed(self._timings, "calibration"):
                calibration = self._calibration(state, model)
            self._calibration_info = calibration.describe()
        # oneshot runs initialization with gradients on; the probes need none.
        with _timed(self._timings, "plan"), torch.no_grad():
            plan, scores = plan_pruning(
                model,
                None,
                request,
                calibration=calibration,
                positions=self.positions,
                batch_size=self.batch_size,
                model_id=getattr(model, "name_or_path", None) or None,
                progress=False,
            )
        with _timed(self._timings, "surgery"):
            before = model.config.to_dict()
            apply_plan(model, plan, log=logger.info)
            _keep_config_on_save(model, _changed_keys(before, model.config.to_dict()))
        logger.info("DepthPruningModifier: {}", plan.describe())
        self._plan, self._scores = plan, scores
        if self.plan_path:
            Path(self.plan_path).parent.mkdir(parents=True, exist_ok=True)
            plan.to_json(self.plan_path)
        return True

    def on_finalize(self, state: State, **kwargs) -> bool:
        return True

    def _calibration(self, state: State, model) -> Calibration:
        loader = getattr(getattr(state, "data", None), "calib", None)
        n, t = self.calibration_samples, self.calibration_tokens
        if self.calibration in (None, ONESHOT) and loader is not None:
            return windows_from_dataloader(loader, n, t)
        if self.calibration == ONESHOT:
            raise SwappruneError(
                "DepthPruningModifier(calibration='oneshot') but oneshot has no calibration "
                "data: pass dataset= to oneshot, or leave calibration unset to use "
                "swapprune's default text"
            )
        from swapprune.calibration.windows import load_calibration

        return load_calibration(self._load_tokenizer(model), self.calibration, n, t, self.seed)

    def _load_tokenizer(self, model):
        name = self.tokenizer or getattr(model, "name_or_path", None)
        if not name:
            raise SwappruneError(
                "DepthPruningModifier needs calibration windows: pass a dataset to oneshot, "
                "or set tokenizer= to the model's tokenizer (name or path)"
            )
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(name)
        except (OSError, ValueError) as err:
            raise SwappruneError(
                f"DepthPruningModifier could not load a tokenizer from {name!r} ({err}); "
                "pass a dataset to oneshot or set tokenizer="
            ) from None


def windows_from_dataloader(loader, samples: int, tokens: int) -> Calibration:
    """Token windows ``[N, T]`` from a oneshot calibration dataloader.

    Takes, in loader order, the samples with at least ``tokens`` real tokens
    (``attention_mask`` drops padding on either side) and keeps their first
    ``tokens``; stops after ``samples`` of them. Fewer is a warning, none an error.
    """
    rows: list[torch.Tensor] = []
    seen = 0
    for batch in loader:
        ids = torch.as_tensor(batch["input_ids"])
        mask = batch.get("attention_mask") if hasattr(batch, "get") else None
        if ids.dim() == 1:
            ids = ids[None]
        mask = torch.ones_like(ids) if mask is None else torch.as_tensor(mask).reshape(ids.shape)
        for row, keep in zip(ids, mask):
            seen += 1
            row = row[keep.bool()]
            if row.numel() >= tokens:
                rows.append(row[:tokens].to("cpu", torch.long))
            if len(rows) == samples:
                break
        if len(rows) == samples:
            break
    if not rows:
        raise SwappruneError(
            f"none of oneshot's {seen} calibration samples has {tokens} tokens: lower "
            f"calibration_tokens, raise oneshot's max_seq_length, or set calibration="
            f"'wikitext2-valid'"
        )
    if len(rows) < samples:
        logger.warning(
            "DepthPruningModifier: {} of {} oneshot samples have >= {} tokens; scoring on "
            "{} windows, not {}",
            len(rows),
            seen,
            tokens,
            len(rows),
            samples,
        )
    return Calibration(torch.stack(rows), f"{ONESHOT}-dataloader", 0)


def calibration_dataloader(
    tokenizer,
    source: str | None = None,
    samples: int = DEFAULT_PROMPTS,
    tokens: int = DEFAULT_TOKENS,
    seed: int = 0,
):
    """swapprune's calibration windows as a DataLoader to hand to ``oneshot(dataset=...)``.

    The pruning modifier then scores on exactly the windows ``swapprune.prune``
    would use, and quantization modifiers that need data calibrate on the same.
    """
    from torch.utils.data import DataLoader

    from swapprune.calibration.windows import load_calibration

    cal = load_calibration(tokenizer, source, samples, tokens, seed)
    rows = [
        {"input_ids": r[None], "attention_mask": torch.ones_like(r)[None]} for r in cal.input_ids
    ]
    return DataLoader(rows, batch_size=None)  # type: ignore[arg-type]  # a list is a map dataset


def _changed_keys(before: dict, after: dict) -> list[tuple[str, ...]]:
    """Paths of the config entries the surgery changed (top level and ``text_config``)."""
    paths: list[tuple[str, ...]] = [
        (k,) for k in after if k != "text_config" and before.get(k) != after[k]
    ]
    inner_b, inner_a = before.get("text_config"), after.get("text_config")
    if isinstance(inner_b, dict) and isinstance(inner_a, dict):
        paths += [("text_config", k) for k in inner_a if inner_b.get(k) != inner_a[k]]
    return paths


def _keep_config_on_save(model, paths: list[tuple[str, ...]]) -> None:
    """Make ``model.save_pretrained`` write the pruned config, not the original one.

    llm-compressor's save rewrites ``config.json`` from the *original* model's
    file (for vLLM compatibility) and patches back only the fields it edits
    itself, which would restore the unpruned layer count and ``layer_types``.
    This wraps the (already wrapped) method and writes the entries the surgery
    changed back into the saved file, with the values the model has at save time.
    """
    if not paths:
        return
    inner = model.save_pretrained

    @functools.wraps(inner)
    def save_pretrained(save_directory, *args, **kwargs):
        result = inner(save_directory, *args, **kwargs)
        _patch_saved_config(Path(save_directory) / "config.json", model.config.to_dict(), paths)
        return result

    # llm-compressor must not wrap it a second time.
    setattr(save_pretrained, "_overridden", True)  # noqa: B010
    model.save_pretrained = save_pretrained


def _patch_saved_config(path: Path, current: dict, paths: list[tuple[str, ...]]) -> None:
    if not path.is_file():  # another rank wrote it, or nothing was saved
        return
    saved = json.loads(path.read_text(encoding="utf-8"))
    changed = False
    for key_path in paths:
        src, dst = current, saved
        for part in key_path[:-1]:
            src, dst = src.get(part, {}), dst.setdefault(part, {})
        key = key_path[-1]
        if key in src and dst.get(key) != src[key]:
            logger.info("{}: {}: {} -> {}", path.name, ".".join(key_path), dst.get(key), src[key])
            dst[key] = src[key]
            changed = True
    if changed:
        path.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _refuse_prepared_model(model) -> None:
    """Refuse models another modifier or oneshot's norm context has already edited.

    Blocks are renumbered by the surgery, so modules that oneshot swapped in by
    name (offset norms of Gemma-like models) or quantization schemes already
    attached would be restored onto the wrong blocks.
    """
    from llmcompressor.modeling.offset_norm import NormCalibrationModule

    for name, mod in model.named_modules():
        if isinstance(mod, NormCalibrationModule):
            raise SwappruneError(
                f"{name} is an offset norm that oneshot swapped for calibration; oneshot "
                "restores it by name after the renumbering, so prune this model with "
                "swapprune.prune (or the swapprune CLI) first and quantize it after"
            )
        if getattr(mod, "quantization_scheme", None) is not None:
            raise SwappruneError(
                f"{name} already carries a quantization scheme: put DepthPruningModifier "
                "first in the recipe"
            )


@contextmanager
def _timed(out: dict, name: str):
    """Record wall seconds as ``out[name]`` and process CPU seconds as ``out[name + "_cpu"]``."""
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield
    finally:
        out[name] = time.perf_counter() - wall
        out[f"{name}_cpu"] = time.process_time() - cpu


ModifierFactory.register("DepthPruningModifier", DepthPruningModifier)
