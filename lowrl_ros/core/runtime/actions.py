"""What happens to a policy's output before it reaches the robot, from the robot file (ROS-free).

The robot file (docs/robot_file.md: "Action", "Output", "Safety") has four sections read
here: ``interface`` (what the controller's command means: position | velocity | effort), ``action``
(post-processing), ``output`` (message type, topic, the controller's joint order) and ``safety``
(e-stop topics, soft start, the safe action). ``ActionConfig``, ``OutputConfig`` and
``SafetyConfig`` parse one section each (``from_dict``; a bad entry is a one-line ``ValueError``
naming the key and the fix). ``ActionProcessor`` joins them with the policy's joints, default pose
and artifact contract at configure time and then does, per tick, in this order:

1. ``transform``: target = clip(offset + scale * y, lower, upper), y the policy's output (already
   clipped to the contract's action limits), offset the default pose or a list, lower/upper the
   joint limits;
2. ``limit_rate``: each joint moves at most ``rate_limit`` units per second times the period that
   actually elapsed since the previous command;
3. ``to_controller``: the policy's joint order -> the controller's, by NAME (never by index).

Soft start, the safe action and the e-stop latch are the controller's (``core/runtime/control.py``);
the processor only supplies the numbers. ``measured_positions`` picks the robot's measured joint
positions out of a JointState's names/positions, which ``hold`` holds and soft start starts from.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lowrl_ros.core.runtime.joints import JointIndex

INTERFACES = ("position", "velocity", "effort")
OUTPUT_TYPES = ("float64_multi_array", "joint_trajectory")
# The safe actions each interface allows, the first being the shipped default. On a position
# interface "zero" commands every joint to 0 rad (a leg folding or stretching at full gain), so only
# holding the measured pose or going to the default pose are allowed; on velocity/effort, 0 is "stop".
SAFE_ACTIONS = {"position": ("hold", "default_pose"), "velocity": ("zero",), "effort": ("zero",)}
ACTION_KEYS = ("scale", "offset", "limits", "rate_limit")
OUTPUT_KEYS = ("type", "topic", "joints")
SAFETY_KEYS = ("estop_topic", "reset_topic", "soft_start_s", "safe_action")
DEFAULT_TOPICS = {"float64_multi_array": "forward_command_controller/commands",
                  "joint_trajectory": "joint_trajectory_controller/joint_trajectory"}


def _section(name: str, data: Any, known: Sequence[str]) -> Mapping[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ValueError(f"robot file: '{name}' must be a mapping with keys {', '.join(known)}, "
                         f"got {type(data).__name__}")
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"robot file: unknown key {name}.{unknown[0]}; known keys of '{name}': {', '.join(known)}")
    return data


def _numbers(key: str, value: Any, *, scalar_ok: bool) -> float | tuple[float, ...]:
    """A number or a list of numbers, finite, with a message naming ``key``."""
    if isinstance(value, bool):
        raise ValueError(f"robot file: {key} must be a number or a list of numbers, got {value!r}")
    if scalar_ok and isinstance(value, (int, float)):
        out: float | tuple[float, ...] = float(value)
        values: Sequence[float] = (out,)
    else:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            what = "a number or a list of numbers" if scalar_ok else "a list of numbers"
            raise ValueError(f"robot file: {key} must be {what} (one per joint), got {value!r}")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            raise ValueError(f"robot file: {key} must hold numbers only, got {value!r}")
        values = tuple(float(v) for v in value)
        out = values
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"robot file: {key} must be finite, got {value!r}")
    return out


def _per_joint(key: str, value: float | tuple[float, ...], n: int) -> np.ndarray:
    if isinstance(value, float):
        return np.full(n, value)
    if len(value) != n:
        raise ValueError(f"robot file: {key} has {len(value)} values but there are {n} joints; "
                         "give one per joint (in the policy's joint order) or one number for all")
    return np.asarray(value, dtype=np.float64)


@dataclass(frozen=True)
class ActionConfig:
    """The robot file's ``action`` section: post-processing of the policy's output, per joint.

    Attributes:
        scale: a number or one per joint; None: not set (1).
        offset: "default_pose", a number or one per joint; None: not set (0).
        lower, upper: joint limits (one per joint, policy order) the target is clamped to; None: none.
        rate_limit: max change per second per joint (a number or one per joint); 0: none.
    """

    scale: float | tuple[float, ...] | None = None
    offset: str | float | tuple[float, ...] | None = None
    lower: tuple[float, ...] | None = None
    upper: tuple[float, ...] | None = None
    rate_limit: float | tuple[float, ...] = 0.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "ActionConfig":
        """Parse the ``action`` section (None or {}: the policy's output goes out unchanged)."""
        d = _section("action", data, ACTION_KEYS)
        scale = None if d.get("scale") is None else _numbers("action.scale", d["scale"], scalar_ok=True)
        if scale is not None and 0.0 in ((scale,) if isinstance(scale, float) else scale):
            raise ValueError("robot file: action.scale contains 0, which pins that joint to its offset; "
                             "use a non-zero scale")
        offset = d.get("offset")
        if isinstance(offset, str):
            if offset != "default_pose":
                raise ValueError(f"robot file: action.offset {offset!r} is unknown; use default_pose, "
                                 "a list (one per joint) or a number")
        elif offset is not None:
            offset = _numbers("action.offset", offset, scalar_ok=True)
        lower = upper = None
        if d.get("limits") is not None:
            limits = _section("action.limits", d["limits"], ("lower", "upper"))
            if "lower" not in limits or "upper" not in limits:
                raise ValueError("robot file: action.limits needs both lower and upper (one value per joint)")
            lower = _numbers("action.limits.lower", limits["lower"], scalar_ok=False)
            upper = _numbers("action.limits.upper", limits["upper"], scalar_ok=False)
            if len(lower) != len(upper):
                raise ValueError(f"robot file: action.limits.lower has {len(lower)} values, upper {len(upper)}; "
                                 "give one pair per joint")
            bad = [i for i, (lo, hi) in enumerate(zip(lower, upper)) if not lo < hi]
            if bad:
                raise ValueError(f"robot file: action.limits: joint {bad[0]} has lower {lower[bad[0]]} >= "
                                 f"upper {upper[bad[0]]}; lower must be below upper")
        rate = d.get("rate_limit", 0.0)
        rate = 0.0 if rate is None else _numbers("action.rate_limit", rate, scalar_ok=True)
        if min((rate,) if isinstance(rate, float) else rate) < 0:
            raise ValueError(f"robot file: action.rate_limit must be >= 0 per second (0: none), got {rate!r}")
        return cls(scale=scale, offset=offset, lower=lower, upper=upper, rate_limit=rate)


@dataclass(frozen=True)
class OutputConfig:
    """The robot file's ``interface`` and ``output`` sections: what the command means and where it goes.

    Attributes:
        interface: position | velocity | effort (the controller's command interface).
        type: float64_multi_array (forward_command_controller and its position/velocity/effort
            variants) | joint_trajectory (joint_trajectory_controller; position interface only).
        topic: the command topic, relative (a node namespace puts it under the robot).
        joints: the controller's joint order, by name; None: the policy's order.
    """

    interface: str = "position"
    type: str = "float64_multi_array"
    topic: str = DEFAULT_TOPICS["float64_multi_array"]
    joints: tuple[str, ...] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, interface: Any = "position") -> "OutputConfig":
        """Parse the ``output`` section and the top-level ``interface`` value."""
        if interface not in INTERFACES:
            raise ValueError(f"robot file: interface {interface!r} is unknown; use one of {', '.join(INTERFACES)}")
        d = _section("output", data, OUTPUT_KEYS)
        kind = d.get("type", "float64_multi_array")
        if kind not in OUTPUT_TYPES:
            raise ValueError(f"robot file: output.type {kind!r} is unknown; use one of {', '.join(OUTPUT_TYPES)}")
        if kind == "joint_trajectory" and interface != "position":
            raise ValueError(f"robot file: output.type joint_trajectory carries joint positions, but interface is "
                             f"{interface}; use float64_multi_array for a {interface} forward_command_controller")
        topic = d.get("topic", DEFAULT_TOPICS[kind])
        if not isinstance(topic, str) or not topic.strip("/"):
            raise ValueError(f"robot file: output.topic must be a topic name such as {DEFAULT_TOPICS[kind]}, "
                             f"got {topic!r}")
        joints = d.get("joints")
        if joints is not None:
            if isinstance(joints, str) or not isinstance(joints, Sequence) or not joints or \
                    not all(isinstance(j, str) and j for j in joints):
                raise ValueError(f"robot file: output.joints must be a list of joint names (the controller's "
                                 f"order), got {joints!r}")
            dup = sorted({j for j in joints if list(joints).count(j) > 1})
            if dup:
                raise ValueError(f"robot file: output.joints names {dup[0]!r} twice; each joint once")
            joints = tuple(joints)
        return cls(interface=interface, type=kind, topic=topic, joints=joints)


