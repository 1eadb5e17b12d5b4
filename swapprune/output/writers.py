"""Every file swapprune writes, in one place, and the one line a failed write becomes.

:data:`WRITERS` names each function that writes, the files it writes and how the
write is protected. ``tests/test_writers.py`` finds every write call in the
package (``open`` for writing, ``write_text``, ``save_file``, ``savefig``,
``save_pretrained``, ...) and fails on one whose function is not listed here, then
injects faults (a full disk, the file-size limit, a directory that refuses writes,
SIGTERM) into each listed file's write.

A write that fails becomes :class:`WriteFailed`: one line naming the path, the reason
and, where known, the bytes needed. The command line adds what the run kept (a
``scores.json`` finished before the failure, compare's finished cells).

Protections, as written in :attr:`Writer.how`:

* ``staged``: built in a hidden sibling directory, renamed into place at the end
  (:func:`swapprune.output.artifacts.staging_dir`); a failure removes the sibling.
* ``atomic``: a temporary file in the same directory, fsynced and renamed
  (:func:`swapprune.output.artifacts.write_bytes_atomic` and its text and JSON forms).
* ``inside``: written into a directory that is itself ``staged`` or ``atomic``
  (a checkpoint's files, the conversion cache's entry).
"""

from __future__ import annotations

import contextlib
import errno
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from swapprune.errors import SwappruneError

_SPACE = (errno.ENOSPC, getattr(errno, "EDQUOT", 122))
_REFUSED = (errno.EACCES, errno.EPERM, errno.EROFS)
#: errno in a message without one (safetensors: "os error 28"; others: "code: 28").
_CODE = re.compile(r"(?:os error|code:)\s*(\d+)")
#: numpy's ``tofile`` (the GGUF writer's tensors) reports a short write without an errno.
_SHORT = re.compile(r"(\d+) requested and (\d+) written")


@dataclass(frozen=True)
class Writer:
    """A function that writes files, and the files it writes.

    Attributes:
        site: ``module:function`` (``module:Class.method``).
        files: the files it writes, as they appear on disk.
        how: ``staged``, ``atomic`` or ``inside`` (module docstring), or ``lock``/``probe``
            for the files that hold no result, ``direct`` for a development tool.
    """

    site: str
    files: str
    how: str


#: Every function in the package that opens a file for writing. A write call in any
#: other function fails ``tests/test_writers.py``.
WRITERS: tuple[Writer, ...] = (
    Writer(
        "swapprune.output.artifacts:_write_atomic",
        "scores.json, plan.json, metrics.json, provenance.json, config.yaml, "
        "compare's results.json, results.md and cache/*.json, validate's files, "
        "landscape.json, eval outputs, the conversion cache's index",
        "atomic",
    ),
    Writer(
        "swapprune.output.artifacts:save_figure", "every plot (*.png), into memory first", "atomic"
    ),
    Writer(
        "swapprune.output.artifacts:staging_dir",
        "a checkpoint's or cache entry's directory",
        "staged",
    ),
    Writer(
        "swapprune.output.artifacts:staged_files", "compare's report, moved in together", "staged"
    ),
    Writer("swapprune.output.artifacts:locked", "lock files (.NAME.lock)", "lock"),
    Writer("swapprune.output.placement:move_into_place", "the finished directory's name", "staged"),
    Writer("swapprune.output.placement:sole_writer", "a scores file's lock (.NAME.lock)", "lock"),
    Writer(
        "swapprune.output.checkpoint:write_checkpoint",
        "README.md (the card), mergekit.yaml",
        "inside",
    ),
    Writer("swapprune.output.checkpoint:_save_model", "model.safetensors, config.json", "inside"),
    Writer(
        "swapprune.output.tokenizer_files:portable_tokenizer_config",
        "tokenizer_config.json",
        "inside",
    ),
    Writer("swapprune.output.tokenizer_files:save_tokenizer", "the tokenizer's files", "inside"),
    Writer(
        "swapprune.gguf.writer:write_pruned_gguf", "model.gguf (a temporary file renamed)", "inside"
    ),
    Writer("swapprune.edit.patch:save_patches", "patch.safetensors", "inside"),
    Writer("swapprune.edit.quantization:save_quantized", "the quantized checkpoint", "staged"),
    Writer("swapprune.model.load:convert_gguf", "the GGUF conversion cache's entry", "inside"),
    Writer("swapprune.pipeline.checks:check_writable", "a probe file, removed at once", "probe"),
    Writer(
        "swapprune.cli:_silence_stdout", "none: stdout to /dev/null after a closed pipe", "probe"
    ),
    Writer(
        "swapprune.data.vendor:_write_jsonl", "the vendored data (a development tool)", "direct"
    ),
)


