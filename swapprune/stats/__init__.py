"""Statistics for reading a cut and a comparison of cuts (pure numpy; no torch).

* :mod:`swapprune.stats.bootstrap`: resampling indices, percentile intervals,
  paired differences;
* :mod:`swapprune.stats.clustered`: bootstraps whose unit of replication is an
  article, or a calibration seed crossed with articles;
* :mod:`swapprune.stats.layers`: the layer bootstrap of a predictor-validity
  Spearman;
* :mod:`swapprune.stats.verdicts`: the four outcomes of comparing two cuts
  (better, better, equivalent within a margin, inconclusive) and the paper's
  overlap-of-CIs test beside them;
* :mod:`swapprune.stats.multiplicity`: Holm over the distinct model pairs of a
  table, and the primary contrasts.

The bootstrap's defaults live here, importable without numpy (the resample count is
:data:`swapprune.defaults.N_BOOT`, which the configuration's fields name).
"""

from swapprune.defaults import N_BOOT

__all__ = ["LEVEL", "N_BOOT", "SEED"]

#: Two-sided confidence level of every interval.
LEVEL = 0.95
#: Seed of the resampling indices.
SEED = 0
