"""How many torch threads a command runs with: decided once, when the command starts.

On a small CPU shared with other jobs, torch's default (one thread per core) is
a poor choice: its OpenMP threads wait on each other at every operator, and a
core another process holds stalls them all (at torch's default of two threads on
a 2-core machine at load average 3-5, a block evaluation of the demo model took
0.48 s, against 37 ms at one thread on the idle machine).
``eval/bench_threads.py`` measures 1 against 2 threads, with and without a busy
process beside them (eval/BENCHMARKS.md).

So a command that loads a model looks at how much of the machine is free right
now (the idle share of every CPU over a fifth of a second, from ``/proc/stat``;
elsewhere the one-minute load average) and runs with no more threads than there
are free cores, at least one. It never raises torch's default, and it leaves the
choice alone when the user made one: ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS``
set, or torch already imported by the caller (a program calling
:func:`swapprune.cli.main` owns its threads). Nothing here imports torch.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

#: Environment variables through which a user chooses the thread count.
USER_SETTINGS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: How long the CPUs' idle time is sampled (seconds).
SAMPLE_S = 0.2


@dataclass(frozen=True)
class ThreadChoice:
    """What the command start decided.

    Attributes:
        threads: the thread count set, or ``None`` when torch's default (or the user's
            choice) was left alone.
        reason: one phrase for the estimate line, e.g. ``"1.1 of 2 cores free"``.
    """

    threads: int | None
    reason: str


#: The decision of this process's command start (``None`` until :func:`apply` runs).
CHOICE: ThreadChoice | None = None


def cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cpu_times() -> tuple[float, float] | None:
    """``(idle, total)`` jiffies of all CPUs, or ``None`` without ``/proc/stat``."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 5:
        return None
    return fields[3] + fields[4], sum(fields[:8])  # idle + iowait; user..steal


def free_cores(n: int, sample_s: float = SAMPLE_S) -> float:
    """Cores not in use by anyone right now (measured), or by the load average."""
    first = _cpu_times()
    if first is not None:
        time.sleep(sample_s)
        second = _cpu_times()
        if second is not None and second[1] > first[1]:
            return n * (second[0] - first[0]) / (second[1] - first[1])
    try:
        return max(0.0, n - os.getloadavg()[0])
    except OSError:
        return float(n)


def choose(n: int, free: float) -> int | None:
    """Threads for ``free`` of ``n`` cores: ``None`` (torch's default) when all are free.

    Rounded to the nearest core, at least one: a core 60% idle is worth a thread,
    one 30% idle is not.
    """
    want = max(1, int(free + 0.5))
    return None if want >= n else want


def decide(environ=None, modules=None, sample_s: float = SAMPLE_S) -> ThreadChoice:
    """The thread choice for a command starting now (pure but for the CPU sample)."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    given = next((k for k in USER_SETTINGS if environ.get(k)), None)
    if given:
        return ThreadChoice(None, f"{given}={environ[given]}")
    if "torch" in modules:
        return ThreadChoice(None, "set by the calling program")
    n = cpus()
    free = free_cores(n, sample_s)
    threads = choose(n, free)
    return ThreadChoice(threads, f"{free:.1f} of {n} cores free")


def apply(environ=None, modules=None) -> ThreadChoice:
    """Decide, and set the count where torch will read it when it is imported."""
    global CHOICE
    environ = os.environ if environ is None else environ
    CHOICE = decide(environ, modules)
    if CHOICE.threads is not None:
        # torch sizes its intra-op pool from OMP_NUM_THREADS when it is first imported,
        # which happens after this (the command imports it lazily).
        environ["OMP_NUM_THREADS"] = str(CHOICE.threads)
    return CHOICE


def describe(current: int) -> str:
    """``"1 torch thread (1.1 of 2 cores free)"`` for the estimate line."""
    text = f"{current} torch thread{'s' if current != 1 else ''}"
    return f"{text} ({CHOICE.reason})" if CHOICE is not None else text
