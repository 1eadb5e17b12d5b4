"""CLI options generated from the configuration's field metadata, and back.

Every flag of every command is a field of a dataclass in
:mod:`swapprune.config`: :func:`add_section` turns a section into an argument
group (``--field-name``, with its help text and default), :func:`section_from`
builds the dataclass from the parsed arguments. A flag therefore has one name,
one default and one help text wherever it appears.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from typing import Any

from swapprune.cli.argv import COMMANDS, flag
from swapprune.config import QUICK
from swapprune.config.run import stage_class
from swapprune.errors import SwappruneError, did_you_mean


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> typing.NoReturn:
        hint = f"; see '{self.prog} --help'"
        if message.startswith("unrecognized arguments: "):
            flags = [o for a in self._all_actions() for o in a.option_strings]
            first = message.split(": ", 1)[1].split()[0]
            hint = did_you_mean(first, flags) + hint
        print(f"{self.prog}: error: {message}{hint}", file=sys.stderr)
        raise SystemExit(2)

    def _all_actions(self) -> list[argparse.Action]:
        actions = list(self._actions)
        for a in self._actions:
            if isinstance(a, argparse._SubParsersAction):
                for p in a.choices.values():
                    actions += p._actions
        return actions


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Examples in the epilog keep their layout; wide enough for the option column."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=34)


def _csv(kind):
    def parse(text: str):
        try:
            return [kind(x.strip()) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {'integers' if kind is int else 'values'}, got '{text}'"
            ) from None

    return parse


def _base_type(tp):
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        tp = next(a for a in args if a is not type(None))
    return tp


def _default_text(default: Any) -> str:
    if default is None or default is False or default == []:
        return ""
    if isinstance(default, list):
        default = ",".join(map(str, default))
    return f" (default: {default})"


def add_section(
    parser: argparse.ArgumentParser,
    cls,
    section: str,
    *,
    title: str | None = None,
    prefix: str = "",
    prefixed: tuple[str, ...] | None = None,
    skip: tuple[str, ...] = (),
    required: tuple[str, ...] = (),
    defaults: dict[str, Any] | None = None,
) -> None:
    """Add one argument per CLI field of dataclass ``cls``, stored as ``section.field``.

    Args:
        parser: the (sub)parser.
        cls: a config dataclass.
        section: the config section name (``dest`` prefix).
        title: argument group title (default: ``section``).
        prefix: flag prefix for fields whose names another section of the same
            command also uses (``eval`` -> ``--eval-batch-size``).
        prefixed: the fields the prefix applies to (default: all).
        skip: fields left out of this command.
        required: fields this command requires.
        defaults: defaults that differ from the dataclass's for this command.
    """
    group = parser.add_argument_group(title or section)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if not meta.get("cli", True) or f.name in skip:
            continue
        dest = f"{section}.{f.name}"
        pre = prefix if prefix and (prefixed is None or f.name in prefixed) else ""
        name = flag(f, pre)
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None if f.default is dataclasses.MISSING else f.default
        if defaults and f.name in defaults:
            default = defaults[f.name]
        tp = _base_type(hints[f.name])
        # argparse %-formats help strings: a literal % must be doubled.
        kwargs: dict[str, Any] = {"dest": dest, "help": meta.get("help", "").replace("%", "%%")}
        if tp is bool:
            if default:
                kwargs.update(action="store_false", default=True)
                off = meta.get("off")
                kwargs["help"] = off.replace("%", "%%") if off else f"skip: {kwargs['help']}"
            else:
                kwargs.update(action="store_true", default=False)
        else:
            if typing.get_origin(tp) is list:
                item = typing.get_args(tp)[0]
                kwargs["type"] = _csv(item)
                kwargs["metavar"] = meta.get("metavar") or ("N,N" if item is int else "A,B")
            else:
                kwargs["type"] = tp
                kwargs["metavar"] = meta.get("metavar") or f.name.upper()
            kwargs["default"] = default
            kwargs["help"] += _default_text(default).replace("%", "%%")
            if f.name in required:
                # Checked after parsing (check_required): one message for every command.
                kwargs["default"] = None
                kwargs["help"] += " (required)"
                earlier = parser.get_default(REQUIRED) or []
                parser.set_defaults(**{REQUIRED: [*earlier, (dest, name)]})
        group.add_argument(name, **kwargs)


REQUIRED = "_required_fields"


def add_command_sections(
    parser: argparse.ArgumentParser,
    command: str | None,
    required: dict[str, tuple[str, ...]] | None = None,
    defaults: dict[str, dict[str, Any]] | None = None,
) -> None:
    """The sections of ``command`` as :data:`swapprune.cli.argv.COMMANDS` lists them (the
    same table turns a configuration back into this command's line)."""
    for sec in COMMANDS[command]:
        add_section(
            parser,
            stage_class(sec.name),
            sec.name,
            title=sec.title,
            prefix=sec.prefix,
            prefixed=sec.prefixed,
            skip=sec.skip,
            required=(required or {}).get(sec.name, ()),
            defaults=(defaults or {}).get(sec.name),
        )


def check_required(args: argparse.Namespace) -> str | None:
    """The first required flag left unset, or ``None``."""
    for dest, shown in getattr(args, REQUIRED, None) or ():
        if getattr(args, dest, None) is None:
            return shown
    return None


def section_from(args: argparse.Namespace, cls, section: str, **fixed: Any):
    """Build dataclass ``cls`` from the parsed ``section.*`` arguments (others: defaults)."""
    kwargs = dict(fixed)
    for f in dataclasses.fields(cls):
        dest = f"{section}.{f.name}"
        if hasattr(args, dest) and f.name not in fixed:
            kwargs[f.name] = getattr(args, dest)
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field no flag provided
        raise SwappruneError(str(e)) from None


def add_common(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    """Options every model-loading command has."""
    g = parser.add_argument_group("run")
    g.add_argument("--no-progress", action="store_true", help="hide progress bars and stage lines")
    if quick:
        # The settings this command has (another command's, e.g. score's bootstrap, do not
        # apply here), each named by its flag.
        flags = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings}
        shown = ", ".join(f"{flags[k]} {v}" for k, v in QUICK.items() if k in flags)
        g.add_argument(
            "--quick",
            action="store_true",
            help=f"a first look, quicker than the defaults: {shown} (explicit flags win)",
        )


def apply_quick(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Make the ``--quick`` preset the parser's defaults when ``--quick`` is on the line."""
    if "--quick" in argv:
        known = {a.dest for a in parser._actions}
        parser.set_defaults(**{k: v for k, v in QUICK.items() if k in known})
