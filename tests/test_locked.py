"""``artifacts.locked``: one holder at a time across processes, released when the holder dies."""

import subprocess
import sys
import time

import pytest

from swapprune.output.artifacts import locked

fcntl = pytest.importorskip("fcntl")

HOLD = """
import sys, time
from swapprune.output.artifacts import locked
with locked(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _try_lock(path) -> bool:
    with open(path, "a+b") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        return True


def _holder(path, seconds: float) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_second_holder_waits_for_the_first(tmp_path):
    path = tmp_path / "entry.lock"
    p = _holder(path, 1.0)
    assert not _try_lock(path)
    t = time.perf_counter()
    with locked(path):
        waited = time.perf_counter() - t  # until the holder's 1 s sleep ended
    assert waited > 0.3
    assert _try_lock(path)
    p.wait()


def test_lock_of_a_killed_holder_is_released(tmp_path):
    path = tmp_path / "entry.lock"
    p = _holder(path, 60.0)
    assert not _try_lock(path)
    p.kill()
    p.wait()
    with locked(path):
        pass
    assert _try_lock(path)