def sites() -> set[str]:
    """Every ``module:function`` on the list."""
    return {w.site for w in WRITERS}


class WriteFailed(SwappruneError):
    """A write that failed (space, the file-size limit, a refusal): one line naming the path."""


def is_write_error(e: BaseException) -> bool:
    """Whether ``e`` is a write the system refused: a full disk, a quota, the file-size
    limit, a permission or a read-only file system, or a short write (also from
    safetensors and numpy, which report them without an errno)."""
    if isinstance(e, WriteFailed):
        return False  # already the one line
    code = _errno(e)
    if code in (*_SPACE, errno.EFBIG, *_REFUSED):
        return True
    return isinstance(e, OSError) and _SHORT.search(str(e)) is not None


@contextlib.contextmanager
def refused_as_line(
    path: Path, needs: int | None = None, inside: Path | None = None
) -> Iterator[None]:
    """Turn a write the system refuses inside the block into :class:`WriteFailed` for
    ``path``; a :class:`WriteFailed` that names a file in the staging directory
    ``inside`` is said with its final place (``path``) instead."""
    try:
        yield
    except WriteFailed as e:
        if inside is not None and str(inside) in str(e):
            raise WriteFailed(str(e).replace(str(inside), str(path))) from None
        raise
    except BaseException as e:
        if is_write_error(e):
            raise write_error(path, e, needs) from None
        raise


def _errno(e: BaseException) -> int | None:
    if isinstance(e, OSError) and e.errno:
        return e.errno
    m = _CODE.search(str(e))
    return int(m.group(1)) if m else None


def size(n: float) -> str:
    """``n`` bytes in words: ``512 bytes``, ``30.1 MB``."""
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def file_size_limit() -> int | None:
    """This process's file-size limit in bytes (``ulimit -f``), or ``None`` when unlimited."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def write_error(path: Path, e: BaseException, needs: int | None = None) -> WriteFailed:
    """The one line for a write of ``path`` that failed with ``e`` (:func:`is_write_error`)."""
    code = _errno(e)
    need = f"it needs about {size(needs)}" if needs else "the write was cut short"
    short = _SHORT.search(str(e))
    if short and code is None:
        wanted, done = (int(x) for x in short.groups())
        need = f"a write of {size(wanted)} stopped after {size(done)}"
        limit = file_size_limit()
        code = errno.EFBIG if limit is not None else errno.ENOSPC
    if code == errno.EFBIG:
        limit = file_size_limit()
        at = f" of {size(limit)}" if limit is not None else ""
        return WriteFailed(
            f"cannot write {path}: a file exceeds this process's file-size limit{at} (ulimit -f); {need}"
        )
    if code in _REFUSED:
        why = "a read-only file system" if code == errno.EROFS else "permission denied"
        return WriteFailed(f"cannot write {path}: {why}; choose a directory you can write to")
    try:
        free = shutil.disk_usage(path if path.is_dir() else path.parent).free
    except OSError:
        free = None
    room = f", {size(free)} free there" if free is not None else ""
    return WriteFailed(f"no space left to write {path}: {need}{room}")
