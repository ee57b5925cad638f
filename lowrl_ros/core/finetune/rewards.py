"""Rewards and episode ends computed on the robot from the robot file (ROS-free).

The robot file's ``reward:`` and ``episode:`` sections (docs/robot_file.md, "Reward" and "Episode ends
and resets") name observation terms by their ``name`` (or their index in ``observation``, when two
terms share a name). Each step the fine-tuner hands :meth:`RewardSpec.compute` the observation the
policy saw (from ``lowrl/policy/step``), the action it executed (the policy's units: the teleop
action while a person intervened), and the command that went out (robot units); it returns the
total and one value per term (already weighted), which the transition log keeps as columns.

Terms (``weight`` on each; the raw value is what is listed, the reward adds ``weight * value``):

    track_lin_vel_xy  exp(-|cmd_xy - v_xy|^2 / sigma^2)   velocity: the base linear velocity term (an
                      observation term, e.g. an ``array`` term from the state estimator), command: the
                      ``velocity_command`` term (entries 0, 1)
    track_ang_vel_z   exp(-(cmd_wz - w_z)^2 / sigma^2)    velocity: ``imu_angular_velocity`` (entry 2),
                      command: ``velocity_command`` (entry 2)
    upright           -(g_x^2 + g_y^2) from ``projected_gravity`` (0 upright, -1 on its side)
    action_rate       -|a_t - a_{t-1}|^2 of the executed action (policy units)
    joint_effort      -|tau|^2 from a ``joint_effort`` observation term, or, when the policy does not observe
                      effort, from the JointState the fine-tuner reads itself (``compute(effort=...)``)
    alive             1 every step that is not a fall
    pendulum          Pendulum-v1: -(theta^2 + 0.1 thdot^2 + 0.001 u^2), theta = atan2(sin, cos) from the
                      ``joint_position`` terms with ``function: cos`` / ``sin``, thdot from ``joint_velocity``,
                      u the command that went out (the torque)

Observation values are un-scaled back to sensor units (``raw = value / scale + offset``, the newest
step of a history) before use, so a term's ``scale`` in the robot file does not change the reward.

Reward-only inputs (``reward.inputs``): values the reward needs but the policy does not observe, such as
the base linear velocity from a state estimator. Each input names a topic the FINE-TUNER subscribes to
(never the policy node: the policy's observation and its step message do not change), its type
(``twist_stamped`` / ``twist``: geometry_msgs, ``field: linear`` or ``angular``, 3 values; or
``float32_multi_array`` with ``size``) and ``timeout_s``. A term names the input where it would name an
observation term (``velocity: base_lin_vel``); the newest value received is used, and a value older
than ``timeout_s`` (or none yet) makes the step's reward NaN: the step is not trained on, and counted.

Episode ends: ``fall_tilt_deg`` (the tilt from ``projected_gravity`` beyond the limit: terminated),
``time_limit_steps`` or ``time_limit_s`` (truncated).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from lowrl_ros.core.runtime.observation import ObservationSpec, TermSpec
from lowrl_ros.core.runtime.robot_file import RobotFile, RobotFileError

# term -> (the observation references it takes, with their defaults: the term kind to look for)
REWARD_TERMS: dict[str, dict[str, str]] = {
    "track_lin_vel_xy": {"velocity": "base_lin_vel", "command": "velocity_command"},
    "track_ang_vel_z": {"velocity": "imu_angular_velocity", "command": "velocity_command"},
    "upright": {"gravity": "projected_gravity"},
    "action_rate": {},
    "joint_effort": {"effort": "joint_effort"},
    "alive": {},
    "pendulum": {"cos": "joint_position:cos", "sin": "joint_position:sin", "velocity": "joint_velocity"},
}
REWARD_KEYS = ("term", "weight", "sigma", "name")
INPUT_TYPES = ("twist_stamped", "twist", "float32_multi_array")
INPUT_KEYS = ("name", "topic", "type", "field", "size", "timeout_s")
EPISODE_KEYS = ("fall_tilt_deg", "gravity", "time_limit_steps", "time_limit_s")


@dataclass(frozen=True)
class _Ref:
    """Where a term's newest raw value sits in the observation vector."""

    start: int
    size: int
    scale: np.ndarray
    offset: np.ndarray

    def raw(self, obs: np.ndarray) -> np.ndarray:
        value = obs[self.start:self.start + self.size]
        return value / self.scale + self.offset


