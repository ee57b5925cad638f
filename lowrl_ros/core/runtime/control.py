"""The policy node's control logic, free of ROS: safety, watchdog, soft start, decimation, tiers.

The node feeds observations (or the error that made one unusable) and calls :meth:`step` once per
control tick; everything that decides *which* action goes out lives here, so it is tested with a
fake clock and fake policies (test/test_control.py) and the node stays a thin wrapper.

Order of decisions in one tick (the first that applies wins):

1. not active                      -> safe action
2. e-stop latched (robot file)     -> safe action until a reset
   a reset requested (episode end) -> until the robot reports ready (:meth:`hold_until_ready`): RESET, no
                                      command (position interface: the reset owns the joints), else safe action
3. no good observation yet since activation, or (position interface) no measured joint
   positions yet                   -> NOTHING: no command at all (``source == "none"``)
4. the latest observation was bad  -> safe action, error reason kept for diagnostics
5. no observation within watchdog  -> safe action
6. tier SAFE                       -> the ladder's stop: safe action, or hold for ``hold``
7. not an acting tick (decimation) -> hold the last action
8. otherwise                       -> policy (full or lite by tier), blended from the safe action
                                      over ``soft_start_steps`` after activation or a swap.
                                      A teleop override held (:meth:`set_override`, newer than
                                      ``override_timeout_s``) replaces the policy's output before
                                      the post-processing, limits and rate limit: an intervention.

Without a robot file every action is clamped to the policy contract's limits. With one (an
``ActionProcessor``, core/runtime/actions.py) the policy's output is post-processed (scale, offset,
joint limits), soft start is timed (``safety.soft_start_s``) and blends from the MEASURED pose on a
position interface (from the last command after a swap or a safe period), the rate limit applies
to what goes out, and the safe action is the interface's (``hold``: the joint positions measured
when the safe period began, held for all of it, or followed while a reset is under way; ``None``
while they are unknown, so nothing goes out).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol

import numpy as np

from lowrl_ros.core.config import field
from lowrl_ros.core.runtime.actions import ActionProcessor
from lowrl_ros.core.runtime.artifact import last_action_convention
from lowrl_ros.core.runtime.ladder import FallbackLadder
from lowrl_ros.core.runtime.realtime import PhaseLock
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.core.types import Level, Policy, StatusEntry

MODES = ("event", "fixed_rate")
ROBOT_TIMINGS = ("contract", "parameters")
SAFE_ACTIONS = ("zero", "hold", "default_pose")
NOTHING = "none"  # StepResult.source when no command may go out at all
RESET = "reset"  # StepResult.source while a position robot's reset is under way: no command, a step row all the same
ESTOP_STATUS = "lowrl/policy/estop"
TIMING_STATUS = "lowrl/policy/timing"

PolicyLike = Policy  # what the controller needs of a policy: core/types.py's Policy protocol


class BundleLike(Protocol):
    """What the controller needs of a bundle (lowrl_ros.core.runtime.bundle.PolicyBundle fits)."""

    policies: Mapping[str, PolicyLike]
    version: int

    def smallest(self) -> PolicyLike: ...


@dataclass(frozen=True)
class ControlConfig:
    """Control-loop settings (the policy node's parameters of the same names; ``live``: changeable while running)."""

    mode: str = field("event", "event (act on each observation) | fixed_rate (act on a timer tick)")
    control_period_s: float = field(0.01, "timer period in fixed_rate mode; the deadline reference in both modes",
                                    range=(1e-4, 10.0))
    decimation: int = field(1, "fixed_rate: run the policy every k-th tick and hold in between", range=(1, 100),
                            live=True)
    tier_decimation: int = field(4, "extra decimation in the DECIMATED compute tier", range=(1, 100), live=True)
    watchdog_timeout_s: float = field(0.1, "no observation for this long -> the safe action", range=(1e-3, 10.0),
                                      live=True)
    soft_start_steps: int = field(50, "blend from the safe action to the policy over N policy steps after "
                                      "activation or a swap (0: none)", range=(0, 10000), live=True)
    safe_action: str = field("zero", "zero | hold (the last action sent) | default_pose", live=True)
    default_pose: tuple[float, ...] = field((), "the safe action for default_pose (one value per action)", live=True)
    deadline_s: float = field(0.0, "an output later than this after its reference is a deadline miss "
                                   "(0: control_period_s)", range=(0.0, 10.0), live=True)
    # On-robot fine-tuning learns from what the robot did: a deterministic policy shows its learner no other
    # action than its own. The noise is what the step rows record (the executed action), never the teleop's.
    explore_std: float = field(0.0, "Gaussian noise on the policy's action at the full tier, a fraction of each "
                                    "action's half range, for the fine-tuner to learn from (0: off); clipped to "
                                    "the limits and rate-limited like any action", range=(0.0, 1.0), live=True)
    tick_phase_s: float = field(0.001, "fixed_rate: keep each tick this long after the robot's joint states "
                                       "arrive (a phase lock: it pulls the schedule earlier, at most 5 % of a period "
                                       "a tick; 0: the schedule runs free)", range=(0.0, 0.1))
    latency_window: int = field(1000, "recent inference latencies kept for p50/p99", range=(1, 100000))
    # A keep-alive: the controller holds the safe action in between.
    safe_period_s: float = field(0.1, "fixed_rate, safe tier: keep-alive period of the safe action "
                                      "(0: control_period_s x tier_decimation)", range=(0.0, 10.0))

    def __post_init__(self) -> None:
        object.__setattr__(self, "default_pose", tuple(float(v) for v in self.default_pose))
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is unknown; use one of {', '.join(MODES)}")
        if not 1e-4 <= self.control_period_s <= 10.0:
            raise ValueError(f"control_period_s={self.control_period_s} is outside 0.0001..10 s; "
                             "e.g. 0.01 for 100 Hz")
        for name in ("decimation", "tier_decimation", "latency_window"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)}")
        if self.watchdog_timeout_s <= 0:
            raise ValueError(f"watchdog_timeout_s must be > 0 (e.g. 10 control periods), got {self.watchdog_timeout_s}")
        if self.soft_start_steps < 0:
            raise ValueError(f"soft_start_steps must be >= 0 (0: no soft start), got {self.soft_start_steps}")
        if self.safe_action not in SAFE_ACTIONS:
            raise ValueError(f"safe_action {self.safe_action!r} is unknown; use one of {', '.join(SAFE_ACTIONS)}")
        if self.safe_action == "default_pose" and not self.default_pose:
            raise ValueError("safe_action is 'default_pose' but default_pose is empty; give one value per action")
        if not np.isfinite(self.default_pose).all():
            raise ValueError(f"default_pose must be finite, got {self.default_pose}")
        if not 0.0 <= self.explore_std <= 1.0:
            raise ValueError(f"explore_std={self.explore_std} is outside 0..1 (a fraction of the half action range; "
                             "0: off, e.g. 0.05)")
        if self.deadline_s < 0:
            raise ValueError(f"deadline_s must be >= 0 (0: the control period), got {self.deadline_s}")
        if not 0.0 <= self.tick_phase_s <= 0.1:
            raise ValueError(f"tick_phase_s={self.tick_phase_s} is outside 0..0.1 s (0: no phase lock)")
        if not 0.0 <= self.safe_period_s <= 10.0:
            raise ValueError(f"safe_period_s={self.safe_period_s} is outside 0..10 s (0: control_period_s * "
                             "tier_decimation)")

    @property
    def deadline(self) -> float:
        return self.deadline_s or self.control_period_s

    def phase_lock(self, age: Callable[[float], float | None]) -> PhaseLock | None:
        """The fixed_rate loop's lock onto the robot's samples (``age(t)``: the newest one's age at t; None: off)."""
        return PhaseLock(age, self.tick_phase_s) if self.tick_phase_s else None


