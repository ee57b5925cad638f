"""Parameter descriptors, so rqt_reconfigure shows ranges (sliders) and marks read-only parameters."""
from __future__ import annotations

from typing import Any

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


# Ranges of FineTuneConfig's fields, shared by finetune_node and trainer_node.
FINETUNE_RANGES: dict[str, dict[str, Any]] = {
    "lr": dict(floats=(1e-7, 1.0)), "batch_size": dict(ints=(1, 4096)), "buffer_size": dict(ints=(1, 10_000_000)),
    "min_transitions": dict(ints=(1, 10_000_000)), "updates_per_transition": dict(floats=(1e-3, 100.0)),
    "version_every_updates": dict(ints=(1, 10_000_000)), "eval_episodes": dict(ints=(1, 1000)),
    "rollback_margin": dict(floats=(0.0, 1e9)), "min_return": dict(dynamic=True), "seed": dict(ints=(0, 2**31 - 1)),
    "threads": dict(ints=(1, 64)), "memory_cap_mb": dict(floats=(64.0, 1e6)), "nice": dict(ints=(0, 19)),
    "updates_per_slice": dict(ints=(1, 10_000)), "critic_warmup_updates": dict(ints=(0, 10_000_000)),
    "bc_weight": dict(floats=(0.0, 1e6)), "judge_baseline": {},
}
