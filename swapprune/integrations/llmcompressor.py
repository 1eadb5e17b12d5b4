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

import dataclasses
import time
import typing
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
from pydantic import Field, PrivateAttr, create_model, model_validator

from swapprune.api import cut
from swapprune.calibration.windows import load_calibration
from swapprune.config import CalibrationConfig, SelectConfig
from swapprune.config.fields import default_of
from swapprune.edit.surgery import apply_plan
from swapprune.errors import SwappruneError
from swapprune.integrations.oneshot_data import (
    ONESHOT,
    calibration_dataloader,
    windows_from_dataloader,
    windows_line,
)
from swapprune.integrations.saved_config import changed_keys, keep_config_on_save
from swapprune.model.arch import context_length
from swapprune.model.facts import ModelFacts
from swapprune.model.load import load_tokenizer
from swapprune.model.stack import decoder_stack
from swapprune.pipeline.checks import check_selection, selection_spec

__all__ = ["DepthPruningModifier", "windows_from_dataloader", "calibration_dataloader"]


#: CalibrationConfig fields the modifier takes (the rest concern swapprune's own runs).
CALIBRATION_FIELDS = (
    "calib",
    "prompts",
    "tokens",
    "seed",
    "positions",
    "batch_size",
    "adaptive",
    "target_frequency",
    "tranche",
)
#: SelectConfig fields a modifier has no use for: it applies no saved plan, it scores
#: inside oneshot (``modifier.scores`` holds what it measured), and it writes no GGUF, which
#: is what the in-phase constraint (``serve``) is for.
SKIPPED = ("plan", "scores", "serve")
#: Fields whose default the modifier reads from oneshot's data instead (None = follow it).
FROM_DATA = ("prompts", "tokens")


def _schema() -> dict[str, Any]:
    """The modifier's pydantic fields: SelectConfig's and CalibrationConfig's, names,
    types, defaults and help text included (the modifier declares none of its own)."""
    fields: dict[str, Any] = {}
    for cls, names in ((SelectConfig, None), (CalibrationConfig, CALIBRATION_FIELDS)):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name in SKIPPED or (names is not None and f.name not in names):
                continue
            text = f.metadata.get("help", "")
            if f.name in FROM_DATA:
                default = default_of(cls, f.name)
                fields[f.name] = (
                    int | None,
                    Field(
                        None, description=f"{text} (None: follow oneshot's data, else {default})"
                    ),
                )
            elif f.metadata.get("required"):
                fields[f.name] = (int, Field(..., description=text))
            else:
                fields[f.name] = (hints[f.name], Field(default_of(cls, f.name), description=text))
    fields["tokenizer"] = (
        str | None,
        Field(
            None,
            description="tokenizer for text calibration without oneshot data; "
            "None: the model's name_or_path",
        ),
    )
    fields["plan_path"] = (str | None, Field(None, description="write the prune plan (JSON) here"))
    return fields


