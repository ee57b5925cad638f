"""Observation terms of a robot file: each from its own topic, in the policy's order (ROS-free).

A legged policy (Isaac Lab, rsl_rl, rl_sar) reads a concatenation of terms: base angular velocity,
projected gravity, a velocity command, joint positions relative to a default pose, joint
velocities, the last action, maybe a height scan; each scaled, maybe clipped, maybe stacked over a
few steps. Each term comes from its own sensor at its own rate. :class:`ObservationSpec` is that
list, parsed from the robot file's ``observation`` section; :class:`ObservationBuilder` keeps the
newest sample of each topic (fed by ros/robot_inputs.py as plain numpy samples) and, at each
control tick, builds the vector.

Per term: ``value = clip((raw - offset) * scale, clip[0], clip[1])`` (the artifact contract's
convention, ``offset`` 0 and ``scale`` 1 by default), then the history (if any) stacks the last
``length`` values, ``oldest_first`` or ``newest_first`` as stated.

Staleness: every term has ``timeout_s`` (default: 5 control periods of the policy's contract). A
term whose newest sample is older than that, or that has none yet, makes :meth:`build` raise
:class:`~lowrl_ros.core.runtime.obs_adapter.ObservationError` naming the term and its topic; the
controller then sends the safe action and the node diagnoses an ERROR. An old value is never
silently reused, and the histories restart from fresh data after a stale spell.

Samples per source (what ros/robot_inputs.py hands over):

- ``joint_state``: ``(names, position, velocity, effort)`` as in sensor_msgs/JointState.
- ``imu``: ``(orientation, angular_velocity, linear_acceleration)``, orientation as the message's
  (x, y, z, w) fields.
- ``twist``: 6 values, linear x, y, z then angular x, y, z (geometry_msgs/Twist).
- ``array``: the values of a std_msgs/Float32MultiArray.
"""
from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from lowrl_ros.core.runtime.artifact import LAST_ACTION_CONVENTIONS
from lowrl_ros.core.runtime.joints import JointIndex
from lowrl_ros.core.runtime.obs_adapter import ObservationError
from lowrl_ros.core.runtime.robot_file import RobotFile, RobotFileError
from lowrl_ros.core.types import ContractLike

SOURCES = ("joint_state", "imu", "twist", "array", "action")
QOS_CHOICES = ("best_effort", "reliable", "sensor_data")
HISTORY_ORDERS = ("oldest_first", "newest_first")
QUATERNION_ORDERS = ("xyzw", "wxyz")
DEFAULT_TIMEOUT_PERIODS = 5  # a term is stale after this many control periods without a sample (timeout_s: unset)

# term -> (source, keys it takes besides the common ones)
TERMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "joint_position": ("joint_state", ("joints", "relative", "function")),
    "joint_velocity": ("joint_state", ("joints",)),
    "joint_effort": ("joint_state", ("joints",)),
    "imu_angular_velocity": ("imu", ()),
    "imu_linear_acceleration": ("imu", ()),
    "projected_gravity": ("imu", ("quaternion_order", "type")),
    "velocity_command": ("twist", ("ranges",)),
    "last_action": ("action", ("size", "convention")),
    "array": ("array", ("size",)),
}
COMMON_KEYS = ("term", "name", "topic", "scale", "offset", "clip", "timeout_s", "history", "qos")
_GENERIC_NAME = re.compile(r"^obs_?\d+$")
_XYZ = ("x", "y", "z")


def projected_gravity(quaternion: Sequence[float], order: str) -> np.ndarray:
    """Gravity's direction (0, 0, -1 in the world) seen in the body frame, from the body's orientation.

    ``quaternion`` rotates body to world, laid out as ``order`` says ("xyzw": ROS messages, Isaac
    Lab >= 3.0; "wxyz": Isaac Lab before 3.0, MuJoCo). Upright gives (0, 0, -1), as Isaac Lab's
    ``projected_gravity`` term. Raises ObservationError for a zero or non-finite quaternion (a
    driver without an orientation estimate often sends all zeros).
    """
    return -np.array(_gravity_terms(quaternion, order))


