"""Config dataclasses as ROS parameters: one way to declare them and one way to read them back.

Each field made with :func:`lowrl_ros.core.config.field` becomes a parameter whose description is
the field's help (what rqt_reconfigure shows), whose range is the field's range (a slider) and which
is read-only unless the field is ``live``. The dataclass's ``__post_init__`` stays the one validator.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Collection, Mapping

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult

from lowrl_ros.core.config import DYNAMIC, HELP, LIVE, RANGE


def descriptor(text: str, *, read_only: bool = False, floats: tuple[float, float] | None = None,
               ints: tuple[int, int] | None = None, dynamic: bool = False) -> ParameterDescriptor:
    """A ParameterDescriptor with a description, an optional range and the read-only flag."""
    d = ParameterDescriptor(description=text, read_only=read_only, dynamic_typing=dynamic)
    if floats:
        d.floating_point_range = [FloatingPointRange(from_value=float(floats[0]), to_value=float(floats[1]),
                                                     step=0.0)]
    if ints:
        d.integer_range = [IntegerRange(from_value=int(ints[0]), to_value=int(ints[1]), step=1)]
    return d


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise TypeError(f"field {f.name} has no default; a ROS parameter needs one")


def _ros(value: Any) -> Any:
    """ROS has lists, not tuples."""
    return list(value) if isinstance(value, tuple) else value


def _plain(value: Any) -> Any:
    """Arrays from ROS (lists, array.array) as the tuples the frozen configs hold."""
    return tuple(value) if isinstance(value, (list, tuple)) or hasattr(value, "tolist") else value


def field_descriptor(f: dataclasses.Field, default: Any, *, owner: str = "") -> ParameterDescriptor:
    """The descriptor of one config field: its help, its range, read-only unless live."""
    text = f.metadata.get(HELP)
    if not text:
        # rqt_reconfigure would show nothing useful; every declared config field documents itself.
        raise TypeError(f"{owner}.{f.name} has no help; declare it with lowrl_ros.core.config.field(...)")
    range_ = f.metadata.get(RANGE)
    is_int = isinstance(default, int) and not isinstance(default, bool)
    dynamic = f.metadata.get(DYNAMIC)
    if dynamic is None:
        dynamic = isinstance(default, (list, tuple))
    return descriptor(text, read_only=not f.metadata.get(LIVE, False), dynamic=dynamic,
                      ints=range_ if range_ and is_int else None, floats=range_ if range_ and not is_int else None)


def declare_config(node, cls: type, *, prefix: str = "", skip: Collection[str] = (),
                   names: Mapping[str, str] | None = None, defaults: Mapping[str, Any] | None = None) -> None:
    """Declare one parameter per field of the config dataclass ``cls`` on ``node``.

    Args:
        node: the rclpy node.
        cls: a dataclass whose fields were made with ``lowrl_ros.core.config.field``.
        prefix: put before every parameter name (``"log_"``, ``"gap."``, ``"finetune."``).
        skip: fields that are not parameters of this node.
        names: field name -> parameter name (before the prefix) where they differ.
        defaults: field name -> the parameter's default where the node's differs from the field's
            (e.g. ``[""]``: a typed empty string array, which ROS cannot infer from ``[]``).
    """
    names, defaults = names or {}, defaults or {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        default = defaults[f.name] if f.name in defaults else _default(f)
        node.declare_parameter(prefix + names.get(f.name, f.name), _ros(default),
                               field_descriptor(f, default, owner=cls.__name__))


def config_from_params(node, cls: type, *, prefix: str = "", skip: Collection[str] = (),
                       names: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None,
                       **values: Any) -> Any:
    """Build ``cls`` from the parameters :func:`declare_config` declared (validated by the dataclass).

    Args:
        node, cls, prefix, skip, names: as given to :func:`declare_config`.
        overrides: parameter name -> value that replaces the current one (an on-set callback's
            proposed change, checked before it is accepted).
        **values: fields given directly instead of read from a parameter.
    """
    names, overrides = names or {}, overrides or {}
    for f in dataclasses.fields(cls):
        if f.name in skip or f.name in values:
            continue
        name = prefix + names.get(f.name, f.name)
        values[f.name] = _plain(overrides[name] if name in overrides else node.get_parameter(name).value)
    return cls(**values)


def _same(a: Any, b: Any) -> bool:
    """Parameter values equal, NaN included (a float parameter may hold NaN: FineTuneConfig.min_return)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b) if not hasattr(a, "__len__") else list(a) == list(b)
    except TypeError:
        return False


def add_post_set_callback(node, callback: Callable[[list], None]) -> None:
    """Run ``callback(params)`` after a parameter change is accepted: the node's state changes there,
    while on-set callbacks only validate (any of them may still refuse the change).

    rclpy on Iron and later has ``add_post_set_parameters_callback``. rclpy on Humble (the default
    on JetPack 6) has not: there an on-set callback that accepts everything defers ``callback`` to a
    one-shot timer of the node and hands it only the parameters the node now holds, i.e. those no
    validator refused. The change then lands on the next spin instead of before ``set_parameters``
    returns.
    """
    if hasattr(node, "add_post_set_parameters_callback"):
        node.add_post_set_parameters_callback(callback)
        return

    def defer(params) -> SetParametersResult:
        def apply() -> None:
            node.destroy_timer(timer)
            accepted = [p for p in params
                        if node.has_parameter(p.name) and _same(node.get_parameter(p.name).value, p.value)]
            if accepted:
                callback(accepted)
        timer = node.create_timer(0.0, apply)
        return SetParametersResult(successful=True)

    node.add_on_set_parameters_callback(defer)
