"""The budget monitor's configuration and decision, without ROS and without torch.

A robot's computer has a control deadline, a memory ceiling and a temperature it must not pass.
``BudgetMonitor.step`` turns one sample of readings (from ``lowrl_ros.core.budget.probes`` and the policy
node's statistics) into one ``SignalStatus`` per signal and the compute tier the policy should run.

Limits. Every signal has a hard limit; its warn level sits a headroom margin (default 25 %) inside
it — the 20–30 % headroom rule of constrained deployment (reference/constrained-rl.md,
"Profiling"): an upper limit warns at ``hard * (1 - headroom)``, a lower limit (available memory)
at ``hard * (1 + headroom)``, and temperature at ``ambient + (hard - ambient) * (1 - headroom)``
because the budget that heat eats is the rise above ambient, not the absolute degrees.

Severity to tier (``TIER_FOR_SEVERITY``): a signal on its warn level asks for a cheaper tier, a
signal past its hard limit for a much cheaper one; thermal and memory hard limits ask for the safe
action, because a cheaper policy does not undo heat or a leak fast enough::

    signal                 warn        hard
    latency p99            lite        decimated (then safe, see below)
    deadline-miss rate     lite        decimated (then safe)
    CPU throttling         lite        decimated
    CPU load               (full)      lite
    memory (RSS, avail.)   lite        safe
    CPU temperature        decimated   safe

A deadline signal (latency, misses) still past its hard limit once the policy has run the tier
it asked for during a whole ``miss_window_s`` asks for one tier cheaper, down to the safe action:
if even the decimated lite policy misses its deadline, its output cannot be trusted. On the safe
action these two signals are STALE (no inference runs to time).

The tier follows the worst signal. Going down (cheaper) needs ``escalate_after`` consecutive
samples that all ask for it, and then goes straight to the least severe tier those samples agreed
on; going back up is one tier at a time, each step only after ``recover_dwell_s`` seconds of
samples that all ask for less (hysteresis, as in Autoware's system_monitor); a tier that has to
drop again right after a step up doubles that dwell (flap damping, see ``TierDecider``). A STALE signal (no
sensor, a probe that failed, no policy statistics yet) is reported but never moves the tier: the
monitor does not act on what it cannot see.

The robot's ladder. With ``robot_file`` set, every tier the signals ask for maps onto that robot
file's ``fallback`` ladder (core/runtime/ladder.py, the same mapping the policy node applies), deepening
and recovery go step by step along it, and while a signal past its limit asks for more than the
ladder's last policy step the tier status says so (the next step is the stop) before the stop is
taken. Without it the ladder is every tier: full, lite, decimated, safe.
"""
from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping, Sequence

from lowrl_ros.core.config import field as config_field
from lowrl_ros.core.runtime.ladder import FallbackLadder
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.core.types import Level, Silence, StatusEntry

TEMPERATURE_SOURCES = ("auto", "file", "estimated", "none")


class Severity(enum.IntEnum):
    """How close a signal is to its limit; maps onto diagnostic levels OK/WARN/ERROR/STALE."""

    OK = 0
    WARN = 1
    HARD = 2
    STALE = 3

    @property
    def level(self) -> Level:
        """The diagnostic level of this severity (past the hard limit is an ERROR)."""
        return _LEVEL_OF[self]


_LEVEL_OF = {Severity.OK: Level.OK, Severity.WARN: Level.WARN, Severity.HARD: Level.ERROR, Severity.STALE: Level.STALE}

# Signals that the policy's own tier changes: past the hard limit on the very tier they asked
# for, after the policy has run that tier for a whole window, they ask for one tier cheaper.
DEADLINE_KINDS = ("latency", "miss_rate")

