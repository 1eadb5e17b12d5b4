"""User-facing errors.

Anything a user can trigger (a bad flag, a missing file, an impossible budget)
raises :class:`SwappruneError`; the CLI prints its one-line message and exits
with status 2. Internal invariants may still use ``assert``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SwappruneError(Exception):
    """An error caused by user input, reported as one line, exit status 2.

    Line breaks in the message (a value the user typed, echoed back) are written as
    ``\\n``, so the report stays one line whatever the input was.
    """

    def __init__(self, message: object = "", *args: object) -> None:
        if isinstance(message, str):
            message = message.replace("\r", "\\r").replace("\n", "\\n")
        super().__init__(message, *args)


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
