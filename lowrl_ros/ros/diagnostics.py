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
           "from_entries", "level_of", "robot_name", "status", "swap_rejection"]

HARDWARE_ID = socket.gethostname()
# Level -> the message's one-byte level (rclpy exposes DiagnosticStatus.OK etc. as ``bytes``).
_BYTES = {Level.OK: DiagnosticStatus.OK, Level.WARN: DiagnosticStatus.WARN, Level.ERROR: DiagnosticStatus.ERROR,
          Level.STALE: DiagnosticStatus.STALE}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def log(logger: Any, level: Level, line: str) -> None:
    """Log ``line`` at the severity of a diagnostic ``level`` (rclpy loggers need one severity per call site)."""
    if level >= Level.ERROR:
        logger.error(line)
    elif level == Level.WARN:
        logger.warning(line)
    else:
        logger.info(line)


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


def robot_name(name: str, namespace: str = "/") -> str:
    """A status name as the node in ``namespace`` publishes it: ``lowrl/...`` as is in the root
    namespace, ``<namespace>/lowrl/...`` in another (``r1/lowrl/policy/policy``).

    /diagnostics stays one global topic (the aggregator's convention), so two robots sharing a DDS
    domain are told apart by the name (the aggregator keys statuses by name) and the hardware_id.
    """
    ns = namespace.strip("/")
    return f"{ns}/{name}" if ns else name


def array(stamp, statuses: list[DiagnosticStatus], namespace: str = "/") -> DiagnosticArray:
    """A DiagnosticArray of ``statuses`` from a node in ``namespace`` (``node.get_namespace()``):
    outside the root namespace each name gets the namespace in front and the hardware_id gets it at
    the end (``host/r1``), so a second robot on the same domain never overwrites or is mistaken for
    this one."""
    if namespace.strip("/"):
        for s in statuses:
            s.name = robot_name(s.name, namespace)
            s.hardware_id = f"{s.hardware_id}/{namespace.strip('/')}"
    msg = DiagnosticArray()
    msg.header.stamp = stamp
    msg.status = statuses
    return msg


def level_of(s: DiagnosticStatus) -> Level:
    """The status level as a Level (it is a one-byte `bytes` in rclpy)."""
    lvl = s.level
    return Level(lvl[0] if isinstance(lvl, (bytes, bytearray)) else int(lvl))


def swap_rejection(s: DiagnosticStatus, namespace: str = "/") -> tuple[str, int] | None:
    """(path, version) if ``s`` is the status of the policy node in ``namespace`` reporting a
    rejected swap, else None (another robot's policy node is not ours).

    Reads the ``swap_state``/``swap_path``/``swap_version`` keys (docs/CONTRACTS.md), never the
    message text, which is for people and may change.
    """
    if s.name != robot_name(POLICY_STATUS, namespace):
        return None
    values = {kv.key: kv.value for kv in s.values}
    if values.get("swap_state") != SwapState.REJECTED:
        return None
    try:
        version = int(values.get("swap_version") or 0)
    except ValueError:
        version = 0
    return values.get("swap_path", ""), version