@dataclass(frozen=True)
class RewardInput:
    """One reward-only input (``reward.inputs``): a topic the fine-tuner reads for the reward alone."""

    name: str
    topic: str
    type: str
    field: str  # twist types: linear | angular
    size: int
    timeout_s: float


class _InputStore:
    """The newest value of each reward-only input and when it came (the fine-tuner's clock, s)."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[float, np.ndarray]] = {}
        self.now = math.inf  # set by RewardSpec.compute; inf: every value is stale until then


@dataclass(frozen=True)
class _InputRef:
    """A term's reference to a reward-only input: NaN when none came yet or the newest is too old."""

    spec: RewardInput
    store: _InputStore

    def raw(self, _obs: np.ndarray) -> np.ndarray:
        got = self.store.values.get(self.spec.name)
        if got is None or self.store.now - got[0] > self.spec.timeout_s:
            return np.full(self.spec.size, np.nan)
        return got[1]


def _parse_inputs(section: Any, spec: ObservationSpec) -> tuple[RewardInput, ...]:
    if not isinstance(section, list):
        raise ValueError("reward.inputs must be a list, e.g. [{name: base_lin_vel, topic: state_estimator/twist, "
                         "type: twist_stamped, field: linear, timeout_s: 0.1}]")
    out: list[RewardInput] = []
    for i, raw in enumerate(section):
        where = f"reward.inputs[{i}]"
        if not isinstance(raw, dict):
            raise ValueError(f"{where} must be a mapping with {', '.join(INPUT_KEYS)}; got {raw!r}")
        unknown = [k for k in raw if k not in INPUT_KEYS]
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; known: {', '.join(INPUT_KEYS)}")
        name, topic, kind = raw.get("name"), raw.get("topic"), raw.get("type")
        if not isinstance(name, str) or not name or not isinstance(topic, str) or not topic:
            raise ValueError(f"{where}: name and topic must be non-empty strings, got name={name!r}, topic={topic!r}")
        if name in {t.name for t in spec.terms} or name in {x.name for x in out}:
            raise ValueError(f"{where}: name {name!r} is already an observation term's or another input's; "
                             "give the input its own name")
        if kind not in INPUT_TYPES:
            raise ValueError(f"{where}: type must be one of {', '.join(INPUT_TYPES)}, got {kind!r}")
        if kind == "float32_multi_array":
            size = raw.get("size")
            if isinstance(size, bool) or not isinstance(size, int) or size < 1 or "field" in raw:
                raise ValueError(f"{where}: a float32_multi_array input takes size: <a positive integer> (and no "
                                 f"field); got size={size!r}")
            field = ""
        else:
            field, size = raw.get("field", "linear"), 3
            if field not in ("linear", "angular") or "size" in raw:
                raise ValueError(f"{where}: a {kind} input takes field: linear | angular (3 values, no size); "
                                 f"got field={field!r}")
        out.append(RewardInput(name, topic, kind, field, size, _number(raw, "timeout_s", 0.1, where, positive=True)))
    return tuple(out)


@dataclass(frozen=True)
class RewardTerm:
    """One configured reward term."""

    name: str
    term: str
    weight: float
    sigma: float
    refs: dict[str, _Ref]


def _starts(spec: ObservationSpec) -> list[int]:
    out, k = [], 0
    for t in spec.terms:
        out.append(k)
        k += t.dim
    return out


