"""Statistics for reading a comparison of cuts (pure numpy; no torch).

* :mod:`swapprune.stats.clustered`: bootstraps whose unit of replication is an
  article, a calibration seed crossed with articles, or a block;
* :mod:`swapprune.stats.verdicts`: the four outcomes of comparing two cuts
  (better, better, equivalent within a margin, inconclusive), Holm over the
  distinct model pairs of a table, the primary contrasts, and the paper's
  overlap-of-CIs test beside them.
"""
