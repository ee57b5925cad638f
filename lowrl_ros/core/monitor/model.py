"""The monitor model: what the rqt plugin and ``lowrl top`` show, fed decoded samples, no ROS, no clock of its own.

A ROS adapter (``lowrl_ros/ros/monitor_listener.py``) decodes messages and calls the ``on_*`` methods;
the views call :meth:`MonitorModel.snapshot` a few times a second. Keeping the picture here means the
two views cannot disagree, and the rules (what counts as a swap, when a source is stale, misses per
second) are unit-tested on an injected clock (test/test_monitor_model.py).

What is fed, per robot namespace (``/`` or ``/r1``):

- ``on_tier``: ``/lowrl/compute_tier`` (the tier the budget monitor publishes);
- ``on_stats``: ``/lowrl/policy/stats`` in :data:`~lowrl_ros.core.runtime.policy_stats.STATS_FIELDS` order;
- ``on_step``: a ``/lowrl/policy/step`` row (only its header: the running version, the e-stop flag);
- ``on_episode``: ``/lowrl/episode`` ``[index, return, length, terminated]``, counted for the running version;
- ``on_status``: one ``lowrl/<node>/...`` diagnostic status (name without the namespace, level, message, values);
  swaps, rejections and rollbacks are the fine-tuner's counter keys where it runs (never its decision text).

Each source (policy, budget, finetune, trainer, episodes) is ``ok``, ``stale`` (heard, but not for
``stale_s``) or ``not running`` (never heard), so a view shows what is missing instead of old numbers.

Over time: every feed also appends to a time series kept for the last ``window_s`` (120 s by default,
stamped with the model's clock), which the snapshot hands out as a :class:`Series` for the rqt plots
and ``lowrl top``'s sparklines: latency, deadline misses, the applied tier, each budget signal, each
episode's return with its version, and the swaps, rejections and rollbacks as timed events.
"""
from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from lowrl_ros.core.runtime.policy_stats import STATS_FIELDS
from lowrl_ros.core.runtime.step_row import HEADER, STEP_ROW_VERSION
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.core.types import Level

OK, STALE, NOT_RUNNING = "ok", "stale", "not running"
SOURCES = ("policy", "budget", "finetune", "trainer", "episodes")
STALE_S = 3.0  # the nodes publish diagnostics at 1 Hz and stats at 10 Hz: three missed periods of the slowest
WINDOW_S = 120.0  # seconds of history kept per time series (two minutes: a load phase and its recovery)
MAX_SAMPLES = 4000  # a cap per series whatever the rate (stats come at 10 Hz: 1200 samples in the window)
RETURNS_KEPT = 20  # episode returns kept per version
MISS_WINDOW_S = 5.0  # misses per second are counted over this much of the stats stream
_COUNTED = ("lowrl/finetune/versions", "lowrl/trainer/finetune")  # statuses with swap/rejection/rollback counters
_ESTOP = HEADER.index("estop")
_VERSION = HEADER.index("policy_version")


def split_name(full: str) -> tuple[str, str]:
    """(namespace, status name) of a status name as published: ``r1/lowrl/policy/tier`` -> (``/r1``,
    ``lowrl/policy/tier``); a name without ``lowrl/`` in it -> (``/``, name)."""
    head, sep, tail = full.partition("lowrl/")
    if not sep:
        return "/", full
    return "/" + head.strip("/"), sep + tail


def tier_label(value: float | None) -> str:
    """The tier's name for a published or applied tier value ("-" when unknown)."""
    if value is None or not math.isfinite(value):
        return "-"
    try:
        return ComputeTier.parse(int(value)).label
    except (ValueError, OverflowError):
        return f"unknown ({value:g})"


def _number(text: object) -> float | None:
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class Signal:
    """One budget signal against its limits (a ``lowrl/budget/<name>`` status)."""

    name: str
    value: float | None
    unit: str
    warn: float | None
    limit: float | None
    level: Level
    message: str


@dataclass(frozen=True)
class Status:
    """One diagnostic status as last heard, and when (model clock)."""

    level: Level
    message: str
    values: Mapping[str, str]
    time: float


@dataclass(frozen=True)
class Series:
    """What happened over the last ``window_s`` seconds, times on the model's clock (``now`` is the snapshot's).

    Tuples of plain numbers, oldest first, so a view draws them as they are and a test compares them."""

    now: float = 0.0
    window_s: float = WINDOW_S
    latency: tuple[tuple[float, float, float], ...] = ()  # (t, p50_us, p99_us), one per stats sample
    misses: tuple[tuple[float, int], ...] = ()  # (t, deadline misses since the previous stats sample), when > 0
    tier: tuple[tuple[float, int], ...] = ()  # (t, applied tier value), one per stats sample
    signals: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)  # budget name -> (t, value)
    returns: tuple[tuple[float, int, float], ...] = ()  # (t, version running, return), one per episode
    events: tuple[tuple[float, str, int], ...] = ()  # (t, "swap" | "rejection" | "rollback", version after it)