def _find(spec: ObservationSpec, ref: Any, default: str, where: str,
          inputs: dict[str, _InputRef] | None = None) -> _Ref | _InputRef:
    """Resolve a reference (a term name, a term index, a reward-only input's name, or the default: the only
    term of that kind, else the input of that name)."""
    terms = spec.terms
    inputs = inputs or {}
    if isinstance(ref, str) and ref in inputs:
        return inputs[ref]
    if ref is None and default in inputs and not any(t.term == default or t.name == default for t in terms):
        return inputs[default]
    if isinstance(ref, bool):
        ref = None
    if isinstance(ref, int):
        if not 0 <= ref < len(terms):
            raise ValueError(f"{where}: observation term index {ref} is out of range (0..{len(terms) - 1})")
        found = [terms[ref]]
    elif isinstance(ref, str) and ref:
        found = [t for t in terms if t.name == ref]
        if not found:
            raise ValueError(f"{where}: no observation term is named {ref!r}; names: "
                             f"{', '.join(t.name for t in terms)}{_input_names(inputs)} (set name: on the term, "
                             "give its index, or add a reward input of that name)")
    else:
        kind, _, function = default.partition(":")
        found = [t for t in terms if (t.term == kind or t.name == kind) and (not function or t.function == function)]
        if not found:
            raise ValueError(f"{where}: the observation has no {default!r} term; add one, name the term to use, or "
                             f"read it as a reward-only input (reward.inputs)")
    if len(found) > 1:
        raise ValueError(f"{where}: {len(found)} observation terms match {ref or default!r} (indices "
                         f"{', '.join(str(t.index) for t in found)}); give the term's index instead")
    t: TermSpec = found[0]
    # A clipped value un-scales to the clip edge: the reward saturates there, as the policy's input does.
    start = _starts(spec)[t.index]
    if t.history > 1 and t.history_order == "oldest_first":
        start += (t.history - 1) * t.size  # the newest step
    return _Ref(start, t.size, np.where(t.scale == 0, 1.0, t.scale), t.offset)


def _input_names(inputs: dict[str, Any]) -> str:
    return f"; reward inputs: {', '.join(inputs)}" if inputs else ""


def _section(robot: RobotFile, key: str, parse, spec: ObservationSpec):
    """The robot file's ``key`` section parsed against ``spec`` (None when absent); a ValueError becomes a
    RobotFileError naming the file and the entry."""
    section = robot.raw.get(key)
    if section is None:
        return None
    try:
        return parse(section, spec)
    except ValueError as exc:
        raise RobotFileError(robot.where(str(exc))) from exc


def _number(raw: dict[str, Any], key: str, default: float, where: str, positive: bool = False) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or (positive and value <= 0):
        raise ValueError(f"{where}: {key} must be a finite{' positive' if positive else ''} number, got {value!r}")
    return float(value)


@dataclass
class RewardResult:
    """One step's reward: the total and each term's weighted value (in the configured order)."""

    total: float
    terms: np.ndarray
    fell: bool