class _DepthPruning(Modifier):
    """Remove or merge ``budget`` decoder blocks chosen by a swapprune criterion.

    The fields are those of :class:`~swapprune.config.SelectConfig` (``budget``,
    ``protocol``, ``strategy``, ``op``, ...) and the calibration fields of
    :class:`~swapprune.config.CalibrationConfig` (``prompts``, ``tokens``, ``seed``,
    ``positions``, ...), with their names, defaults and help text, plus
    ``tokenizer`` and ``plan_path``. Names and settings are checked when the
    modifier is built; the budget against the model's depth when the recipe is
    initialized, before the first forward pass.

    Calibration windows: by default oneshot's calibration data. ``prompts`` and
    ``tokens`` left unset follow that data (every sample up to the default count,
    at the longest length most of them reach, capped at the default length; the
    log says what was taken). Without oneshot data, swapprune's own calibration
    source (``calib``, default the vendored WikiText-2 validation text), which needs
    a tokenizer. ``calib="oneshot"`` insists on oneshot's data.
    """

    _plan: Any = PrivateAttr(None)
    _scores: Any = PrivateAttr(None)
    _timings: dict = PrivateAttr(default_factory=dict)
    _calibration_info: dict = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check_names(self):
        # Every name and setting is checked now, at the edge, before oneshot loads data.
        select, calibration = self.configs()
        check_selection(select, calibration)
        return self

    def configs(self, prompts: int | None = None, tokens: int | None = None):
        """``(SelectConfig, CalibrationConfig)`` of these fields (window counts resolved)."""
        values = {k: getattr(self, k) for k in self.model_fields_set | set(type(self).model_fields)}
        select = SelectConfig(
            **{f.name: values[f.name] for f in dataclasses.fields(SelectConfig) if f.name in values}
        )
        cal = {k: values[k] for k in CALIBRATION_FIELDS if k not in FROM_DATA}
        if cal.get("calib") == ONESHOT:
            cal["calib"] = None
        for k, given in (("prompts", prompts), ("tokens", tokens)):
            cal[k] = given or values[k] or default_of(CalibrationConfig, k)
        return select, CalibrationConfig(**cal)

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
        model = state.model
        _refuse_prepared_model(model)
        select, cal = self.configs()
        # Budget against the block count, before the first forward pass.
        facts = ModelFacts.from_config(model.config).with_layers(decoder_stack(model).num_layers)
        spec = selection_spec(select, cal, facts)
        calibration = None
        if spec.needs_windows:
            with _timed(self._timings, "calibration"):
                calibration = self._calibration(state, model, cal)
            self._calibration_info = calibration.describe()
        n, t = (
            (calibration.input_ids.shape[0], calibration.input_ids.shape[1])
            if calibration is not None
            else (None, None)
        )
        select, cal = self.configs(n, t)
        settings = {**dataclasses.asdict(select), **dataclasses.asdict(cal)}
        settings = {k: v for k, v in settings.items() if k in type(self).model_fields}
        # Held-out windows (the certificate, auto's search) and patch windows are cut from
        # swapprune's text with the model's tokenizer; without one the cut is not certified.
        tokenizer = None
        if spec.certify or spec.policy == "auto" or select.patch != "none":
            tokenizer = self._tokenizer_or_none(model, required=select.patch != "none")
        # oneshot runs initialization with gradients on; the probes need none.
        with _timed(self._timings, "plan"), torch.no_grad():
            name = getattr(model, "name_or_path", None) or None
            plan, scores, patches = cut(
                model, tokenizer, calibration, None, None, name, False, settings, _log
            )
        with _timed(self._timings, "surgery"):
            before = model.config.to_dict()
            apply_plan(model, plan, log=logger.info, patches=patches)
            keep_config_on_save(model, changed_keys(before, model.config.to_dict()))
        logger.info("DepthPruningModifier: {}", plan.describe())
        self._plan, self._scores = plan, scores
        if self.plan_path:
            Path(self.plan_path).parent.mkdir(parents=True, exist_ok=True)
            plan.to_json(self.plan_path)
        return True

    def on_finalize(self, state: State, **kwargs) -> bool:
        return True

    def _calibration(self, state: State, model, cal: CalibrationConfig):
        """Oneshot's windows, or windows of swapprune's calibration text."""
        loader = getattr(getattr(state, "data", None), "calib", None)
        if self.calib in (None, ONESHOT) and loader is not None:
            windows = windows_from_dataloader(loader, self.prompts, self.tokens)
            logger.info(
                "DepthPruningModifier: {}", windows_line(windows, self.prompts, self.tokens)
            )
            return windows
        if self.calib == ONESHOT:
            raise SwappruneError(
                "DepthPruningModifier(calib='oneshot') but oneshot has no calibration "
                "data: pass dataset= to oneshot, or leave calib unset to use "
                "swapprune's default text"
            )
        tok = self._load_tokenizer(model)
        return load_calibration(
            tok, cal.calib, cal.prompts, cal.tokens, cal.seed, context_length(model.config)
        )

    def _tokenizer_or_none(self, model, required: bool):
        try:
            return self._load_tokenizer(model)
        except SwappruneError:
            if required:
                raise
            logger.warning("DepthPruningModifier: no tokenizer: the cut is not certified")
            return None

    def _load_tokenizer(self, model):
        name = self.tokenizer or getattr(model, "name_or_path", None)
        if not name:
            raise SwappruneError(
                "DepthPruningModifier needs calibration windows: pass a dataset to oneshot, "
                "or set tokenizer= to the model's tokenizer (name or path)"
            )
        return load_tokenizer(name)


DepthPruningModifier = create_model(
    "DepthPruningModifier", __base__=_DepthPruning, __module__=__name__, **_schema()
)
DepthPruningModifier.__doc__ = _DepthPruning.__doc__


def _refuse_prepared_model(model) -> None:
    """Refuse models another modifier or oneshot's norm context has already edited.

    Blocks are renumbered by the surgery, so modules that oneshot swapped in by
    name (offset norms of Gemma-like models) or quantization schemes already
    attached would be restored onto the wrong blocks.
    """
    from llmcompressor.modeling.offset_norm import NormCalibrationModule  # imports llmcompressor

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


def _log(line: str) -> None:
    """The estimate's lines in oneshot's log, under the modifier's name."""
    logger.info("DepthPruningModifier: {}", line.removeprefix("[estimate] "))


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