@dataclass(frozen=True)
class RobotSnapshot:
    """The picture of one robot namespace at one instant; ``None`` and ``"-"`` mean not heard."""

    namespace: str
    sources: Mapping[str, str]  # source -> ok | stale | not running
    tier_published: str
    tier_applied: str
    tier_reason: str
    p50_us: float | None
    p99_us: float | None
    deadline_us: float | None
    control_period_us: float | None
    misses: int | None
    misses_per_s: float | None
    signals: tuple[Signal, ...]
    running_version: int | None
    best_version: int | None
    returns: Mapping[int, tuple[float, int]]  # version -> (mean of its recent returns, episodes)
    last_return: float | None
    episodes: int
    swaps: int
    rejections: int
    rollbacks: int
    last_decision: str
    learner_state: str
    learner_updates: str
    trainer_stage: str
    estop_latched: bool | None
    estop_topic: str
    estop_reset_topic: str
    statuses: Mapping[str, Status]
    series: Series = field(default_factory=Series)


def _series() -> deque:
    return deque(maxlen=MAX_SAMPLES)


@dataclass
class _Robot:
    heard: dict[str, float] = field(default_factory=dict)  # source -> last time
    tier_published: float | None = None
    stats: dict[str, float] = field(default_factory=dict)
    misses: deque = field(default_factory=_series)  # (time, total misses): the rate and the miss marks
    latency: deque = field(default_factory=_series)  # (time, p50, p99)
    tier: deque = field(default_factory=_series)  # (time, applied tier)
    signals: dict[str, deque] = field(default_factory=dict)  # budget signal -> (time, value)
    running_version: int | None = None
    estop_row: bool | None = None
    swaps: int = 0
    returns: dict[int, deque] = field(default_factory=dict)
    return_series: deque = field(default_factory=_series)  # (time, version, return)
    events: deque = field(default_factory=_series)  # (time, kind, version)
    counters: dict[tuple[str, str], int] = field(default_factory=dict)  # (status, counter key) as last heard
    episodes: int = 0
    rejected: set = field(default_factory=set)  # (swap_path, swap_version) seen rejected
    statuses: dict[str, Status] = field(default_factory=dict)


def _locked(method):
    """Run ``method`` under the model's lock (feeds come from a ROS thread, snapshots from a view)."""
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    wrapper.__doc__, wrapper.__name__ = method.__doc__, method.__name__
    return wrapper