class RewardSpec:
    """The ``reward:`` section, parsed against the observation (see the module docstring)."""

    def __init__(self, terms: Sequence[RewardTerm], topic: str = "", inputs: Sequence[RewardInput] = (),
                 store: _InputStore | None = None) -> None:
        self.terms = tuple(terms)
        self.topic = topic
        self.inputs = tuple(inputs)
        self._store = store or _InputStore()
        self.names = tuple(t.name for t in self.terms)
        self._prev: np.ndarray | None = None
        self._values = np.zeros(len(self.terms))
        self._effort: np.ndarray | None = None

    @property
    def needs_effort(self) -> bool:
        """A joint_effort term reads the JointState effort (the policy does not observe it)."""
        return any(t.term == "joint_effort" and not t.refs for t in self.terms)

    @classmethod
    def from_robot_file(cls, robot: RobotFile, spec: ObservationSpec) -> RewardSpec | None:
        """None when the file has no ``reward:`` section; RobotFileError names the entry and the fix."""
        return _section(robot, "reward", cls.parse, spec)

    def set_input(self, name: str, value: Any, now: float) -> None:
        """A reward-only input's newest value (received at ``now``, s, the clock ``compute(now=)`` uses);
        ValueError when the size is wrong or a value is not finite."""
        spec = next((x for x in self.inputs if x.name == name), None)
        if spec is None:
            raise ValueError(f"no reward input is named {name!r}; inputs: {', '.join(x.name for x in self.inputs)}")
        arr = np.asarray(value, dtype=np.float64).ravel()
        if arr.size != spec.size or not np.isfinite(arr).all():
            raise ValueError(f"reward input {name} ({spec.topic}) needs {spec.size} finite values, got "
                             f"{arr.tolist()}")
        self._store.values[name] = (now, arr)

    @classmethod
    def parse(cls, section: Any, spec: ObservationSpec) -> RewardSpec:
        if not isinstance(section, dict) or not (("terms" in section) ^ ("topic" in section)) or (
                "inputs" in section and "topic" in section):
            raise ValueError("reward must be a mapping with either terms: [{term: alive, weight: 1.0}, ...] "
                             "(and optionally inputs: [...]) or topic: <a std_msgs/Float64 reward topic>")
        unknown = [k for k in section if k not in ("terms", "topic", "inputs")]
        if unknown:
            raise ValueError(f"reward: unknown key(s) {', '.join(map(str, unknown))}; known: terms, inputs, topic")
        if "topic" in section:
            topic = section["topic"]
            if not isinstance(topic, str) or not topic:
                raise ValueError(f"reward.topic must be a topic name, got {topic!r}")
            return cls((), topic=topic)
        raw_terms = section["terms"]
        if not isinstance(raw_terms, list) or not raw_terms:
            raise ValueError("reward.terms must be a non-empty list, e.g. [{term: alive, weight: 1.0}]")
        inputs = _parse_inputs(section.get("inputs", []), spec)
        store = _InputStore()
        input_refs = {x.name: _InputRef(x, store) for x in inputs}
        terms, names = [], set()
        for i, raw in enumerate(raw_terms):
            where = f"reward.terms[{i}]"
            if not isinstance(raw, dict) or raw.get("term") not in REWARD_TERMS:
                raise ValueError(f"{where}: term must be one of {', '.join(REWARD_TERMS)}, got {raw!r}")
            kind = raw["term"]
            refs_allowed = REWARD_TERMS[kind]
            unknown = [k for k in raw if k not in REWARD_KEYS and k not in refs_allowed]
            if unknown:
                raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; {kind} takes "
                                 f"{', '.join(REWARD_KEYS + tuple(refs_allowed))}")
            name = raw.get("name", kind)
            if name in names:
                raise ValueError(f"{where}: a second term named {name!r}; set name: to tell them apart")
            names.add(name)
            if kind == "joint_effort" and raw.get("effort") is None and not any(
                    t.term == "joint_effort" for t in spec.terms):
                refs = {}  # not observed: the JointState effort, handed to compute() by the fine-tuner
            else:
                refs = {k: _find(spec, raw.get(k), default, f"{where} ({kind}.{k})", input_refs)
                        for k, default in refs_allowed.items()}
            terms.append(RewardTerm(name, kind, _number(raw, "weight", 1.0, where),
                                    _number(raw, "sigma", 0.25, where, positive=True), refs))
        used = {r.spec.name for t in terms for r in t.refs.values() if isinstance(r, _InputRef)}
        unused = [x.name for x in inputs if x.name not in used]
        if unused:
            raise ValueError(f"reward.inputs {', '.join(unused)} is read by no term; name it in a term "
                             f"(e.g. velocity: {unused[0]}) or remove it")
        return cls(terms, inputs=inputs, store=store)

    def reset(self) -> None:
        """An episode started: action_rate has no previous action."""
        self._prev = None

    def compute(self, obs: np.ndarray, action: np.ndarray, command: np.ndarray, next_obs: np.ndarray,
                fell: bool = False, effort: np.ndarray | None = None, now: float = math.inf) -> RewardResult:
        """The reward of acting ``action`` (policy units) / ``command`` (robot units) on ``obs``, which led
        to ``next_obs``. The locomotion terms read ``next_obs`` (the state the action produced, as Isaac
        Lab's reward manager does after stepping); ``pendulum`` reads ``obs`` (Pendulum-v1's cost is of
        the state the torque was applied in). ``now`` (s, the clock of :meth:`set_input`) judges whether each
        reward-only input is fresh; a stale or missing one makes the total NaN."""
        out = self._values
        self._store.now = now
        self._effort = effort
        for i, t in enumerate(self.terms):
            out[i] = t.weight * self._raw(t, obs if t.term == "pendulum" else next_obs, action, command, fell)
        self._prev = np.array(action, dtype=np.float64)
        return RewardResult(float(out.sum()), out.copy(), fell)

    def _raw(self, t: RewardTerm, obs: np.ndarray, action: np.ndarray, command: np.ndarray, fell: bool) -> float:
        r = t.refs
        if t.term == "track_lin_vel_xy":
            err = r["command"].raw(obs)[:2] - r["velocity"].raw(obs)[:2]
            return math.exp(-float(err @ err) / t.sigma ** 2)
        if t.term == "track_ang_vel_z":
            err = float(r["command"].raw(obs)[2] - r["velocity"].raw(obs)[2])
            return math.exp(-err * err / t.sigma ** 2)
        if t.term == "upright":
            g = r["gravity"].raw(obs)
            return -float(g[0] ** 2 + g[1] ** 2)
        if t.term == "action_rate":
            if self._prev is None:
                return 0.0
            d = np.asarray(action, dtype=np.float64) - self._prev
            return -float(d @ d)
        if t.term == "joint_effort":
            if not r:  # from the JointState: NaN (the step is not trained on) until the first one arrived
                if self._effort is None:
                    return math.nan
                tau = np.asarray(self._effort, dtype=np.float64)
            else:
                tau = r["effort"].raw(obs)
            return -float(tau @ tau)
        if t.term == "alive":
            return 0.0 if fell else 1.0
        # pendulum (Pendulum-v1's cost, negated)
        theta = math.atan2(float(r["sin"].raw(obs)[0]), float(r["cos"].raw(obs)[0]))
        thdot = float(r["velocity"].raw(obs)[0])
        u = float(np.asarray(command, dtype=np.float64).ravel()[0]) if np.size(command) else 0.0
        return -(theta ** 2 + 0.1 * thdot ** 2 + 0.001 * u ** 2)