# kind -> (tier asked for on WARN, tier asked for on HARD). See the module docstring.
TIER_FOR_SEVERITY: dict[str, tuple[ComputeTier, ComputeTier]] = {
    "latency": (ComputeTier.LITE, ComputeTier.DECIMATED),
    "miss_rate": (ComputeTier.LITE, ComputeTier.DECIMATED),
    "throttle": (ComputeTier.LITE, ComputeTier.DECIMATED),
    "cpu_load": (ComputeTier.FULL, ComputeTier.LITE),
    "memory": (ComputeTier.LITE, ComputeTier.SAFE),
    "temperature": (ComputeTier.DECIMATED, ComputeTier.SAFE),
}


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class BudgetConfig:
    """Limits and timing of the budget monitor (one field per ROS parameter of budget_monitor_node, all live).

    A memory or load limit of 0 switches that signal's enforcement off (it is still measured and
    diagnosed). All sizes in MB are 10**6 bytes.
    """

    sample_rate_hz: float = config_field(10.0, "how often the probes run and the tier is decided",
                                         range=(0.1, 1000.0), live=True)
    headroom: float = config_field(0.25, "warn this fraction inside every hard limit (20-30 % rule)",
                                   range=(0.0, 0.9), live=True)
    escalate_after: int = config_field(3, "consecutive bad samples before stepping down to a cheaper tier",
                                       range=(1, 100), live=True)
    recover_dwell_s: float = config_field(5.0, "seconds of good samples before each step back up",
                                          range=(0.0, 3600.0), live=True)
    publish_period_s: float = config_field(1.0, "re-publish the (latched) tier this often, besides on change",
                                           range=(0.05, 60.0), live=True)
    latency_p99_limit_us: float = config_field(0.0, "hard limit on windowed p99; 0 = the policy's own deadline",
                                               range=(0.0, 1e8), live=True)
    miss_rate_limit: float = config_field(0.05, "hard limit on the fraction of ticks that missed the deadline",
                                          range=(0.0, 1.0), live=True)
    miss_window_s: float = config_field(2.0, "window over which the miss rate is computed", range=(0.1, 600.0),
                                        live=True)
    policy_rss_limit_mb: float = config_field(400.0, "policy node resident memory (pid from its stats); 0 = off",
                                              range=(0.0, 1e7), live=True)
    process_names: tuple[str, ...] = config_field(("finetune_node",), "other processes watched, by name", live=True)
    process_rss_limits_mb: tuple[float, ...] = config_field((1500.0,), "one limit per name; 0 = off", live=True)
    min_available_mb: float = config_field(200.0, "system available memory must stay above this; 0 = off",
                                           range=(0.0, 1e7), live=True)
    temperature_source: str = config_field("auto", "auto (psutil/sysfs/hwmon) | file | estimated | none", live=True)
    temperature_file: str = config_field("", "for source 'file': a file holding millidegrees C, like sysfs",
                                         live=True)
    temperature_limit_c: float = config_field(85.0, "hard CPU temperature limit", range=(-50.0, 200.0), live=True)
    ambient_c: float = config_field(25.0, "ambient temperature: base of the thermal headroom and the model",
                                    range=(-50.0, 100.0), live=True)
    thermal_rise_c: float = config_field(45.0, "estimated model: steady rise above ambient at 100 % CPU load",
                                         range=(0.0, 200.0), live=True)
    thermal_time_constant_s: float = config_field(60.0, "estimated model: first-order time constant",
                                                  range=(0.1, 3600.0), live=True)
    throttle_limit: float = config_field(0.5, "hard limit on the fraction of max CPU frequency capped by a "
                                              "thermal/power limit; 0 = off",
                                         range=(0.0, 1.0), live=True)
    cpu_load_limit_pct: float = config_field(95.0, "hard limit on system CPU load in percent; 0 = off",
                                             range=(0.0, 100.0), live=True)
    cpu_load_window_s: float = config_field(0.0, "CPU load over the last this many seconds at each sample "
                                                 "(0: since the previous sample); smooths out single 10 ms ticks",
                                            range=(0.0, 60.0), live=True)
    robot_file: str = config_field("", "the policy node's robot file: its fallback ladder bounds the tiers asked for "
                                       "(docs/budget.md); empty: full, lite, decimated, safe", live=True)

    def __post_init__(self) -> None:
        # Lists arrive from YAML/ROS; store tuples so the config stays hashable and frozen.
        object.__setattr__(self, "process_names", tuple(self.process_names))
        object.__setattr__(self, "process_rss_limits_mb", tuple(self.process_rss_limits_mb))
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("float", "int") and not _is_num(value):
                raise ValueError(f"budget config {f.name}={value!r} must be a finite number, e.g. {f.default!r}")
        self._check_range("sample_rate_hz", 0.1, 1000.0, "0.1..1000 Hz; 10 Hz is enough to react within 0.3 s")
        self._check_range("headroom", 0.0, 0.9, "a fraction 0..0.9; 0.2-0.3 keeps 20-30 % headroom")
        if not isinstance(self.escalate_after, int) or isinstance(self.escalate_after, bool) or self.escalate_after < 1:
            raise ValueError(f"budget config escalate_after={self.escalate_after!r} must be an integer >= 1 "
                             "(consecutive bad samples before stepping down; 3 is a good start)")
        self._check_range("recover_dwell_s", 0.0, 3600.0, "0..3600 s; a few seconds avoids flapping")
        self._check_range("publish_period_s", 0.05, 60.0, "0.05..60 s")
        self._check_range("latency_p99_limit_us", 0.0, 1e8, "microseconds >= 0; 0 uses the policy's deadline")
        if not 0.0 < self.miss_rate_limit <= 1.0:
            raise ValueError(f"budget config miss_rate_limit={self.miss_rate_limit!r} must be a fraction in "
                             "(0, 1], e.g. 0.05 for 5 % of ticks")
        self._check_range("miss_window_s", 0.1, 600.0, "0.1..600 s; at least a few control periods")
        for name in ("policy_rss_limit_mb", "min_available_mb"):
            self._check_range(name, 0.0, 1e7, "MB >= 0; 0 switches the limit off")
        if any(not isinstance(n, str) or not n.strip() for n in self.process_names):
            raise ValueError(f"budget config process_names={list(self.process_names)!r} must be non-empty "
                             "process names (as in `ps -o comm` or the script name), e.g. ['finetune_node']")
        if len(self.process_rss_limits_mb) != len(self.process_names):
            raise ValueError(f"budget config has {len(self.process_names)} process_names but "
                             f"{len(self.process_rss_limits_mb)} process_rss_limits_mb; give one limit (MB) per name")
        if any(not _is_num(v) or v < 0 for v in self.process_rss_limits_mb):
            raise ValueError(f"budget config process_rss_limits_mb={list(self.process_rss_limits_mb)!r} must be "
                             "MB >= 0 (0 switches a limit off)")
        if self.temperature_source not in TEMPERATURE_SOURCES:
            raise ValueError(f"budget config temperature_source={self.temperature_source!r} is unknown; use one of "
                             f"{', '.join(TEMPERATURE_SOURCES)}")
        if self.temperature_source == "file" and not str(self.temperature_file).strip():
            raise ValueError("budget config temperature_source='file' needs temperature_file: a path whose content "
                             "is millidegrees Celsius, e.g. /sys/class/thermal/thermal_zone0/temp")
        self._check_range("temperature_limit_c", -50.0, 200.0, "degrees C, e.g. 85 for most SoCs")
        self._check_range("ambient_c", -50.0, 100.0, "degrees C, e.g. 25")
        if self.ambient_c >= self.temperature_limit_c:
            raise ValueError(f"budget config ambient_c={self.ambient_c} must be below temperature_limit_c="
                             f"{self.temperature_limit_c}; the thermal headroom is the rise between them")
        self._check_range("thermal_rise_c", 0.0, 200.0, "degrees C >= 0 (steady rise at 100 % load)")
        self._check_range("thermal_time_constant_s", 0.1, 3600.0, "0.1..3600 s")
        self._check_range("throttle_limit", 0.0, 1.0, "a fraction 0..1 of max frequency capped; 0 switches it off")
        self._check_range("cpu_load_limit_pct", 0.0, 100.0, "percent 0..100; 0 switches it off")
        self._check_range("cpu_load_window_s", 0.0, 60.0, "0..60 s; 0 measures since the previous sample, 0.5 "
                                                         "smooths out single ticks at 10 Hz")
        self.ladder()  # an unreadable robot file or a bad fallback entry is refused here, with its fix

    def ladder(self) -> FallbackLadder:
        """The robot file's fallback ladder (its default when it declares none), or every tier without one."""
        if not self.robot_file:
            return FallbackLadder.default(None, has_lite=True)
        from lowrl_ros.core.runtime.robot_file import load_robot_file  # reads YAML: only when set

        robot = load_robot_file(self.robot_file)
        return FallbackLadder.for_robot(robot.raw, where=robot.path or "robot file")

    def _check_range(self, name: str, low: float, high: float, hint: str) -> None:
        value = getattr(self, name)
        if not low <= value <= high:
            raise ValueError(f"budget config {name}={value!r} is out of range; use {hint}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "BudgetConfig":
        """Build from a dict (a YAML ``ros__parameters`` block); unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown budget config key(s) {', '.join(unknown)}; "
                             f"known keys: {', '.join(sorted(known))}")
        return cls(**dict(values))

    def warn_level(self, hard: float, kind: str, upper: bool = True) -> float:
        """The warn level that keeps ``headroom`` inside ``hard`` (see the module docstring)."""
        if kind == "temperature":
            return self.ambient_c + (hard - self.ambient_c) * (1.0 - self.headroom)
        return hard * (1.0 - self.headroom) if upper else hard * (1.0 + self.headroom)


@dataclass(frozen=True)
class Reading:
    """One probe's measurement. ``value is None`` means no value: STALE, with ``detail`` saying why."""

    value: float | None
    source: str = ""  # where it came from: "psutil", "sysfs", "file", "estimated", "policy stats"
    detail: str = ""  # why it is stale, or a label such as "estimated"
    silence: Silence | None = None  # an input not heard within its timeout (what and since when)


@dataclass(frozen=True)
class SignalStatus:
    """One signal judged against its limits: what diagnostics show and what the decision reads."""

    name: str  # diagnostic suffix, e.g. "latency_p99", "process_rss/finetune_node"
    kind: str  # key of TIER_FOR_SEVERITY
    unit: str
    value: float | None
    warn: float | None  # None: no limit (off or unknown)
    hard: float | None
    upper: bool  # True: bad above the limit; False: bad below it
    severity: Severity
    tier: ComputeTier  # the tier this signal asks for
    source: str
    message: str
    silence: Silence | None = None  # STALE because its input went quiet: since when

    @property
    def margin(self) -> float | None:
        """Fraction of the hard limit still free (negative past it); None without value or limit."""
        if self.value is None or self.hard is None or self.hard == 0:
            return None
        room = (self.hard - self.value) if self.upper else (self.value - self.hard)
        return room / abs(self.hard)


def judge(name: str, kind: str, unit: str, reading: Reading, hard: float | None, warn: float | None,
          upper: bool = True) -> SignalStatus:
    """Compare one reading with its warn and hard levels and say which tier it asks for."""
    src = reading.source + (f" ({reading.detail})" if reading.detail and reading.value is not None else "")
    if reading.value is None:
        return SignalStatus(name, kind, unit, None, warn, hard, upper, Severity.STALE, ComputeTier.FULL,
                            reading.source, reading.detail or "no value", reading.silence)
    v = float(reading.value)
    if hard is None or warn is None:
        return SignalStatus(name, kind, unit, v, None, None, upper, Severity.OK, ComputeTier.FULL, src,
                            f"{v:.4g} {unit} (no limit)")
    beyond = (lambda x: v >= x) if upper else (lambda x: v <= x)
    on_warn, on_hard = TIER_FOR_SEVERITY[kind]
    word = "above" if upper else "below"
    if beyond(hard):
        sev, tier, msg = Severity.HARD, on_hard, f"{v:.4g} {unit} {word} hard limit {hard:.4g}"
    elif beyond(warn):
        sev, tier, msg = Severity.WARN, on_warn, f"{v:.4g} {unit} {word} warn level {warn:.4g}"
    else:
        sev, tier, msg = Severity.OK, ComputeTier.FULL, f"{v:.4g} {unit}, within limits"
    if reading.detail and "estimated" in reading.detail:
        msg += " (estimated)"  # an estimated value is never shown as if measured
    return SignalStatus(name, kind, unit, v, warn, hard, upper, sev, tier, src, msg)


class MissRateWindow:
    """Deadline-miss rate over a time window, from the policy node's cumulative counters.

    The counters restart from zero when the policy node restarts; a decrease resets the window.
    """

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, float, float]] = deque()

    def add(self, now: float, misses: float, ticks: float) -> None:
        if self._samples and (ticks < self._samples[-1][2] or misses < self._samples[-1][1]):
            self._samples.clear()
        self._samples.append((now, misses, ticks))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()

    def rate(self) -> float | None:
        """Missed ticks / ticks over the window; None until two samples with ticks between them."""
        if len(self._samples) < 2:
            return None
        _, m0, t0 = self._samples[0]
        _, m1, t1 = self._samples[-1]
        return (m1 - m0) / (t1 - t0) if t1 > t0 else None


