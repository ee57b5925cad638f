"""Config fields that carry their own documentation: one source for ROS parameters and CLI flags.

A config dataclass declares each field with :func:`field`: its default, a one-line help, and
optionally the range a ROS parameter may take and whether a running node may change it. From that
metadata ``lowrl_ros/ros/params.py`` declares ROS parameters (description, range, read-only) and
``lowrl_ros/commands/_config_flags.py`` builds ``--flags``; the dataclass's ``__post_init__`` stays
the one validator (checks written with :func:`require`). Pure Python: safe on the robot.
"""
from __future__ import annotations

import dataclasses
from typing import Any

HELP, RANGE, LIVE, DYNAMIC = "help", "range", "live", "dynamic"


def field(default: Any, help: str, *, range: tuple[float, float] | None = None, live: bool = False,
          dynamic: bool | None = None) -> Any:
    """A dataclass field documented for ROS parameters and CLI flags.

    Args:
        default: the default value; a list is copied per instance (``default_factory``).
        help: one line: what the field means (a parameter's description, a flag's help).
        range: ``(low, high)`` a ROS parameter may take (rqt_reconfigure draws a slider); an int
            default makes an integer range. The dataclass still validates every value itself.
        live: a running node may change it (the ROS parameter is writable); otherwise read-only.
        dynamic: the ROS parameter accepts any type. None: only sequences do, because an empty
            YAML list arrives untyped; the dataclass judges the value.

    Returns:
        A ``dataclasses.field`` with the above in its metadata.
    """
    metadata = {HELP: help, RANGE: range, LIVE: live, DYNAMIC: dynamic}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def help_of(f: dataclasses.Field) -> str:
    """A field's help text ("" when it was declared without :func:`field`)."""
    return f.metadata.get(HELP, "")


def require(cond: Any, msg: str, *, owner: str = "") -> None:
    """Raise ``ValueError(msg)`` (prefixed ``"<owner>: "`` when given) unless ``cond`` holds.

    The check of every config's ``__post_init__``: the message says what is wrong and how to fix it.
    """
    if not cond:
        raise ValueError(f"{owner}: {msg}" if owner else msg)


def coerce(f: dataclasses.Field, value: Any, *, owner: str = "") -> Any:
    """A YAML or command-line value as the type of the field's default, with a message naming the field.

    Strings such as ``"1e5"`` (an int field), ``"off"`` (a bool field) and ``"nan"`` are accepted; a
    field whose default is None takes an int; a tuple field takes any sequence.
    """
    default = f.default_factory() if f.default is dataclasses.MISSING else f.default
    kind = int if default is None else type(default)
    try:
        if kind is bool:
            if isinstance(value, str):
                if value.lower() in ("1", "true", "yes", "on"):
                    return True
                if value.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(value)
            return bool(value)
        if kind is int:
            number = float(value) if isinstance(value, str) else value  # "1e5" is an int; "1.5" is not
            if isinstance(number, float) and not number.is_integer():
                raise ValueError(value)
            return int(number)
        if kind is float:
            return float(value)
        if kind in (tuple, list):
            return kind((value,) if isinstance(value, str) else value)
        return str(value)
    except (TypeError, ValueError):
        where = f"{owner}: " if owner else ""
        raise ValueError(f"{where}{f.name}={value!r} is not a valid {kind.__name__}") from None


# lowrl's own gymnasium environments (ids "lowrl/...") register when their module is imported. gymnasium's
# "module:id" form imports it, so `--env lowrl/LeggedAnt-v0` works wherever gym.make is called.
LOWRL_ENV_MODULE = "lowrl_ros.core.sim.legged"


def gym_env_id(env_id: str) -> str:
    """The id to give gym.make: ``lowrl/...`` ids prefixed with the module that registers them."""
    return f"{LOWRL_ENV_MODULE}:{env_id}" if env_id.startswith("lowrl/") else env_id