@dataclass(frozen=True)
class ControlTiming:
    """When the policy acts, against the control period its contract names (the ``robot_timing`` parameter).

    A policy is trained at one control period; run at another it sees another system (a 50 Hz policy fed
    1 kHz joint states in event mode would act ~1,000 times a second). So ``robot_timing: contract`` (the
    default) runs ``fixed_rate`` at the contract's period, whatever ``mode`` and ``control_period_s`` say;
    ``parameters`` keeps those, and when they give another rate :attr:`warning` says so (a WARN line at
    configure and the WARN ``lowrl/policy/timing`` diagnostic). A contract that names no period
    (None) leaves the parameters in force, without a warning.

    Attributes:
        overrides: the ControlConfig fields it sets (mode, control_period_s), {} for none.
        text: how the loop is timed, for the status; warning: non-empty when the rate is not the contract's.
    """

    robot_timing: str
    overrides: Mapping[str, object]
    text: str
    warning: str = ""

    @classmethod
    def choose(cls, robot_timing: str, contract_period_s: float | None, mode: str,
               control_period_s: float) -> "ControlTiming":
        if robot_timing not in ROBOT_TIMINGS:
            raise ValueError(f"robot_timing {robot_timing!r} is unknown; use one of {', '.join(ROBOT_TIMINGS)}")
        if not contract_period_s:
            return cls(robot_timing, {},
                       f"{mode}, control_period_s {control_period_s:g} s (the policy names no control period)")
        period = float(contract_period_s)
        if robot_timing == "contract":
            return cls(robot_timing, {"mode": "fixed_rate", "control_period_s": period},
                       f"fixed_rate at the policy's control period {period:g} s (robot_timing: contract)")
        if mode == "fixed_rate" and math.isclose(control_period_s, period, rel_tol=1e-9):
            return cls(robot_timing, {},
                       f"fixed_rate at {period:g} s, the policy's control period (robot_timing: parameters)")
        runs = "on each observation (mode event)" if mode == "event" else f"every {control_period_s:g} s"
        return cls(robot_timing, {}, f"{mode} (robot_timing: parameters)",
                   f"robot_timing: parameters: the policy acts {runs}, not at the control period its contract "
                   f"names ({period:g} s); set robot_timing: contract to run it at that rate")

    def status(self) -> StatusEntry:
        """WARN while the policy runs at another rate than its contract's, else OK."""
        return StatusEntry(TIMING_STATUS, Level.WARN if self.warning else Level.OK, self.warning or self.text,
                           {"robot_timing": self.robot_timing})


