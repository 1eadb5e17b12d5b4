"""The model card (``README.md``) of a written checkpoint: what was cut, why, and what it cost.

It reads as prose: what the model is and where it came from, which blocks were
removed and why those (including why a block the criterion ranked as more
removable was kept), then what the run measured (``extra``, from
:func:`card_lines`: the cost, the certificate, the stability, ``auto``'s
decision). The exact plan, the per-block scores and the files are in a
collapsed ``<details>`` section at the end.
"""

from __future__ import annotations

import json
from typing import Any

from swapprune.plan import PrunePlan, source_id
from swapprune.records import KEYS as RECORD_KEYS

CARD_TAGS = ("swapprune", "pruned", "layer-pruning")


def model_card(plan: PrunePlan, base_model_id: Any, extra: list[str] | None = None) -> str:
    """Model card ``README.md``: HF YAML metadata, the cut in prose, the details collapsed.

    Args:
        plan: the applied plan.
        base_model_id: the unpruned model: a :class:`swapprune.model.source.ModelSource`
            (its hub id goes into ``base_model``; without one the prose says which file
            it was and where it came from), or a hub id or path as a string.
        extra: markdown paragraphs added after the account of the cut.
    """
    hub = getattr(base_model_id, "hub_id", None) if not isinstance(base_model_id, str) else None
    origin = getattr(base_model_id, "origin", None) or source_id(base_model_id)
    if (
        isinstance(base_model_id, str)
        and "/" in base_model_id
        and not base_model_id.startswith(("/", ".", "~"))
    ):
        hub = base_model_id  # a hub id given as text
    front = ["---"]
    if hub:  # the hub validates base_model as a model id: a file name has no place there
        front.append(f"base_model: {json.dumps(hub)}")
    front += ["library_name: transformers", "tags:", *(f"  - {t}" for t in CARD_TAGS), "---", ""]
    name = (hub or origin.split(" (")[0]).rstrip("/").rsplit("/", 1)[-1].removesuffix(".gguf")
    kept, total = len(plan.kept), plan.num_layers
    body = [
        f"# {name}, {kept} of {total} blocks (depth-pruned with swapprune)",
        "",
        " ".join(
            [
                f"This is {origin}{_derived(origin, hub)} with {_what(plan)}.",
                "It loads with plain `AutoModelForCausalLM.from_pretrained`, like the model it "
                "came from.",
            ]
        ),
        "",
        *_why(plan),
        *(extra or []),
        "<details>",
        "<summary>Details: the exact plan, the scores behind it, the files</summary>",
        "",
        *_plan_list(plan),
        *_scores_section(plan),
        "Files:",
        "",
        "- `plan.json`: the exact plan (reload with `swapprune.plan.PrunePlan.from_json`).",
        "- `mergekit.yaml`: the same cut as a mergekit passthrough config (layer_range ends are "
        "exclusive"
        + ("; merged weights are not reproducible by passthrough" if plan.merged else "")
        + ").",
        "- `provenance.json`: versions, the command that produced this checkpoint, and the "
        "self-check results (reloaded logits vs in-memory; generation with vs without KV cache).",
        "",
        "</details>",
        "",
    ]
    return "\n".join(front + body)


def card_lines(metrics: dict, plan: PrunePlan) -> list[str]:
    """The card's account of what the run measured: what the cut cost (``metrics["cost"]``),
    whether it can be trusted, how stable the selection is, what ``auto`` decided."""
    out: list[str] = []
    cost = metrics.get("cost")
    if cost:
        # The summary's first line is the perplexity; further lines (generation) follow it.
        first, *more = cost["summary"].removeprefix("cost: ").splitlines()
        text = (
            f"What the cut cost: {first}, with a 95% paired bootstrap CI over windows of the "
            "matched WikiText-2 contract."
        )
        text += "".join(f" {line[:1].upper()}{line[1:]}." for line in more if line.strip())
        out += [text + (f" **{cost['warning']}**" if cost.get("warning") else ""), ""]
    records = plan.records
    cert = records.measured
    if cert is not None:
        text = cert.paragraph()
        out += [text, ""]
    stab = records.stability
    if stab is not None:
        said = stab.summary().removeprefix("stability: ")
        text = f"How stable is the choice? {said[:1].upper()}{said[1:]}."
        warning = records.stability_warning()
        out += [text + (f" **{warning}**" if warning else ""), ""]
    if records.auto is not None:
        out += ["What `--protocol auto` decided: " + "; ".join(records.auto.lines()) + ".", ""]
    return out


