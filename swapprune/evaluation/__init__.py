"""Offline evaluation on lm-evaluation-harness, running an in-memory model.

Public API:

* :func:`evaluate` runs a model on tasks and returns an :class:`EvalResult`
  (metrics with 95% CIs plus the per-window/document/example values);
* :func:`resolve_tasks` validates task names before any model work;
* :func:`compare` pairs two runs on one task metric (paired bootstrap).

Tasks: ``swapprune_wikitext2_ppl`` (matched sliding-window perplexity) and the
lm-eval task pack in ``swapprune/tasks`` (``swapprune_wikitext``,
``swapprune_lambada_openai``, ``swapprune_piqa``, ``swapprune_winogrande``,
``swapprune_arc_easy``, ``swapprune_boolq``), all on vendored data; any other
lm-eval task name is passed through to lm-eval.
"""

from swapprune.evaluation.names import ALIASES, NATIVE_TASKS, PACK_DIR, resolve_tasks
from swapprune.evaluation.pipeline import evaluate
from swapprune.evaluation.results import EvalResult, Metric, TaskResult, compare

__all__ = [
    "ALIASES",
    "NATIVE_TASKS",
    "PACK_DIR",
    "EvalResult",
    "Metric",
    "TaskResult",
    "compare",
    "evaluate",
    "resolve_tasks",
]
