"""Whether a run writes ``model.gguf``: ``--gguf`` resolved against the input and the cut.

The pruned GGUF copies the kept blocks' tensors from the source GGUF byte for
byte, in their own quantization (:mod:`swapprune.gguf.writer`). That is
only possible when the input is a GGUF and nothing changes the kept blocks'
weights: a merge, a linear patch or healing does, and re-quantizing would
silently replace the source's quantization with another, so those cuts go to
the safetensors checkpoint only.

``--gguf auto`` (default) writes the GGUF when it can and otherwise says why in
the summary; ``on`` refuses, in one line and before the model loads, a run that
cannot write it; ``off`` never writes it. Imports neither torch nor transformers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from swapprune.errors import SwappruneError
from swapprune.gguf.source import inspect_source
from swapprune.model.load import resolve_source
from swapprune.plan import PrunePlan

if TYPE_CHECKING:
    from swapprune.config.run import RunConfig
    from swapprune.gguf.source import GGUFSource

MERGE = (
    "a merge changes the kept blocks' weights, so their quantized bytes cannot be copied "
    "(the safetensors checkpoint holds the merge; quantize it anew)"
)
PATCH = (
    "a linear patch changes the weights of the block before each removed span, so its "
    "quantized bytes cannot be copied (the safetensors checkpoint holds the patched model)"
)
HEAL = (
    "healing changes the kept blocks' weights, so their quantized bytes cannot be copied "
    "(the safetensors checkpoint holds the healed model)"
)


@dataclass(frozen=True)
class GGUFOutput:
    """The resolved ``--gguf`` of a run.

    Attributes:
        write: whether the save stage writes ``model.gguf``.
        reason: why it does not, when the input is a GGUF (for the summary and the
            records); ``None`` when it does or when there is nothing to say.
        source: the checked source GGUF (when ``write``).
    """

    write: bool
    reason: str | None = None
    source: GGUFSource | None = None


def gguf_output(config: RunConfig) -> GGUFOutput:
    """Resolve ``config.export.gguf``; reads the source GGUF's metadata, never its tensors.

    Raises:
        SwappruneError: ``--gguf on`` for a run that cannot write the GGUF (a
            non-GGUF input, a merge, a linear patch, healing, no prune stage, or a
            source the writer refuses: truncated, corrupt, an unsupported architecture).
    """
    x = config.export
    if x is None or x.gguf == "off":
        is_gguf = x is not None and resolve_source(config.model.name).gguf_file is not None
        return GGUFOutput(False, "--gguf off" if is_gguf else None)
    source = resolve_source(config.model.name)
    why = _why_not(config, source.gguf_file is not None)
    if why is not None:
        if x.gguf == "on":
            raise SwappruneError(f"--gguf on cannot be met: {why}")
        return GGUFOutput(False, why if source.gguf_file else None)
    assert source.gguf_path is not None
    try:
        checked = inspect_source(source.gguf_path)
    except SwappruneError as e:
        if x.gguf == "on":
            raise
        return GGUFOutput(False, str(e))
    return GGUFOutput(True, None, checked)


def _why_not(config: RunConfig, is_gguf: bool) -> str | None:
    """Why this run's cut cannot be written as a pruned copy of a source GGUF, or ``None``."""
    p = config.prune
    if p is None:
        return "GGUF output writes a cut, and this run has no prune stage"
    if not is_gguf:
        return (
            f"the input {config.model.name} is not a .gguf file (the kept blocks' tensors are "
            "copied from one)"
        )
    op, patched = p.op, p.patch != "none"
    if p.plan is not None:
        plan = PrunePlan.from_json(p.plan)
        op, patched = (
            ("merge" if plan.merged or plan.op != "remove" else "remove"),
            bool(plan.patch),
        )
    if op == "merge":
        return MERGE
    if patched:
        return PATCH
    if config.heal is not None:
        return HEAL
    return None
