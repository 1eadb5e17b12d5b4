"""The one configuration of a swapprune run: every stage's settings, as a schema.

A run is ``load -> calibrate -> score -> select -> edit -> heal -> save ->
quantize -> evaluate``; :class:`RunConfig` holds one dataclass per stage
(:mod:`~swapprune.config.sections`, :mod:`~swapprune.config.select`) and the
studies add theirs (:mod:`~swapprune.config.studies`). The CLI flags, the
Python API and the recipe YAML are three views of them:

* the CLI generates its options from the fields' metadata (:mod:`swapprune.cli.options`);
* ``swapprune.run(RunConfig(...))`` takes it directly;
* :func:`swapprune.recipe.load_config` reads a recipe YAML, applies ``--set key.sub=value``
  overrides, rejects unknown keys with a did-you-mean, and checks types;
* the llm-compressor modifier's fields are those of the selection and calibration sections.

The schema is fields, types, defaults, ranges and choices among fixed names: each
section's ``check`` reads the section alone. What needs a registry, the disk, the hub,
an optional package or the model's facts is checked in :mod:`swapprune.pipeline.checks`.
This package imports nothing of swapprune outside itself but :mod:`swapprune.defaults`
and :mod:`swapprune.errors` (``tests/test_layout.py`` holds it to that).
"""

from swapprune.config.fields import DTYPES, POINTS, POSITIONS, SCHEMES, opt
from swapprune.config.run import QUICK, RunConfig, quick_of, stage_class
from swapprune.config.sections import (
    CalibrationConfig,
    CostConfig,
    EvalConfig,
    ExportConfig,
    HealConfig,
    ModelConfig,
    QuantizeConfig,
    ScoreConfig,
)
from swapprune.config.select import SelectConfig
from swapprune.config.studies import CompareConfig, ValidateConfig

__all__ = [
    "DTYPES",
    "POINTS",
    "POSITIONS",
    "QUICK",
    "SCHEMES",
    "CalibrationConfig",
    "CompareConfig",
    "CostConfig",
    "EvalConfig",
    "ExportConfig",
    "HealConfig",
    "ModelConfig",
    "QuantizeConfig",
    "RunConfig",
    "ScoreConfig",
    "SelectConfig",
    "ValidateConfig",
    "opt",
    "quick_of",
    "stage_class",
]
