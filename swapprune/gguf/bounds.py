"""A bounds check of a GGUF header before ``gguf.GGUFReader`` parses it.

The reader trusts the counts it reads: a damaged key count, array length or
tensor count makes it build one Python object per claimed element, which can
take all the memory of the machine before it fails. This walk reads the same
layout (magic, version, tensor and key counts, the keys with their typed
values, the tensor infos) and refuses, in one line, any count or length that
the bytes left in the file cannot hold. It reads lengths only: values are
skipped, not decoded.
"""

from __future__ import annotations

import mmap
import os
import struct

from swapprune.errors import SwappruneError

# Value type -> byte size, for the fixed-size GGUF value types (8: string, 9: array).
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 8


class _Walk:
    def __init__(self, buf, path):
        self.buf, self.path, self.at = buf, path, 0

    def fail(self, what: str):
        raise SwappruneError(f"cannot read GGUF file {self.path}: {what} (at byte {self.at})")

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.buf):
            self.fail("truncated header")
        (value,) = struct.unpack_from(fmt, self.buf, self.at)
        self.at += size
        return value

    def skip(self, n: int, what: str) -> None:
        if n < 0 or self.at + n > len(self.buf):
            self.fail(f"{what} of {n} bytes runs past the end of the file")
        self.at += n

    def string(self, what: str) -> None:
        self.skip(self.take("<Q"), what)

    def value(self, vtype: int, what: str) -> None:
        if vtype in _SIZES:
            self.skip(_SIZES[vtype], what)
        elif vtype == _STRING:
            self.string(what)
        elif vtype == _ARRAY:
            itype, count = self.take("<I"), self.take("<Q")
            if itype in _SIZES:
                self.skip(count * _SIZES[itype], f"{what}: an array of {count}")
            elif itype == _STRING:
                if count * 8 > len(self.buf) - self.at:
                    self.fail(f"{what}: an array of {count} strings does not fit in the file")
                for _ in range(count):
                    self.string(what)
            else:
                self.fail(f"{what}: an array of value type {itype}")
        else:
            self.fail(f"{what}: value type {vtype}")


def check_header_bounds(path: str | os.PathLike) -> int | None:
    """Refuse a GGUF file whose header claims more than its bytes hold (one-line error).

    Only little-endian files are walked (the reader's own checks handle the rest).

    Returns:
        The number of weights the tensor infos declare (``None`` for a big-endian file):
        the walk reads the shapes anyway, and it is far cheaper than ``GGUFReader``,
        which parses the whole vocabulary.
    """
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise SwappruneError(f"cannot read GGUF file {path}: empty file")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            w = _Walk(buf, path)
            if bytes(buf[:4]) != b"GGUF":
                w.fail("not a GGUF file (no GGUF magic)")
            w.at = 4
            version = w.take("<I")
            if version & 0xFFFF == 0:  # byte-swapped: a big-endian file
                return None
            n_tensors, n_kv = w.take("<Q"), w.take("<Q")
            rest = len(buf) - w.at
            if n_kv * 12 > rest or n_tensors * 24 > rest:
                w.fail(f"{n_kv} keys and {n_tensors} tensors do not fit in the file")
            for _ in range(n_kv):
                w.string("a key")
                w.value(w.take("<I"), "a value")
            weights = 0
            for _ in range(n_tensors):
                w.string("a tensor name")
                dims = w.take("<I")
                if dims > _MAX_DIMS:
                    w.fail(f"a tensor of {dims} dimensions")
                if w.at + 8 * dims + 12 > len(buf):
                    w.fail(
                        f"a tensor's shape, type and offset of {8 * dims + 12} bytes runs past "
                        "the end of the file"
                    )
                count = 1
                for _ in range(dims):
                    count *= w.take("<Q")
                weights += count
                w.skip(12, "a tensor's type and offset")
            return weights
