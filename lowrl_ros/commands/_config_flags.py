"""Config dataclasses as command-line flags: one ``--flag`` per field, a YAML preset underneath.

The order of precedence is the dataclass default, then the preset (``--config YAML``, one section of
it or the whole flat mapping), then the environment variable ``LOWRL_SET``, then the flags that were
given (nanoGPT's configurator, without exec). Each flag's help is the field's help
(lowrl_ros/core/config.py); the dataclass validates the result.

``LOWRL_SET="train.total_steps=3000 distill.bc_steps=500 release.eval_episodes=5"`` changes fields of
every command it reaches without editing the command lines: a smaller budget for a documented
pipeline run as written (test/test_documented_commands.py does exactly that). ``SECTION`` is the
preset section of the config (``train`` for TrainConfig, ``distill``, ``release``); each command
says on stderr which fields it took from there.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
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
    from_env = env_overrides(cls)
    if from_env:
        print(f"{ENV_VAR}: {cls.__name__} " + " ".join(f"{k}={v}" for k, v in from_env.items()), file=sys.stderr)
    data.update(from_env)
    for f in fields:
        value = getattr(args, f.name, None)
        if value is not None:
            data[f.name] = value
        if data.get(f.name) is not None:  # None: a preset's "no value" (e.g. parent_version: null)
            data[f.name] = coerce(f, data[f.name], owner=cls.__name__)
    return cls(**data)


ENV_VAR = "LOWRL_SET"
ENV_SECTIONS = ("train", "distill", "release")


def env_section(cls: Any) -> str:
    """The ``LOWRL_SET`` section of a config class: its preset section (TrainConfig -> ``train``)."""
    return cls.__name__.removesuffix("Config").lower()


def env_overrides(cls: Any, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The fields of ``cls`` that ``LOWRL_SET`` sets, as strings (converted later like flags).

    Raises:
        ValueError: an item that is not ``SECTION.FIELD=VALUE``, an unknown section, or an unknown
            field of this class's section (the known ones are listed).
    """
    text = (os.environ if environ is None else environ).get(ENV_VAR, "")
    names = [f.name for f in dataclasses.fields(cls)]
    out: dict[str, str] = {}
    for item in text.replace(",", " ").split():
        key, sep, value = item.partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot or not name or not value:
            raise ValueError(f"{ENV_VAR}: {item!r} is not SECTION.FIELD=VALUE, e.g. train.total_steps=3000")
        if section not in ENV_SECTIONS:
            raise ValueError(f"{ENV_VAR}: unknown section {section!r} in {item!r}; use one of {list(ENV_SECTIONS)}")
        if section != env_section(cls):
            continue
        if name not in names:
            raise ValueError(f"{ENV_VAR}: {cls.__name__} has no field {name!r}; known: {names}")
        out[name] = value
    return out


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