def _derived(origin: str, hub: str | None) -> str:
    return "" if not hub or hub in origin else f", derived from {hub}"


def _what(plan: PrunePlan) -> str:
    n = len(plan.removed)
    if plan.merged:
        groups = "; ".join(f"{g} into block {k}" for k, g in plan.merged.items())
        return (
            f"{n} of its {plan.num_layers} blocks merged into a neighbour ({plan.merge}: {groups})"
        )
    if not n:
        return "no block removed"
    return (
        f"{n} of its {plan.num_layers} transformer blocks removed: {_list(plan.removed)} (0-based)"
    )


def _list(blocks) -> str:
    items = [str(b) for b in blocks]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def _blocks(blocks, verb: str) -> str:
    """``"Block 5 ranks"`` or ``"Blocks 5 and 7 rank"``."""
    many = len(blocks) > 1
    return f"Block{'s' if many else ''} {_list(blocks)} {verb if many else verb + 's'}"


def _why(plan: PrunePlan) -> list[str]:
    """Why these blocks: the criterion and strategy, and any block ranked more removable kept."""
    if not plan.protocol:
        return []
    text = (
        f"The blocks were chosen by the `{plan.protocol}` criterion with the "
        f"`{plan.strategy}` strategy at a budget of {plan.budget}."
    )
    imp = plan.scores.get("importance")
    if isinstance(imp, list) and len(imp) == plan.num_layers and plan.removed:
        text += " " + _kept_lower(plan, imp)
    return [text, ""]


def _kept_lower(plan: PrunePlan, imp: list) -> str:
    """The kept blocks ranked more removable than a removed one, and the reason they stayed."""
    gone = set(plan.removed)
    worst = max((imp[b] for b in gone if imp[b] is not None), default=None)
    lower = [
        b
        for b, v in enumerate(imp)
        if b not in gone and v is not None and worst is not None and v < worst
    ]
    if not lower:
        return "They are the least important blocks the criterion found (lower = more removable)."
    cert = plan.records.measured
    if cert is not None and cert.switched:
        return (
            f"{_blocks(lower, 'rank')} as more removable than a removed block, but on held-out "
            "windows the set removed here was clearly better than the criterion's own choice."
        )
    if plan.strategy and plan.strategy.startswith(("greedy", "bi-greedy")):
        beside = [b for b in lower if b - 1 in gone or b + 1 in gone]
        if beside:
            return (
                f"{_blocks(beside, 'rank')} as more removable than a removed block but "
                f"{'sit' if len(beside) > 1 else 'sits'} next to one: the strategy never removes two adjacent blocks, since two neighbours "
                "that each look redundant can stand in for each other, and removing both "
                "loses what they shared."
            )
    return (
        f"{_blocks(lower, 'rank')} as more removable than a removed block; the "
        f"`{plan.strategy}` strategy chose the set as a whole, not block by block."
    )


def _plan_list(plan: PrunePlan) -> list[str]:
    body = [
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
    return [*body, ""]


def _scores_section(plan: PrunePlan) -> list[str]:
    """A per-layer table for score lists/dicts covering the layers, the rest (the records
    among them) as JSON, in ``plan.json``'s order."""
    n = plan.num_layers
    columns: dict[str, list[Any]] = {}
    rest: dict[str, Any] = {}
    for key, value in plan.to_dict()["scores"].items():
        if key in RECORD_KEYS:
            rest[key] = value
            continue
        if isinstance(value, dict) and isinstance(value.get("values"), list):
            value = value["values"]  # the tie-break's per-block key (its rule is in plan.json)
        per_layer = _per_layer(value, n)
        if per_layer is None:
            rest[key] = value
        else:
            columns[key] = per_layer
    if not columns and not rest:
        return []
    lines = ["Scores behind the decision:", ""]
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