@dataclass
class StepResult:
    """One tick's output: the action and why it was chosen."""

    action: np.ndarray  # empty when source is "none"
    source: str  # "policy", "hold", "safe", "none" (publish nothing), "reset" (publish nothing; the row marks it)
    reason: str = ""  # why the safe action, when it is
    latency_s: float | None = None  # inference time when the policy ran
    policy_action: np.ndarray | None = None  # the EXECUTED output (contract units) when it ran: last_action
    own_action: np.ndarray | None = None  # the policy's own output; differs from policy_action in an intervention
    raw_action: np.ndarray | None = None  # the network's y before its action transform: last_action "raw"
    intervention: bool = False  # a teleop override replaced the policy's output this tick


class LatencyWindow:
    """The most recent N latencies in a fixed ring, with p50/p99 on demand (cheap to append, computed at 10 Hz).

    :meth:`add` runs every policy step on the control thread: one store into a preallocated array.
    The percentiles partition a copy (:meth:`snapshot`), so a caller holding a lock can take the
    copy under it and compute :func:`percentiles_us` after releasing it.
    """

    def __init__(self, size: int) -> None:
        self._buf = np.empty(int(size))
        self._count = 0  # values held (up to size)
        self._next = 0  # where the next value goes

    def add(self, seconds: float) -> None:
        self._buf[self._next] = seconds
        self._next += 1
        if self._next == self._buf.size:
            self._next = 0
        if self._count < self._buf.size:
            self._count += 1

    def __len__(self) -> int:
        return self._count

    def snapshot(self) -> np.ndarray:
        """A copy of the values held (in no particular order)."""
        return self._buf[:self._count].copy()

    def percentiles_us(self) -> tuple[float, float]:
        """(p50, p99) in microseconds; (nan, nan) when empty."""
        return percentiles_us(self.snapshot())


class LoopTiming:
    """The control loop's period and execution time over the recent ticks, in the spirit of ros2_control's
    controller manager statistics (periodicity mean/std, execution time mean/max, overruns), so each is a
    key of the ``lowrl/policy/latency`` status that rqt_plot or a recorder can draw.

    :meth:`add` runs on the control thread (two stores); :meth:`summary` computes at the diagnostics rate.
    """

    def __init__(self, size: int) -> None:
        self.periods = LatencyWindow(size)
        self.executions = LatencyWindow(size)
        self._last: float | None = None

    def add(self, start: float, execution_s: float | None) -> None:
        """A tick that started at ``start`` and took ``execution_s`` (None: nothing ran, only the period counts)."""
        if self._last is not None:
            self.periods.add(start - self._last)
        self._last = start
        if execution_s is not None:
            self.executions.add(execution_s)

    def summary(self, period_s: float) -> dict[str, float]:
        """``periodicity_{mean,std,error_mean}_us`` (error: mean minus ``period_s``) and
        ``execution_time_{mean,max}_us``; nan before two ticks."""
        p, e = self.periods.snapshot() * 1e6, self.executions.snapshot() * 1e6
        nan = float("nan")
        return {"periodicity_mean_us": float(p.mean()) if p.size else nan,
                "periodicity_std_us": float(p.std()) if p.size else nan,
                "periodicity_error_mean_us": float(p.mean()) - period_s * 1e6 if p.size else nan,
                "execution_time_mean_us": float(e.mean()) if e.size else nan,
                "execution_time_max_us": float(e.max()) if e.size else nan}


def percentiles_us(seconds: np.ndarray) -> tuple[float, float]:
    """(p50, p99) of latencies in seconds, in microseconds; (nan, nan) when empty. Reorders ``seconds``.

    Equal to ``np.percentile(seconds, [50, 99])`` (its default linear method, the same interpolation
    formula) but from one ``partition`` at the four ranks it reads, not a sort and numpy's wrapper.
    """
    n = seconds.size
    if n == 0:
        return float("nan"), float("nan")
    ranks, where = [], []
    for q in (0.5, 0.99):
        index = (n - 1) * q
        lo = int(math.floor(index))
        hi = min(lo + 1, n - 1)
        ranks += [lo, hi]
        where.append((lo, hi, index - lo))
    seconds.partition(sorted(set(ranks)))
    out = []
    for lo, hi, t in where:
        a, b = float(seconds[lo]), float(seconds[hi])
        # numpy's _lerp: from the nearer end, so t = 1 gives b exactly
        out.append((a + (b - a) * t if t < 0.5 else b - (b - a) * (1 - t)) * 1e6)
    return out[0], out[1]


