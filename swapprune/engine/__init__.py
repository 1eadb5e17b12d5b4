"""The probe engine, in the order the data flows: plans -> runner -> probes -> scores.

* :mod:`~swapprune.engine.orders`: the probes as layer plans, and pair sets (pure);
* :mod:`~swapprune.engine.runner`: runs layer plans over the model's own blocks,
  with prefix reuse (the only module that registers hooks);
* :mod:`~swapprune.engine.probes`: swap-KL values per unit and window;
* :mod:`~swapprune.engine.scores`: the scores artifact and its summaries (pure);
* :mod:`~swapprune.engine.probing`: ``swapprune.score`` with resume;
* :mod:`~swapprune.engine.sharding`: the same across ``torchrun`` processes;
* :mod:`~swapprune.engine.oracle`: pruned-model queries for model-based criteria.
"""
