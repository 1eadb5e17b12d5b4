"""A whole run: :class:`RunConfig`, one section per stage, validated once.

:meth:`RunConfig.check` validates everything that needs no model (names,
ranges, files, output paths); :meth:`RunConfig.check_model` everything that
needs only the model's facts (budget vs depth, window length vs context, a budget
that the ``--serve`` constraint can meet) and
returns the frozen selection spec the run hands down. Both run before any
weights load; neither imports torch or transformers.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from swapprune.model.facts import ModelFacts
    from swapprune.select.spec import SelectionSpec


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
        """Validate every stage and their combination; loads no weights. Returns ``self``.

        A run that may write ``model.gguf`` reads the source GGUF's metadata here.

        Args:
            study: the configuration of a study (``compare``, ``validate``), which brings
                its own work: a run with no stage of its own is then allowed.
        """
        for f in dataclasses.fields(self):
            stage = getattr(self, f.name)
            if stage is None:
                continue
            if isinstance(stage, ExportConfig):
                stage.check(protect=self._inputs())
            elif isinstance(stage, SelectConfig):
                stage.check(self.calibration)
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
        if self.export is not None:
            from swapprune.gguf.decision import gguf_output

            gguf_output(self)  # refuses --gguf on that cannot be met
        stages = (self.score, self.prune, self.heal, self.quantize, self.eval, self.export)
        if not study and not any(stages):
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

    def check_model(self, facts: ModelFacts) -> SelectionSpec | None:
        """Checks that need only the model's facts; returns the selection spec (if selecting)."""
        spec = None
        if self.prune is not None and self.prune.plan is None:
            from swapprune.select.constraints import for_run
            from swapprune.select.spec import build

            serve = for_run(self, facts)  # --serve: build refuses a budget it cannot meet
            spec = build(self.prune, self.calibration, facts.num_layers, bool(self.score), serve)
        if self.score is not None and self.score.pairs:
            from swapprune.engine.orders import parse_pairs

            parse_pairs(self.score.pairs, facts.num_layers)
        ctx = facts.context_length
        if self.prune is not None and self.prune.plan is None and self.prune.certify:
            from swapprune.config.select import heldout_tokens

            heldout_tokens(self.prune, ctx)
        if self.prune is not None and self.prune.plan is None and self.prune.patch != "none":
            from swapprune.config.select import check_patch_windows

            check_patch_windows(self.prune, facts)
        if ctx is not None and self.calibration.tokens > ctx:
            raise SwappruneError(
                f"tokens {self.calibration.tokens} exceeds the model's context length {ctx}"
            )
        if ctx is not None and self.eval is not None and self.eval.max_length > ctx:
            raise SwappruneError(
                f"eval max_length {self.eval.max_length} exceeds the model's context length {ctx}"
            )
        return spec

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