@dataclass
class TierDecider:
    """Escalate after N consecutive bad samples; step back up one tier per dwell of good samples.

    Pure state machine over ``update(now, wanted)``: ``now`` is any monotonic clock in seconds
    (a fake one in tests), ``wanted`` the tier the worst signal asks for.

    Flap damping: a cheaper tier often cures the signal that asked for it (the lite policy meets
    the deadline the full one missed), so the signals cannot tell whether stepping back up is
    safe. If the tier must drop again within one dwell of a step up, the dwell doubles (up to
    ``max_backoff`` times ``recover_dwell_s``); a step up that holds for a dwell resets it.
    """

    escalate_after: int = 3
    recover_dwell_s: float = 5.0
    ladder: FallbackLadder = field(default_factory=lambda: FallbackLadder.default(None, has_lite=True))
    tier: ComputeTier = ComputeTier.FULL
    max_backoff: int = 8
    backoff: int = 1  # current dwell = recover_dwell_s * backoff
    _bad_count: int = 0
    _bad_floor: ComputeTier = ComputeTier.SAFE  # least severe tier all current bad samples agreed on
    _good_since: float | None = None
    _last_up: float | None = None

    @property
    def dwell_s(self) -> float:
        """The dwell now required before the next step up."""
        return self.recover_dwell_s * self.backoff

    def update(self, now: float, wanted: ComputeTier) -> bool:
        """Feed one sample; return True when ``tier`` changed."""
        if self._last_up is not None and now - self._last_up >= self.dwell_s:
            self.backoff, self._last_up = 1, None  # the last step up held for a full dwell
        if wanted > self.tier:
            self._good_since = None
            self._bad_count += 1
            self._bad_floor = min(self._bad_floor, wanted)
            if self._bad_count >= self.escalate_after:
                if self._last_up is not None:  # dropping again soon after a step up: flapping
                    self.backoff = min(self.backoff * 2, self.max_backoff)
                    self._last_up = None
                self.tier = self._bad_floor
                self._reset_bad()
                return True
            return False
        self._reset_bad()
        if wanted == self.tier:
            self._good_since = None
            return False
        if self._good_since is None:
            self._good_since = now
        if now - self._good_since >= self.dwell_s:
            self.tier = self.ladder.dearer(self.tier)
            self._last_up = now
            # Each further step up needs a full dwell of its own.
            self._good_since = now if wanted < self.tier else None
            return True
        return False

    def _reset_bad(self) -> None:
        self._bad_count = 0
        self._bad_floor = ComputeTier.SAFE