@dataclass(frozen=True)
class SafetyConfig:
    """The robot file's ``safety`` section.

    Attributes:
        estop_topic: std_msgs/Bool; true latches the safe action until a reset ("" : no e-stop input).
        reset_topic: std_msgs/Empty; releases the latch once the e-stop reads false.
        soft_start_s: blend from the measured pose (position) or zero (velocity/effort) to the
            policy's output over this many seconds after activation, a swap, a reset or any
            safe-action period (0: none).
        safe_action: what goes out when the policy may not act; allowed and default per interface
            in ``SAFE_ACTIONS`` (position: hold, the last MEASURED joint positions, or default_pose).
    """

    interface: str = "position"
    estop_topic: str = "estop"
    reset_topic: str = "estop_reset"
    soft_start_s: float = 1.0
    safe_action: str = "hold"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, interface: Any = "position") -> "SafetyConfig":
        """Parse the ``safety`` section for the given interface (its safe default when unset)."""
        if interface not in INTERFACES:
            raise ValueError(f"robot file: interface {interface!r} is unknown; use one of {', '.join(INTERFACES)}")
        d = _section("safety", data, SAFETY_KEYS)
        topics = {}
        for key in ("estop_topic", "reset_topic"):
            value = d.get(key, getattr(cls, key))
            if not isinstance(value, str):
                raise ValueError(f"robot file: safety.{key} must be a topic name (\"\" for none), got {value!r}")
            topics[key] = value
        if topics["estop_topic"] and not topics["reset_topic"]:
            raise ValueError("robot file: safety.reset_topic is empty but an estop_topic is set; a latched "
                             "e-stop needs a reset topic (e.g. estop_reset)")
        soft = d.get("soft_start_s", cls.soft_start_s)
        if isinstance(soft, bool) or not isinstance(soft, (int, float)) or not 0 <= soft <= 60:
            raise ValueError(f"robot file: safety.soft_start_s must be 0..60 seconds (0: none), got {soft!r}")
        allowed = SAFE_ACTIONS[interface]
        safe = d.get("safe_action", allowed[0])
        if safe not in allowed:
            if safe == "zero" and interface == "position":
                why = "on a position interface zero commands every joint to 0 rad"
            elif safe in ("hold", "default_pose"):
                why = f"{safe} sends joint positions, which a {interface} controller would read as {interface}s"
            else:
                why = "unknown safe action"
            raise ValueError(f"robot file: safety.safe_action {safe!r} is refused for interface {interface} ({why}); "
                             f"use {' or '.join(allowed)}")
        return cls(interface=interface, soft_start_s=float(soft), safe_action=safe, **topics)


