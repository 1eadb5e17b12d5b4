"""The run sequence: ``run(config) -> RunResult``, its stages, checks, record and forecast.

* :mod:`~swapprune.pipeline.sequence`: :func:`run`, every stage a configuration names;
* :mod:`~swapprune.pipeline.checks`: every check that needs more than the configuration
  (registries, files, the hub, packages, the model's facts), once, before torch;
* :mod:`~swapprune.pipeline.stages`: the stage functions;
* :mod:`~swapprune.pipeline.windows`: the windows a run cuts from text (calibration,
  held-out), with the tokenizer alone;
* :mod:`~swapprune.pipeline.cut`: the cut sequence the run, the Python API and
  ``compare``'s cells share;
* :mod:`~swapprune.pipeline.record`: how steps are run and said, and what a run records;
* :mod:`~swapprune.pipeline.forecast`: what the work will take, said before it starts.

``swapprune.run`` is :func:`~swapprune.pipeline.sequence.run`; this package is not named
``run`` so that the function keeps its name on the package.
"""

from swapprune.pipeline.sequence import RunResult, run

__all__ = ["RunResult", "run"]