@dataclass(frozen=True)
class EpisodeEnd:
    """Why an episode ended: ``kind`` terminated (a fall), truncated (the time limit) or cut (truncated sooner, for
    the identification's recording: :meth:`EpisodeSpec.cut_first`; never judged)."""

    kind: str
    reason: str


class EpisodeSpec:
    """The ``episode:`` section: a fall (tilt beyond a limit) and a time limit."""

    def __init__(self, fall_tilt_rad: float | None = None, gravity: _Ref | None = None,
                 time_limit_steps: int | None = None, time_limit_s: float | None = None) -> None:
        self.fall_tilt_rad = fall_tilt_rad
        self.gravity = gravity
        self.time_limit_steps = time_limit_steps
        self.time_limit_s = time_limit_s
        self.steps = 0
        self.t0: float | None = None
        self.cut_episodes, self.cut_steps = 0, 0  # cut_first()

    @classmethod
    def from_robot_file(cls, robot: RobotFile, spec: ObservationSpec) -> EpisodeSpec | None:
        """None when the file has no ``episode:`` section."""
        return _section(robot, "episode", cls.parse, spec)

    @classmethod
    def parse(cls, section: Any, spec: ObservationSpec) -> EpisodeSpec:
        if not isinstance(section, dict) or not section:
            raise ValueError(f"episode must be a mapping with {', '.join(EPISODE_KEYS)}; got {section!r}")
        unknown = [k for k in section if k not in EPISODE_KEYS]
        if unknown:
            raise ValueError(f"episode: unknown key(s) {', '.join(map(str, unknown))}; "
                             f"known: {', '.join(EPISODE_KEYS)}")
        tilt = gravity = steps = seconds = None
        if "fall_tilt_deg" in section:
            deg = _number(section, "fall_tilt_deg", 0.0, "episode", positive=True)
            if deg >= 180:
                raise ValueError(f"episode.fall_tilt_deg {deg:g} must be below 180 (degrees from upright)")
            tilt = math.radians(deg)
            gravity = _find(spec, section.get("gravity"), "projected_gravity", "episode.gravity")
        if "time_limit_steps" in section:
            steps = section["time_limit_steps"]
            if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
                raise ValueError(f"episode.time_limit_steps must be a positive integer, got {steps!r}")
        if "time_limit_s" in section:
            seconds = _number(section, "time_limit_s", 0.0, "episode", positive=True)
        return cls(tilt, gravity, steps, seconds)

    def cut_first(self, episodes: int, steps: int) -> None:
        """The next ``episodes`` episodes end (truncated) after ``steps`` steps at most: the off-board
        identification's recording, which replays each episode's first steps only (fine-tuner ``record_*``)."""
        if episodes < 0 or steps < 1:
            raise ValueError(f"record_episodes {episodes} must be >= 0 and record_time_limit_steps {steps} >= 1")
        self.cut_episodes, self.cut_steps = int(episodes), int(steps)

    def whole_steps(self, period_s: float) -> int | None:
        """The fewest transitions a truncated episode streams when the time limit ended it (None: no time limit):
        one truncated sooner was cut (:meth:`cut_first`) and is not a whole episode. 90 % of the limit's steps: a
        safe tick or a missing reward input drops a transition, and stamps jitter."""
        limits = ([self.time_limit_steps] if self.time_limit_steps else []) + \
            ([self.time_limit_s / period_s] if self.time_limit_s else [])
        return max(1, int(0.9 * min(limits))) if limits else None

    def tilt(self, obs: np.ndarray) -> float:
        """The angle (rad) between the base's up axis and up, from projected gravity."""
        g = self.gravity.raw(obs)
        norm = float(np.linalg.norm(g))
        return 0.0 if norm == 0 else math.acos(max(-1.0, min(1.0, -float(g[2]) / norm)))

    def fell(self, obs: np.ndarray) -> bool:
        return self.fall_tilt_rad is not None and self.tilt(obs) > self.fall_tilt_rad

    def reset(self) -> None:
        self.steps, self.t0 = 0, None

    def step(self, obs: np.ndarray, now: float) -> EpisodeEnd | None:
        """Count one step taken from ``obs`` at ``now`` (s); the end it makes, if any (then reset)."""
        if self.t0 is None:
            self.t0 = now
        self.steps += 1
        end = None
        if self.fall_tilt_rad is not None and self.fell(obs):
            end = EpisodeEnd("terminated", f"fall: tilt {math.degrees(self.tilt(obs)):.0f} deg > "
                                           f"{math.degrees(self.fall_tilt_rad):.0f} deg")
        elif self.time_limit_steps is not None and self.steps >= self.time_limit_steps:
            end = EpisodeEnd("truncated", f"time limit: {self.steps} steps")
        elif self.time_limit_s is not None and now - self.t0 >= self.time_limit_s:
            end = EpisodeEnd("truncated", f"time limit: {now - self.t0:.1f} s")
        elif self.cut_episodes and self.steps >= self.cut_steps:
            end = EpisodeEnd("cut", f"cut for the identification's recording: {self.steps} steps")
        if end is not None:
            self.cut_episodes = max(0, self.cut_episodes - 1)
            self.reset()
        return end