def measured_positions(names: Sequence[str], positions: Sequence[float],
                       wanted: Sequence[str] | JointIndex) -> np.ndarray | None:
    """The positions of ``wanted`` joints (in that order) from a JointState's ``names``/``positions``.

    None when a wanted joint is missing, the message has fewer positions than names, or a wanted
    position is not finite: an unknown pose is never guessed (nothing is held that was not measured).
    ``wanted`` may be a :class:`JointIndex` (its lookup cached per name list: the per-tick call).
    """
    index = wanted if isinstance(wanted, JointIndex) else JointIndex(wanted)
    out = index.take(names, positions)
    return out if out is not None and np.isfinite(out).all() else None


def _identity(scale: np.ndarray, offset: np.ndarray) -> bool:
    return bool(np.all(scale == 1.0) and np.all(offset == 0.0))


class ActionProcessor:
    """The robot file's action and output sections joined with the policy (see the module docstring).

    Args:
        action, output, safety: the parsed sections.
        joints: the policy's joint order (the robot file's ``joints``).
        default_pose: one value per joint (policy order), or None when the file has none.
        contract: the artifact's PolicyContract (action size, names, action_scale/action_offset).

    Raises:
        ValueError: anything that does not fit, naming the key or joint and the fix.
    """

    def __init__(self, action: ActionConfig, output: OutputConfig, safety: SafetyConfig, joints: Sequence[str],
                 default_pose: Sequence[float] | None, contract: Any) -> None:
        self.action, self.output, self.safety = action, output, safety
        self.joints = tuple(joints)
        self.joint_index = JointIndex(self.joints)  # the measured pose's lookup (measured_positions)
        n = len(self.joints)
        if len(set(self.joints)) != n:
            raise ValueError(f"robot file: joints names a joint twice ({list(self.joints)}); each joint once")
        self.default_pose = None if default_pose is None else _per_joint("default_pose", tuple(default_pose), n)
        if action.offset == "default_pose":
            if self.default_pose is None:
                raise ValueError("robot file: action.offset is default_pose but the file has no default_pose; "
                                 "add default_pose (one value per joint) or give the offset as a list")
            offset = self.default_pose.copy()
        else:
            offset = _per_joint("action.offset", 0.0 if action.offset is None else action.offset, n)
        self.scale = _per_joint("action.scale", 1.0 if action.scale is None else action.scale, n)
        self.offset = offset
        self.check_contract(contract)
        self.lower = np.full(n, -np.inf) if action.lower is None else _per_joint("action.limits.lower",
                                                                                 action.lower, n)
        self.upper = np.full(n, np.inf) if action.upper is None else _per_joint("action.limits.upper",
                                                                               action.upper, n)
        rate = _per_joint("action.rate_limit", action.rate_limit, n)
        self.rate = np.where(rate > 0, rate, np.inf)  # per second; inf: no limit
        self._unlimited = rate <= 0
        self._max_rate = np.where(self._unlimited, 0.0, rate)
        self._no_limit = bool(self._unlimited.all())  # limit_rate: nothing to do
        self._some_unlimited = bool(self._unlimited.any())
        if safety.safe_action == "default_pose" and self.default_pose is None:
            raise ValueError("robot file: safety.safe_action is default_pose but the file has no default_pose; "
                             "add default_pose or use hold")
        controller = self.joints if output.joints is None else output.joints
        missing = [j for j in controller if j not in self.joints]
        if missing:
            raise ValueError(f"robot file: output.joints names {missing[0]!r}, which is not in joints (the policy's "
                             f"joints: {', '.join(self.joints)}); fix the name or remove it")
        unused = [j for j in self.joints if j not in controller]
        if unused:
            raise ValueError(f"robot file: joint {unused[0]!r} of the policy is missing in output.joints (the "
                             "controller's order); every policy joint must be commanded")
        self.controller_joints = tuple(controller)
        self.order = np.array([self.joints.index(j) for j in controller], dtype=np.intp)

    def describe(self) -> str:
        """One line for the log: the interface, where the commands go, the safe action and the soft start."""
        return (f"{self.interface} interface, {self.output.type} on {self.output.topic}, safe action "
                f"{self.safety.safe_action}, soft start {self.safety.soft_start_s:g} s (the safe_action, default_pose "
                "and soft_start_steps parameters are not used)")

    def check_contract(self, contract: Any) -> None:
        """Raise ValueError if the policy's contract does not fit the robot file: another action count,
        the same joint names in another order, or an action scale/offset both sides would apply."""
        n = len(self.joints)
        if n != int(contract.action_dim):
            raise ValueError(f"robot file: joints lists {n} joints but the policy has {contract.action_dim} actions "
                             f"({', '.join(contract.action_names)}); list one joint per action, in the policy's order")
        names = tuple(contract.action_names)
        if set(names) == set(self.joints) and names != self.joints:
            raise ValueError(f"robot file: joints are in the order {list(self.joints)} but the policy's actions are "
                             f"{list(names)}; list joints in the policy's order")
        c_scale = np.ones(n) if contract.action_scale is None else np.asarray(contract.action_scale, float)
        c_offset = np.zeros(n) if contract.action_offset is None else np.asarray(contract.action_offset, float)
        if not _identity(self.scale, self.offset) and not _identity(c_scale, c_offset):
            raise ValueError("the action scale/offset would be applied twice: the policy artifact already carries "
                             f"action_scale {c_scale.tolist()} / action_offset {c_offset.tolist()} and the robot "
                             "file sets action.scale/offset too; remove scale and offset from the robot file's "
                             "action section (the artifact's already map the output to joint targets)")

    @property
    def interface(self) -> str:
        return self.output.interface

    def transform(self, y: np.ndarray) -> np.ndarray:
        """target = clip(offset + scale * y, lower, upper) (policy order)."""
        # np.clip's semantics (max with lower, then min with upper) in place: its Python wrapper costs more
        # than the arithmetic for 12 joints, and this runs every tick.
        out = np.multiply(self.scale, np.asarray(y, dtype=np.float64))
        np.add(self.offset, out, out=out)
        np.maximum(out, self.lower, out=out)
        return np.minimum(out, self.upper, out=out)

    def clamp(self, target: np.ndarray) -> np.ndarray:
        """``target`` within the joint limits."""
        return np.clip(target, self.lower, self.upper)

    def limit_rate(self, target: np.ndarray, previous: np.ndarray | None, elapsed_s: float) -> np.ndarray:
        """``target`` moved at most ``rate_limit * elapsed_s`` per joint away from ``previous`` (None: no limit)."""
        if previous is None or self._no_limit:
            return target
        step = self._max_rate * max(float(elapsed_s), 0.0)
        if self._some_unlimited:
            step[self._unlimited] = np.inf  # no limit on these joints (inf * 0 would be nan)
        delta = np.subtract(target, previous)
        np.maximum(delta, np.negative(step), out=delta)  # np.clip(delta, -step, step), without its wrapper
        np.minimum(delta, step, out=delta)
        return np.add(previous, delta, out=delta)

    def to_controller(self, action: np.ndarray) -> np.ndarray:
        """Policy order -> the controller's order (by name, fixed at configure time)."""
        return np.asarray(action, dtype=np.float64)[self.order]

    @classmethod
    def from_robot_dict(cls, data: Mapping[str, Any], contract: Any) -> "ActionProcessor":
        """Build from a whole robot file as loaded YAML (``joints``, ``default_pose``, ``interface``,
        ``action``, ``output``, ``safety``; the other sections are the observation loader's)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"robot file: must be a YAML mapping, got {type(data).__name__}")
        joints = data.get("joints")
        if isinstance(joints, str) or not isinstance(joints, Sequence) or not joints or \
                not all(isinstance(j, str) and j for j in joints):
            raise ValueError(f"robot file: joints must be a list of joint names in the policy's order, got {joints!r}")
        pose = data.get("default_pose")
        if pose is not None:
            pose = _numbers("default_pose", pose, scalar_ok=False)
        interface = data.get("interface", "position")
        return cls(ActionConfig.from_dict(data.get("action")), OutputConfig.from_dict(data.get("output"), interface),
                   SafetyConfig.from_dict(data.get("safety"), interface), joints, pose, contract)
