"""Parameter descriptors, so rqt_reconfigure shows ranges (sliders) and marks read-only parameters."""
from __future__ import annotations

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor


def descriptor(text: str, *, read_only: bool = False, floats: tuple[float, float] | None = None,
               ints: tuple[int, int] | None = None, dynamic: bool = False) -> ParameterDescriptor:
    """A ParameterDescriptor with a description, an optional range and the read-only flag."""
    d = ParameterDescriptor(description=text, read_only=read_only, dynamic_typing=dynamic)
    if floats:
        d.floating_point_range = [FloatingPointRange(from_value=floats[0], to_value=floats[1], step=0.0)]
    if ints:
        d.integer_range = [IntegerRange(from_value=ints[0], to_value=ints[1], step=1)]
    return d
