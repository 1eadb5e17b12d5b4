"""swapprune: protocol-aware depth pruning for transformer language models.

Replacement and interchange swap-KL probes as layer-importance criteria, layer
removal and merging at a budget, Hugging Face checkpoints that load anywhere,
and lm-eval comparisons with uncertainty.
"""

from __future__ import annotations

import importlib
import sys

from swapprune.engine import threads

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "RunConfig",
    "load_config",
    "load_model",
    "plan_pruning",
    "prune",
    "run",
    "score",
]

# Public name -> the module that defines it. Lazy: importing swapprune imports no torch.
_LAZY = {
    "score": "swapprune.engine.probing",
    "load_model": "swapprune.model.load",
    "plan_pruning": "swapprune.api",
    "prune": "swapprune.api",
    "run": "swapprune.pipeline.sequence",
    "RunConfig": "swapprune.config",
    "load_config": "swapprune.recipe",
}


#: The functions among them: each runs as a command would (:mod:`swapprune.entry`).
_CALLS = ("score", "load_model", "plan_pruning", "prune", "run")


def __getattr__(name: str):
    if name in _LAZY:
        if name in _CALLS:
            # The thread choice is made before torch is imported, which some of these
            # modules do as they load (the call itself would find it made by then).
            if threads.CHOICE is None and "torch" not in sys.modules:
                threads.apply()
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'swapprune' has no attribute {name!r}")
