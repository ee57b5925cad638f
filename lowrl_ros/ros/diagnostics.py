"""Build diagnostic_msgs the ROS way: DiagnosticArray on /diagnostics, hardware_id set,
names grouped under ``lowrl/...`` for the diagnostic aggregator (config/diagnostic_aggregator.yaml)."""
from __future__ import annotations

import socket
from typing import Any, Mapping

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

# Plain ints (rclpy exposes the message constants as one-byte ``bytes``).
OK = DiagnosticStatus.OK[0]
WARN = DiagnosticStatus.WARN[0]
ERROR = DiagnosticStatus.ERROR[0]
STALE = DiagnosticStatus.STALE[0]

HARDWARE_ID = socket.gethostname()
# The policy node's own status; its "version" value names the running policy (sim robot, demo recorder).
POLICY_STATUS = "lowrl/policy/policy"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def status(name: str, level: int, message: str, values: Mapping[str, Any] | None = None,
           hardware_id: str = HARDWARE_ID) -> DiagnosticStatus:
    """One DiagnosticStatus; ``level`` is OK/WARN/ERROR/STALE (bytes in the message, int here)."""
    return DiagnosticStatus(
        level=bytes([int(level)]),
        name=name,
        message=message,
        hardware_id=hardware_id,
        values=[KeyValue(key=str(k), value=_fmt(v)) for k, v in (values or {}).items()],
    )


def array(stamp, statuses: list[DiagnosticStatus]) -> DiagnosticArray:
    msg = DiagnosticArray()
    msg.header.stamp = stamp
    msg.status = statuses
    return msg


def level_of(s: DiagnosticStatus) -> int:
    """The status level as an int (it is a one-byte `bytes` in rclpy)."""
    lvl = s.level
    return lvl[0] if isinstance(lvl, (bytes, bytearray)) else int(lvl)
