"""Real-time settings for the control thread: SCHED_FIFO priority, CPU affinity, locked memory (ROS-free).

All optional and off by default. Each is asked of the OS for the *calling* thread (Linux applies
``sched_setscheduler``/``sched_setaffinity`` with pid 0 to the calling thread), so the policy node
calls :func:`apply_realtime` from the thread that runs the control ticks: its own control thread in
``fixed_rate`` mode (named ``lowrl_control`` by :func:`name_thread`), the executor's in event mode.

The OS may refuse: an unprivileged user has no real-time priority (``ulimit -r`` is 0) and may lock
only a little memory (``ulimit -l``). A refusal is not fatal: the node runs on at normal priority
and :func:`apply_realtime` returns a WARN line saying how to grant it. Granting it, once per robot:

- ``/etc/security/limits.conf`` (log in again afterwards)::

      <user>  -  rtprio   90
      <user>  -  memlock  unlimited

- or the capabilities on the interpreter/binary: ``sudo setcap cap_sys_nice,cap_ipc_lock+ep <python>``
- in a container: ``docker run --cap-add SYS_NICE --ulimit rtprio=90 --ulimit memlock=-1 ...``

Locked memory (``mlockall(MCL_CURRENT | MCL_FUTURE)``) keeps the control path from page faults
after start; with a finite ``memlock`` limit later allocations beyond it fail, so grant
``unlimited`` when you enable it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass

from lowrl_ros.core.types import Level

MCL_CURRENT, MCL_FUTURE = 1, 2
CONTROL_THREAD = "lowrl_control"  # the OS name of the policy node's fixed_rate control thread (top -H, chrt -p)
_HOW_TO_GRANT = ("grant it with '<user> - rtprio 90' in /etc/security/limits.conf (log in again), "
                 "'setcap cap_sys_nice+ep' on the interpreter, or docker --cap-add SYS_NICE --ulimit rtprio=90")


@dataclass(frozen=True)
class RealtimeResult:
    """What was asked and what the OS did, one line each (level, text)."""

    lines: tuple[tuple[Level, str], ...]

    @property
    def level(self) -> Level:
        return max((lvl for lvl, _ in self.lines), default=Level.OK)

    def text(self) -> str:
        return "; ".join(t for _, t in self.lines)


def parse_cpus(text: str) -> tuple[int, ...]:
    """``"2,3"`` or ``"2-3"`` -> (2, 3); "" -> () (no pinning). ValueError names the bad part."""
    cpus: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi if sep else lo)
        except ValueError:
            raise ValueError(f"rt_cpus part {part!r} is not a CPU number or range; write e.g. '3' or '2,3' or "
                             "'2-3'") from None
        if first < 0 or last < first:
            raise ValueError(f"rt_cpus range {part!r} is empty or negative")
        cpus.extend(range(first, last + 1))
    return tuple(dict.fromkeys(cpus))


def apply_realtime(priority: int = 0, cpus: tuple[int, ...] = (), lock_memory: bool = False) -> RealtimeResult:
    """Ask the OS for real-time settings on the calling thread; never raises for an OS refusal.

    Args:
        priority: SCHED_FIFO priority 1..99 (0: leave the scheduling alone).
        cpus: CPUs the thread may run on (empty: leave the affinity alone).
        lock_memory: mlockall(MCL_CURRENT | MCL_FUTURE).
    """
    if not 0 <= int(priority) <= 99:
        raise ValueError(f"rt_priority {priority} is outside 0..99 (0: off; 80 is a common control priority)")
    lines: list[tuple[Level, str]] = []
    if priority:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(priority)))
            lines.append((Level.OK, f"SCHED_FIFO priority {priority}"))
        except (OSError, AttributeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not supported on this OS"
            lines.append((Level.WARN, f"SCHED_FIFO priority {priority} refused ({why}); running at normal "
                                      f"priority: {_HOW_TO_GRANT}"))
    if cpus:
        try:
            os.sched_setaffinity(0, set(cpus))
            lines.append((Level.OK, f"pinned to CPU {','.join(map(str, cpus))}"))
        except (OSError, AttributeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not supported on this OS"
            lines.append((Level.WARN, f"CPU affinity {','.join(map(str, cpus))} refused ({why}); check rt_cpus "
                                      f"against the CPUs this process may use ({_allowed()})"))
    if lock_memory:
        ok, why = _mlockall()
        if ok:
            lines.append((Level.OK, "memory locked (mlockall)"))
        else:
            lines.append((Level.WARN, f"mlockall refused ({why}); memory may page: grant '<user> - memlock "
                                      "unlimited' in /etc/security/limits.conf, 'setcap cap_ipc_lock+ep' on the "
                                      "interpreter, or docker --ulimit memlock=-1"))
    return RealtimeResult(tuple(lines))


def name_thread(name: str) -> bool:
    """Give the calling thread an OS name (``top -H``, ``ps -L``, /proc/<pid>/task/*/comm; 15 bytes at most).

    Python's thread names stay inside Python; the OS name tells the control thread apart when a user
    checks its CPU use or priority (``chrt -p <tid>``). Best effort: False where the OS has no prctl.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return libc.prctl(15, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0) == 0  # 15: PR_SET_NAME
    except (OSError, AttributeError, TypeError):
        return False


def _allowed() -> str:
    try:
        return ",".join(map(str, sorted(os.sched_getaffinity(0))))
    except (OSError, AttributeError):
        return "unknown"


def _mlockall() -> tuple[bool, str]:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        rc = libc.mlockall(MCL_CURRENT | MCL_FUTURE)
    except (OSError, AttributeError):
        return False, "mlockall is not available on this OS"
    if rc == 0:
        return True, ""
    return False, os.strerror(ctypes.get_errno())
