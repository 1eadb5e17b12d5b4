"""Lower precision for evaluations that only rank candidates (torch side).

Where sets are evaluated only to decide which of them are measured further
(the certificate's +-1 neighbours, screened on two windows before the best
two are carried), a float32 model may run its matrix products in bfloat16
under autocast. No copy of the weights is made, and every number that is
reported or certified is measured again on the float32 path. It is used only
where bfloat16 is fast: on a CUDA device, or a CPU whose oneDNN has a bfloat16
path (AVX-512 BF16 or AMX); elsewhere the evaluation stays float32.
``eval/bench_reference.py`` measures the speed and the ranking agreement.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch


def fast_bf16(device: torch.device) -> bool:
    """Whether bfloat16 matrix products are fast on ``device``."""
    if device.type == "cuda":
        return True
    if device.type != "cpu":
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def ranking_precision(model) -> AbstractContextManager:
    """bfloat16 autocast for a float32 ``model`` where it is fast, else nothing (also for
    an object that is no torch module)."""
    params = model.parameters() if isinstance(model, torch.nn.Module) else ()
    p = next((p for p in params if p.is_floating_point()), None)
    if p is None or p.dtype != torch.float32 or not fast_bf16(p.device):
        return nullcontext()
    return torch.autocast(p.device.type, dtype=torch.bfloat16)


def ranking_dtype(model) -> str:
    """The precision :func:`ranking_precision` gives ``model``, in words for a record."""
    ctx = ranking_precision(model)
    return "bfloat16 autocast" if isinstance(ctx, torch.autocast) else "as loaded"
