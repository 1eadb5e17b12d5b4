"""Recipes: a :class:`~swapprune.config.RunConfig` written as YAML, validated once at the edge.

:func:`load_config` reads the YAML (or a dict), applies ``--set key.sub=value``
overrides, refuses unknown keys with a did-you-mean, checks every value's
type, and validates the result
(:func:`swapprune.pipeline.checks.check_config`). :func:`describe_schema` prints every field
(``swapprune run --schema``).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any

from swapprune.config import RunConfig, stage_class
from swapprune.errors import SwappruneError, did_you_mean

# pipeline.checks brings numpy: both it and yaml are imported inside the functions that
# read a recipe, so that building the command line's parser imports neither.


def load_config(
    path: str | Path | None, overrides: list[str] | None = None, data: dict | None = None
) -> RunConfig:
    """Read a recipe YAML (or ``data``), apply ``key.sub=value`` overrides and validate it.

    Raises:
        SwappruneError: unreadable file, unknown key, wrong type, unknown name,
            impossible setting, unusable output directory.
    """
    import yaml  # imports yaml

    if data is None:
        p = Path(str(path))
        if not p.is_file():
            raise SwappruneError(f"recipe {path} not found")
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise SwappruneError(
                f"recipe {path} is not valid YAML: {str(e).splitlines()[0]}"
            ) from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise SwappruneError(f"recipe {path} must be a mapping of stages, got {_kind(data)}")
    for item in overrides or ():
        apply_override(data, item)
    if isinstance(data.get("model"), str):  # model: smollm2-135m
        data["model"] = {"name": data["model"]}
    _refuse_nul(data, "")
    cfg = build(RunConfig, data, "")
    from swapprune.pipeline.checks import check_config  # imports numpy

    return check_config(cfg)


def _refuse_nul(value, key: str) -> None:
    """A NUL byte in any string: no path, name or text of a recipe can hold one."""
    if isinstance(value, str) and "\x00" in value:
        raise SwappruneError(f"{key or 'recipe'}: {value!r} contains a NUL byte")
    if isinstance(value, dict):
        for k, v in value.items():
            _refuse_nul(k, key)
            _refuse_nul(v, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list):
        for v in value:
            _refuse_nul(v, key)


def apply_override(data: dict, item: str) -> None:
    """Set ``key.sub=value`` in ``data``; the value is parsed as YAML (``3``, ``true``, ``[a, b]``)."""
    import yaml  # imports yaml

    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise SwappruneError(f"--set expects key.sub=value, got '{item}'")
    parts = key.strip().split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise SwappruneError(f"--set {key}: '{'.'.join(parts[: i + 1])}' is not a section")
    try:
        node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        node[parts[-1]] = raw


def build(cls, data: Any, where: str):
    """Build dataclass ``cls`` from ``data``: unknown keys, missing keys and types are errors."""
    label = where or "recipe"
    if not isinstance(data, dict):
        raise SwappruneError(f"{label} must be a mapping, got {_kind(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            raise SwappruneError(
                f"unknown key '{_join(where, str(key))}'{did_you_mean(str(key), fields)}; "
                f"allowed in {label}: {', '.join(fields)}"
            )
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if name not in data:
            if required:
                raise SwappruneError(f"{_join(where, name)} is required ({f.metadata.get('help')})")
            continue
        kwargs[name] = _coerce(data[name], hints[name], _join(where, name))
    return cls(**kwargs)


def _coerce(value: Any, tp, where: str):
    """Check ``value`` against annotation ``tp``; returns it (nested stages built)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is not type(None):
                return _coerce(value, a, where)
    if dataclasses.is_dataclass(tp):
        return build(tp, {} if value is None else value, where)
    if typing.get_origin(tp) is list:
        if isinstance(value, str):  # --set eval.tasks=piqa,boolq
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise SwappruneError(f"{where} must be a list, got {_kind(value)}")
        return [_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }[tp]
    if not ok:
        shown = f" {value!r}" if isinstance(value, (str, int, float)) else ""
        raise SwappruneError(f"{where} must be {_TYPE_WORDS[tp]}, got {_kind(value)}{shown}")
    return float(value) if tp is float else value


_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def describe_schema() -> str:
    """Every stage and field with its default and help text (``swapprune run --schema``)."""
    lines = []
    for stage in dataclasses.fields(RunConfig):
        cls = stage_class(stage.name)
        lines.append(f"{stage.name}:  # {stage.metadata['help']}")
        for f in dataclasses.fields(cls):
            default = (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            )
            required = default is dataclasses.MISSING or f.metadata.get("required")
            shown = "REQUIRED" if required else json.dumps(default)
            lines.append(f"  {f.name + ': ' + shown:<36} # {f.metadata.get('help', '')}")
    return "\n".join(lines)