class EStopLatch:
    """An emergency stop that latches: once asserted, the safe action goes out until a reset.

    Owned by the node, not by one controller, so the latch survives policy swaps, tier changes,
    deactivate/activate and a cleanup/configure cycle. A reset is refused while the e-stop input
    still reads true (releasing the button comes first), and the latch is an ERROR status naming
    the e-stop topic for as long as it holds.

    Args:
        topic: the e-stop input (shown in the status); reset_topic: where a reset comes from.
    """

    def __init__(self, topic: str = "estop", reset_topic: str = "estop_reset") -> None:
        self.topic, self.reset_topic = topic, reset_topic
        self.latched = False
        self.asserted = False
        self.latched_at: float | None = None
        self.count = 0  # how often it latched

    @classmethod
    def keep(cls, old: "EStopLatch | None", topic: str, reset_topic: str) -> "EStopLatch | None":
        """The latch for a new configuration: ``old`` (still latched, if it was) unless the e-stop topic
        changed, so a cleanup/configure never releases an e-stop; None without an e-stop topic."""
        if not topic:
            return None
        if old is not None and old.topic == topic:
            old.reset_topic = reset_topic
            return old
        return cls(topic, reset_topic)

    def update(self, asserted: bool, now: float) -> bool:
        """Record the e-stop input; return True when this latched it (it was not latched before)."""
        self.asserted = bool(asserted)
        if self.asserted and not self.latched:
            self.latched, self.latched_at = True, now
            self.count += 1
            return True
        return False

    def reset(self) -> tuple[bool, str]:
        """Release the latch unless the e-stop still reads true; (released, a line for the log)."""
        if not self.latched:
            return False, "e-stop reset: nothing to release (not latched)"
        if self.asserted:
            return False, (f"e-stop reset refused: {self.topic} still reads true; release the e-stop "
                           "(publish false) first, then reset")
        self.latched = False
        return True, "e-stop released: the policy takes over again through the soft start"

    def status(self) -> StatusEntry:
        """ERROR while latched (naming the e-stop and how to release it), OK otherwise."""
        if self.latched:
            steps = f"publish std_msgs/Empty on {self.reset_topic}"
            if self.asserted:
                steps = f"release the e-stop (false on {self.topic}), then {steps}"
            return StatusEntry(ESTOP_STATUS, Level.ERROR, f"e-stop latched by {self.topic}: safe action held; "
                               f"to resume, {steps}",
                               {"topic": self.topic, "reset_topic": self.reset_topic, "latched": True,
                                "asserted": self.asserted, "count": self.count})
        return StatusEntry(ESTOP_STATUS, Level.OK, f"e-stop clear ({self.topic})",
                           {"topic": self.topic, "reset_topic": self.reset_topic, "latched": False,
                            "asserted": self.asserted, "count": self.count})


def full_policy(bundle: BundleLike) -> PolicyLike:
    """The bundle's "full" tier, or its only/first policy."""
    return bundle.policies.get("full") or next(iter(bundle.policies.values()))


def policy_dims(policy: PolicyLike) -> tuple[int, int]:
    c = policy.contract
    return int(c.obs_dim), int(c.action_dim)


def _raw_output(policy: PolicyLike, executed: np.ndarray, replaced: bool) -> np.ndarray:
    """The network output y behind this tick's executed action (a copy), for the last_action "raw" convention.

    The engine's own pre-transform output when the policy ran unaided (engines.Policy.raw_output: the clip
    to the limits does not leak in); where the action was replaced (an intervention, exploration noise) the
    executed action's y (the transform inverted); a
    policy that offers neither (a test fake) is taken to have the identity transform.
    """
    raw = None if replaced else getattr(policy, "raw_output", None)
    if raw is not None:
        return np.array(raw, dtype=np.float64)
    invert = getattr(policy, "raw_from_action", None)
    return invert(executed) if invert is not None else np.array(executed, dtype=np.float64)


@dataclass
class _Active:
    bundle: BundleLike
    full: PolicyLike
    lite: PolicyLike | None  # None: one-policy bundle, LITE falls to DECIMATED
    low: np.ndarray
    high: np.ndarray
    half: np.ndarray  # (high - low) / 2: explore_std's unit, computed once per policy, not per tick


