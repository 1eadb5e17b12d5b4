"""Putting a finished output in place: under a lock, and only over what the run may replace.

A run checks its output path when it starts (:func:`~swapprune.output.artifacts.check_output_dir`)
and writes into a hidden sibling for minutes or hours. Before the final rename
it takes an exclusive lock on the parent directory (``flock`` on the directory
itself: no lock file is left) and looks again: the path must hold what it held
at the start (:func:`output_state`), and may be replaced only by the
``--overwrite`` rule. Otherwise the finished result is renamed beside it, under
a name the error prints, and nothing at the path is touched. Two runs with one
``--output`` therefore never both succeed, and never mix their files.

A write the system refuses (a full disk, the file-size limit, a permission) becomes one
line naming the path (:func:`swapprune.output.writers.write_error`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from swapprune.errors import SwappruneError
from swapprune.output.writers import refused_as_line

PROVENANCE = "provenance.json"


def output_state(out: Path) -> tuple | None:
    """What is at ``out``: ``None`` (nothing), else its inode, mtime and provenance stamp."""
    try:
        st = out.stat()
    except FileNotFoundError:
        return None
    stamp = None
    with contextlib.suppress(OSError, ValueError):
        stamp = json.loads((out / PROVENANCE).read_text()).get("created")
    return (st.st_ino, st.st_mtime_ns, stamp)


@contextlib.contextmanager
def directory_lock(directory: Path) -> Iterator[None]:
    """An exclusive lock on ``directory`` for the block (no file is created; a no-op without fcntl)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _written_by_swapprune(directory: Path) -> bool:
    try:
        data = json.loads((directory / PROVENANCE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "swapprune" in (data.get("versions") or {})


def move_into_place(
    tmp: Path, out: Path, *, overwrite: bool | None = None, expected: tuple | None | bool = False
) -> None:
    """Rename the finished ``tmp`` to ``out``, re-checking ``out`` under a lock.

    Args:
        tmp: the finished directory (a sibling of ``out``).
        out: the destination.
        overwrite: ``True``: replace an ``out`` that swapprune wrote; ``False``: replace
            nothing; ``None``: replace whatever is there (swapprune's own cache entries).
        expected: :func:`output_state` of ``out`` when the run started (``False``:
            not recorded; then only the overwrite rule is checked).

    Raises:
        SwappruneError: ``out`` changed since the start, or holds what may not be
            replaced; ``tmp`` is then kept under a printed name.
    """
    with directory_lock(out.parent):
        now = output_state(out)
        empty = now is not None and out.is_dir() and not any(out.iterdir())
        why = None
        if expected is not False and now != expected and not (empty and expected is None):
            why = f"{out} changed while this run worked (another run, or a user, wrote it)"
        elif now is not None and not empty and overwrite is False:
            why = f"{out} exists and --overwrite was not given"
        elif now is not None and not empty and overwrite and not _written_by_swapprune(out):
            why = f"{out} was not written by swapprune, so --overwrite does not replace it"
        if why is not None:
            kept = Path(tempfile.mkdtemp(prefix=f"{out.name}.run-{os.getpid()}-", dir=out.parent))
            kept.rmdir()
            os.rename(tmp, kept)
            raise SwappruneError(f"{why}; nothing there was touched; this run's result is {kept}")
        if empty:
            out.rmdir()
        if not out.exists():
            os.rename(tmp, out)
            return
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        old.rmdir()
        os.rename(out, old)
        os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def sole_writer(path: Path) -> Iterator[None]:
    """Hold ``.NAME.lock`` beside ``path`` for the block; another holder is a one-line error.

    For a file a run writes for a long time (a scores file it resumes): a second run on
    the same file fails at once instead of interleaving its writes. The lock file is
    removed at the end; a killed holder's lock is released by the kernel and its file
    reused. The inode is re-checked after locking, so a holder that removed the file just
    before this one locked it is not missed.
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    lock = path.with_name(f".{path.name}.lock")
    while True:
        with refused_as_line(path):  # a directory that refuses the lock refuses the file too
            lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SwappruneError(
                f"another run is writing {path}; wait for it, or choose another output file"
            ) from None
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the lock file was replaced meanwhile: lock the current one
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
