"""Offline evaluation on lm-evaluation-harness, running an in-memory model.

Public API:

* :func:`evaluate` runs a model on tasks and returns an :class:`EvalResult`
  (metrics with 95% CIs plus the per-window/document/example values);
* :func:`resolve_tasks` validates task names before any model work;
* :func:`compare` pairs two runs on one task metric (paired bootstrap).

Tasks: ``swapprune_wikitext2_ppl`` (matched sliding-window perplexity),
``swapprune_wikitext2_ext`` (every later article of the same split, with an
article-clustered CI: :mod:`swapprune.evaluation.extended`) and the lm-eval
task pack in ``swapprune/tasks`` (``swapprune_wikitext``,
``swapprune_lambada_openai``, ``swapprune_piqa``, ``swapprune_winogrande``,
``swapprune_arc_easy``, ``swapprune_boolq``), all on vendored data; any other
lm-eval task name is passed through to lm-eval.

Importing this package (or resolving task names) imports neither lm-eval nor
numpy; ``evaluate`` and the result types load on first use, and lm-eval only
when a model is evaluated.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from swapprune.evaluation.names import ALIASES, NATIVE_TASKS, PACK_DIR, resolve_tasks

if TYPE_CHECKING:
    from swapprune.evaluation.pairing import compare
    from swapprune.evaluation.results import EvalResult, Metric, TaskResult
    from swapprune.evaluation.suite import evaluate

_LAZY = {
    "evaluate": "swapprune.evaluation.suite",
    "EvalResult": "swapprune.evaluation.results",
    "Metric": "swapprune.evaluation.results",
    "TaskResult": "swapprune.evaluation.results",
    "compare": "swapprune.evaluation.pairing",
}

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


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'swapprune.evaluation' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
