"""Statistics for reading a comparison of cuts (pure numpy; no torch).

* :mod:`swapprune.stats.clustered`: bootstraps whose unit of replication is an
  article, or a calibration seed crossed with articles;
* :mod:`swapprune.stats.layers`: the layer bootstrap of a predictor-validity
  Spearman;
* :mod:`swapprune.stats.verdicts`: the four outcomes of comparing two cuts
  (better, better, equivalent within a margin, inconclusive) and the paper's
  overlap-of-CIs test beside them;
* :mod:`swapprune.stats.multiplicity`: Holm over the distinct model pairs of a
  table, and the primary contrasts.
"""
