"""The model card (``README.md``) of a written checkpoint: metadata, what was cut, and why."""

from __future__ import annotations

import json
from typing import Any

from swapprune.plan import PrunePlan, source_id

CARD_TAGS = ("swapprune", "pruned", "layer-pruning")


def model_card(plan: PrunePlan, base_model_id: Any, extra: list[str] | None = None) -> str:
    """Model card ``README.md``: HF YAML metadata, what was removed or merged, and why.

    Args:
        plan: the applied plan.
        base_model_id: the unpruned model as others can find it (``base_model``): a
            hub id or an absolute path, or a :class:`swapprune.model.load.ModelSource`,
            whose ``id`` is exactly that.
        extra: markdown lines added after the plan summary.
    """
    base_model_id = source_id(base_model_id)
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
    ]
    if plan.fingerprint:
        fp = plan.fingerprint
        body.append(
            f"- **Source model fingerprint**: config `{fp.get('config')}`, weights "
            f"`{fp.get('weights')}` ({fp.get('dtype')})"
        )
    body += [
        "",
    ]
    body += list(extra or [])
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