@dataclass(frozen=True)
class Assessment:
    """The outcome of one sample: every signal's status, the tier, and why it changed (if it did)."""

    statuses: tuple[SignalStatus, ...]
    tier: ComputeTier
    wanted: ComputeTier
    changed: bool
    reason: str
    note: str = ""  # a limit is crossed and the ladder has no cheaper policy step left (the stop is next)


@dataclass
class PolicyReport:
    """The fields of the policy node's stats the monitor uses (lowrl_ros.core.runtime.policy_stats)."""

    window_p99_us: float
    deadline_misses: float
    ticks: float
    deadline_us: float
    tier: float
    pid: float
    received_at: float  # monitor clock, seconds


@dataclass
class BudgetMonitor:
    """Judge one sample of readings against a BudgetConfig and decide the compute tier."""

    config: BudgetConfig
    stats_timeout_s: float = 2.0  # policy stats older than this are STALE
    decider: TierDecider = field(init=False)
    _misses: MissRateWindow = field(init=False)
    _policy: PolicyReport | None = field(init=False, default=None)
    _applied_since: float | None = field(init=False, default=None)  # policy runs decider.tier since
    _watch_from: float | None = field(init=False, default=None)  # the first sample: the stats are awaited since

    def __post_init__(self) -> None:
        self.decider = TierDecider(self.config.escalate_after, self.config.recover_dwell_s, self.config.ladder())
        self._misses = MissRateWindow(self.config.miss_window_s)

    @property
    def ladder(self) -> FallbackLadder:
        return self.decider.ladder

    def reconfigure(self, config: BudgetConfig) -> None:
        """Take new limits live; the current tier (moved onto a new ladder) and the miss window are kept."""
        self.config = config
        self.decider.escalate_after = config.escalate_after
        self.decider.recover_dwell_s = config.recover_dwell_s
        self.decider.ladder = config.ladder()
        self.decider.tier = self.decider.ladder.apply(self.decider.tier)
        self._misses.window_s = config.miss_window_s

    @property
    def policy(self) -> PolicyReport | None:
        return self._policy

    def policy_pid(self, now: float) -> int | None:
        """The policy node's pid from fresh stats (for the memory probe), else None."""
        p = self._policy
        if p is None or now - p.received_at > self.stats_timeout_s or p.pid <= 0:
            return None
        return int(p.pid)

    def on_policy_stats(self, now: float, values: Sequence[float]) -> None:
        """Take one /lowrl/policy/stats message (values in STATS_FIELDS order)."""
        from lowrl_ros.core.runtime.policy_stats import PolicyStats  # tiny, ROS-free

        s = PolicyStats.from_list(values)
        self._policy = PolicyReport(s.window_p99_us, s.deadline_misses, s.ticks, s.deadline_us, s.tier, s.pid, now)
        self._misses.add(now, s.deadline_misses, s.ticks)
        if int(s.tier) != self.decider.tier:
            self._applied_since = None
        elif self._applied_since is None:
            self._applied_since = now

    def judge_all(self, now: float, readings: Mapping[str, Reading], wall_now: float | None = None
                  ) -> list[SignalStatus]:
        """One status per signal: policy latency and misses, memory, temperature, throttling, load.

        ``readings`` keys: "policy_rss", "process_rss/<name>", "memory_available",
        "cpu_temperature", "cpu_throttle", "cpu_load" (missing keys are STALE). The policy stats are
        awaited from the first call on: not heard within ``stats_timeout_s`` (since then, or since the
        newest), the two deadline signals are STALE and say since when (``wall_now``: the wall clock at
        ``now``, for the time of day; default ``now``).
        """
        c = self.config
        out: list[SignalStatus] = []
        p = self._policy
        if self._watch_from is None:
            self._watch_from = now
        fresh = p is not None and now - p.received_at <= self.stats_timeout_s
        if not fresh:
            quiet = Silence.of("policy stats on /lowrl/policy/stats", None if p is None else p.received_at,
                               self._watch_from, self.stats_timeout_s, now, now if wall_now is None else wall_now)
            why = quiet.message() if quiet is not None else "waiting for the first policy stats"
            lat = miss = Reading(None, "policy stats", why, quiet)
        elif int(p.tier) == ComputeTier.SAFE:
            # No inference runs on the safe action: its latency window is frozen, not evidence.
            lat = miss = Reading(None, "policy stats", "policy runs the safe action: no inference to judge")
        else:
            lat = Reading(p.window_p99_us, "policy stats")
            rate = self._misses.rate()
            miss = Reading(rate, "policy stats", "" if rate is not None else "waiting for a second stats sample")
        hard_lat = c.latency_p99_limit_us or (p.deadline_us if fresh and p.deadline_us > 0 else None)
        out.append(judge("latency_p99", "latency", "us", lat, hard_lat,
                         c.warn_level(hard_lat, "latency") if hard_lat else None))
        out.append(judge("deadline_miss_rate", "miss_rate", "fraction", miss, c.miss_rate_limit,
                         c.warn_level(c.miss_rate_limit, "miss_rate")))
        out.append(self._limit("policy_rss", "memory", "MB", readings, c.policy_rss_limit_mb))
        for name, limit in zip(c.process_names, c.process_rss_limits_mb):
            out.append(self._limit(f"process_rss/{name}", "memory", "MB", readings, limit))
        out.append(self._limit("memory_available", "memory", "MB", readings, c.min_available_mb, upper=False))
        out.append(self._limit("cpu_temperature", "temperature", "degC", readings, c.temperature_limit_c))
        out.append(self._limit("cpu_throttle", "throttle", "fraction", readings, c.throttle_limit))
        out.append(self._limit("cpu_load", "cpu_load", "%", readings, c.cpu_load_limit_pct))
        return out

    def _limit(self, name: str, kind: str, unit: str, readings: Mapping[str, Reading], hard: float,
               upper: bool = True) -> SignalStatus:
        reading = readings.get(name, Reading(None, "", "not sampled"))
        if not hard:
            return judge(name, kind, unit, reading, None, None, upper)
        return judge(name, kind, unit, reading, hard, self.config.warn_level(hard, kind, upper), upper)

    def _deepen(self, now: float, statuses: list[SignalStatus]) -> list[SignalStatus]:
        """A deadline signal still past its hard limit on the tier it asked for, after the policy
        has run that tier for ``miss_window_s``, asks for one tier cheaper (down to the safe
        action): if even the decimated lite policy misses its deadline, its output cannot be
        trusted."""
        tier, ladder = self.decider.tier, self.decider.ladder
        settled = self._applied_since is not None and now - self._applied_since >= self.config.miss_window_s
        cheaper = ladder.cheaper(tier)
        if not settled or cheaper is None:
            return statuses
        return [replace(s, tier=cheaper, message=f"{s.message}, still on the {tier.label} tier")
                if s.kind in DEADLINE_KINDS and s.severity == Severity.HARD and ladder.apply(s.tier) <= tier else s
                for s in statuses]

    def step(self, now: float, readings: Mapping[str, Reading], wall_now: float | None = None) -> Assessment:
        """Judge all signals and update the tier: the worst non-STALE signal wins (``wall_now``: see judge_all)."""
        statuses = self._deepen(now, self.judge_all(now, readings, wall_now))
        active = [s for s in statuses if s.severity != Severity.STALE]
        worst = max(active, key=lambda s: (s.tier, s.severity), default=None)
        ladder = self.decider.ladder
        wanted = ladder.apply(worst.tier) if worst is not None else ComputeTier.FULL
        before = self.decider.tier
        changed = self.decider.update(now, wanted)
        if not changed:
            reason = ""
        elif self.decider.tier > before:
            reason = f"{before.label} -> {self.decider.tier.label}: {worst.name} {worst.message}"
        else:
            reason = f"{before.label} -> {self.decider.tier.label}: all signals allowed it for a dwell"
        if changed:
            self._applied_since = None  # the policy has to show it runs the new tier
        if changed and self.decider.backoff > 1:
            reason += f" (dwell now {self.decider.dwell_s:g} s: flap damping)"
        tier, note = self.decider.tier, ""
        if worst is not None and worst.tier > tier and ladder.last_policy_step(tier):
            step = ladder.step(tier)
            note = (f"{worst.name} {worst.message}: the ladder {ladder.describe()} has no cheaper policy step than "
                    f"{step.label if step else tier.label}; if it stays past its limit the next step is "
                    f"{ladder.stop.label}")
        return Assessment(tuple(statuses), tier, wanted, changed, reason, note)


