"""The command line of a configuration: the CLI's flags read backwards.

The CLI builds a :class:`~swapprune.config.RunConfig` from flags that the
configuration's field metadata names (:mod:`swapprune.cli.options`); this module
turns a configuration back into the command that builds it. Every "next:" line a
command prints is this view of the run's own configuration with a change, so it
carries the model, windows, scores and settings the run used, and works as
printed.

:data:`COMMANDS` lists each command's sections in the order its ``--help`` shows
them; the CLI's parsers are built from the same table, so a flag is named once.
A field is written only when it differs from its declared default, except the
fields a command always needs (``--model``, ``--budget``, ``--output``).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swapprune.config.fields import default_of
from swapprune.config.run import stage_class
from swapprune.config.select import SelectConfig

#: Fields written on every command line that has them, default or not.
ALWAYS = ("name", "budget", "output")


@dataclass(frozen=True)
class Section:
    """One configuration section as a command shows it.

    Attributes:
        name: the :class:`~swapprune.config.RunConfig` attribute (``prune``, ``cost``...).
        prefix: flag prefix (``cost`` -> ``--cost-windows``).
        prefixed: the fields the prefix applies to (``None``: all).
        skip: fields this command does not offer.
        title: the ``--help`` group title.
    """

    name: str
    prefix: str = ""
    prefixed: tuple[str, ...] | None = None
    skip: tuple[str, ...] = ()
    title: str | None = None


COMMANDS: dict[str | None, tuple[Section, ...]] = {
    None: (  # the default command, prune
        Section("model"),
        Section("calibration"),
        Section("prune", title="selection"),
        Section("export", title="output"),
        Section("cost", prefix="cost", title="cost check (base vs pruned WikiText-2 perplexity)"),
    ),
    "score": (Section("model"), Section("calibration"), Section("score", title="probes")),
    "eval": (Section("model"), Section("eval", title="evaluation")),
}


def flag(f: dataclasses.Field, prefix: str = "") -> str:
    """The flag of field ``f``: its own, or ``--[prefix-]name`` (``--no-name`` for a default-on
    switch)."""
    own = f.metadata.get("flag")
    name = f.name.replace("_", "-")
    if f.default is True:
        return f"--{prefix}-no-{name}" if prefix else f"--no-{name}"
    return own or (f"--{prefix}-{name}" if prefix else f"--{name}")


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def section_argv(obj, section: Section) -> list[str]:
    """The flags that rebuild ``obj`` (fields left at their defaults are not written)."""
    out: list[str] = []
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        if not f.metadata.get("cli", True) or f.name in section.skip:
            continue
        value, default = getattr(obj, f.name), default_of(type(obj), f.name)
        if value == default and f.name not in ALWAYS:
            continue
        pre = section.prefix if section.prefixed is None or f.name in section.prefixed else ""
        if hints[f.name] is bool or isinstance(value, bool):
            if value != default:
                out.append(flag(f, pre))
        elif value is not None:
            out += [flag(f, pre), _text(value)]
    return out


def command_line(cfg, command: str | None = None, extra: tuple[str, ...] = ()) -> str:
    """The ``swapprune`` command that runs ``cfg`` (``command`` ``None``: prune)."""
    argv = ["swapprune"] + ([command] if command else [])
    for section in COMMANDS[command]:
        obj = getattr(cfg, section.name)
        if obj is None:
            if section.name == "cost":
                argv.append("--no-eval")
            continue
        argv += section_argv(obj, section)
    return shlex.join([*argv, *extra])


def changed(cfg, **sections: dict[str, Any] | None):
    """``cfg`` with fields of its sections replaced: ``changed(cfg, prune={"budget": 2})``.

    A section given as ``None`` is dropped; one the configuration lacks is built.
    """
    out = cfg
    for name, values in sections.items():
        if values is None:
            out = dataclasses.replace(out, **{name: None})
            continue
        sub = getattr(out, name)
        sub = dataclasses.replace(sub, **values) if sub is not None else stage_class(name)(**values)
        out = dataclasses.replace(out, **{name: sub})
    return out


def default_output(model: str, protocol: str, budget: int) -> str:
    """``./<model name>-<protocol>-<budget>``: where a prune run without ``--output`` writes."""
    name = re.sub(r"\.gguf$", "", Path(model.rstrip("/")).name) or "model"
    return f"{re.sub(r'[^A-Za-z0-9._-]+', '-', name)}-{protocol}-{budget}"


def prune_config(cfg, budget: int, protocol: str | None = None, **prune: Any):
    """The run of ``cfg`` at another budget (or criterion), into its own directory.

    ``prune``: further selection fields to change. For a run that applied a plan
    (``apply``), a fresh selection by ``protocol``.
    """
    sel = cfg.prune if cfg.prune is not None and cfg.prune.plan is None else SelectConfig()
    protocol = protocol or sel.protocol
    out = default_output(cfg.model.name, protocol, budget)
    values = dataclasses.asdict(sel) | {"budget": budget, "protocol": protocol, **prune}
    return changed(cfg, prune=values, export={"output": out, "overwrite": False})


def prune_command(cfg, budget: int, protocol: str | None = None, **prune: Any) -> str:
    """The prune command of :func:`prune_config`."""
    return command_line(prune_config(cfg, budget, protocol, **prune))
