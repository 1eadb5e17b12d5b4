"""The prune plan: which original blocks the pruned model keeps, removes or merges.

A :class:`PrunePlan` is the artifact handed from selection to surgery and
saved next to the checkpoint (``plan.json``). It is pure data (no torch), is
validated whenever it is built or read, and can be rendered as the equivalent
mergekit ``passthrough`` config. What the selection measured besides the
per-block values (the certificate, stability, compute, ``auto``'s decision, ...)
travels as typed records (:class:`~swapprune.records.PlanRecords`).

All indices are 0-based indices into the *original* block list.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from swapprune.errors import SwappruneError
from swapprune.output.artifacts import write_text_atomic
from swapprune.records import KEYS as RECORD_KEYS
from swapprune.records import PlanRecords

OPS = ("remove", "merge")


@dataclass
class PrunePlan:
    """Which original blocks make up the pruned model.

    Attributes:
        num_layers: block count of the original model (``L``).
        kept: original indices of the new model's blocks, ascending.
        removed: original indices dropped from the stack (including blocks
            absorbed by a merge), ascending.
        merged: kept block -> the original blocks merged into it, itself
            included (``{4: [4, 5]}``); empty for a plain removal.
        op: ``"remove"`` or ``"merge"``.
        merge: name of the merge rule (``swapprune.edit.merging.MERGES``), or ``None``.
        budget: number of blocks the selection was asked to drop, if any.
        protocol: importance criterion the scores came from.
        strategy: selection strategy that turned scores into this plan.
        scores: per-block values behind the decision (importance, the tie-break key,
            a strategy's notes, oracle counts; JSON-serialisable).
        model: id of the source model.
        fingerprint: :func:`swapprune.model.fingerprint.model_fingerprint` of the source
            model, when known; a plan applied to another model can then be refused
            (:func:`swapprune.model.fingerprint.check_same_model`).
        patch: the linear patch folded after removal (:mod:`swapprune.edit.patch`): its
            kind, spans and fits, and the file beside the plan holding its matrices
            (``patch.safetensors``) with their sha256; ``None`` without a patch.
        records: what the selection recorded besides per-block values (certificate,
            stability, compute, adaptive, ``auto``, serve, removal order). ``plan.json``
            writes them inside ``scores``, where :meth:`from_dict` finds them again.
    """

    num_layers: int
    kept: list[int]
    removed: list[int] = field(default_factory=list)
    merged: dict[int, list[int]] = field(default_factory=dict)
    op: str = "remove"
    merge: str | None = None
    budget: int | None = None
    protocol: str | None = None
    strategy: str | None = None
    scores: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    fingerprint: dict[str, Any] | None = None
    patch: dict[str, Any] | None = None
    records: PlanRecords = field(default_factory=PlanRecords)

    def __post_init__(self) -> None:
        self.kept = list(self.kept)
        self.removed = list(self.removed)
        # JSON object keys are strings; normalise so a reloaded plan equals the original.
        self.merged = {_index_key(k): list(v) for k, v in dict(self.merged).items()}
        self.validate()
        self.removed.sort()
        for group in self.merged.values():
            group.sort()

    # -- construction -------------------------------------------------------

    @classmethod
    def from_removal(cls, num_layers: int, removed: list[int], **meta: Any) -> PrunePlan:
        """Plan that drops ``removed`` and keeps every other block in order."""
        _check_indices("removed", removed, num_layers)
        gone = set(removed)
        kept = [i for i in range(num_layers) if i not in gone]
        return cls(num_layers=num_layers, kept=kept, removed=sorted(gone), op="remove", **meta)

    @classmethod
    def from_merges(
        cls,
        num_layers: int,
        merges: dict[int, list[int]],
        merge: str = "average",
        **meta: Any,
    ) -> PrunePlan:
        """Plan that merges each ``absorbed`` list into its kept block and drops the absorbed.

        Args:
            num_layers: original block count.
            merges: kept block -> the blocks absorbed into it (the kept block
                itself may be listed or not).
            merge: merge rule name.
            **meta: the remaining :class:`PrunePlan` fields.
        """
        merged: dict[int, list[int]] = {}
        absorbed: list[int] = []
        for base, others in merges.items():
            others = [int(i) for i in others if int(i) != int(base)]
            merged[int(base)] = sorted({int(base), *others})
            absorbed += others
        _check_indices("absorbed", absorbed, num_layers)
        gone = set(absorbed)
        kept = [i for i in range(num_layers) if i not in gone]
        return cls(
            num_layers=num_layers,
            kept=kept,
            removed=sorted(gone),
            merged=merged,
            op="merge",
            merge=merge,
            **meta,
        )

    # -- validation ---------------------------------------------------------

    def validate(self) -> None:
        """Raise :class:`SwappruneError` unless the plan is self-consistent."""
        n = self.num_layers
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise SwappruneError(f"plan num_layers must be a positive integer, got {n!r}")
        _check_indices("kept", self.kept, n)
        _check_indices("removed", self.removed, n)
        if not self.kept:
            raise SwappruneError("plan keeps no block; at least one block must remain")
        if self.kept != sorted(self.kept):
            # Removal and merging never reorder blocks; a shuffled list is a bug upstream.
            raise SwappruneError(f"plan kept indices must be ascending, got {self.kept}")
        both = sorted(set(self.kept) & set(self.removed))
        if both:
            raise SwappruneError(f"plan lists blocks {both} as both kept and removed")
        missing = sorted(set(range(n)) - set(self.kept) - set(self.removed))
        if missing:
            raise SwappruneError(f"plan neither keeps nor removes blocks {missing} (of {n})")
        if self.op not in OPS:
            raise SwappruneError(f"plan op must be one of {', '.join(OPS)}, got {self.op!r}")
        if self.op == "remove" and self.merged:
            raise SwappruneError("plan op is 'remove' but it lists merged blocks")
        if self.op == "merge" and not self.merge:
            raise SwappruneError("plan op is 'merge' but names no merge rule")
        clash = sorted(set(self.scores) & set(RECORD_KEYS))
        if clash:
            raise SwappruneError(f"plan scores hold {clash}: those are records (plan.records)")
        if self.patch is not None:
            if self.op != "remove" or not isinstance(self.patch, dict):
                raise SwappruneError("plan patch must be an object, on a removal plan")
            if not isinstance(self.patch.get("file"), str) or "spans" not in self.patch:
                raise SwappruneError("plan patch must name its file and its spans")
        absorbed_by: dict[int, int] = {}
        for base, group in self.merged.items():
            if base not in self.kept:
                raise SwappruneError(f"merged block {base} is not a kept block")
            _check_indices(f"merged[{base}]", group, n)
            if base not in group:
                raise SwappruneError(f"merged[{base}] = {group} must include {base} itself")
            for i in group:
                if i == base:
                    continue
                if i not in self.removed:
                    raise SwappruneError(
                        f"block {i} is merged into {base} but is not listed as removed"
                    )
                if i in absorbed_by:
                    raise SwappruneError(
                        f"block {i} is merged into both {absorbed_by[i]} and {base}"
                    )
                absorbed_by[i] = base

    # -- derived views ------------------------------------------------------

    @property
    def is_identity(self) -> bool:
        """True when the plan keeps every block and merges nothing."""
        return self.kept == list(range(self.num_layers)) and not self.merged

    def runs(self) -> list[tuple[int, int]]:
        """Contiguous runs of kept indices as half-open ``(start, end)`` ranges."""
        runs: list[tuple[int, int]] = []
        for i in self.kept:
            if runs and runs[-1][1] == i:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))
        return runs

    def describe(self) -> str:
        """One line saying what the plan does."""
        if self.merged:
            groups = ", ".join(f"{g} -> {k}" for k, g in self.merged.items())
            what = f"merges {groups} ({self.merge})"
        elif self.removed:
            what = f"removes blocks {self.removed}"
            if self.patch:
                what += f" (linear patch on {len(self.patch['spans'])} span(s))"
        else:
            what = "keeps every block"
        return f"{what}; {len(self.kept)} of {self.num_layers} blocks remain"

    # -- persistence --------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``plan.json``): the fields, with the records inside ``scores``."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "records"}
        d["merged"] = {str(k): v for k, v in self.merged.items()}
        d["scores"] = self.records.json_scores(self.scores)
        return copy.deepcopy(d)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "plan") -> PrunePlan:
        """Build a plan from its JSON form; unknown or missing keys are errors."""
        if not isinstance(data, dict):
            raise SwappruneError(f"{source}: expected a JSON object, got {type(data).__name__}")
        known = set(cls.__dataclass_fields__) - {"records"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SwappruneError(f"{source}: unknown keys {unknown}; known: {sorted(known)}")
        for key in ("num_layers", "kept"):
            if key not in data:
                raise SwappruneError(f"{source}: missing key '{key}'")
        try:
            records, scores = PlanRecords.from_scores(data.get("scores") or {})
            return cls(**{**data, "scores": scores}, records=records)
        except (TypeError, ValueError, AttributeError, KeyError) as e:
            raise SwappruneError(f"{source}: malformed plan ({e})") from None

    def to_json(self, path: str | Path) -> None:
        """Write the plan as indented JSON."""
        text = json.dumps(self.to_dict(), indent=2)
        # One line per index list: a 30-layer plan should read at a glance.
        # (Matches need newlines, which JSON strings cannot hold, so string values are safe.)
        text = re.sub(
            r"\[\n\s*(-?\d+(?:,\n\s*-?\d+)*)\n\s*\]",
            lambda m: "[" + ", ".join(re.findall(r"-?\d+", m.group(1))) + "]",
            text,
        )
        write_text_atomic(path, text + "\n")

    @classmethod
    def from_json(cls, path: str | Path) -> PrunePlan:
        """Read and validate a plan written by :meth:`to_json`."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except OSError as e:
            raise SwappruneError(f"cannot read plan {path}: {e.strerror or e}") from None
        except json.JSONDecodeError as e:
            raise SwappruneError(f"plan {path} is not valid JSON: {e}") from None
        return cls.from_dict(data, source=str(path))

    # -- mergekit -----------------------------------------------------------

    def mergekit_yaml(self, model_id: Any, dtype: str = "bfloat16") -> str:
        """The equivalent mergekit ``passthrough`` config.

        Each contiguous run of kept blocks becomes one slice. Merged weights
        cannot be expressed by ``passthrough``: for a merge plan the config
        reproduces the kept ordering with the kept blocks' original weights,
        and a comment says so.

        Args:
            model_id: the source model as mergekit should find it: a hub id or an
                absolute path, or a :class:`swapprune.model.source.ModelSource` (its
                :meth:`~swapprune.model.source.ModelSource.mergekit_source`: for a GGUF, the
                converted checkpoint and how to make one).
            dtype: the ``dtype`` mergekit writes.
        """
        notes: list[str] = []
        if hasattr(model_id, "mergekit_source"):
            name, notes = model_id.mergekit_source()
            about = getattr(model_id, "origin", name)
        else:
            name = about = source_id(model_id)
            if name.endswith(".gguf"):
                notes = [
                    "# mergekit reads Hugging Face checkpoints, not GGUF: convert the file "
                    "first and point `model` at the result."
                ]
        model = _yaml_scalar(name)
        lines = [
            f"# swapprune plan for {about}: {self.describe()}.",
            "# mergekit layer_range is [start, end): the end index is EXCLUSIVE,",
            f"# so [0, 3] takes layers 0, 1, 2. Removed: {self.removed}.",
            *notes,
        ]
        if self.merged:
            lines += [
                f"# WARNING: blocks were merged ({self.merge}): "
                + ", ".join(f"{g} -> {k}" for k, g in self.merged.items())
                + ".",
                "# passthrough cannot express merges: this config keeps the same layers in the",
                "# same order but with their ORIGINAL weights; merged weights are not reproduced.",
                "# Use the swapprune checkpoint for the merged model.",
            ]
        lines.append("slices:")
        for start, end in self.runs():
            lines += [
                "  - sources:",
                f"      - model: {model}",
                f"        layer_range: [{start}, {end}]",
            ]
        lines += ["merge_method: passthrough", f"dtype: {dtype}", ""]
        return "\n".join(lines)


def source_id(model: Any) -> str:
    """The id to record for a source model: ``model.id`` for a
    :class:`~swapprune.model.load.ModelSource`, else ``model`` as a string."""
    return str(model.id) if hasattr(model, "id") else str(model)


def _check_indices(what: str, indices: list[int], n: int) -> None:
    seen: set[int] = set()
    for i in indices:
        if not isinstance(i, int) or isinstance(i, bool):
            raise SwappruneError(f"{what} index {i!r} is not an integer")
        if not 0 <= i < n:
            raise SwappruneError(f"{what} index {i} is out of range for {n} layers (0..{n - 1})")
        if i in seen:
            raise SwappruneError(f"{what} lists block {i} twice")
        seen.add(i)


def _index_key(key: Any) -> Any:
    if isinstance(key, str) and key.isdigit():
        return int(key)
    return key


def _yaml_scalar(text: str) -> str:
    # Hub ids and plain paths are safe bare; anything else is written as a JSON
    # string, which is also a valid YAML double-quoted scalar.
    return text if re.fullmatch(r"[A-Za-z0-9_./][A-Za-z0-9_./-]*", text) else json.dumps(text)
