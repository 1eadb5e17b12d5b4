"""What every call of the Python API does as the command line does: threads, lines, a clean stop.

:func:`entry_point` wraps the functions ``swapprune`` exports (``run``, ``load_model``,
``score``, ``prune``, ``plan_pruning``), so a program that calls them gets what a
``swapprune`` command gets:

* **the same thread choice**: :func:`swapprune.engine.threads.apply` runs once, before
  the call imports torch, unless the program chose (``OMP_NUM_THREADS``, or torch imported
  before the first call: the program owns its threads then);
* **the same lines**: a call that says what it does (``[estimate]`` and stage lines)
  says them to its ``say`` argument, or, without one, to the ``swapprune`` logger at
  level INFO (:func:`lines`): quiet unless the program turns logging on;
* **one clean line on Ctrl-C**: a ``KeyboardInterrupt`` inside the call, where the
  library runs the loop, leaves it as a fresh ``KeyboardInterrupt`` whose message says
  what stopped and where the work it finished is; if nothing catches it, the
  interpreter prints that one line instead of a traceback (a hook installed at the
  first interrupt, which leaves every other exception to the hook before it) and exits
  with status 130, as for any Ctrl-C.

Imports neither torch nor transformers.
"""

from __future__ import annotations

import atexit
import functools
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from swapprune.engine import threads

F = TypeVar("F", bound=Callable[..., Any])
#: What a stopped call keeps, from its arguments: a phrase, or ``None`` for nothing.
Kept = Callable[..., "str | None"]

#: The logger the API says its lines to when no ``say`` is given.
LOGGER = logging.getLogger("swapprune")
#: The attribute that marks a ``KeyboardInterrupt`` raised here, with its line.
LINE = "swapprune_line"

_depth = threading.local()
_hooked = False


def lines(say: Callable[[str], None] | None) -> Callable[[str], None] | None:
    """``say``, else the ``swapprune`` logger's INFO when it is on, else ``None`` (silent:
    a call that times its work before saying it then skips the timing too)."""
    if say is not None:
        return say
    return LOGGER.info if LOGGER.isEnabledFor(logging.INFO) else None


def entry_point(kept: Kept | None = None) -> Callable[[F], F]:
    """Give a function the command line's thread choice and a one-line Ctrl-C (the
    outermost call only: a call inside another says nothing of its own).

    Args:
        kept: called with the function's arguments when it is stopped: where the work it
            finished is (``None``: it keeps none).
    """

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(_depth, "n", 0)
            if depth == 0:
                if threads.CHOICE is None:
                    threads.apply()
            _depth.n = depth + 1
            try:
                return fn(*args, **kwargs)
            except KeyboardInterrupt as e:
                # Only a plain Ctrl-C: a subclass (the command line's SIGTERM, Terminated)
                # is its caller's to handle as it is.
                if depth > 0 or getattr(e, LINE, None) or type(e) is not KeyboardInterrupt:
                    raise
                where = kept(*args, **kwargs) if kept is not None else None
                raise interrupted(f"swapprune.{fn.__name__}()", where) from None
            finally:
                _depth.n = depth

        return call  # type: ignore[return-value]

    return wrap


def interrupted(call: str, kept: str | None = None) -> KeyboardInterrupt:
    """The ``KeyboardInterrupt`` a stopped call leaves with: its message is the line the
    interpreter prints if nothing catches it (:func:`_hook`)."""
    global _hooked
    line = f"interrupted during {call}; partial files removed, " + (kept or "nothing was written")
    e = KeyboardInterrupt(line)
    setattr(e, LINE, line)
    if not _hooked:
        sys.excepthook = _hook(sys.excepthook)
        _hooked = True
    return e


def _hook(previous):
    def hook(kind, value, traceback) -> None:
        line = getattr(value, LINE, None)
        if line:
            print(f"swapprune: {line}", file=sys.stderr, flush=True)
            _keep_the_interrupt_status()
            return
        previous(kind, value, traceback)

    return hook


def _keep_the_interrupt_status() -> None:
    """Let the interpreter exit by SIGINT (status 130) after an uncaught interrupt.

    ``torch._dynamo`` (imported by ``transformers.masking_utils`` in some releases, and by
    any model load) registers an exit hook that logs its compile times; running it makes
    the interpreter forget the uncaught interrupt, and the status becomes 1. With nothing
    compiled it has nothing to log, so it is dropped; a program that compiled keeps it.
    """
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is not None and not getattr(utils, "compilation_time_metrics", True):
        atexit.unregister(utils.dump_compile_times)