def _gravity_terms(quaternion: Sequence[float], order: str) -> tuple[float, float, float]:
    """The third row of the body-to-world rotation (projected gravity negated), as Python floats."""
    q = np.asarray(quaternion, dtype=np.float64)
    if order == "xyzw":
        x, y, z, w = q.tolist()  # Python floats: the scalar arithmetic below is several times cheaper on them
    elif order == "wxyz":
        w, x, y, z = q.tolist()
    else:
        raise ValueError(f"quaternion order {order!r} is unknown; use one of {', '.join(QUATERNION_ORDERS)}")
    n = math.sqrt(w * w + x * x + y * y + z * z)
    if not math.isfinite(n) or n < 1e-6:
        raise ObservationError(f"orientation quaternion {q.tolist()} is zero or not finite (no orientation "
                               "estimate?); the IMU driver must fill the orientation")
    w, x, y, z = w / n, x / n, y / n, z / n
    # R^T @ (0, 0, -1): minus the third row of the body-to-world rotation matrix.
    return 2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)


@dataclass(frozen=True)
class TermSpec:
    """One observation term, parsed and checked (see the module docstring)."""

    index: int
    term: str
    name: str
    topic: str
    source: str
    size: int  # entries of one step
    labels: tuple[str, ...]  # one per entry of one step (joint names, x/y/z, indices)
    scale: np.ndarray
    offset: np.ndarray
    clip: tuple[float, float] | None
    timeout_s: float
    history: int = 1
    history_order: str = "oldest_first"
    qos: str = "best_effort"
    joints: tuple[str, ...] = ()
    relative: bool = False
    function: str = ""  # joint_position: "" | cos | sin
    quaternion_order: str = ""
    msg_type: str = ""  # the topic's message: joint_state | imu | twist | array
    ranges: np.ndarray | None = None  # velocity_command: (3, 2) [lo, hi]
    convention: str = ""  # last_action: raw | action; "": the policy's (artifact.last_action_convention)

    @property
    def dim(self) -> int:
        """Entries this term contributes to the observation (size x history)."""
        return self.size * self.history

    def describe(self) -> str:
        """``term 3 'imu_angular_velocity' (topic imu)`` for messages."""
        named = f" {self.name!r}" if self.name != self.term else ""
        on = f" (topic {self.topic})" if self.topic else ""
        return f"observation term {self.index} {self.term!r}{named}{on}"


