"""Build diagnostic_msgs the ROS way: DiagnosticArray on /diagnostics, hardware_id set,
names grouped under ``lowrl/...`` for the diagnostic aggregator (config/diagnostic_aggregator.yaml).

The one place where a core ``Level`` (lowrl_ros/core/types.py; the budget monitor's ``Severity``
maps onto it with ``Severity.level``) becomes a DiagnosticStatus level byte, and where the policy
node's status name and swap keys are read back (``swap_rejection``).
"""
from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

from lowrl_ros.core.runtime.status import POLICY_STATUS
from lowrl_ros.core.runtime.swap import SwapState
from lowrl_ros.core.types import Level, StatusEntry

__all__ = ["HARDWARE_ID", "POLICY_STATUS", "DiagnosticArray", "DiagnosticStatus", "Level", "array",
           "from_entries", "level_of", "status", "swap_rejection"]

HARDWARE_ID = socket.gethostname()
# Level -> the message's one-byte level (rclpy exposes DiagnosticStatus.OK etc. as ``bytes``).
_BYTES = {Level.OK: DiagnosticStatus.OK, Level.WARN: DiagnosticStatus.WARN, Level.ERROR: DiagnosticStatus.ERROR,
          Level.STALE: DiagnosticStatus.STALE}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def status(name: str, level: Level, message: str, values: Mapping[str, Any] | None = None,
           hardware_id: str = HARDWARE_ID) -> DiagnosticStatus:
    """One DiagnosticStatus; ``level`` is a Level (OK/WARN/ERROR/STALE)."""
    return DiagnosticStatus(
        level=_BYTES[Level(level)],
        name=name,
        message=message,
        hardware_id=hardware_id,
        values=[KeyValue(key=str(k), value=_fmt(v)) for k, v in (values or {}).items()],
    )


def from_entries(entries: Iterable[StatusEntry], hardware_id: str = HARDWARE_ID) -> list[DiagnosticStatus]:
    """The DiagnosticStatus of each core StatusEntry (policy_status, budget_status, ...)."""
    return [status(e.name, e.level, e.message, e.values, hardware_id) for e in entries]


def array(stamp, statuses: list[DiagnosticStatus]) -> DiagnosticArray:
    msg = DiagnosticArray()
    msg.header.stamp = stamp
    msg.status = statuses
    return msg


def level_of(s: DiagnosticStatus) -> Level:
    """The status level as a Level (it is a one-byte `bytes` in rclpy)."""
    lvl = s.level
    return Level(lvl[0] if isinstance(lvl, (bytes, bytearray)) else int(lvl))


def swap_rejection(s: DiagnosticStatus) -> tuple[str, int] | None:
    """(path, version) if ``s`` is the policy node's status reporting a rejected swap, else None.

    Reads the ``swap_state``/``swap_path``/``swap_version`` keys (docs/CONTRACTS.md), never the
    message text, which is for people and may change.
    """
    if s.name != POLICY_STATUS:
        return None
    values = {kv.key: kv.value for kv in s.values}
    if values.get("swap_state") != SwapState.REJECTED:
        return None
    try:
        version = int(values.get("swap_version") or 0)
    except ValueError:
        version = 0
    return values.get("swap_path", ""), version
