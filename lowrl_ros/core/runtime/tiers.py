"""Compute tiers, ordered from most to least expensive (docs/architecture.md, "Compute tiers").

On the wire the tier is a std_msgs/UInt8 on `/lowrl/compute_tier` carrying the enum value, so
rqt_plot can draw it and `ros2 topic echo` stays readable with this table.
"""
from __future__ import annotations

import enum


class ComputeTier(enum.IntEnum):
    """The budget monitor picks one; the policy node applies it within two control periods."""

    FULL = 0  # the full policy
    LITE = 1  # the smallest (distilled) policy of the bundle
    DECIMATED = 2  # lite policy every k-th tick, hold the last action in between
    SAFE = 3  # the configured safe action (zero, hold or default pose)

    @classmethod
    def parse(cls, value: "int | str | ComputeTier") -> "ComputeTier":
        """Accept an int, a name ("lite", "SAFE") or a tier; raise ValueError naming the choices."""
        if isinstance(value, ComputeTier):
            return value
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                pass
        else:
            try:
                return cls(int(value))
            except ValueError:
                pass
        choices = ", ".join(f"{t.value}={t.name.lower()}" for t in cls)
        raise ValueError(f"unknown compute tier {value!r}; use one of {choices}")

    @property
    def label(self) -> str:
        return self.name.lower()
