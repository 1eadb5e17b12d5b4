"""The matrices of a linear patch on disk: ``patch.safetensors`` beside ``plan.json``.

A plan records the patch's kind, spans and fits, the file's name and its sha256;
the matrices (``[H, H]`` per span, or ``[H]`` for a channel-wise patch) live in
the file, stored in float64 exactly as fitted, so ``swapprune apply`` folds the
same numbers and rebuilds the checkpoint bit for bit.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from swapprune.edit.patch import Patch
from swapprune.errors import SwappruneError

FILE = "patch.safetensors"


def patch_record(patches: list[Patch], ridge: float, windows: dict, compute: dict) -> dict:
    """The plan's ``patch`` entry (without the file digest, added when saved)."""
    return {
        "kind": "linear",
        "file": FILE,
        "ridge": ridge,
        "windows": windows,
        "spans": [p.describe() for p in patches],
        "compute": compute,
    }


def save_patches(patches: list[Patch], directory: Path) -> str:
    """Write the matrices into ``directory / FILE``; returns their sha256."""
    from safetensors.torch import save_file

    path = Path(directory) / FILE
    save_file({f"span.{i}": p.matrix.contiguous() for i, p in enumerate(patches)}, str(path))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_patches(plan, directory: str | Path) -> list[Patch]:
    """The patches of ``plan`` from the file beside it, checked against the recorded digest."""
    from safetensors.torch import load_file

    rec = plan.patch
    path = Path(directory) / rec["file"]
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SwappruneError(
            f"the plan's patch file {path} cannot be read: {e.strerror or e}"
        ) from None
    if rec.get("sha256") and hashlib.sha256(data).hexdigest() != rec["sha256"]:
        raise SwappruneError(f"patch file {path} does not match the plan's sha256")
    tensors = load_file(str(path))
    out = []
    for i, span in enumerate(rec["spans"]):
        key = f"span.{i}"
        if key not in tensors:
            raise SwappruneError(f"patch file {path} lacks {key}")
        out.append(
            Patch(
                span=(int(span["span"][0]), int(span["span"][1])),
                block=int(span["block"]),
                module=str(span["module"]),
                kind=str(span["kind"]),
                matrix=tensors[key],
                fit=dict(span.get("fit") or {}),
            )
        )
    return out