def _tier_label(value: float) -> str:
    try:
        return ComputeTier.parse(int(value)).label
    except (ValueError, OverflowError):
        return f"unknown ({value:g})"


def budget_status(last: Assessment, tier: ComputeTier, policy: PolicyReport | None, last_change: str,
                  prefix: str = "lowrl/budget", ladder: FallbackLadder | None = None) -> list[StatusEntry]:
    """The budget monitor's diagnostics, pure: one status per signal, then ``<prefix>/tier``.

    A signal's level is its severity's (:attr:`Severity.level`); one STALE because its input went quiet
    (the policy stats) says since when in ``stale_since`` (ISO 8601 UTC; "" otherwise). The tier status is
    OK on the full tier, ERROR on the safe action and WARN in between.

    Args:
        last: the latest assessment (``BudgetMonitor.step``).
        tier: the tier now published; policy: the policy node's latest stats (None: none yet).
        last_change: why the tier last changed ("none yet" before the first change).
        prefix: the diagnostic name prefix.
        ladder: the robot's fallback ladder, shown in the tier status (None: not shown).
    """
    statuses = []
    for s in last.statuses:
        margin = s.margin
        values = {"value": "" if s.value is None else s.value, "unit": s.unit,
                  "limit": "" if s.hard is None else s.hard, "warn": "" if s.warn is None else s.warn,
                  "margin": "" if margin is None else margin, "source": s.source, "asks_tier": s.tier.label,
                  "stale_since": "" if s.silence is None else s.silence.since_text}
        statuses.append(StatusEntry(f"{prefix}/{s.name}", s.severity.level, s.message, values))
    level = Level.OK if tier == ComputeTier.FULL else (Level.ERROR if tier == ComputeTier.SAFE else Level.WARN)
    message = f"compute tier {tier.label}"
    if last.note:
        level, message = max(level, Level.WARN), f"{message}; {last.note}"
    statuses.append(StatusEntry(f"{prefix}/tier", level, message, {
        "tier": tier.label, "wanted": last.wanted.label, "last_change": last_change,
        "policy_applies": "" if policy is None else _tier_label(policy.tier),
        "ladder": ladder.describe() if ladder is not None else "", "note": last.note}))
    return statuses
