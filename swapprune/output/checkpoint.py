"""Save a pruned model as a Hugging Face checkpoint that proves itself.

:func:`save_checkpoint` writes weights (safetensors), config, tokenizer,
generation config, ``plan.json``, ``mergekit.yaml``, a model card and
``provenance.json`` into a temporary sibling directory, reloads that directory
with plain ``AutoModelForCausalLM.from_pretrained`` and checks it (same logits
as the in-memory model; greedy generation with the KV cache equals generation
without it), and only then renames it into place. An interrupted or failed run
leaves at most a hidden ``.<name>.partial-*`` directory, never a checkpoint
that looks whole.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from swapprune.errors import SwappruneError
from swapprune.gguf.convert import gguf_marker_cleared
from swapprune.model.arch import TYPE_KEY
from swapprune.model.stack import decoder_stack
from swapprune.output.artifacts import PROVENANCE, check_output_dir, staging_dir, write_json_atomic
from swapprune.output.artifacts import provenance as make_provenance
from swapprune.output.card import model_card
from swapprune.output.placement import output_state
from swapprune.output.tokenizer_files import save_tokenizer
from swapprune.plan import PrunePlan

# New tokens of the self-check's greedy generation (cached run + one uncached forward).
GENERATE_TOKENS = 8
# Max |logit difference| allowed between the reloaded and in-memory model, relative to the
# largest |logit| (at least 1). Same code, same weights: fp32 differs only by summation order.
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10, torch.bfloat16: 1e-2, torch.float16: 1e-3}


class SelfCheckError(SwappruneError):
    """The written checkpoint did not reproduce the in-memory model; nothing was kept."""


def save_checkpoint(
    model: nn.Module,
    tokenizer,
    plan: PrunePlan,
    out_dir: str | Path,
    *,
    overwrite: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """Write the pruned ``model`` as a checkpoint in ``out_dir`` and self-check it.

    The directory is built in a hidden sibling and renamed into place only
    after the self-check passed. ``kwargs`` are those of :func:`write_checkpoint`.

    Args:
        model: the pruned model (after :func:`swapprune.edit.surgery.apply_plan`).
        tokenizer: its tokenizer, saved alongside (``None`` to skip).
        plan: the plan that was applied.
        out_dir: destination directory (absent or empty, or an earlier swapprune
            output with ``overwrite``).
        overwrite: replace an earlier swapprune output in ``out_dir``.

    Returns:
        The self-check results (also written to ``provenance.json``).

    Raises:
        SwappruneError: bad ``out_dir`` (nothing written), or
        SelfCheckError: the reloaded checkpoint differs (nothing left in place).
    """
    out = check_output_dir(out_dir, overwrite)
    with staging_dir(out, overwrite=overwrite, expected=output_state(out)) as tmp:
        return write_checkpoint(model, tokenizer, plan, tmp, **kwargs)


def write_checkpoint(
    model: nn.Module,
    tokenizer,
    plan: PrunePlan,
    directory: Path,
    *,
    save_dtype: torch.dtype | None = None,
    provenance: dict[str, Any],
    base_model_id: Any,
    selfcheck: bool = True,
    check_ids: torch.Tensor | None = None,
    card_extra: list[str] | None = None,
    record: dict[str, Any] | None = None,
    card_from_files: Callable[[Path], list[str]] | None = None,
) -> dict[str, Any]:
    """Write the checkpoint files into the existing (staging) ``directory`` and self-check them.

    Args:
        model: the pruned model.
        tokenizer: its tokenizer (``None`` to skip).
        plan: the plan that was applied.
        directory: where to write (the caller renames it into place).
        save_dtype: dtype of the saved weights; the model's own dtype when ``None``.
            The in-memory model is not changed (the self-check then runs it on a
            rounded copy of its weights, which costs one extra copy in memory).
        provenance: the command line / configuration that produced the model.
        base_model_id: the unpruned model: a :class:`~swapprune.model.source.ModelSource` (the
            card's ``base_model`` and origin, mergekit's source) or a hub id or path.
        selfcheck: reload and verify (recommended).
        check_ids: token windows ``[B, T]`` for the logit check; a fixed seeded
            sample of the vocabulary when ``None``.
        card_extra: markdown lines added to the model card (e.g. the measured cost).
        record: further top-level fields of ``provenance.json``.
        card_from_files: more card lines, computed from ``directory`` once the weights,
            ``config.json`` and the tokenizer are written (the serving view reads the
            saved ``config.json``).

    Returns:
        The self-check results.
    """
    tmp = Path(directory)
    start = time.perf_counter()
    model_dtype = next(model.parameters()).dtype
    save_dtype = save_dtype or model_dtype
    device = next(model.parameters()).device
    if check_ids is None:
        check_ids = _default_windows(model.config)
    check_ids = check_ids.to(device)
    was_training = model.training
    model.eval()  # dropout would make the reference differ from any reload
    try:
        reference = _reference_logits(model, check_ids, save_dtype) if selfcheck else None
    finally:
        model.train(was_training)

    dtype_name = str(save_dtype).removeprefix("torch.")
    with gguf_marker_cleared(model):
        _save_model(model, tmp, save_dtype)
    if tokenizer is not None:
        save_tokenizer(tokenizer, tmp)
    plan.to_json(tmp / "plan.json")
    (tmp / "mergekit.yaml").write_text(plan.mergekit_yaml(base_model_id, dtype=dtype_name))
    extra = [*(card_extra or []), *(card_from_files(tmp) if card_from_files else [])]
    (tmp / "README.md").write_text(model_card(plan, base_model_id, extra))
    if selfcheck:
        results = _selfcheck(tmp, model, check_ids, reference, model_dtype)
    else:
        results = {"skipped": True}
    results["wall_s"] = round(time.perf_counter() - start, 3)
    data = make_provenance(
        base_model=getattr(base_model_id, "base_model", base_model_id),
        invocation=provenance,
        plan=plan.describe(),
        save_dtype=dtype_name,
        selfcheck=results,
        **(record or {}),
    )
    write_json_atomic(tmp / PROVENANCE, data, indent=2)
    return results


def _default_windows(config) -> torch.Tensor:
    # Ids 0-2 are specials in most vocabularies; a seeded sample keeps runs comparable.
    g = torch.Generator().manual_seed(0)
    return torch.randint(3, config.vocab_size, (2, 32), generator=g)


@torch.no_grad()
def _reference_logits(model: nn.Module, ids: torch.Tensor, save_dtype: torch.dtype):
    """In-memory logits ``[B, T, V]``, with weights rounded to ``save_dtype`` if that differs."""
    params = dict(model.named_parameters())
    rounded = None
    if any(p.is_floating_point() and p.dtype != save_dtype for p in params.values()):
        # The checkpoint stores rounded weights that reload upcast exactly, so the reference
        # runs the in-memory model on the same rounded values (the model itself is untouched).
        rounded = {
            n: p.to(save_dtype).to(p.dtype) if p.is_floating_point() else p
            for n, p in params.items()
        }
    if rounded is None:
        return model(input_ids=ids, use_cache=False).logits.float()
    out = torch.func.functional_call(model, rounded, (), {"input_ids": ids, "use_cache": False})
    return out.logits.float()


def _save_model(module: nn.Module, path: Path, save_dtype: torch.dtype) -> None:
    model: Any = module  # a PreTrainedModel
    model_dtype = next(model.parameters()).dtype
    if save_dtype == model_dtype:
        model.save_pretrained(path)
        return
    # Cast each storage once so tied tensors (embeddings / LM head) stay shared and are
    # written once, as save_pretrained does for the model's own tensors.
    cast: dict[tuple[int, torch.dtype], torch.Tensor] = {}
    state = {}
    for name, t in model.state_dict().items():
        if t.is_floating_point():
            key = (t.data_ptr(), t.shape)
            state[name] = cast.setdefault(key, t.to(save_dtype))
        else:
            state[name] = t
    model.save_pretrained(path, state_dict=state)
    # save_pretrained records the in-memory dtype; loaders with dtype="auto" must see the saved one.
    config_file = path / "config.json"
    config = json.loads(config_file.read_text())
    config["dtype"] = str(save_dtype).removeprefix("torch.")
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _selfcheck(path: Path, model, ids, reference, model_dtype) -> dict[str, Any]:
    """Reload ``path`` once with plain ``from_pretrained`` and prove it is the in-memory model.

    Proves: the checkpoint reloads (same dtype, straight onto the model's
    device) with no missing or unexpected keys; it has the in-memory block
    count and ``layer_types``; its logits on ``ids`` match ``reference`` within
    :data:`TOLERANCE`; and a short greedy generation with the KV cache equals
    generation without it. The uncached side is one teacher-forced forward over
    the generated sequence: at every step it sees the prefix the cached run
    saw, so it picks the same next token exactly when an uncached greedy
    generation would (a differing pick is allowed only for a near-tie, two
    logits within the tolerance). That is one forward instead of one per token.
    """
    from transformers import AutoModelForCausalLM  # imports transformers

    t0 = time.perf_counter()
    attn = getattr(model.config, "_attn_implementation", None)
    kwargs: dict[str, Any] = {"dtype": model_dtype, "output_loading_info": True}
    if attn:
        kwargs["attn_implementation"] = attn
    if ids.device.type != "cpu":
        kwargs["device_map"] = str(ids.device)  # load the weights where they will run, once
    try:
        loaded: Any = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        reloaded, info = loaded
    except Exception as e:  # any reload failure means the checkpoint is not usable
        raise SelfCheckError(f"self-check: the checkpoint does not reload ({e})") from e
    reloaded.to(ids.device).eval()
    t_reload = time.perf_counter()
    problems = {
        k: sorted(v) for k, v in info.items() if k in ("missing_keys", "unexpected_keys") and v
    }
    if problems:
        raise SelfCheckError(f"self-check: reload reported {problems}")

    stack, ref_stack = decoder_stack(reloaded), decoder_stack(model)
    if stack.num_layers != ref_stack.num_layers:
        raise SelfCheckError(
            f"self-check: reloaded model has {stack.num_layers} blocks, expected "
            f"{ref_stack.num_layers}"
        )
    types = getattr(reloaded.config, TYPE_KEY, None)
    expected_types = getattr(model.config, TYPE_KEY, None)
    if expected_types is not None and list(types or []) != list(expected_types):
        raise SelfCheckError(
            f"self-check: reloaded layer_types {types} != in-memory {list(expected_types)}"
        )

    with torch.no_grad():
        logits = reloaded(input_ids=ids, use_cache=False).logits.float()
    diff = (logits - reference).abs().max().item()
    scale = max(1.0, reference.abs().max().item())
    tol = TOLERANCE.get(model_dtype, 1e-2) * scale
    if not diff <= tol:  # written so NaN fails too
        raise SelfCheckError(
            f"self-check: reloaded logits differ from the in-memory model by {diff:.3g} "
            f"(tolerance {tol:.3g})"
        )
    del logits
    t_logits = time.perf_counter()

    gen_diff = _check_cached_generation(reloaded, ids[:1, : min(8, ids.shape[1])], tol)
    del reloaded
    t_end = time.perf_counter()
    return {
        "passed": True,
        "windows": list(ids.shape),
        "logits_max_abs_diff": diff,
        "logits_tolerance": tol,
        "generate_new_tokens": GENERATE_TOKENS,
        "generate_cache_equal": True,
        "generate_logits_max_abs_diff": gen_diff,
        "num_layers": stack.num_layers,
        "layer_types": list(types) if types is not None else None,
        "reload_check_s": round(t_end - t0, 3),
        "reload_s": round(t_reload - t0, 3),
        "logits_s": round(t_logits - t_reload, 3),
        "generate_s": round(t_end - t_logits, 3),
    }


@torch.no_grad()
def _check_cached_generation(model, prompt: torch.Tensor, tol: float) -> float:
    """Greedy generation with the KV cache against the uncached forward; returns the max logit gap.

    Raises :class:`SelfCheckError` when a cached step picks another token than
    the uncached logits of the same prefix (beyond a near-tie within ``tol``).
    """
    n, p = GENERATE_TOKENS, prompt.shape[1]
    out = model.generate(
        prompt,
        use_cache=True,
        max_new_tokens=n,
        min_new_tokens=n,
        do_sample=False,
        pad_token_id=_pad_id(model),
        output_logits=True,
        return_dict_in_generate=True,
    )
    seq = out.sequences
    cached = torch.stack(out.logits, dim=1).float()  # [1, n, V], before any logits processor
    full = model(input_ids=seq[:, :-1], use_cache=False).logits.float()[:, p - 1 :]
    gap = (cached - full).abs().max().item()
    pick_cached, pick_full = cached.argmax(-1), full.argmax(-1)
    for step in (pick_cached != pick_full).nonzero()[:, 1].tolist():
        a, b = pick_cached[0, step], pick_full[0, step]
        if not (full[0, step, b] - full[0, step, a]).abs().item() <= tol:
            raise SelfCheckError(
                "self-check: greedy generation with the KV cache differs from generation "
                f"without it at step {step} (token {int(a)} vs {int(b)}; cached "
                f"{seq[0, p:].tolist()}); a layer_idx or layer_types mismatch is the usual cause"
            )
    return gap


def _pad_id(model) -> int:
    gc = getattr(model, "generation_config", None)
    for value in (
        getattr(gc, "pad_token_id", None),
        getattr(gc, "eos_token_id", None),
        getattr(model.config, "eos_token_id", None),
        0,
    ):
        if isinstance(value, list):
            value = value[0] if value else None
        if isinstance(value, int):
            return value
    return 0
