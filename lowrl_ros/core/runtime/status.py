"""The policy node's diagnostics as a pure function of plain state (no ROS, no clock of its own).

Autoware's ``determine_diagnostics`` idea (autoware_gyro_odometer): the node gathers state, this
module decides levels and words, and tests drive it with made-up state (test/test_status.py).
``lowrl_ros/ros/diagnostics.py`` turns the entries into a DiagnosticArray.

The five statuses, under ``lowrl/policy/``:

- ``latency``: WARN once any output missed its deadline; its values carry the :data:`TIMING_KEYS`;
- ``input``: ERROR while the newest bad observation (or watchdog trip) is under ``ERROR_HOLD_S`` old,
  else STALE while a robot-file topic has not been heard within its ``timeout_s``;
- ``input/<topic>``: one per robot-file topic (joint states, IMU, command, ...): STALE, saying since
  when, while the node is active and the topic has not been heard within its timeout
  (:class:`lowrl_ros.core.types.Silence`), OK otherwise;
- ``policy``: the running version, or the last swap's outcome (ERROR when rejected), with the
  ``swap_*`` keys of :class:`lowrl_ros.core.runtime.swap.SwapStatus` (docs/CONTRACTS.md);
- ``bundle``: the bundle stream (ERROR after a rejection);
- ``tier``: WARN on any compute tier below full; it names the robot's fallback ladder and the step
  applied, and says so while a cheaper tier is asked for than the ladder's last policy step (the
  next step is the stop).

And, from :func:`robot_io_status`, the ones a configuration adds: ``timing`` (WARN while the policy
runs at another rate than its contract names), ``estop`` (ERROR while latched), ``intervention`` (WARN
while a teleop override replaces the policy's action) and ``realtime`` (WARN when the OS refused an
``rt_*`` setting).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lowrl_ros.core.runtime.ladder import FallbackLadder
from lowrl_ros.core.runtime.swap import StreamStatus, SwapStatus
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.core.runtime.observation import InputSeen
from lowrl_ros.core.types import Level, Silence, StatusEntry

PREFIX = "lowrl/policy"
# The policy node's own status; its values name the running policy (version, path) and the last
# swap (swap_state, swap_path, swap_version, swap_code), read by the sim robot and the fine-tuner.
POLICY_STATUS = f"{PREFIX}/policy"
INPUT_STATUS = f"{PREFIX}/input"  # and INPUT_STATUS/<topic> per robot-file topic
INTERVENTION_STATUS = f"{PREFIX}/intervention"
REALTIME_STATUS = f"{PREFIX}/realtime"
# The loop timing keys of the latency status (PolicyController.timing_stats), after ros2_control's
# controller manager: one number each, so rqt_plot or a recorder can draw it.
TIMING_KEYS = ("periodicity_mean_us", "periodicity_std_us", "periodicity_error_mean_us", "execution_time_mean_us",
               "execution_time_max_us", "overruns")
ERROR_HOLD_S = 2.0  # an input error keeps the status at ERROR this long after the last bad message
REPORT_INTERVAL_S = 0.2  # a new input error is reported at once, but a flood at most this often


@dataclass(frozen=True)
class RunningPolicy:
    """What the controller runs and what it last saw (a snapshot taken by the node).

    Attributes:
        version, path, tiers: the running bundle.
        active: the lifecycle state is active.
        last_error: the newest input error ("" if none); last_error_time: when (node clock), or None.
        bundle_topic: where bundles arrive (shown beside the stream status).
        inputs: each robot-file topic as last seen (``ObservationBuilder.inputs``, the node's clock).
    """

    version: int
    path: str
    tiers: tuple[str, ...]
    active: bool
    last_error: str = ""
    last_error_time: float | None = None
    bundle_topic: str = ""
    inputs: tuple[InputSeen, ...] = ()


@dataclass(frozen=True)
class TierView:
    """The compute tier applied, the one the budget monitor asked for (they differ where the robot's
    ladder maps one onto another) and the ladder (None: not shown)."""

    applied: ComputeTier
    requested: ComputeTier
    ladder: FallbackLadder | None = None

    def entry(self) -> StatusEntry:
        """``lowrl/policy/tier``: OK on full, else WARN naming the step the robot file allowed."""
        ladder, applied = self.ladder, self.applied
        step = ladder.step(applied) if ladder is not None else None
        label = step.label if step is not None else applied.label
        message = f"tier {label}"
        values: dict[str, Any] = {"tier": applied.label, "requested": self.requested.label, "tier_value": int(applied)}
        if ladder is not None:
            values.update(step=label, ladder=ladder.describe(), declared=ladder.declared)
            if self.requested != applied:
                message += f" (requested {self.requested.label}; ladder {ladder.describe()})"
            if self.requested > applied and ladder.last_policy_step(applied):
                message += f"; no cheaper policy step than {label} left: the next step is {ladder.stop.label}"
        return StatusEntry(f"{PREFIX}/tier", Level.OK if applied == ComputeTier.FULL else Level.WARN, message, values)


def policy_status(stats: Mapping[str, float], swap: SwapStatus, stream: StreamStatus, tier: TierView,
                  now: float, running: RunningPolicy, wall_now: float | None = None) -> list[StatusEntry]:
    """The policy node's five statuses and one per robot-file topic (see the module docstring).

    Args:
        stats: ``PolicyController.stats()``, with ``timing_stats()`` where the loop timing keys are wanted.
        swap, stream: ``PolicySwapper.status()`` and ``stream_status()``.
        tier: applied and requested compute tier.
        now: the clock ``running.last_error_time`` was taken on.
        running: the running policy, its newest input error and its inputs.
        wall_now: the wall clock at ``now`` (epoch seconds), for the time of day an input went stale.
    """
    misses = int(stats["deadline_misses"])
    recent = running.last_error_time is not None and now - running.last_error_time < ERROR_HOLD_S
    inputs = input_status(running.inputs, running.active, now, now if wall_now is None else wall_now)
    stale = [e for e in inputs if e.level == Level.STALE]
    return [
        StatusEntry(f"{PREFIX}/latency", Level.WARN if misses > 0 else Level.OK,
                    f"p99 {stats['window_p99_us']:.0f} us, {misses} deadline misses",
                    {"p50_us": stats["window_p50_us"], "p99_us": stats["window_p99_us"], "deadline_misses": misses,
                     "ticks": int(stats["ticks"]), "deadline_us": stats["deadline_us"],
                     **{k: stats[k] for k in TIMING_KEYS if k in stats}}),
        StatusEntry(INPUT_STATUS, Level.ERROR if recent else Level.STALE if stale else Level.OK,
                    running.last_error if recent else stale[0].message if stale else "observations OK",
                    {"last_error": running.last_error or "none",
                     **({"stale": ",".join(e.values["topic"] for e in stale)} if stale else {})}),
        StatusEntry(POLICY_STATUS, swap.level,
                    swap.message if swap.level != Level.OK else f"v{running.version} {running.path}",
                    {"version": running.version, "path": running.path, "tiers": ",".join(running.tiers),
                     "active": running.active, **swap.values()}),
        StatusEntry(f"{PREFIX}/bundle", stream.level, stream.message,
                    {"topic": running.bundle_topic, **stream.values()}),
        tier.entry(),
    ] + inputs


def input_status(inputs: Sequence[InputSeen], active: bool, now: float, wall_now: float) -> list[StatusEntry]:
    """One ``input/<topic>`` entry per robot-file topic: STALE (and since when) while the node is active and the
    topic has not been heard within its timeout since the activation; OK while heard, or while inactive (the
    node reads nothing then). Every entry carries the same keys, so each can be plotted."""
    entries = []
    for seen in inputs:
        values: dict[str, Any] = {"topic": seen.topic, "timeout_s": seen.timeout_s, "stale_since": "",
                                  "silent_s": "" if seen.last is None else round(now - seen.last, 3)}
        silence = Silence.of(seen.topic, seen.last, seen.start, seen.timeout_s, now, wall_now) if active else None
        if silence is not None:
            level, message = Level.STALE, silence.message()
            values.update(silence.values())
        elif not active:
            level, message = Level.OK, "not read: the node is inactive"
        else:
            level = Level.OK
            message = "waiting for the first message" if seen.last is None else \
                f"heard {(now - seen.last) * 1e3:.0f} ms ago"
        entries.append(StatusEntry(f"{INPUT_STATUS}/{seen.topic.strip('/')}", level, message, values))
    return entries


def robot_io_status(*, timing: Any = None, estop: Any = None, teleop_topic: str = "", override_held: bool = False,
                    interventions: int = 0, realtime: Any = None, deploy: Any = None,
                    phase: Any = None) -> list[StatusEntry]:
    """The statuses a configuration adds (see the module docstring); each only where it applies.

    Args:
        timing: the ``ControlTiming`` (core/runtime/control.py) in force, or None.
        estop: the ``EStopLatch``, or None without an e-stop.
        teleop_topic: "" without teleop; override_held: an override is held now; interventions: ticks so far.
        realtime: the ``RealtimeResult`` of the rt_* settings, or None when none was asked for.
        deploy: the configure-time ``DeployReport`` (core/runtime/deploy_check.py), or None without a robot file.
        phase: the fixed_rate loop's ``PhaseLock`` (core/runtime/realtime.py), its figures added to the timing's.
    """
    entries = [] if timing is None else [timing.status()]
    if entries and phase is not None:
        entries[0] = replace(entries[0], values={**entries[0].values, **phase.values()})
    if estop is not None:
        entries.append(estop.status())
    if teleop_topic:
        entries.append(StatusEntry(INTERVENTION_STATUS, Level.WARN if override_held else Level.OK,
                                   "intervention active" if override_held else "no intervention",
                                   {"teleop_topic": teleop_topic, "intervention_ticks": str(interventions)}))
    if realtime is not None:
        entries.append(StatusEntry(REALTIME_STATUS, realtime.level, realtime.text()))
    if deploy is not None:
        entries.append(deploy.status())
    return entries


class InputErrorReports:
    """When a new input error deserves an immediate status: at once, but a flood at most every
    ``interval_s`` (the periodic diagnostics repeat it anyway)."""

    def __init__(self, interval_s: float = REPORT_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._last_report = float("-inf")
        self._reported: float | None = None  # the error time last reported

    def due(self, error_time: float | None, now: float) -> bool:
        """True if the error stamped ``error_time`` is new and may be reported ``now`` (then it counts as reported)."""
        if error_time == self._reported or now - self._last_report <= self.interval_s:
            return False
        self._last_report, self._reported = now, error_time
        return True
