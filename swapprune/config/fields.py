"""How a configuration field is declared, and the checks every section shares.

A field is a dataclass field whose metadata the CLI (:mod:`swapprune.cli.options`),
the recipe schema (:mod:`swapprune.recipe`) and the llm-compressor modifier read:
one name, one default and one help text wherever it appears.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import field
from typing import Any

from swapprune.errors import SwappruneError, unknown_name

DTYPES = ("float32", "bfloat16", "float16")
POSITIONS = ("last", "all")
SCHEMES = ("int8", "int4")
POINTS = ("base", "pruned", "healed", "quantized")
NO_TEXT = (None, "", "none", "null")
DEVICE = re.compile(r"^(cpu|auto|mps|meta|(cuda|xpu|npu)(:\d+)?)$")


def opt(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    factory: Any = None,
    flag: str | None = None,
    cli: bool = True,
    metavar: str | None = None,
    required: bool = False,
    off: str | None = None,
) -> Any:
    """A config field with the metadata the CLI and the recipe schema read.

    Args:
        default: the default value (omit for a required field).
        help: one line for ``--help`` and ``swapprune run --schema``.
        factory: ``default_factory`` for list defaults.
        flag: the CLI flag when it is not ``--field-name``.
        cli: whether the field has a CLI flag at all.
        metavar: the placeholder shown in ``--help``.
        required: required in practice although the dataclass has a default (checked by
            the section's ``check``; shown as REQUIRED in the schema).
        off: for a switch that is on by default, the help of the flag that turns it off
            (``--no-NAME``; default: ``skip:`` and ``help``).
    """
    meta = {
        "help": help,
        "flag": flag,
        "cli": cli,
        "metavar": metavar,
        "required": required,
        "off": off,
    }
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def default_of(cls, name: str) -> Any:
    """The declared default of field ``name`` of dataclass ``cls``."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def positive(where: str, value: int | float | None, minimum: int | float = 1) -> None:
    if value is not None and value < minimum:
        raise SwappruneError(f"{where} must be >= {minimum}, got {value}")


def choice(where: str, value: str | None, choices) -> None:
    if value is not None and value not in choices:
        raise unknown_name(where, value, choices)
