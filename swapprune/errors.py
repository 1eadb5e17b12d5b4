"""User-facing errors.

Anything a user can trigger (a bad flag, a missing file, an impossible budget)
raises :class:`SwappruneError`; the CLI prints its one-line message and exits
with status 2. Internal invariants may still use ``assert``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Fix:
    """A run that fixes what an error names, as data: the front end writes it out.

    The command line writes it as the command that runs it
    (:func:`swapprune.cli.argv.command_line`); the message alone leaves it out.

    Attributes:
        config: the :class:`~swapprune.config.RunConfig` to run.
        command: the command that runs it (``score``; ``None``: the default command).
        what: what it does, said before it (``add them to the file``).
    """

    config: Any
    command: str | None
    what: str


class SwappruneError(Exception):
    """An error caused by user input, reported as one line, exit status 2.

    Line breaks in the message (a value the user typed, echoed back) are written as
    ``\\n``, so the report stays one line whatever the input was.

    Attributes:
        fix: a run that fixes it (:class:`Fix`), or ``None``; :meth:`line` writes it in.
        then: the message's end, after the fix (``"; or choose ..."``).
    """

    def __init__(
        self, message: object = "", *args: object, fix: Fix | None = None, then: str = ""
    ) -> None:
        if isinstance(message, str):
            message = _one_line(message)
        self.head, self.fix, self.then = message, fix, _one_line(then)
        super().__init__(f"{message}{self.then}" if self.then else message, *args)

    def line(self, written_fix: str | None = None) -> str:
        """The message with the fix written in (as ``written_fix``, e.g. a command line)."""
        if self.fix is None or written_fix is None:
            return str(self)
        return f"{self.head}; {self.fix.what}: {written_fix}{self.then}"


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""``."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_name(kind: str, name: str, choices: Iterable[str]) -> SwappruneError:
    """Build the standard error for a name missing from a registry."""
    choices = sorted(choices)
    return SwappruneError(
        f"unknown {kind} '{name}'{did_you_mean(name, choices)}; known: {', '.join(choices)}"
    )


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process was, so cleanups run as for Ctrl-C."""