class MonitorModel:
    """Per-namespace state fed by decoded samples; :meth:`snapshot` builds a view's picture.

    Args:
        clock: seconds, monotonic (a fake one in tests); every ``on_*`` call is stamped with it.
        stale_s: a source not heard for this long is ``stale``.
    """

    def __init__(self, clock: Callable[[], float], stale_s: float = STALE_S, window_s: float = WINDOW_S) -> None:
        self._clock = clock
        self.stale_s = float(stale_s)
        self.window_s = float(window_s)
        self._robots: dict[str, _Robot] = {}
        self._lock = threading.Lock()  # a ROS thread feeds, a view's thread reads

    @_locked
    def namespaces(self) -> list[str]:
        """The robot namespaces heard so far, sorted (``/`` first)."""
        return sorted(self._robots)

    def _robot(self, ns: str, source: str) -> tuple[_Robot, float]:
        ns = "/" + ns.strip("/")
        robot = self._robots.setdefault(ns, _Robot())
        now = self._clock()
        robot.heard[source] = now
        return robot, now

    def _push(self, series: deque, now: float, *item) -> None:
        """Append ``(now, *item)`` and drop what fell out of the window (the deque's maxlen caps a fast feed)."""
        series.append((now, *item))
        while now - series[0][0] > self.window_s:
            series.popleft()

    # ---- feeds ------------------------------------------------------------------------------
    @_locked
    def on_tier(self, ns: str, value: int) -> None:
        """The compute tier the budget monitor published (``/lowrl/compute_tier``)."""
        robot, _ = self._robot(ns, "budget")
        robot.tier_published = float(value)

    @_locked
    def on_stats(self, ns: str, values: Sequence[float]) -> None:
        """One ``/lowrl/policy/stats`` sample; a sample of another length is ignored (another version's node)."""
        if len(values) != len(STATS_FIELDS):
            return
        robot, now = self._robot(ns, "policy")
        robot.stats = stats = dict(zip(STATS_FIELDS, map(float, values)))
        self._push(robot.misses, now, stats["deadline_misses"])
        self._push(robot.latency, now, stats["window_p50_us"], stats["window_p99_us"])
        self._push(robot.tier, now, int(stats["tier"]))

    @_locked
    def on_step(self, ns: str, row: Sequence[float]) -> None:
        """A step row's header: the version that ran the tick (a change is a swap) and the e-stop flag."""
        if len(row) < len(HEADER) or row[0] != STEP_ROW_VERSION:
            return
        robot, now = self._robot(ns, "policy")
        version = int(row[_VERSION])
        if robot.running_version is not None and version != robot.running_version:
            robot.swaps += 1
            self._push(robot.events, now, "swap", version)
        robot.running_version = version
        robot.estop_row = bool(row[_ESTOP])

    @_locked
    def on_episode(self, ns: str, values: Sequence[float]) -> None:
        """``[index, return, length, terminated]``: the return counts for the version running now."""
        if len(values) < 2 or not math.isfinite(values[1]):
            return
        robot, now = self._robot(ns, "episodes")
        ret = float(values[1])
        robot.episodes += 1
        version = robot.running_version if robot.running_version is not None else 0
        self._push(robot.return_series, now, version, ret)
        robot.returns.setdefault(version, deque(maxlen=RETURNS_KEPT)).append(ret)

    @_locked
    def on_status(self, ns: str, name: str, level: Level, message: str, values: Mapping[str, str]) -> None:
        """One diagnostic status, ``name`` without the namespace (``lowrl/finetune/versions``)."""
        parts = name.split("/")
        if len(parts) < 3 or parts[0] != "lowrl":
            return
        source = {"sim_robot": "episodes"}.get(parts[1], parts[1])
        robot, now = self._robot(ns, source if source in SOURCES else parts[1])
        values = {str(k): str(v) for k, v in values.items()}
        robot.statuses[name] = Status(Level(level), message, values, now)
        if name == "lowrl/policy/policy" and values.get("swap_state") == "rejected":
            key = (values.get("swap_path", ""), values.get("swap_version", ""))
            if key not in robot.rejected and not self._counted(robot):
                self._push(robot.events, now, "rejection", int(_number(key[1]) or 0))
            robot.rejected.add(key)
        elif name.startswith("lowrl/budget/") and name != "lowrl/budget/tier":
            value = _number(values.get("value"))
            if value is not None:
                self._push(robot.signals.setdefault(parts[-1], _series()), now, value)
        elif name in _COUNTED:
            self._count_events(robot, name, values, now)

    @staticmethod
    def _counted(robot: _Robot) -> bool:
        """Whether a fine-tuner's (or trainer's) counter keys were heard: then they time the events."""
        return any(name in robot.statuses for name in _COUNTED)

    def _count_events(self, robot: _Robot, name: str, values: Mapping[str, str], now: float) -> None:
        """A rejection or rollback event each time its counter key grew (the first status heard sets the base);
        the on-robot fine-tuner's keys win over the trainer's, as in the snapshot's counts."""
        if name == "lowrl/trainer/finetune" and "lowrl/finetune/versions" in robot.statuses:
            return
        version = _number(values.get("current", values.get("running", "")))
        for key in ("rejections", "rollbacks"):
            n = _number(values.get(key))
            if n is None:
                continue
            before = robot.counters.get((name, key))
            if before is not None and n > before:
                self._push(robot.events, now, key[:-1], int(version or 0))
            robot.counters[(name, key)] = int(n)

    # ---- the picture ------------------------------------------------------------------------
    def source_state(self, ns: str, source: str) -> str:
        robot = self._robots.get("/" + ns.strip("/"))
        heard = None if robot is None else robot.heard.get(source)
        if heard is None:
            return NOT_RUNNING
        return OK if self._clock() - heard <= self.stale_s else STALE

    @_locked
    def snapshot(self, ns: str) -> RobotSnapshot:
        """The picture of ``ns`` now (an empty one, every source ``not running``, for a namespace never heard)."""
        ns = "/" + ns.strip("/")
        r = self._robots.get(ns) or _Robot()
        st = r.statuses
        stats = r.stats

        def value(status: str, key: str, default: str = "-") -> str:
            s = st.get(status)
            return s.values.get(key, default) if s is not None else default

        applied = stats.get("tier")
        if applied is None:
            applied = _number(value("lowrl/policy/tier", "tier_value", ""))
        estop = st.get("lowrl/policy/estop")
        versions = st.get("lowrl/finetune/versions")
        trainer = st.get("lowrl/trainer/finetune") or st.get("lowrl/trainer/stream")
        learner = st.get("lowrl/finetune/learner")
        best = _number(value("lowrl/finetune/versions", "best", ""))
        if best is None:
            best = _number(value("lowrl/trainer/finetune", "best", ""))
        running = r.running_version
        if running is None:
            running_text = _number(value("lowrl/policy/policy", "version", ""))
            running = None if running_text is None else int(running_text)
        return RobotSnapshot(
            namespace=ns,
            sources={s: self.source_state(ns, s) for s in SOURCES},
            tier_published=tier_label(r.tier_published),
            tier_applied=tier_label(applied),
            tier_reason=value("lowrl/budget/tier", "last_change"),
            p50_us=stats.get("window_p50_us"), p99_us=stats.get("window_p99_us"),
            deadline_us=stats.get("deadline_us"), control_period_us=stats.get("control_period_us"),
            misses=int(stats["deadline_misses"]) if "deadline_misses" in stats else None,
            misses_per_s=self._miss_rate(r),
            signals=self._signals(st),
            running_version=running,
            best_version=None if best is None else int(best),
            returns={v: (sum(rs) / len(rs), len(rs)) for v, rs in sorted(r.returns.items()) if rs},
            last_return=r.return_series[-1][2] if r.return_series else None,
            episodes=r.episodes,
            **self._counts(st, r),
            last_decision=versions.message if versions is not None else "-",
            learner_state=learner.values.get("state", "-") if learner is not None else "-",
            learner_updates=learner.values.get("updates", "-") if learner is not None else "-",
            trainer_stage=trainer.message if trainer is not None else "-",
            estop_latched=(estop.values.get("latched") == "True") if estop is not None else r.estop_row,
            estop_topic=estop.values.get("topic", "estop") if estop is not None else "estop",
            estop_reset_topic=estop.values.get("reset_topic", "estop_reset") if estop is not None else "estop_reset",
            statuses=dict(st),
            series=self._series(r),
        )

    def _series(self, r: _Robot) -> Series:
        """The time series inside the window now (a feed gone quiet leaves old samples: they are cut here)."""
        now = self._clock()
        t0 = now - self.window_s

        def recent(series: deque) -> tuple:
            return tuple(item for item in series if item[0] >= t0)

        totals = recent(r.misses)
        misses = tuple((t, int(m - before)) for (_, before), (t, m) in zip(totals, totals[1:]) if m > before)
        return Series(now=now, window_s=self.window_s, latency=recent(r.latency), misses=misses, tier=recent(r.tier),
                      signals={name: recent(s) for name, s in sorted(r.signals.items())},
                      returns=recent(r.return_series), events=recent(r.events))

    @staticmethod
    def _counts(st: Mapping[str, Status], r: _Robot) -> dict[str, int]:
        """``swaps``, ``rejections``, ``rollbacks``: the fine-tuner's counter keys (``lowrl/finetune/versions``, else
        the off-board trainer's ``lowrl/trainer/finetune``), which count every one since it started. Without them
        (no fine-tuner): the swaps seen in the step rows and the rejections seen in the policy status since this
        view started, and no rollbacks (only a fine-tuner decides one)."""
        counts = {"swaps": r.swaps, "rejections": len(r.rejected), "rollbacks": 0}
        for name in ("lowrl/trainer/finetune", "lowrl/finetune/versions"):  # the on-robot fine-tuner wins
            s = st.get(name)
            for key in counts:
                n = _number(s.values.get(key)) if s is not None else None
                if n is not None:
                    counts[key] = int(n)
        return counts

    def _miss_rate(self, r: _Robot) -> float | None:
        """Deadline misses per second over the last ``MISS_WINDOW_S`` of stats samples (None: under two samples)."""
        if len(r.misses) < 2:
            return None
        t1, m1 = r.misses[-1]
        t0, m0 = next(((t, m) for t, m in r.misses if t1 - t <= MISS_WINDOW_S), r.misses[0])
        if t1 <= t0:
            return None
        return max(0.0, (m1 - m0) / (t1 - t0))  # a restarted policy node counts from 0 again

    @staticmethod
    def _signals(statuses: Mapping[str, Status]) -> tuple[Signal, ...]:
        out = []
        for name, s in sorted(statuses.items()):
            if not name.startswith("lowrl/budget/") or name == "lowrl/budget/tier":
                continue
            v = s.values
            out.append(Signal(name.rsplit("/", 1)[1], _number(v.get("value")), v.get("unit", ""),
                              _number(v.get("warn")), _number(v.get("limit")), s.level, s.message))
        return tuple(out)
