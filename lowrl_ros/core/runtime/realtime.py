"""The fixed-rate control thread and its real-time settings (ROS-free).

:class:`TickSchedule` is the absolute schedule of a fixed-rate loop and :class:`ControlLoop` the thread
that keeps it (the policy node's ``fixed_rate`` mode; rl_sar keeps its loop in core the same way:
``src/rl_sar/library/core/loop/loop.hpp``). Both take the clock and the sleep as arguments, so
test/test_realtime.py drives them on a fake clock.

Real-time settings for the control thread: SCHED_FIFO priority, CPU affinity, locked memory.

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
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

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


class TickSchedule:
    """The absolute schedule of a fixed-rate loop: tick n is due at ``start + n * period``.

    The reference of a tick is when it was *due*, not when the thread happened to wake, so jitter
    never accumulates into drift (no sleep-after-compute), and periods the loop could not serve at
    all (a stall longer than a period) are reported as skipped.
    """

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._next_due: float | None = None

    def tick(self, now: float) -> tuple[float, int]:
        """Return (due time of this tick, number of whole periods skipped before it)."""
        due = now if self._next_due is None else self._next_due
        skipped = max(0, int((now - due) / self.period_s))
        due += skipped * self.period_s
        self._next_due = due + self.period_s
        return due, skipped

    @property
    def next_due(self) -> float | None:
        """When the next tick is due (None before the first)."""
        return self._next_due

    def shift(self, seconds: float) -> None:
        """Move the next tick and every one after it by ``seconds`` (a :class:`PhaseLock`'s correction)."""
        if self._next_due is not None:
            self._next_due += seconds


class PhaseLock:
    """Keeps a fixed-rate loop's ticks ``offset_s`` after the robot's sensor samples arrive.

    The robot publishes its joint states on its own schedule (ros2_control's update loop, a simulator's
    physics loop), and a free-running tick schedule takes whatever phase against it the launch gave.
    A tick that falls just before a sample arrives acts on an observation almost a sensor period old,
    and its command reaches the robot one robot update later than a tick that falls just after: a robot
    period more delay, fixed for the whole session and mixed with the other by load jitter. Measured on
    the sim robot (5 ms loop, 20 ms ticks): the phase at launch ranged 0.2-4.5 ms, and within ~0.4 ms
    of coincidence the quadruped's policy saw a physics step more latency
    (bench_results/sim2real_session/timing_2026-11-29).

    After each tick, ``lag`` is the age at the tick's due time of the newest sample it took (``age(due)``;
    None: none). The smallest lag of the last ``window`` ticks, when past ``offset_s``, moves the next due
    time earlier by ``gain * (lag - offset_s)``, at most ``max_share`` of a period a tick: the loop
    converges onto the samples' arrival plus the offset within a sensor period / max shift ticks (8 ticks
    for a 200 Hz robot at 50 Hz) and then holds. The smallest of a window: one sample that arrives late
    (load) leaves the tick with the sample before, a sensor period old, and that must not move a locked
    loop; a phase that really moved shows in every tick of the window.

    It only ever pulls earlier: the sensor's period is not known, and a sensor faster than the offset
    (a 1 kHz robot loop) gives lags below it, which move nothing; a tick already within the offset of its
    sample stays where it is. A sample a period old or older (a silent sensor) moves nothing either, and
    neither does any tick within ``quiet_ticks`` of one that found no new sample since the tick before: a
    sensor slower than the loop has no phase to lock to.

    Attributes:
        lag_s: the newest sample's age at the last tick's due time (None: no sample yet).
        shifted_s: the total shift so far (s, negative: earlier).
    """

    def __init__(self, age: Callable[[float], float | None], offset_s: float = 0.001, gain: float = 0.5,
                 max_share: float = 0.05, quiet_ticks: int = 50, window: int = 5) -> None:
        if offset_s <= 0:
            raise ValueError(f"the phase lock's offset must be > 0 s, got {offset_s}")
        self.age, self.offset_s, self.gain, self.max_share = age, offset_s, gain, max_share
        self.quiet_ticks = quiet_ticks
        self._lags: deque[float] = deque(maxlen=window)
        self.lag_s: float | None = None
        self.shifted_s = 0.0
        self._stamp: float | None = None  # the newest sample's arrival at the last tick
        self._since_repeat = 0  # ticks since one found no new sample

    def shift(self, due: float, period_s: float) -> float:
        """The move of the next due time (s, <= 0) after the tick due at ``due``."""
        self.lag_s = lag_s = self.age(due)
        stamp = None if lag_s is None else due - lag_s
        repeat = stamp is None or (self._stamp is not None and abs(stamp - self._stamp) < 1e-6)
        self._stamp, self._since_repeat = stamp, 0 if repeat else self._since_repeat + 1
        if repeat or not lag_s < period_s:
            self._lags.clear()
            return 0.0
        self._lags.append(lag_s)
        lag = min(self._lags)
        if self._since_repeat < self.quiet_ticks or lag <= self.offset_s:
            return 0.0
        shift = -min(self.gain * (lag - self.offset_s), self.max_share * period_s)
        self.shifted_s += shift
        return shift

    def values(self) -> dict[str, str]:
        """For the timing status: the lock's target and the last lag."""
        lag = "none" if self.lag_s is None else f"{self.lag_s * 1e3:.2f}"
        return {"tick_after_sensor_ms": f"{self.offset_s * 1e3:g}", "sensor_lag_ms": lag,
                "phase_shifted_ms": f"{self.shifted_s * 1e3:.2f}"}


class ControlLoop:
    """fixed_rate control on its own thread: one tick at each absolute deadline of a :class:`TickSchedule`.

    Tick n is due at ``t0 + n * period``, so jitter never accumulates into drift; a tick that wakes
    more than a period late passes the periods it skipped to ``tick`` (deadline misses) and keeps the
    schedule. The thread sleeps with ``time.sleep`` to the deadline (clock_nanosleep on CLOCK_MONOTONIC,
    the clock of ``perf_counter``): measured here it costs the thread about half the CPU of an Event
    wait per tick. Sleeps are cut at :data:`MAX_SLEEP_S`, so :meth:`stop` and :meth:`retime` (a new
    tier's period: tick at once on a fresh schedule) act within that even on a slow tier.

    Args:
        period_s: the first schedule's period.
        tick: ``tick(due, skipped) -> bool`` runs one tick (``due``: when it was due on ``clock``;
            ``skipped``: whole periods missed before it); False ends the loop (nothing left to run).
        on_start: runs first on the new thread (the RT settings: :func:`apply_realtime` is per thread).
        on_error: an exception that escaped ``tick`` (logged by the caller; the loop goes on at the next
            deadline).
        clock, sleep: seconds, monotonic; a fake pair in tests.
        name: the Python thread name (the OS name is :data:`CONTROL_THREAD`).
        phase: a :class:`PhaseLock` that keeps the ticks just after the robot's samples arrive (None: the
            schedule runs free).
    """

    MAX_SLEEP_S = 0.05

    def __init__(self, period_s: float, tick: Callable[[float, int], bool], *,
                 on_start: Callable[[], None] = lambda: None,
                 on_error: Callable[[Exception], None] = lambda exc: None,
                 clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep,
                 name: str = CONTROL_THREAD, phase: PhaseLock | None = None) -> None:
        self._tick, self._on_start, self._on_error = tick, on_start, on_error
        self.phase = phase
        self._clock, self._sleep = clock, sleep
        self._schedule = TickSchedule(period_s)
        # Plain flags and one reference: each is one attribute store/load (atomic under the GIL); the loop
        # reads them between sleeps.
        self._stopped = False
        self._woken = False
        self._thread = threading.Thread(target=self.run, name=name, daemon=True)

    @property
    def period_s(self) -> float:
        return self._schedule.period_s

    @property
    def schedule(self) -> TickSchedule:
        """The schedule in force (replaced by :meth:`retime`)."""
        return self._schedule

    def start(self) -> "ControlLoop":
        """Run :meth:`run` on the loop's own thread; returns self."""
        self._thread.start()
        return self

    def retime(self, period_s: float) -> bool:
        """A new period (a compute tier's): a fresh schedule, whose first tick is at once (within MAX_SLEEP_S).
        False (and the schedule kept) when ``period_s`` is the one in force."""
        if period_s == self._schedule.period_s:
            return False
        self._schedule = TickSchedule(period_s)
        self._woken = True
        return True

    def stop(self, timeout: float = 2.0) -> None:
        """Stop after the tick in progress (if any); returns when the thread has ended."""
        self._stopped = True
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def run(self) -> None:
        """The loop itself (the thread's target; a test calls it directly on a fake clock)."""
        if self._thread is threading.current_thread():
            name_thread(CONTROL_THREAD)
        self._on_start()
        clock, sleep, longest = self._clock, self._sleep, self.MAX_SLEEP_S
        while not self._stopped:
            self._woken = False
            schedule = self._schedule
            due, skipped = schedule.tick(clock())
            try:
                if not self._tick(due, skipped):
                    return  # nothing left to run (the node was released under us)
            except Exception as exc:  # noqa: BLE001 - the loop must outlive any one tick
                self._on_error(exc)
            if self.phase is not None:
                schedule.shift(self.phase.shift(due, schedule.period_s))
            deadline = schedule.next_due
            while not (self._stopped or self._woken):
                remaining = deadline - clock()
                if remaining <= 0:
                    break
                sleep(remaining if remaining < longest else longest)
