"""The policy node's statistics message, read by the budget monitor.

On the wire: std_msgs/Float64MultiArray on ``/lowrl/policy/stats`` (10 Hz), values in the order of
``STATS_FIELDS``; ``layout.dim[0].label`` carries the names joined by commas so a human reading
``ros2 topic echo`` sees them. Standard message types only (docs/architecture.md, "Nodes and topics"),
hence a fixed order here.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

STATS_FIELDS: tuple[str, ...] = (
    "window_p50_us",  # inference latency over the recent window, microseconds
    "window_p99_us",
    "deadline_misses",  # total since activation: a tick whose output came later than the deadline
    "ticks",  # total control ticks since activation
    "control_period_us",
    "deadline_us",
    "tier",  # ComputeTier value now applied
    "pid",  # the policy node's process, for the budget monitor's memory probe
)


@dataclass(frozen=True)
class PolicyStats:
    window_p50_us: float
    window_p99_us: float
    deadline_misses: float
    ticks: float
    control_period_us: float
    deadline_us: float
    tier: float
    pid: float

    def to_list(self) -> list[float]:
        return [float(v) for v in asdict(self).values()]

    @classmethod
    def from_list(cls, values) -> "PolicyStats":
        values = list(values)
        if len(values) != len(STATS_FIELDS):
            raise ValueError(f"policy stats need {len(STATS_FIELDS)} values ({', '.join(STATS_FIELDS)}), "
                             f"got {len(values)}")
        return cls(*map(float, values))


class WindowMax:
    """A rate cap that never hides a spike: the largest value offered since the last one handed out,
    at most once per ``1 / hz`` (``hz <= 0``: every value, as offered).

    The per-inference latency topic goes through it, so a watcher (rqt_plot, Foxglove, a recorder) sees
    10 messages a second at most instead of one per tick, and each is the worst inference of its period.
    The clock is the caller's (seconds), so it is tested without waiting.
    """

    def __init__(self, hz: float) -> None:
        self.period_s = 1.0 / hz if hz > 0 else 0.0
        self._max: float | None = None
        self._next = float("-inf")

    def offer(self, value: float, now: float) -> float | None:
        """The value to publish now, or None (held until the period ends)."""
        if self.period_s == 0.0:
            return value
        self._max = value if self._max is None or value > self._max else self._max
        if now < self._next:
            return None
        out, self._max = self._max, None
        # The next slot from this one (jitter does not lower the rate); the first and after a gap, from now.
        self._next = self._next + self.period_s if now - self._next < self.period_s else now + self.period_s
        return out
