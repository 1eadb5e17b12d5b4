"""A whole run: :class:`RunConfig`, one section per stage.

:meth:`RunConfig.check` reads the configuration alone: every section's types, ranges
and choices, and how the sections combine. What needs more (the registries' names,
files and output paths, the hub, optional packages, the model's facts) is checked in
:mod:`swapprune.pipeline.checks`, once, before any weights load.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass

from swapprune.config.fields import POINTS, opt
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
from swapprune.errors import SwappruneError

#: ``--quick``: a first look, quicker than the defaults (``section.field`` -> value; explicit
#: settings win on the command line). Most of a selection's time is the certificate's
#: evaluations on its held-out windows, so those are 128 tokens long instead of 512; the
#: times of both are in eval/BENCHMARKS.md.
QUICK = {
    "calibration.prompts": 16,
    "calibration.tokens": 64,
    "calibration.tranche": 8,
    "prune.heldout_tokens": 128,
    "score.bootstrap": 200,
    "cost.windows": 4,
}


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

    def check(self, study: bool = False) -> RunConfig:
        """Check every stage on its own and how they combine; returns ``self``.

        Args:
            study: the configuration of a study (``compare``, ``validate``), which brings
                its own work: a run with no stage of its own is then allowed.
        """
        for f in dataclasses.fields(self):
            stage = getattr(self, f.name)
            if stage is not None:
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
        stages = (self.score, self.prune, self.heal, self.quantize, self.eval, self.export)
        if not study and not any(stages):
            raise SwappruneError(
                "the run does nothing: add a score, prune, heal, quantize, eval or export stage"
            )
        return self

    def points(self) -> list[str]:
        """Points of the run at which a model exists, in order."""
        stage = {"pruned": self.prune, "healed": self.heal, "quantized": self.quantize}
        return ["base"] + [p for p in POINTS[1:] if stage[p] is not None]

    def to_dict(self) -> dict:
        """The resolved configuration (defaults filled in), skipped stages left out."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def to_yaml(self) -> str:
        import yaml  # imports yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def quick_of(cfg: RunConfig) -> RunConfig:
    """``cfg`` at the :data:`QUICK` settings (sections it lacks stay absent)."""
    out = cfg
    for key, value in QUICK.items():
        section, name = key.split(".")
        sub = getattr(out, section)
        if sub is not None and hasattr(sub, name):
            out = dataclasses.replace(out, **{section: dataclasses.replace(sub, **{name: value})})
    return out


def stage_class(name: str) -> type:
    """The dataclass of stage ``name`` (``prune`` -> :class:`SelectConfig`)."""
    hint = typing.get_type_hints(RunConfig)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint
