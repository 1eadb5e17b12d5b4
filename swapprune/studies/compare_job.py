"""One comparison, as data: :class:`CompareJob`, what ``swapprune compare`` runs.

Pure data: the comparison is checked by :func:`swapprune.pipeline.checks.check_compare`
(and its run's settings by :func:`swapprune.pipeline.checks.check`) and run by
:func:`swapprune.studies.compare.run_compare`.
"""

from __future__ import annotations

from dataclasses import dataclass

from swapprune.config import CalibrationConfig, CompareConfig, EvalConfig, RunConfig, SelectConfig


@dataclass
class CompareJob:
    """One comparison: the shared run settings and the comparison's own.

    Attributes:
        run: model, calibration, probes (``score``) and evaluation (``eval``) settings.
        compare: budgets, criteria, strategy, random seeds, patches, output directory.
        select: the selection settings every cell shares (held-out and patch windows,
            protection...); budget, criterion, strategy and whether it certifies are the
            cell's own.
    """

    run: RunConfig
    compare: CompareConfig
    select: SelectConfig | None = None

    @property
    def eval(self) -> EvalConfig:
        assert self.run.eval is not None
        return self.run.eval

    @property
    def calib(self) -> CalibrationConfig:
        return self.run.calibration

    # Read by the report (its contract section).
    @property
    def limit(self) -> int | None:
        return self.eval.limit

    @property
    def words(self) -> int:
        return self.eval.words

    @property
    def max_length(self) -> int:
        return self.eval.max_length

    @property
    def strategy(self) -> str | None:
        return self.compare.strategy