class PolicyController:
    """Chooses the action of each control tick. Not thread-safe: call from one thread.

    Args:
        config: the control settings.
        bundle: the policies.
        clock: seconds, monotonic (a fake one in tests).
        actions: the robot file's post-processing (None: no robot file, today's behaviour).
        estop: the e-stop latch (kept by the node so it outlives this controller); None: none.
        ladder: the robot file's declared fallback ladder (core/runtime/ladder.py); None: the robot's
            default for each bundle. Every requested tier maps onto it: a step it lacks is never taken.
    """

    def __init__(self, config: ControlConfig, bundle: BundleLike,
                 clock: Callable[[], float] = time.monotonic, actions: ActionProcessor | None = None,
                 estop: EStopLatch | None = None, ladder: FallbackLadder | None = None,
                 rng: np.random.Generator | None = None) -> None:
        self.config = config
        self._clock = clock
        self._policy = self._prepare(bundle)
        self.obs_dim, self.action_dim = policy_dims(self._policy.full)
        self.actions = actions
        self.estop = estop
        self._declared_ladder = ladder
        self.ladder = self._ladder_for(bundle)  # LadderError (a ValueError): configure fails naming the entry
        if actions is not None:
            actions.check_contract(self._policy.full.contract)
        self.check_config(config)
        self.latency = LatencyWindow(config.latency_window)
        self.timing = LoopTiming(config.latency_window)
        self.requested_tier = ComputeTier.FULL
        self.tier = ComputeTier.FULL
        self.active = False
        self.ticks = 0
        self.policy_steps = 0
        self.deadline_misses = 0
        self.last_error = ""
        self.last_error_time: float | None = None
        self._obs: np.ndarray | None = None
        self._obs_error = ""
        self._obs_time: float | None = None
        self._last_action = np.zeros(self.action_dim)
        self._soft_from = self._last_action.copy()
        self._soft_step = 0
        self._observed = False  # a good observation came since activation
        self._measured: np.ndarray | None = None  # measured joint positions (policy order), robot file only
        self._held: np.ndarray | None = None  # robot file, hold: the pose held since this safe period began
        self._last_out: np.ndarray | None = None  # the last command that went out (robot file: rate limit)
        self._last_out_time = 0.0
        self._last_source = NOTHING
        self._soft_t0: float | None = None  # robot file: when the running blend started (None: start one)
        self._override: np.ndarray | None = None  # teleop action (contract units), see set_override
        self._override_time = -float("inf")
        self.override_timeout_s = 0.2
        self.interventions = 0  # ticks whose action came from the teleop override
        self._explore = rng or np.random.default_rng()  # explore_std's noise (a test seeds it)
        self.waiting_ready = ""  # non-empty: safe action until release_hold() (a reset is under way)

    def check_config(self, config: ControlConfig) -> None:
        """Raise ValueError if ``config`` does not fit the running policy (checked before a live change).

        ControlConfig checks itself; what it cannot know is the policy's action size, which a
        ``default_pose`` safe action must match.
        """
        if config.safe_action == "default_pose" and len(config.default_pose) != self.action_dim:
            raise ValueError(f"default_pose has {len(config.default_pose)} values but the policy has "
                             f"{self.action_dim} actions; give one value per action")

    # ---- policies -------------------------------------------------------------------------
    @staticmethod
    def _prepare(bundle: BundleLike) -> _Active:
        full = full_policy(bundle)
        lite = bundle.smallest() if len(bundle.policies) > 1 else None
        if lite is full:
            lite = None
        c = full.contract
        low, high = np.asarray(c.action_low, float), np.asarray(c.action_high, float)
        return _Active(bundle, full, lite, low, high, (high - low) / 2.0)

    @property
    def bundle(self) -> BundleLike:
        return self._policy.bundle

    def _ladder_for(self, bundle: BundleLike) -> FallbackLadder:
        """The declared ladder, checked against ``bundle``, or the robot's default for it."""
        if self._declared_ladder is not None:
            self._declared_ladder.check_bundle(bundle.policies, "robot file fallback")
            return self._declared_ladder
        return FallbackLadder.default(self.actions.interface if self.actions is not None else None,
                                      has_lite=len(bundle.policies) > 1)

    def check_compatible(self, bundle: BundleLike) -> None:
        """Raise ValueError if ``bundle`` cannot replace the running one (different I/O sizes, or an
        action scale/offset the robot file would apply a second time)."""
        for name, policy in bundle.policies.items():
            dims = policy_dims(policy)
            if dims != (self.obs_dim, self.action_dim):
                raise ValueError(f"policy tier {name!r} maps {dims[0]} observations to {dims[1]} actions, "
                                 f"the running one {self.obs_dim} to {self.action_dim}; a hot-swap must keep the "
                                 "I/O contract (restart the node for a different robot)")
            if self.actions is not None:
                self.actions.check_contract(policy.contract)
            running = last_action_convention(self._policy.full.contract)
            if last_action_convention(policy.contract) != running:
                raise ValueError(f"policy tier {name!r} reads back its last action as "
                                 f"{last_action_convention(policy.contract)!r}, the running one as {running!r}; the "
                                 "observation follows the policy configured at start: restart the node to change it")
        self._ladder_for(bundle)  # a declared ladder's lite must be in the new bundle too

    def swap(self, bundle: BundleLike) -> None:
        """Replace the policies between ticks (atomic: one reference), then soft-start again."""
        self.check_compatible(bundle)
        self._policy = self._prepare(bundle)
        self.ladder = self._ladder_for(bundle)
        self.tier = self._effective(self.requested_tier)
        self._start_soft()

    # ---- lifecycle ------------------------------------------------------------------------
    def activate(self) -> None:
        self.active = True
        self._obs, self._obs_time, self._obs_error = None, None, ""
        self._observed = False  # nothing goes out before the first good observation of this activation
        self._last_out, self._last_source, self._held = None, NOTHING, None
        self._start_soft()

    def deactivate(self) -> np.ndarray | None:
        """Stop; return the safe action to publish last (None: nothing may go out, the pose is unknown)."""
        self.active = False
        action = self.safe_action()
        if action is not None:
            self._last_action = action
        return action

    def _start_soft(self) -> None:
        if self.actions is not None:
            self._soft_t0 = None  # the next policy output starts a timed blend (see _blend)
            return
        # Blend from what the actuators were last told, or the safe action, towards the policy.
        self._soft_from = self.safe_action()
        self._soft_step = 0

    # ---- inputs ---------------------------------------------------------------------------
    def observe(self, obs: np.ndarray | None, error: str = "") -> None:
        """Record the newest observation, or the error that made it unusable."""
        now = self._clock()
        self._obs_time = now
        if error or obs is None:
            self._obs, self._obs_error = None, error or "no observation"
            self.last_error, self.last_error_time = self._obs_error, now
        else:
            self._obs, self._obs_error = obs, ""
            self._observed = True

    def set_measured(self, positions: np.ndarray | None) -> None:
        """The robot's newest measured joint positions in the policy's joint order (None: unknown);
        ``hold`` holds them and a position soft start starts from them. Keeps the last known pose
        when given None (a message without these joints says nothing about where they are)."""
        if positions is not None:
            self._measured = np.asarray(positions, dtype=np.float64)

    @property
    def observation(self) -> np.ndarray | None:
        """The newest good observation (the one the next policy step reads; not a copy)."""
        return self._obs

    def set_override(self, action: np.ndarray | None, now: float | None = None) -> None:
        """A person's action (the policy's output units, one value per action) replacing the policy's
        while it is newer than ``override_timeout_s``; None ends it at once. ValueError when unusable."""
        if action is None:
            self._override = None
            return
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (self.action_dim,) or not np.isfinite(a).all():
            raise ValueError(f"teleop action has {a.size} values or is not finite; send {self.action_dim} finite "
                             "values in the policy's action order and units")
        self._override = a
        self._override_time = self._clock() if now is None else now

    def override_held(self, now: float | None = None) -> bool:
        """A teleop override is held: the newest one is younger than ``override_timeout_s``."""
        return self._override is not None and \
            (self._clock() if now is None else now) - self._override_time <= self.override_timeout_s

    def hold_until_ready(self, reason: str) -> None:
        """Run no policy until :meth:`release_hold` (the robot is ready again after its reset).

        A position-controlled robot is sent nothing meanwhile: its reset owns the joints, and a hold would fight
        it (one measured before the reset and arriving after it pulled the quadruped's joints back toward the old
        pose at 3 rad/s: the episode began moving). Velocity and effort commands go to zero (left alone they would
        keep the last one). The measured pose is forgotten, so the soft start after the ready starts from the
        pose the reset left, never from one before it."""
        self.waiting_ready = reason or "waiting for the robot to be ready"
        self._measured = self._held = None

    def release_hold(self) -> None:
        self.waiting_ready = ""
        self._start_soft()  # back to the policy smoothly, from wherever the reset left the joints

    @property
    def measured(self) -> np.ndarray | None:
        """The last measured joint positions (policy order), None before the first."""
        return None if self._measured is None else self._measured.copy()

    def observation_age(self, now: float | None = None) -> float | None:
        """Seconds since the newest observation (good or bad); None before the first one."""
        if self._obs_time is None:
            return None
        return (self._clock() if now is None else now) - self._obs_time

    def set_tier(self, tier: int | str | ComputeTier) -> str | None:
        """Apply a compute tier at the next tick; return a log line when the applied tier changes."""
        requested = ComputeTier.parse(tier)
        self.requested_tier = requested
        effective = self._effective(requested)
        if effective == self.tier:
            return None
        before, self.tier = self.tier, effective
        step = self.ladder.step(effective)
        label = step.label if step is not None else effective.label
        note = ""
        if effective != requested:
            note = f" (requested {requested.label}; the robot's ladder is {self.ladder.describe()})"
        return f"compute tier {before.label} -> {label}{note}"

    def _effective(self, tier: ComputeTier) -> ComputeTier:
        return self.ladder.apply(tier)

    def _tier_decimation(self) -> int:
        """The decimated step's factor: the ladder's ``decimated:k``, else the ``tier_decimation`` parameter."""
        step = self.ladder.step(ComputeTier.DECIMATED)
        return step.decimation if step is not None and step.decimation else self.config.tier_decimation

    # ---- output ---------------------------------------------------------------------------
    def safe_action(self, kind: str = "") -> np.ndarray | None:
        """The safe action (``kind`` "hold": hold, whatever is configured); None only with a robot file
        whose safe action needs a pose not yet measured."""
        if self.actions is not None:
            return self._robot_safe_action(kind)
        c = self.config
        if (kind or c.safe_action) == "hold":
            action = self._last_action.copy()
        elif c.safe_action == "default_pose":
            action = np.asarray(c.default_pose, dtype=np.float64)
        else:
            action = np.zeros(self.action_dim)
        return np.clip(action, self._policy.low, self._policy.high)

    def _robot_safe_action(self, kind: str = "") -> np.ndarray | None:
        safe = kind or self.actions.safety.safe_action
        if safe == "hold":
            # The MEASURED pose, not the last command: after a fall or a stall the two differ, and
            # commanding the old target would pull the joints back at full gain. Not clamped:
            # clamping a pose measured outside the limits would move the joint.
            # Measured once, when the safe period begins, and held for all of it: commanding each tick's
            # newest measurement would let a joint that sags under load (a position loop's steady-state
            # error) pull its own command down after it, and with the measurement's delay the command
            # chases the joint.
            if self._held is None:
                self._held = None if self._measured is None else self._measured.copy()
            return None if self._held is None else self._held.copy()
        if safe == "default_pose":
            return self.actions.clamp(self.actions.default_pose)
        return np.zeros(self.action_dim)

    def output_period_s(self) -> float:
        """fixed_rate: seconds between outputs in the tier now applied.

        Below lite the loop itself slows down: by ``tier_decimation`` when decimated, to the
        ``safe_period_s`` keep-alive when safe. The robot's
        controller holds the last command (the forward_command_controller contract), so publishing
        a held action again is work a degraded tier exists to shed, and under CPU contention every
        wake-up is a chance to miss a deadline. Event mode follows the observations instead.
        """
        c = self.config
        if self.tier == ComputeTier.SAFE and c.safe_period_s > 0:
            return max(c.safe_period_s, c.control_period_s)
        k = self._tier_decimation() if self.tier >= ComputeTier.DECIMATED else 1
        return c.control_period_s * k

    def _decimation(self) -> int:
        if self.config.mode == "fixed_rate":
            return self.config.decimation  # the tier's factor is in output_period_s()
        return self._tier_decimation() if self.tier == ComputeTier.DECIMATED else 1

    def step(self, reference_time: float | None = None) -> StepResult:
        """Choose this tick's action.

        Args:
            reference_time: when the output was due to start (the scheduled timer tick, or the
                observation's arrival); a result later than ``deadline`` after it is a miss.
        """
        now = self._clock()
        ref = now if reference_time is None else reference_time
        self.ticks += 1
        result = self._choose(now)
        self._last_source = result.source
        if result.source != "safe":
            self._held = None  # the next safe period measures the pose it holds afresh
        if result.source in (NOTHING, RESET):
            self.timing.add(now, None)
            return result  # nothing goes out: no deadline to meet, nothing to hold or limit from
        self._last_action = result.action
        self._last_out, self._last_out_time = result.action, now
        end = self._clock()
        self.timing.add(now, end - now)
        if end - ref > self.config.deadline:
            self.deadline_misses += 1
        return result

    def _safe(self, reason: str, kind: str = "") -> StepResult:
        action = self.safe_action(kind)
        if action is None:
            return StepResult(np.empty(0), NOTHING, f"{reason}; joint positions not measured yet")
        return StepResult(action, "safe", reason)

    def _choose(self, now: float) -> StepResult:
        if not self.active:
            return self._safe("inactive")
        if self.estop is not None and self.estop.latched:
            return self._safe(f"e-stop latched by {self.estop.topic}")
        if self.waiting_ready:  # see hold_until_ready
            if self.actions is not None and self.actions.interface == "position":
                return StepResult(np.empty(0), RESET, self.waiting_ready)
            return self._safe(self.waiting_ready)
        if not self._observed:
            return StepResult(np.empty(0), NOTHING, self._obs_error or "waiting for the first observation")
        if self.actions is not None and self.actions.interface == "position" and self._measured is None:
            return StepResult(np.empty(0), NOTHING, "waiting for the measured joint positions")
        if self._obs_error:
            return self._safe(self._obs_error)
        if self._obs_time is None:
            return self._safe("waiting for the first observation")
        if now - self._obs_time > self.config.watchdog_timeout_s:
            reason = f"watchdog: no observation for {self.config.watchdog_timeout_s:g} s"
            self.last_error, self.last_error_time = reason, now  # diagnosed like a bad input
            return self._safe(reason)
        if self.tier == ComputeTier.SAFE:
            stop = self.ladder.stop.name  # "safe": the configured safe action; "hold": hold, whatever is configured
            return self._safe(f"compute tier safe ({stop}, the robot's last fallback step)",
                              "hold" if stop == "hold" else "")
        if (self.ticks - 1) % self._decimation() and self._last_source in ("policy", "hold"):
            # Hold only what the policy last chose, never a safe action from before (act instead).
            return StepResult(self._last_action, "hold")
        active = self._policy
        policy = active.full if self.tier == ComputeTier.FULL or active.lite is None else active.lite
        t0 = self._clock()
        action = np.asarray(policy.act(self._obs), dtype=np.float64)
        latency = self._clock() - t0
        self.latency.add(latency)
        self.policy_steps += 1
        own = action
        intervened = self.override_held(now)
        if intervened:
            action = self._override
            self.interventions += 1
        explored = not intervened and self.config.explore_std > 0.0 and self.tier == ComputeTier.FULL
        if explored:
            action = action + self._explore.normal(0.0, self.config.explore_std, action.shape) * active.half
        result = self._policy_action(action, active, now, latency)
        if result.source == "policy":
            result.own_action, result.intervention = own, intervened
            # What was executed, as the network's output: the noise is part of the last action (as a training
            # framework's sampled action is), so the engine's own output holds only without it.
            result.raw_action = _raw_output(policy, result.policy_action, intervened or explored)
        return result

    def _policy_action(self, action: np.ndarray, active: _Active, now: float, latency: float) -> StepResult:
        if self.actions is not None:
            return self._robot_action(action, active, now, latency)
        n = self.config.soft_start_steps
        if self._soft_step < n:
            self._soft_step += 1
            alpha = self._soft_step / n
            action = (1.0 - alpha) * self._soft_from + alpha * action
        if action.shape != (self.action_dim,) or not np.isfinite(action).all():
            # A policy must never put a NaN on an actuator, whatever its weights did.
            return self._safe(f"policy produced an invalid action {action!r}")
        action = np.clip(action, active.low, active.high)
        return StepResult(action, "policy", latency_s=latency, policy_action=action)

    def _robot_action(self, y: np.ndarray, active: _Active, now: float, latency: float) -> StepResult:
        """Robot file: post-process, blend (timed soft start), rate-limit (see the module docstring)."""
        # A dot product first (NaN/Inf make it non-finite); the exact check only then (huge values overflow it).
        if y.shape != (self.action_dim,) or (not math.isfinite(y.dot(y)) and not np.isfinite(y).all()):
            return self._safe(f"policy produced an invalid action {y!r}")
        y = np.minimum(np.maximum(y, active.low), active.high)  # np.clip(y, low, high) without its wrapper's cost
        target = self.actions.transform(y)
        if self._soft_t0 is None or self._last_source not in ("policy", "hold"):
            # A new blend after activation, a swap, a reset or any safe period: from the last
            # command (continuity), or at activation from the measured pose (position) / zero.
            if self._last_out is not None:
                self._soft_from = self._last_out
            elif self.actions.interface == "position":
                self._soft_from = self._measured.copy()
            else:
                self._soft_from = np.zeros(self.action_dim)
            self._soft_t0 = now
        soft_s = self.actions.safety.soft_start_s
        # Once the blend is complete the target is the policy's own (alpha 1): no three ufunc calls per tick.
        if soft_s > 0 and now - self._soft_t0 < soft_s:
            alpha = (now - self._soft_t0) / soft_s
            # soft_from + alpha * (target - soft_from), in place (target is this tick's own array)
            np.subtract(target, self._soft_from, out=target)
            np.multiply(target, alpha, out=target)
            np.add(target, self._soft_from, out=target)
        previous, elapsed = self._last_out, now - self._last_out_time
        if previous is None and self.actions.interface == "position":
            # The first command after activation: limited from where the joints are, over one period.
            previous, elapsed = self._measured, self.config.control_period_s
        target = self.actions.limit_rate(target, previous, elapsed)
        return StepResult(target, "policy", latency_s=latency, policy_action=y)

    def stats(self, percentiles: bool = True) -> dict[str, float]:
        """Numbers for /diagnostics and /lowrl/policy/stats; ``percentiles=False``: the window's p50/p99 are
        left nan (a caller computing them from ``latency.snapshot()`` outside its lock)."""
        p50, p99 = self.latency.percentiles_us() if percentiles else (float("nan"), float("nan"))
        return {"window_p50_us": p50, "window_p99_us": p99, "deadline_misses": float(self.deadline_misses),
                "ticks": float(self.ticks), "control_period_us": self.config.control_period_s * 1e6,
                "deadline_us": self.config.deadline * 1e6, "tier": float(self.tier)}

    def timing_stats(self) -> dict[str, float]:
        """The loop's timing for the latency status (:class:`LoopTiming`), with ``overruns`` (= deadline misses)."""
        return {**self.timing.summary(self.config.control_period_s), "overruns": float(self.deadline_misses)}
