"""The run sequence: ``run(config) -> RunResult``, its stages, checks, record and forecast.

``swapprune.run`` is :func:`~swapprune.pipeline.sequence.run`; this package is not named
``run`` so that the function keeps its name on the package.
"""

from swapprune.pipeline.sequence import RunResult, run

__all__ = ["RunResult", "run"]
