"""Weight-only quantization with optimum-quanto (runs on CPU and GPU).

:func:`quantize_model` quantizes the linear layers' weights in place (int8 or
int4; activations stay in float) and freezes them; the model keeps working
in memory, so evaluation runs on it directly. :func:`save_quantized` writes the
quanto serialization (safetensors + ``quanto_qmap.json``), reloads it and
checks the logits before moving the directory into place. Reload with::

    from optimum.quanto import QuantizedModelForCausalLM
    model = QuantizedModelForCausalLM.from_pretrained("run/quantized")  # wrapper
    hf_model = model._wrapped  # the plain transformers model with quanto layers

(or :func:`load_quantized`). optimum is imported here only, when quantization runs.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from swapprune.config import QuantizeConfig
from swapprune.errors import SwappruneError
from swapprune.output.tokenizer_files import save_tokenizer
from swapprune.output.writers import is_write_error, write_error

#: Recipe scheme -> optimum-quanto weight qtype name.
#: Scheme -> optimum-quanto weight qtype name (the names are config.SCHEMES).
QTYPES = {"int8": "qint8", "int4": "qint4"}
# Max |logit difference| of the reload, relative to the largest |logit|: same packed
# weights, only the dequantization order may differ.
RELOAD_TOLERANCE = 1e-4

README = """# {name}: weight-only {scheme} quantization (optimum-quanto)

Produced by swapprune from the pruned model in `../model` ({describe}).
Weights of the linear layers matching `{include}` (excluding `{exclude}`) are
stored as {scheme} with float scales; activations stay in float.

Reload (needs `optimum-quanto`, `accelerate`, `transformers`):

```python
from optimum.quanto import QuantizedModelForCausalLM
from transformers import AutoTokenizer

model = QuantizedModelForCausalLM.from_pretrained("{path}")  # wrapper: model(**inputs) works
hf_model = model._wrapped  # plain transformers model (generate, lm-eval HFLM, ...)
tokenizer = AutoTokenizer.from_pretrained("{path}")
```

or `swapprune.edit.quantization.load_quantized("{path}")`. Plain
`AutoModelForCausalLM.from_pretrained` cannot read these weights.
"""


@dataclass
class QuantizeReport:
    scheme: str
    quantized_modules: int
    float_weight_bytes: int  # bytes the quantized modules' weights took before quantization
    wall_s: float

    def to_dict(self) -> dict:
        return asdict(self)


def quantize_model(model, config: QuantizeConfig | None = None) -> QuantizeReport:
    """Quantize ``model``'s weights in place and freeze them; returns a report."""
    from optimum.quanto import freeze, quantization_map, quantize  # imports optimum

    config = config or QuantizeConfig()
    config.check()
    start = time.perf_counter()
    qtype = QTYPES[config.scheme]
    quantize(model, weights=qtype, include=config.include, exclude=config.exclude or None)
    qmap = quantization_map(model)
    if not qmap:
        raise SwappruneError(f"no module matched quantize.include {config.include}")
    modules = dict(model.named_modules())
    nbytes = sum(modules[n].weight.numel() * modules[n].weight.element_size() for n in qmap)
    freeze(model)  # replace float weights by the packed ones
    return QuantizeReport(config.scheme, len(qmap), nbytes, round(time.perf_counter() - start, 3))


def load_quantized(path: str | Path, device: str | None = None):
    """Reload a quantized directory; returns ``(model, tokenizer)`` (a plain HF model)."""
    from optimum.quanto import QuantizedModelForCausalLM  # imports optimum
    from transformers import AutoTokenizer  # imports transformers

    model = QuantizedModelForCausalLM.from_pretrained(str(path))._wrapped
    if device:
        model.to(device)
    tok_files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
    tok = (
        AutoTokenizer.from_pretrained(str(path))
        if any((Path(path) / f).exists() for f in tok_files)
        else None
    )
    return model.eval(), tok


def save_quantized(
    model,
    tokenizer,
    out_dir: str | Path,
    *,
    config: QuantizeConfig,
    provenance: dict,
    check_ids: torch.Tensor | None = None,
    describe: str = "",
    final_path: str | None = None,
) -> dict:
    """Save the quantized ``model`` (quanto format) into ``out_dir`` and self-check the reload.

    ``out_dir`` must not exist yet. Written to a hidden sibling first; a failed
    check leaves nothing behind. ``final_path`` is the path the README's reload
    snippet names (``out_dir`` when ``None``; a runner writing into a temporary
    directory passes the final one).

    Returns:
        The self-check results (also in ``provenance.json``).
    """
    from optimum.quanto import QuantizedModelForCausalLM  # imports optimum

    out = Path(out_dir)
    if out.exists():
        raise SwappruneError(f"{out} exists; refusing to overwrite a quantized model")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        QuantizedModelForCausalLM(model).save_pretrained(tmp)
        if tokenizer is not None:
            save_tokenizer(tokenizer, tmp)
        results = _selfcheck(tmp, model, check_ids) if config.selfcheck else {"skipped": True}
        (tmp / "README.md").write_text(
            README.format(
                name=Path(final_path or out).parent.name or "model",
                scheme=config.scheme,
                describe=describe,
                include=config.include or "*",
                exclude=config.exclude,
                path=final_path or str(out),
            )
        )
        record = {**provenance, "quantize": asdict(config), "selfcheck": results}
        (tmp / "provenance.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
        tmp.rename(out)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_write_error(e):  # a refused write: one line naming the output
            raise write_error(out, e) from None
        raise
    return results


@torch.no_grad()
def _selfcheck(path: Path, model, ids: torch.Tensor | None) -> dict:
    t0 = time.perf_counter()
    if ids is None:
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(3, model.config.vocab_size, (2, 32), generator=g)
    device = model.get_input_embeddings().weight.device
    ids = ids.to(device)
    ref = model(input_ids=ids, use_cache=False).logits.float()
    reloaded, _ = load_quantized(path, device=str(device))
    got = reloaded(input_ids=ids, use_cache=False).logits.float()
    diff = (got - ref).abs().max().item()
    tol = RELOAD_TOLERANCE * max(1.0, ref.abs().max().item())
    if not diff <= tol:  # NaN fails too
        raise SwappruneError(
            f"quantized self-check: reloaded logits differ by {diff:.3g} (tolerance {tol:.3g})"
        )
    del reloaded
    return {
        "passed": True,
        "logits_max_abs_diff": diff,
        "logits_tolerance": tol,
        "windows": list(ids.shape),
        "reload_check_s": round(time.perf_counter() - t0, 3),
    }
