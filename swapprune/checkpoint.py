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

import contextlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch import nn

from swapprune.architectures import TYPE_KEY, decoder_stack
from swapprune.errors import SwappruneError
from swapprune.loading import clear_gguf_marker
from swapprune.plan import PrunePlan

CARD_TAGS = ("swapprune", "pruned", "layer-pruning")
GENERATE_TOKENS = 16
# Max |logit difference| allowed between the reloaded and in-memory model, relative to the
# largest |logit| (at least 1). Same code, same weights: fp32 differs only by summation order.
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10, torch.bfloat16: 1e-2, torch.float16: 1e-3}


class SelfCheckError(SwappruneError):
    """The written checkpoint did not reproduce the in-memory model; nothing was kept."""


def check_output_dir(out_dir: str | Path, overwrite: bool = False) -> Path:
    """Refuse an output directory before anything expensive runs; writes nothing.

    Raises:
        SwappruneError: ``out_dir`` is a file, a non-empty directory without
            ``overwrite``, or lies under a path that is not a writable directory.
    """
    out = Path(out_dir).expanduser().absolute()
    if out.exists():
        if not out.is_dir():
            raise SwappruneError(f"output path {out} exists and is not a directory")
        if any(out.iterdir()) and not overwrite:
            raise SwappruneError(
                f"output directory {out} is not empty; choose another or pass overwrite"
            )
    ancestor = out.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise SwappruneError(f"cannot create {out}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise SwappruneError(f"cannot create {out}: {ancestor} is not writable")
    return out


def save_checkpoint(
    model: nn.Module,
    tokenizer,
    plan: PrunePlan,
    out_dir: str | Path,
    *,
    save_dtype: torch.dtype | None = None,
    overwrite: bool = False,
    provenance: dict[str, Any],
    base_model_id: str,
    selfcheck: bool = True,
    check_ids: torch.Tensor | None = None,
) -> dict[str, Any]:
    """Write the pruned ``model`` as a checkpoint in ``out_dir`` and self-check it.

    Args:
        model: the pruned model (after :func:`swapprune.surgery.apply_plan`).
        tokenizer: its tokenizer, saved alongside (``None`` to skip).
        plan: the plan that was applied.
        out_dir: destination directory (must be absent or empty unless ``overwrite``).
        save_dtype: dtype of the saved weights; the model's own dtype when ``None``.
            The in-memory model is not changed (the self-check then runs it on a
            rounded copy of its weights, which costs one extra copy in memory).
        overwrite: replace an existing non-empty ``out_dir``.
        provenance: the command line / recipe that produced the model (recorded as given).
        base_model_id: id of the unpruned model (model card ``base_model``, mergekit source).
        selfcheck: reload and verify before the rename (recommended).
        check_ids: token windows ``[B, T]`` for the logit check; a fixed seeded
            sample of the vocabulary when ``None``.

    Returns:
        The self-check results (also written to ``provenance.json``).

    Raises:
        SwappruneError: bad ``out_dir`` (nothing written), or
        SelfCheckError: the reloaded checkpoint differs (nothing left in place).
    """
    out = check_output_dir(out_dir, overwrite)
    start = time.perf_counter()
    clear_gguf_marker(model)
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

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        _save_model(model, tmp, save_dtype)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        plan.to_json(tmp / "plan.json")
        dtype_name = str(save_dtype).removeprefix("torch.")
        (tmp / "mergekit.yaml").write_text(plan.mergekit_yaml(base_model_id, dtype=dtype_name))
        (tmp / "README.md").write_text(model_card(plan, base_model_id))
        if selfcheck:
            results = _selfcheck(tmp, model, check_ids, reference, model_dtype)
        else:
            results = {"skipped": True}
        results["wall_s"] = round(time.perf_counter() - start, 3)
        record = {
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "base_model": base_model_id,
            "versions": _versions(),
            "invocation": provenance,
            "plan": plan.describe(),
            "save_dtype": dtype_name,
            "selfcheck": results,
        }
        (tmp / "provenance.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
        _apply_umask(tmp)
        _move_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
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


def _save_model(model: nn.Module, path: Path, save_dtype: torch.dtype) -> None:
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
    from transformers import AutoModelForCausalLM

    t0 = time.perf_counter()
    attn = getattr(model.config, "_attn_implementation", None)
    kwargs = {"dtype": model_dtype, "output_loading_info": True}
    if attn:
        kwargs["attn_implementation"] = attn
    try:
        reloaded, info = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except Exception as e:  # any reload failure means the checkpoint is not usable
        raise SelfCheckError(f"self-check: the checkpoint does not reload ({e})") from e
    reloaded.to(ids.device).eval()
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

    prompt = ids[:1, : min(8, ids.shape[1])]
    gen = dict(
        max_new_tokens=GENERATE_TOKENS,
        min_new_tokens=GENERATE_TOKENS,
        do_sample=False,
        pad_token_id=_pad_id(reloaded),
    )
    with torch.no_grad():
        cached = reloaded.generate(prompt, use_cache=True, **gen)
        uncached = reloaded.generate(prompt, use_cache=False, **gen)
    if not torch.equal(cached, uncached):
        raise SelfCheckError(
            "self-check: greedy generation with the KV cache differs from generation without it "
            f"({cached[0, prompt.shape[1] :].tolist()} vs {uncached[0, prompt.shape[1] :].tolist()})"
            "; a layer_idx or layer_types mismatch is the usual cause"
        )
    del reloaded
    return {
        "passed": True,
        "windows": list(ids.shape),
        "logits_max_abs_diff": diff,
        "logits_tolerance": tol,
        "generate_new_tokens": int(cached.shape[1] - prompt.shape[1]),
        "generate_cache_equal": True,
        "num_layers": stack.num_layers,
        "layer_types": list(types) if types is not None else None,
        "reload_check_s": round(time.perf_counter() - t0, 3),
    }


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


def _apply_umask(path: Path) -> None:
    # mkdtemp (and some writers) create owner-only entries; a checkpoint should get the
    # permissions any other directory the user creates gets.
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o777 & ~umask)
    for f in path.rglob("*"):
        f.chmod((0o777 if f.is_dir() else 0o666) & ~umask)


def _move_into_place(tmp: Path, out: Path) -> None:
    """Rename the finished ``tmp`` to ``out``, replacing an existing ``out`` last."""
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
    if not out.exists():
        os.rename(tmp, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    old.rmdir()
    os.rename(out, old)
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name, dists in {
        "swapprune": ("swapprune",),
        "torch": ("torch",),
        "transformers": ("transformers",),
        "safetensors": ("safetensors",),
        "lm-eval": ("lm_eval", "lm-eval"),
    }.items():
        versions[name] = None
        for dist in dists:
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                versions[name] = importlib.metadata.version(dist)
                break
    if versions["swapprune"] is None:
        import swapprune

        versions["swapprune"] = getattr(swapprune, "__version__", None)
    versions["python"] = sys.version.split()[0]
    return versions


def model_card(plan: PrunePlan, base_model_id: str) -> str:
    """Model card ``README.md``: HF YAML metadata, what was removed or merged, and why."""
    front = [
        "---",
        f"base_model: {json.dumps(base_model_id)}",
        "library_name: transformers",
        "tags:",
        *(f"  - {t}" for t in CARD_TAGS),
        "---",
        "",
    ]
    name = base_model_id.rstrip("/").rsplit("/", 1)[-1]
    body = [
        f"# {name}, depth-pruned with swapprune",
        "",
        f"Derived from `{base_model_id}`: {plan.describe()}.",
        "",
        f"- **Operation**: {plan.op}" + (f" (rule `{plan.merge}`)" if plan.merged else ""),
        f"- **Removed blocks** (0-based, original numbering): {plan.removed or 'none'}",
    ]
    if plan.merged:
        body.append(
            "- **Merged blocks**: " + "; ".join(f"{g} -> block {k}" for k, g in plan.merged.items())
        )
    body += [
        f"- **Kept blocks, in order**: {plan.kept}",
        f"- **Importance protocol**: {plan.protocol or 'not recorded'}",
        f"- **Selection strategy**: {plan.strategy or 'not recorded'}",
        f"- **Budget**: {plan.budget if plan.budget is not None else 'not recorded'}",
        "",
    ]
    body += _scores_section(plan)
    body += [
        "## Files",
        "",
        "- `plan.json`: the exact plan (reload with `swapprune.plan.PrunePlan.from_json`).",
        "- `mergekit.yaml`: the equivalent mergekit passthrough config (layer_range ends are "
        "exclusive"
        + ("; merged weights are not reproducible by passthrough" if plan.merged else "")
        + ").",
        "- `provenance.json`: versions, the command that produced this checkpoint, and the "
        "self-check results (reloaded logits vs in-memory; generation with vs without KV cache).",
        "",
    ]
    return "\n".join(front + body)


def _scores_section(plan: PrunePlan) -> list[str]:
    """A per-layer table for score lists/dicts covering the layers, the rest as JSON."""
    n = plan.num_layers
    columns: dict[str, list[Any]] = {}
    rest: dict[str, Any] = {}
    for key, value in plan.scores.items():
        per_layer = _per_layer(value, n)
        if per_layer is None:
            rest[key] = value
        else:
            columns[key] = per_layer
    if not columns and not rest:
        return []
    lines = ["## Scores behind the decision", ""]
    if columns:
        merged_into = {i: k for k, g in plan.merged.items() for i in g if i != k}
        lines.append("| layer | fate | " + " | ".join(columns) + " |")
        lines.append("|---:|---|" + "---:|" * len(columns))
        for i in range(n):
            fate = (
                f"merged into {merged_into[i]}"
                if i in merged_into
                else "removed"
                if i in plan.removed
                else "kept"
            )
            cells = [_fmt(col[i]) for col in columns.values()]
            lines.append(f"| {i} | {fate} | " + " | ".join(cells) + " |")
        lines.append("")
    if rest:
        lines += ["```json", json.dumps(rest, indent=2, default=str), "```", ""]
    return lines


def _per_layer(value: Any, n: int) -> list[Any] | None:
    if isinstance(value, (list, tuple)) and len(value) == n:
        return list(value)
    if isinstance(value, dict) and len(value) == n:
        try:
            by_idx = {int(k): v for k, v in value.items()}
        except (TypeError, ValueError):
            return None
        if set(by_idx) == set(range(n)):
            return [by_idx[i] for i in range(n)]
    return None


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
