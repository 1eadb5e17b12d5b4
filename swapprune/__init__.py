"""swapprune: protocol-aware depth pruning for transformer language models.

Replacement and interchange swap-KL probes as layer-importance criteria, layer
removal and merging at a budget, Hugging Face checkpoints that load anywhere,
and lm-eval comparisons with uncertainty.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "load_model", "score", "prune"]


def __getattr__(name: str):
    # Lazy: importing swapprune must not import torch/transformers.
    if name == "score":
        from swapprune.engine.scoring import score

        return score
    if name == "load_model":
        from swapprune.loading import load_model

        return load_model
    if name == "prune":
        from swapprune.pruning import prune

        return prune
    raise AttributeError(f"module 'swapprune' has no attribute {name!r}")