def _vector(value: Any, size: int, what: str, default: float) -> np.ndarray:
    if value is None:
        return np.full(size, default)
    arr = np.asarray(value, dtype=np.float64).ravel() if not isinstance(value, (int, float)) else np.full(size, value)
    if arr.size == 1:
        arr = np.full(size, float(arr[0]))
    if arr.size != size:
        raise ValueError(f"{what} has {arr.size} values; give one number or {size} (one per entry)")
    if not np.isfinite(arr).all():
        raise ValueError(f"{what} must be finite numbers, got {value!r}")
    return arr


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def parse_term(index: int, raw: dict[str, Any], joints: tuple[str, ...], default_pose: tuple[float, ...],
               control_period_s: float) -> TermSpec:
    """One robot-file observation entry -> TermSpec; ValueError says which key is wrong and how to fix it."""
    term = raw.get("term")
    where = f"observation[{index}] ({term})"
    if term not in TERMS:
        raise ValueError(f"observation[{index}]: term {term!r} is unknown; use one of {', '.join(TERMS)}")
    source, own = TERMS[term]
    unknown = [k for k in raw if k not in COMMON_KEYS and k not in own]
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; this term takes "
                         f"{', '.join(COMMON_KEYS[1:] + own)}")
    topic = raw.get("topic", "")
    if source == "action":
        if topic:
            raise ValueError(f"{where}: last_action comes from the policy node itself; remove 'topic'")
    elif not isinstance(topic, str) or not topic.strip("/"):
        raise ValueError(f"{where}: 'topic' is required (relative, e.g. 'imu', so a namespace applies)")
    kw: dict[str, Any] = {}
    msg_type = source
    if source == "joint_state":
        sel = raw.get("joints", list(joints))
        if not isinstance(sel, list) or not sel or not all(isinstance(j, str) for j in sel):
            raise ValueError(f"{where}: no joints; list them in the top-level 'joints' (the policy's order) "
                             "or in this term's 'joints'")
        kw["joints"] = tuple(sel)
        labels = tuple(sel)
        if term == "joint_position":
            relative = raw.get("relative", False)
            if not isinstance(relative, bool):
                raise ValueError(f"{where}: relative must be true or false, got {relative!r}")
            if relative:
                if not default_pose:
                    raise ValueError(f"{where}: relative: true needs the top-level default_pose (one value per "
                                     "joint); give it or use relative: false")
                missing = [j for j in sel if j not in joints]
                if missing:
                    raise ValueError(f"{where}: relative: true needs joint(s) {', '.join(missing)} in the "
                                     "top-level joints (their default_pose)")
            function = raw.get("function", "")
            if function not in ("", "cos", "sin"):
                raise ValueError(f"{where}: function {function!r} is unknown; use cos or sin (or leave it out)")
            kw.update(relative=relative, function=function)
    elif source == "imu":
        labels = _XYZ
        if term == "projected_gravity":
            order = raw.get("quaternion_order")
            if order not in QUATERNION_ORDERS:
                raise ValueError(f"{where}: quaternion_order is required, xyzw or wxyz (never guessed: Isaac Lab "
                                 f"changed it in 3.0); got {order!r}")
            msg_type = raw.get("type", "imu")
            if msg_type not in ("imu", "array"):
                raise ValueError(f"{where}: type {msg_type!r} is unknown; imu (sensor_msgs/Imu) or array "
                                 "(Float32MultiArray of 4 quaternion values)")
            if msg_type == "imu" and order != "xyzw":
                raise ValueError(f"{where}: a sensor_msgs/Imu orientation is (x, y, z, w) by field name, so "
                                 "quaternion_order must be xyzw; wxyz applies to type: array")
            kw["quaternion_order"] = order
    elif source == "twist":
        labels = ("lin_x", "lin_y", "ang_z")
        ranges = raw.get("ranges")
        if ranges is not None:
            r = np.asarray(ranges, dtype=np.float64)
            if r.shape != (3, 2) or not np.isfinite(r).all() or (r[:, 0] > r[:, 1]).any():
                raise ValueError(f"{where}: ranges must be [[lo, hi], [lo, hi], [lo, hi]] for linear x, linear y, "
                                 f"angular z with lo <= hi; got {ranges!r}")
            kw["ranges"] = r
    else:  # array, action
        size = raw.get("size", len(joints) if source == "action" else None)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"{where}: size must be a positive integer (the number of values)"
                             + (" or the top-level joints given" if source == "action" else "") + f"; got {size!r}")
        labels = tuple(str(i) for i in range(size))
        if source == "action" and "convention" in raw:
            if raw["convention"] not in LAST_ACTION_CONVENTIONS:
                raise ValueError(f"{where}: convention {raw['convention']!r} is unknown; use raw (the network's output "
                                 "before the action transform: Isaac Lab, rsl_rl, rl_sar) or action (the executed "
                                 "action), or leave it out to follow the policy's recorded convention")
            kw["convention"] = raw["convention"]
    size = len(labels)
    name = raw.get("name", term)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: name must be a non-empty string (the policy's name of this term)")
    scale = _vector(raw.get("scale"), size, f"{where}: scale", 1.0)
    offset = _vector(raw.get("offset"), size, f"{where}: offset", 0.0)
    if (scale == 0).any():
        raise ValueError(f"{where}: scale has a 0, which erases that entry; use a non-zero scale")
    clip = raw.get("clip")
    if clip is not None:
        if not isinstance(clip, list) or len(clip) != 2:
            raise ValueError(f"{where}: clip must be [lo, hi], got {clip!r}")
        clip = (_number(clip[0], f"{where}: clip lo"), _number(clip[1], f"{where}: clip hi"))
        if clip[0] > clip[1]:
            raise ValueError(f"{where}: clip [{clip[0]}, {clip[1]}] has lo > hi")
    timeout = raw.get("timeout_s", DEFAULT_TIMEOUT_PERIODS * control_period_s)
    timeout = _number(timeout, f"{where}: timeout_s")
    if timeout <= 0:
        raise ValueError(f"{where}: timeout_s must be > 0 s (default {DEFAULT_TIMEOUT_PERIODS} control periods)")
    history, order = 1, "oldest_first"
    if "history" in raw:
        h = raw["history"]
        if not isinstance(h, dict) or set(h) - {"length", "order"} or "order" not in h:
            raise ValueError(f"{where}: history must be {{length: N, order: oldest_first|newest_first}} "
                             f"(order stated, never assumed); got {h!r}")
        history, order = h.get("length"), h["order"]
        if isinstance(history, bool) or not isinstance(history, int) or not 1 <= history <= 1000:
            raise ValueError(f"{where}: history length must be an integer 1..1000, got {history!r}")
        if order not in HISTORY_ORDERS:
            raise ValueError(f"{where}: history order {order!r} is unknown; use {' or '.join(HISTORY_ORDERS)}")
    qos = raw.get("qos", "best_effort")
    if source != "action" and qos not in QOS_CHOICES:
        raise ValueError(f"{where}: qos {qos!r} is unknown; use one of {', '.join(QOS_CHOICES)} (best_effort, the "
                         "default, accepts reliable and best-effort publishers)")
    return TermSpec(index=index, term=term, name=name, topic=str(topic).strip("/") if topic else "", source=source,
                    size=size, labels=labels, scale=scale, offset=offset, clip=clip, timeout_s=timeout,
                    history=history, history_order=order, qos=qos, msg_type=msg_type if source != "action" else "",
                    **kw)


@dataclass(frozen=True)
class TopicSpec:
    """One subscription the terms need: a topic, its message kind and QoS (shared by the terms on it)."""

    topic: str
    msg_type: str  # joint_state | imu | twist | array
    qos: str
    timeout_s: float  # the shortest of its terms'


@dataclass(frozen=True)
class InputSeen:
    """One robot-file topic as the builder last saw it: what its input diagnostic is built from
    (``core/runtime/status.py``, one STALE entry per topic not heard within its ``timeout_s``)."""

    topic: str
    timeout_s: float
    last: float | None  # the newest sample's stamp (the builder's clock); None: none since the last reset
    start: float | None  # when the builder was last reset (the activation); None: never


class ObservationSpec:
    """The observation section of a robot file, parsed: the terms in the policy's order."""

    def __init__(self, terms: Sequence[TermSpec], joints: tuple[str, ...] = (),
                 default_pose: tuple[float, ...] = (), source: str = "") -> None:
        self.terms = tuple(terms)
        self.joints = joints
        self.default_pose = default_pose
        self.source = source
        topics: dict[str, TopicSpec] = {}
        for t in self.terms:
            if not t.topic:
                continue
            seen = topics.get(t.topic)
            if seen is None:
                topics[t.topic] = TopicSpec(t.topic, t.msg_type, t.qos, t.timeout_s)
                continue
            if seen.msg_type != t.msg_type:
                raise ValueError(f"{t.describe()} reads a {t.msg_type} message but an earlier term reads "
                                 f"{seen.msg_type} from the same topic; one message type per topic")
            if seen.qos != t.qos:
                raise ValueError(f"{t.describe()} asks qos {t.qos} but an earlier term on the same topic asks "
                                 f"{seen.qos}; one subscription per topic: give both the same qos")
            topics[t.topic] = TopicSpec(t.topic, t.msg_type, t.qos, min(seen.timeout_s, t.timeout_s))
        self.topics = tuple(topics.values())

    @classmethod
    def from_robot_file(cls, robot: RobotFile, control_period_s: float) -> ObservationSpec:
        """Parse ``robot.observation``; RobotFileError names the file and the entry."""
        try:
            terms = [parse_term(i, raw, robot.joints, robot.default_pose, control_period_s)
                     for i, raw in enumerate(robot.observation)]
            return cls(terms, robot.joints, robot.default_pose, robot.path)
        except ValueError as exc:
            raise RobotFileError(robot.where(str(exc))) from exc

    @property
    def obs_dim(self) -> int:
        return sum(t.dim for t in self.terms)

    def entry_names(self) -> list[str]:
        """A readable name per observation entry, e.g. ``joint_position[FL_hip]`` or ``imu_angular_velocity[x]@t-1``."""
        out = []
        for t in self.terms:
            steps = range(t.history - 1, -1, -1) if t.history_order == "oldest_first" else range(t.history)
            for k in (steps if t.history > 1 else [0]):
                suffix = f"@t-{k}" if t.history > 1 else ""
                out.extend(f"{t.name}[{label}]{suffix}" for label in t.labels)
        return out

    def check_against(self, contract: ContractLike, by_name: bool = True) -> None:
        """Raise ValueError naming the term that disagrees with the policy's contract.

        ``by_name=False`` compares the sizes only (the robot file built from the old ``obs_fields``
        parameters, which never compared names).

        The sizes must add up to the contract's observation size; where the contract names its
        observations (anything but the generic ``obs_<i>``), each entry's contract name must begin
        with its term's ``name`` (set ``name:`` on a term to the policy's own term name, e.g.
        Isaac Lab's ``base_ang_vel``) or, for a joint term, contain the entry's joint name.
        ``last_action`` must have the contract's action size.
        """
        where = self.source or "robot file"
        for t in self.terms:
            if t.source == "action" and t.size != contract.action_dim:
                raise ValueError(f"{where}: {t.describe()} has size {t.size} but the policy has "
                                 f"{contract.action_dim} actions; set size: {contract.action_dim}")
        if self.obs_dim != contract.obs_dim:
            sizes = ", ".join(f"{t.term}={t.dim}" for t in self.terms)
            raise ValueError(f"{where}: the observation terms add up to {self.obs_dim} entries ({sizes}) but the "
                             f"policy reads {contract.obs_dim}; add, remove or resize terms to match the policy")
        if not by_name:
            return
        names = list(contract.obs_names)
        if all(_GENERIC_NAME.match(n) for n in names):
            return  # the policy does not name its observations: nothing more to compare
        start = 0
        for t in self.terms:
            for k in range(start, start + t.dim):
                name = names[k].lower()
                # A joint entry may also be named by its joint (e.g. "hip.position", our own `<joint>.<field>`).
                joint = t.labels[(k - start) % t.size].lower() if t.source == "joint_state" else None
                if not (name.startswith(t.name.lower()) or (joint and joint in name)):
                    raise ValueError(
                        f"{where}: observation entry {k} is {names[k]!r} in the policy but comes from "
                        f"{t.describe()} (entries {start}..{start + t.dim - 1}); put the terms in the policy's "
                        f"order or set this term's name: to the policy's name for it")
            start += t.dim


class ObservationBuilder:
    """Newest sample per topic in, one observation vector per control tick out. One thread only.

    Per tick this runs at the policy rate on the robot's computer, so everything that does not
    depend on the sample is fixed at construction: each term writes straight into its slice of one
    preallocated vector (a history term into its own scratch row), the scale/offset/clip and the
    joint-index lookups are resolved once, and the finite check runs once over the whole vector.
    """

    def __init__(self, spec: ObservationSpec, last_action: str = "action") -> None:
        """``last_action``: the policy's convention (artifact.last_action_convention), which a term's own
        ``convention`` overrides: "raw" reads the network's output y, "action" the executed action."""
        if last_action not in LAST_ACTION_CONVENTIONS:
            raise ValueError(f"last_action {last_action!r}: use one of {', '.join(LAST_ACTION_CONVENTIONS)}")
        self.spec = spec
        self._samples: dict[str, tuple[Any, float]] = {}
        self._raw_terms = {t.index for t in spec.terms
                           if t.source == "action" and (t.convention or last_action) == "raw"}
        self.started: float | None = None  # the last reset (see reset)
        # Each joint term's joints in a JointState (JointIndex: cached per distinct name list).
        self._joint_index = {t.index: JointIndex(t.joints) for t in spec.terms if t.source == "joint_state"}
        pose = dict(zip(spec.joints, spec.default_pose))
        self._poses = {t.index: np.array([pose[j] for j in t.joints]) for t in spec.terms if t.relative}
        self._histories = {t.index: deque(maxlen=t.history) for t in spec.terms if t.history > 1}
        self._last_action: np.ndarray | None = None
        self._last_raw: np.ndarray | None = None
        # What last_action reads after a tick that put out no policy action (never written to: shared is safe).
        self._no_action = np.zeros(next((t.size for t in spec.terms if t.source == "action"), 0))
        self._out = np.empty(spec.obs_dim)
        self._joint_topic = next((t.topic for t in spec.terms if t.source == "joint_state"), None)
        # The robot's clock: its joint states (else the first topic), what event mode acts on and a fixed_rate
        # loop locks its phase to (core/runtime/realtime.py PhaseLock).
        self.clock_topic = self._joint_topic or (spec.topics[0].topic if spec.topics else None)
        # One plan per term: (term, reader, where it writes, its history or None, affine, clip).
        self._plan: list[tuple[TermSpec, Any, np.ndarray, deque | None, tuple | None, tuple | None]] = []
        readers = {"joint_state": self._joint_values, "imu": self._imu_values, "twist": self._twist_values,
                   "array": self._array_values, "action": self._action_values}
        # Terms without a history are scaled and clipped together, in place over the whole vector: the entries
        # of other terms get offset 0, scale 1, clip -inf..inf, which leave a value exactly as it is. A history
        # term is scaled and clipped on its own, before its value is stacked.
        offset, scale = np.zeros(spec.obs_dim), np.ones(spec.obs_dim)
        lo, hi = np.full(spec.obs_dim, -np.inf), np.full(spec.obs_dim, np.inf)
        k = 0
        for t in spec.terms:
            history = self._histories.get(t.index)
            affine = (t.offset, t.scale) if bool((t.offset != 0).any() or (t.scale != 1).any()) else None
            if history is None:
                dst = self._out[k:k + t.size]
                offset[k:k + t.size], scale[k:k + t.size] = t.offset, t.scale
                if t.clip is not None:
                    lo[k:k + t.size], hi[k:k + t.size] = t.clip
                self._plan.append((t, readers[t.source], dst, None, None, None))
            else:
                self._plan.append((t, readers[t.source], np.empty(t.size), history, affine, t.clip))
            k += t.dim
        self._affine_all = (offset, scale) if bool((offset != 0).any() or (scale != 1).any()) else None
        self._clip_all = (lo, hi) if bool(np.isfinite(lo).any() or np.isfinite(hi).any()) else None
        self._ranges = {t.index: tuple(map(tuple, t.ranges.tolist())) for t in spec.terms if t.ranges is not None}
        # The index array last used per term and its largest entry (a driver's steady messages reuse one array).
        self._joint_top: dict[int, tuple[np.ndarray, int]] = {}

    def reset(self, now: float | None = None) -> None:
        """Forget every sample, the histories and the last action (on activation, at ``now``: the inputs are
        watched from then on, so one never heard is stale a timeout after it)."""
        self.started = now
        self._samples.clear()
        self._last_action = self._last_raw = None
        for h in self._histories.values():
            h.clear()

    def update(self, topic: str, sample: Any, stamp: float) -> None:
        """Keep ``sample`` (see the module docstring for its shape) as ``topic``'s newest, received at ``stamp``."""
        self._samples[topic] = (sample, stamp)

    def set_last_action(self, action: np.ndarray, raw: np.ndarray | None = None) -> None:
        """The action the policy put out this tick and the network output y behind it (None: ``action``)."""
        self._last_action = np.array(action, dtype=np.float64)  # a copy: a history may keep it
        self._last_raw = self._last_action if raw is None else np.array(raw, dtype=np.float64)

    def after_step(self, result: Any) -> None:
        """The last_action rule: which action the next observation's ``last_action`` term reads after a tick.

        ``result`` is the tick's ``PolicyController.step`` result (None: the step failed). The policy ran:
        its executed output (``policy_action``, contract units, the teleop's in an intervention) for a term
        of convention "action", the network's output y behind it (``raw_action``) for "raw"; a held tick
        (decimation): unchanged; anything else (safe action, nothing sent, a failed step): zeros, as Isaac
        Lab's ActionManager starts an episode.
        """
        source = None if result is None else result.source
        if source == "policy":
            self.set_last_action(result.policy_action, getattr(result, "raw_action", None))
        elif source != "hold":
            self._last_action = self._last_raw = self._no_action

    def forget(self, msg_type: str) -> None:
        """Drop the samples of every topic of ``msg_type`` (joint_state | imu | twist | array) received so far."""
        for t in self.spec.topics:
            if t.msg_type == msg_type:
                self._samples.pop(t.topic, None)

    def joint_state(self) -> tuple[Sequence[str], Any] | None:
        """(names, positions) of the newest JointState sample, whatever its age (the measured pose that
        ``hold`` and soft start use); None before the first one or without a joint term."""
        got = self._samples.get(self._joint_topic) if self._joint_topic else None
        return None if got is None else (got[0][0], got[0][1])

    def inputs(self) -> tuple[InputSeen, ...]:
        """Each subscribed topic's newest stamp and timeout (the input diagnostics)."""
        return tuple(InputSeen(t.topic, t.timeout_s, self._samples.get(t.topic, (None, None))[1], self.started)
                     for t in self.spec.topics)

    def age(self, topic: str, now: float) -> float | None:
        """Seconds since ``topic``'s newest sample; None before the first one."""
        got = self._samples.get(topic)
        return None if got is None else now - got[1]

    def clock_age(self, now: float) -> float | None:
        """Seconds since the newest sample of :attr:`clock_topic`; None before the first one or without topics."""
        return None if self.clock_topic is None else self.age(self.clock_topic, now)

    def build(self, now: float) -> np.ndarray:
        """The observation at time ``now`` (same clock as the stamps).

        Raises:
            ObservationError: naming the term, when a term's sample is missing or older than its
                timeout, a needed joint is missing, or a value is not finite. The histories restart.
        """
        out, k = self._out, 0
        samples = self._samples
        try:
            for t, read, dst, history, affine, clip in self._plan:
                if t.topic:
                    got = samples.get(t.topic)
                    if got is None:
                        raise ObservationError(f"{t.describe()}: no message received yet; check that it is "
                                               "published (ros2 topic hz) and the topic name under the node's "
                                               "namespace")
                    age = now - got[1]
                    if age > t.timeout_s:
                        raise ObservationError(f"{t.describe()}: stale, newest message is {age * 1e3:.0f} ms old "
                                               f"(timeout_s {t.timeout_s:g}); the sensor stopped or is too slow")
                    read(t, got[0], dst)
                else:
                    read(t, None, dst)
                if history is None:
                    k += t.size
                    continue
                # A history term: its own scale/offset (identity skipped) and clip, then stacked.
                if affine is not None:
                    np.subtract(dst, affine[0], out=dst)
                    np.multiply(dst, affine[1], out=dst)
                if clip is not None:  # np.clip's semantics (max with lo, then min with hi), without its overhead
                    np.maximum(dst, clip[0], out=dst)
                    np.minimum(dst, clip[1], out=dst)
                value = dst.copy()  # the deque keeps it; dst is reused next tick
                if not history:  # a fresh start: fill with the first value (as Isaac Lab's CircularBuffer)
                    history.extend([value] * t.history)
                else:
                    history.append(value)
                steps = history if t.history_order == "oldest_first" else reversed(history)
                for v in steps:
                    out[k:k + t.size] = v
                    k += t.size
            if self._affine_all is not None:  # (raw - offset) * scale of every term without a history
                np.subtract(out, self._affine_all[0], out=out)
                np.multiply(out, self._affine_all[1], out=out)
            if self._clip_all is not None:  # np.clip's semantics: max with lo, then min with hi
                np.maximum(out, self._clip_all[0], out=out)
                np.minimum(out, self._clip_all[1], out=out)
            # One dot product (a NaN/Inf makes it non-finite); only then the exact check, since a finite
            # vector with huge entries can overflow the product.
            if not math.isfinite(out.dot(out)) and not np.isfinite(out).all():
                raise self._not_finite(out)
        except ObservationError:
            for h in self._histories.values():
                h.clear()  # never stack values from before a gap
            raise
        return out.copy()

    def _not_finite(self, out: np.ndarray) -> ObservationError:
        bad = int(np.flatnonzero(~np.isfinite(out))[0])
        start = 0
        for t in self.spec.terms:
            if bad < start + t.dim:
                label = t.labels[(bad - start) % t.size]
                return ObservationError(f"{t.describe()}: entry {label} is {out[bad]} (NaN/Inf); the sensor or its "
                                        "driver sent a non-finite value")
            start += t.dim
        return ObservationError(f"observation entry {bad} is {out[bad]} (NaN/Inf)")

    # ---- readers: one term's raw values (before scale/offset/clip) into dst ----------------------
    def _action_values(self, t: TermSpec, _sample: Any, dst: np.ndarray) -> None:
        raw = self._last_raw if t.index in self._raw_terms else self._last_action
        if raw is None:
            dst.fill(0.0)
            return
        if raw.size != t.size:
            raise ObservationError(f"{t.describe()}: the last action has {raw.size} values, size is {t.size}")
        dst[:] = raw

    def _joint_values(self, t: TermSpec, sample: Any, dst: np.ndarray) -> None:
        names, position, velocity, effort = sample
        values = position if t.term == "joint_position" else velocity if t.term == "joint_velocity" else effort
        idx = self._joint_index[t.index].lookup(names)
        if isinstance(idx, list):
            raise ObservationError(f"{t.describe()}: joint {idx[0]!r} is not in the JointState (it has "
                                   f"{', '.join(names) or 'no joints'}); check the robot file's joints")
        seen = self._joint_top.get(t.index)
        if seen is not None and seen[0] is idx:  # the same name list as last tick: the same indices
            top = seen[1]
        else:
            top = int(idx.max()) if idx.size else -1
            self._joint_top[t.index] = (idx, top)
        values = np.asarray(values, dtype=np.float64)
        if top >= values.size:
            field_name = t.term.split("_", 1)[1]
            raise ObservationError(f"{t.describe()}: the JointState has {values.size} {field_name} "
                                   f"values for {len(names)} names; the driver must fill {field_name}")
        np.take(values, idx, out=dst)
        if t.relative:
            np.subtract(dst, self._poses[t.index], out=dst)
        if t.function == "cos":
            np.cos(dst, out=dst)
        elif t.function == "sin":
            np.sin(dst, out=dst)

    def _imu_values(self, t: TermSpec, sample: Any, dst: np.ndarray) -> None:
        if t.msg_type == "array":
            q = np.asarray(sample, dtype=np.float64).ravel()
            if q.size != 4:
                raise ObservationError(f"{t.describe()}: expected 4 quaternion values, got {q.size}")
            self._gravity(t, q, dst)
            return
        orientation, angular_velocity, linear_acceleration = sample
        if t.term == "projected_gravity":
            self._gravity(t, orientation, dst)
        else:
            dst[:] = angular_velocity if t.term == "imu_angular_velocity" else linear_acceleration

    def _twist_values(self, t: TermSpec, sample: Any, dst: np.ndarray) -> None:
        values = (float(sample[0]), float(sample[1]), float(sample[5]))  # linear x, y, angular z
        ranges = self._ranges.get(t.index)
        if ranges is not None:  # np.clip's semantics on 3 floats (min(max(v, lo), hi); NaN stays NaN)
            values = tuple(min(max(v, lo), hi) if v == v else v for v, (lo, hi) in zip(values, ranges))
        dst[0], dst[1], dst[2] = values

    def _array_values(self, t: TermSpec, sample: Any, dst: np.ndarray) -> None:
        arr = np.asarray(sample, dtype=np.float64).ravel()
        if arr.size != t.size:
            raise ObservationError(f"{t.describe()}: the message has {arr.size} values, size is {t.size}; fix the "
                                   "publisher or the term's size")
        dst[:] = arr

    def _gravity(self, t: TermSpec, q: Any, dst: np.ndarray) -> None:
        try:
            a, b, c = _gravity_terms(q, t.quaternion_order)
        except ObservationError as exc:
            raise ObservationError(f"{t.describe()}: {exc}") from exc
        dst[0], dst[1], dst[2] = -a, -b, -c  # projected_gravity's values, without its array
