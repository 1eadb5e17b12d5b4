"""Every file and directory swapprune writes goes through here.

* :func:`check_output_dir`: an output directory is refused before any compute
  when it cannot be written, or when replacing it would lose data that
  swapprune did not write (only a directory holding a swapprune
  ``provenance.json`` may be overwritten, and never the working directory, one
  of its ancestors, or the model being read);
* :func:`check_output_file`: the same for a single output file;
* :func:`staging_dir`: build a directory in a hidden sibling
  (``.NAME.partial-PID-*``) and rename it into place only when complete, so an
  interrupted run never leaves a directory that looks whole; partials left by
  dead processes are removed; the rename re-checks the destination under a lock
  (:mod:`swapprune.output.placement`);
* :func:`write_json_atomic`, :func:`write_text_atomic`, :func:`write_bytes_atomic`: temp file + rename;
* :func:`versions` and :func:`provenance`: what produced an artifact.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from swapprune import __version__
from swapprune.errors import SwappruneError
from swapprune.output.placement import move_into_place
from swapprune.output.writers import refused_as_line

PROVENANCE = "provenance.json"
MAX_NAME = 255  # bytes in one path component on common file systems
_DISTS = {
    "swapprune": ("swapprune",),
    "torch": ("torch",),
    "transformers": ("transformers",),
    "safetensors": ("safetensors",),
    "lm-eval": ("lm_eval", "lm-eval"),
    "accelerate": ("accelerate",),
    "peft": ("peft",),
    "optimum-quanto": ("optimum-quanto",),
}


def check_name(out: Path) -> None:
    """Refuse a path no file system takes: a NUL byte, or a last component too long."""
    if "\x00" in str(out):
        raise SwappruneError(f"output path {str(out)!r} contains a NUL byte")
    if len(out.name.encode()) > MAX_NAME:
        raise SwappruneError(
            f"output name is {len(out.name.encode())} bytes long; the limit is {MAX_NAME}"
        )


def _writable_ancestor(out: Path) -> None:
    ancestor = out.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise SwappruneError(f"cannot create {out}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise SwappruneError(f"cannot create {out}: {ancestor} is not writable")


def written_by_swapprune(directory: Path) -> bool:
    """Whether ``directory`` holds the ``provenance.json`` of an earlier swapprune run."""
    try:
        data = json.loads((directory / PROVENANCE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "swapprune" in (data.get("versions") or {})


def check_output_dir(
    out_dir: str | os.PathLike, overwrite: bool = False, protect: Sequence[str | os.PathLike] = ()
) -> Path:
    """Refuse an output directory before anything expensive runs; writes nothing.

    Args:
        out_dir: the directory to create (or replace).
        overwrite: allow replacing a non-empty directory, which must have been
            written by swapprune.
        protect: paths that must survive (the model being read): ``out_dir`` may
            be neither one of them nor contain one.

    Returns:
        The absolute output path.

    Raises:
        SwappruneError: ``out_dir`` is a file, not writable, too long a name, the
            working directory or an ancestor of it, a protected path, or a
            non-empty directory that may not be replaced.
    """
    out = Path(out_dir).expanduser().absolute()
    check_name(out)
    resolved = out.resolve()
    cwd = Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        raise SwappruneError(f"output directory {out} is the working directory or contains it")
    for p in protect:
        q = Path(p).expanduser().resolve()
        if resolved == q or resolved in q.parents:
            raise SwappruneError(f"output directory {out} would replace the input {p}")
    if out.exists():
        if not out.is_dir():
            raise SwappruneError(f"output path {out} exists and is not a directory")
        if any(out.iterdir()):
            if not overwrite:
                raise SwappruneError(
                    f"output directory {out} is not empty; choose another or pass --overwrite"
                )
            if not written_by_swapprune(out):
                raise SwappruneError(
                    f"--overwrite replaces only a directory that swapprune wrote (with its "
                    f"{PROVENANCE}); {out} is not one, so nothing was touched"
                )
    _writable_ancestor(out)
    return out


def check_output_file(path: str | os.PathLike, what: str = "--out") -> Path:
    """Refuse an output file path before any compute: a directory, under a file, unwritable."""
    out = Path(path).expanduser().absolute()
    check_name(out)
    if out.is_dir():
        raise SwappruneError(f"{what} {path} is a directory; give a file name")
    if out.exists() and not os.access(out, os.W_OK):
        raise SwappruneError(f"{what} {path} is not writable")
    _writable_ancestor(out)
    return out


def apply_umask(path: Path) -> None:
    """Give ``path`` (and everything under it) the permissions a plain mkdir/open would."""
    # mkdtemp and mkstemp create owner-only entries.
    umask = os.umask(0)
    os.umask(umask)
    path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)
    if path.is_dir():
        for f in path.rglob("*"):
            f.chmod((0o777 if f.is_dir() else 0o666) & ~umask)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_partials(out: Path) -> list[Path]:
    """Remove ``.NAME.partial-PID-*`` siblings of ``out`` whose process is gone."""
    removed: list[Path] = []
    if not out.parent.is_dir():
        return removed
    for p in out.parent.glob(f".{out.name}.partial-*"):
        pid = p.name.rsplit(".partial-", 1)[1].split("-", 1)[0]
        if pid.isdigit() and _pid_alive(int(pid)):  # still being written (or this process)
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(p)
    return removed


@contextlib.contextmanager
def staging_dir(
    out: str | os.PathLike,
    *,
    overwrite: bool | None = None,
    expected: tuple | None | bool = False,
    needs: int | None = None,
) -> Iterator[Path]:
    """A hidden sibling of ``out`` to build into; renamed to ``out`` when the block succeeds.

    On any exception (a signal included) the partial directory is removed and
    ``out`` is untouched. The final rename re-checks ``out`` under a lock
    (:func:`swapprune.output.placement.move_into_place`: ``overwrite``, and
    ``expected``, what ``out`` held when the run started). A full disk or the
    file-size limit becomes one line naming ``out`` and ``needs`` bytes.
    """
    out = Path(out).expanduser().absolute()
    with refused_as_line(out, needs):
        out.parent.mkdir(parents=True, exist_ok=True)
        clean_stale_partials(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent))
    with refused_as_line(out, needs, inside=tmp):
        try:
            yield tmp
            apply_umask(tmp)
            move_into_place(tmp, out, overwrite=overwrite, expected=expected)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


@contextlib.contextmanager
def staged_files(out: str | os.PathLike) -> Iterator[Path]:
    """A hidden directory inside ``out`` to write a set of files into; moved into ``out``
    together when the block succeeds, removed when it fails, so ``out`` never holds part
    of the set (compare's report beside its cache). A refused write names its final path.
    """
    out = Path(out)
    with refused_as_line(out):
        tmp = Path(tempfile.mkdtemp(prefix=f".files.partial-{os.getpid()}-", dir=out))
    with refused_as_line(out, inside=tmp):
        try:
            yield tmp
            for f in sorted(tmp.iterdir()):
                os.replace(f, out / f.name)
            tmp.rmdir()
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


@contextlib.contextmanager
def locked(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive advisory lock on the file ``path`` (created if missing), for the block.

    The kernel drops the lock when its process dies, so a killed holder never
    blocks the next one. Where ``fcntl`` is missing (Windows) this is a no-op:
    callers must stay correct without it (atomic writes make a race cost only
    duplicate work).
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` via a temp file in the same directory and a rename."""
    path = Path(path)
    with refused_as_line(path, len(data)):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            binary = isinstance(data, bytes)
            f: IO[Any] = os.fdopen(
                fd, "wb" if binary else "w", encoding=None if binary else "utf-8"
            )
            with f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            apply_umask(Path(tmp))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file in the same directory and a rename."""
    _write_atomic(path, text)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same directory and a rename."""
    _write_atomic(path, data)


def read_keyed_npz(path: str | os.PathLike, key: str) -> dict | None:
    """The arrays of an ``.npz`` cache entry that :func:`write_keyed_npz` wrote under ``key``;
    ``None`` when it is missing, unreadable or stored under another key."""
    import numpy as np  # imports numpy

    try:
        with np.load(path, allow_pickle=False) as z:
            if str(z["key"]) != key:
                return None
            return {n: z[n] for n in z.files if n != "key"}
    except Exception:  # missing, truncated or foreign
        return None


def write_keyed_npz(path: str | os.PathLike, key: str, arrays: dict) -> None:
    """Write ``arrays`` and ``key`` to ``path`` as one ``.npz``, atomically (an ``OSError``
    reaches the caller)."""
    import numpy as np  # imports numpy

    buf = io.BytesIO()
    np.savez(buf, key=np.array(key), **arrays)
    write_bytes_atomic(path, buf.getvalue())


def save_figure(fig, path: str | os.PathLike, dpi: int = 120) -> Path:
    """Render the matplotlib figure ``fig`` as PNG and write it to ``path`` atomically."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    write_bytes_atomic(path, buffer.getvalue())
    return Path(path)


def write_json_atomic(path: str | os.PathLike, data: Any, indent: int | None = 1) -> None:
    """Write ``data`` as JSON to ``path`` atomically (temp file + rename)."""
    write_text_atomic(path, json.dumps(data, indent=indent, default=str) + "\n")


def versions() -> dict[str, str | None]:
    """Installed versions of swapprune and the libraries whose behaviour it depends on."""
    out: dict[str, str | None] = {}
    for name, dists in _DISTS.items():
        out[name] = None
        for dist in dists:
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                out[name] = importlib.metadata.version(dist)
                break
    if out["swapprune"] is None:
        out["swapprune"] = __version__
    out["python"] = sys.version.split()[0]
    return out


def provenance(**fields: Any) -> dict[str, Any]:
    """The ``provenance.json`` record: creation time, versions, and ``fields`` as given."""
    return {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(),
        **fields,
    }
