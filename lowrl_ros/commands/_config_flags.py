"""Config dataclasses as command-line flags: one ``--flag`` per field, a YAML preset underneath.

The order of precedence is the dataclass default, then the preset (``--config YAML``, one section of
it or the whole flat mapping), then the flags that were given (nanoGPT's configurator, without exec).
Each flag's help is the field's help (lowrl_ros/core/config.py); the dataclass validates the result.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, Collection

from lowrl_ros.core.config import coerce, help_of


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def add_config_flags(parser: argparse.ArgumentParser, cls: Any, skip: Collection[str] = (), *,
                     title: str | None = None) -> None:
    """One flag per field of ``cls`` (``--bc-steps`` for ``bc_steps``), in a group of their own.

    Flags default to None, meaning "not given": the preset or the dataclass decides. Values are
    converted by :func:`config_from` (``--total-steps 1e5`` is accepted), so every config reads them
    the same way; a bool field gets ``--flag/--no-flag`` and a tuple field takes one or more values.
    """
    group = parser.add_argument_group(title or f"{cls.__name__} fields")
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        default = _default(f)
        help_text = f"{help_of(f)} (default {default})"
        if isinstance(default, bool):
            group.add_argument(flag, dest=f.name, default=None, action=argparse.BooleanOptionalAction, help=help_text)
        elif isinstance(default, (tuple, list)):
            group.add_argument(flag, dest=f.name, default=None, nargs="+", metavar="STR", help=help_text)
        else:
            kind = int if default is None else type(default)
            group.add_argument(flag, dest=f.name, default=None, metavar=kind.__name__.upper(), help=help_text)


def config_from(cls: Any, args: argparse.Namespace, preset: dict | None) -> Any:
    """``cls`` from a preset mapping, then the flags that were given (each converted to its field's type).

    Raises:
        ValueError: an unknown preset key (the known ones are listed), a value of the wrong type, or
            whatever the dataclass's own checks refuse.
    """
    fields = dataclasses.fields(cls)
    data = dict(preset or {})
    unknown = set(data) - {f.name for f in fields}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} for {cls.__name__}; known: {[f.name for f in fields]}")
    for f in fields:
        value = getattr(args, f.name, None)
        if value is not None:
            data[f.name] = value
        if data.get(f.name) is not None:  # None: a preset's "no value" (e.g. parent_version: null)
            data[f.name] = coerce(f, data[f.name], owner=cls.__name__)
    return cls(**data)


def read_preset(path: str | Path | None, section: str | None = None, *, flag: str = "--config") -> dict:
    """The mapping under ``section:`` of the YAML file ``path`` (the whole file when ``section`` is None).

    ``{}`` when no path is given. ``flag`` names where the path came from in error messages.
    """
    if not path:
        return {}
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text()) or {}
    except FileNotFoundError:
        raise ValueError(f"{flag} {path}: no such file; presets live in config/ (e.g. config/train_pendulum_sac.yaml, "
                         "config/compress_pendulum.yaml)") from None
    if section is None:
        if not isinstance(doc, dict):
            raise ValueError(f"{flag} {path}: expected a mapping of field names to values")
        return doc
    if not isinstance(doc, dict) or not isinstance(doc.get(section, {}), dict):
        raise ValueError(f"{flag} {path}: expected a mapping with a '{section}:' section")
    return doc.get(section) or {}
