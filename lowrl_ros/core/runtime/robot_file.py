"""The robot file: one YAML file that describes a robot's I/O in the policy's order (ROS-free).

The policy node's ``robot_file`` parameter points to it (the reference: docs/robot_file.md).
Top-level keys, the complete set::

    joints        the POLICY's joint order (names as in sensor_msgs/JointState)
    default_pose  rad, one per joint in that order (joint_position relative: true, action offset)
    interface     position | velocity | effort            (parsed by core/runtime/actions.py)
    observation   the observation terms, in the policy's order (core/runtime/observation.py)
    action        post-processing of the policy's output  (parsed by core/runtime/actions.py)
    output        where the commands go                   (parsed by core/runtime/actions.py)
    safety        e-stop, soft start                       (parsed by core/runtime/actions.py)
    reward        reward terms on the robot                (parsed by core/finetune/rewards.py)
    episode       episode ends: fall, time limit           (parsed by core/finetune/rewards.py)
    fallback      the cheaper steps the policy may take     (parsed by core/runtime/ladder.py)
    sim           the robot's simulator, off-board          (parsed by core/sim/robot_sim.py; never on the robot)

This module checks the top level and parses ``joints``, ``default_pose`` and ``observation``; the
output side (``interface``, ``action``, ``output``, ``safety``) is kept raw in :attr:`RobotFile.raw`
for its own parser, so each side is validated where it is used.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOP_LEVEL_KEYS: tuple[str, ...] = ("joints", "default_pose", "interface", "observation", "action", "output",
                                   "safety", "reward", "episode", "fallback", "sim")


class RobotFileError(ValueError):
    """The robot file cannot be used; the message names the file, the entry and the fix."""


@dataclass(frozen=True)
class RobotFile:
    """A parsed robot file.

    Attributes:
        path: where it was read from ("" when built from a dict).
        joints: the policy's joint order.
        default_pose: one value per joint (rad), or () when the file gives none.
        observation: the raw observation term dicts, in order (parsed by ObservationSpec.from_robot_file,
            which also needs the contract's control period for default timeouts).
        raw: the whole file as read (the output side parses ``interface``/``action``/``output``/``safety``).
    """

    path: str
    joints: tuple[str, ...]
    default_pose: tuple[float, ...]
    observation: tuple[dict[str, Any], ...]
    raw: dict[str, Any] = field(default_factory=dict)

    def where(self, what: str) -> str:
        """``"<path>: <what>"`` for messages."""
        return f"{self.path or 'robot file'}: {what}"


def parse_robot_file(data: Any, path: str = "") -> RobotFile:
    """Check the top level of a loaded robot file and parse joints, default_pose and observation."""
    name = path or "robot file"
    if not isinstance(data, dict):
        raise RobotFileError(f"{name}: the top level must be a mapping with keys {', '.join(TOP_LEVEL_KEYS)}; "
                             f"got {type(data).__name__}")
    unknown = [k for k in data if k not in TOP_LEVEL_KEYS]
    if unknown:
        raise RobotFileError(f"{name}: unknown top-level key(s) {', '.join(map(str, unknown))}; "
                             f"the known keys are {', '.join(TOP_LEVEL_KEYS)}")
    joints = data.get("joints", [])
    if not isinstance(joints, list) or not all(isinstance(j, str) and j for j in joints):
        raise RobotFileError(f"{name}: joints must be a list of joint names (as in JointState.name), "
                             f"in the policy's order; got {joints!r}")
    dupes = sorted({j for j in joints if joints.count(j) > 1})
    if dupes:
        raise RobotFileError(f"{name}: joints lists {', '.join(dupes)} more than once; each joint once, "
                             "in the policy's order")
    pose = data.get("default_pose", [])
    if not isinstance(pose, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                             and math.isfinite(v) for v in pose):
        raise RobotFileError(f"{name}: default_pose must be a list of finite numbers (rad), one per joint; "
                             f"got {pose!r}")
    if pose and len(pose) != len(joints):
        raise RobotFileError(f"{name}: default_pose has {len(pose)} values but joints has {len(joints)}; "
                             "give one value per joint, in the same order")
    obs = data.get("observation")
    if not isinstance(obs, list) or not obs:
        raise RobotFileError(f"{name}: observation must be a non-empty list of terms in the policy's order, "
                             "e.g. [{term: joint_position, topic: joint_states}]")
    for i, term in enumerate(obs):
        if not isinstance(term, dict) or "term" not in term:
            raise RobotFileError(f"{name}: observation[{i}] must be a mapping with a 'term' key, got {term!r}")
    return RobotFile(path=path, joints=tuple(joints), default_pose=tuple(float(v) for v in pose),
                     observation=tuple(dict(t) for t in obs), raw=dict(data))


def load_robot_file(path: str | Path) -> RobotFile:
    """Read and check a robot file (YAML). Raises RobotFileError naming the file and what to fix."""
    import yaml  # PyYAML: a dependency of the package (and of every ROS 2 install)

    p = Path(path).expanduser()
    try:
        text = p.read_text()
    except OSError as exc:
        raise RobotFileError(f"robot_file {str(path)!r} cannot be read ({exc.strerror or exc}); "
                             "give the path of a robot YAML file, e.g. config/robots/legged_example.yaml") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RobotFileError(f"{p}: not valid YAML: {' '.join(str(exc).split())}") from exc
    return parse_robot_file(data, str(p))


# The legacy observation parameters (obs_fields '<joint>.<field>') as robot-file terms.
_LEGACY_FIELDS: dict[str, dict[str, Any]] = {
    "position": {"term": "joint_position"},
    "cos_position": {"term": "joint_position", "function": "cos"},
    "sin_position": {"term": "joint_position", "function": "sin"},
    "velocity": {"term": "joint_velocity"},
    "effort": {"term": "joint_effort"},
}


def legacy_robot_file(obs_fields: tuple[str, ...], obs_offset: tuple[float, ...] = (),
                      obs_scale: tuple[float, ...] = (), extra_obs_dim: int = 0, *, input: str = "joint_states",
                      obs_dim: int = 0, joint_states_topic: str = "joint_states",
                      observation_topic: str = "lowrl/observation",
                      extra_observation_topic: str = "lowrl/extra_observation",
                      timeout_s: float | None = None) -> dict[str, Any]:
    """The robot file (as a dict) that describes what the old observation parameters did.

    ``input: joint_states`` with ``obs_fields`` becomes one joint term per entry (offset and scale
    kept), and ``extra_obs_dim`` an ``array`` term on the extra topic; ``input: observation`` becomes one
    ``array`` term of ``obs_dim`` values on the observation topic. The nodes build their robot I/O from
    it, so there is one input path; :func:`robot_file_yaml` writes it for a user to keep. ``timeout_s``
    (the policy node passes its ``watchdog_timeout_s``, the old parameters' staleness rule) goes on every
    term; None leaves the robot file's default (5 control periods).
    """
    timeout = {} if timeout_s is None else {"timeout_s": float(timeout_s)}
    if input == "observation":
        if obs_dim < 1:
            raise RobotFileError("input: observation needs the policy's observation size")
        return {"joints": [], "observation": [{"term": "array", "topic": observation_topic, "size": int(obs_dim),
                                               **timeout}]}
    if input != "joint_states":
        raise RobotFileError(f"input {input!r} is unknown: joint_states or observation (better: a robot_file)")
    if not obs_fields:
        raise RobotFileError("obs_fields is empty: give a robot_file (docs/robot_file.md), e.g. "
                             "config/robots/pendulum.yaml")
    joints: list[str] = []
    terms: list[dict[str, Any]] = []
    for i, entry in enumerate(obs_fields):
        joint, _, kind = str(entry).rpartition(".")
        if not joint or kind not in _LEGACY_FIELDS:
            raise RobotFileError(f"obs_fields entry {entry!r} is not '<joint>.<field>' with field one of "
                                 f"{', '.join(_LEGACY_FIELDS)}")
        if joint not in joints:
            joints.append(joint)
        term = {**_LEGACY_FIELDS[kind], "joints": [joint], "topic": joint_states_topic}
        if obs_offset and obs_offset[i] != 0.0:
            term["offset"] = float(obs_offset[i])
        if obs_scale and obs_scale[i] != 1.0:
            term["scale"] = float(obs_scale[i])
        terms.append({**term, **timeout})
    if extra_obs_dim:
        terms.append({"term": "array", "topic": extra_observation_topic, "size": int(extra_obs_dim), **timeout})
    return {"joints": joints, "observation": terms}


def robot_file_yaml(data: dict[str, Any]) -> str:
    """A robot file dict as the YAML a user would write (flow style per term, one term a line)."""
    import yaml

    lines = [f"joints: [{', '.join(data.get('joints', []))}]", "observation:"]
    for term in data["observation"]:
        lines.append("  - " + yaml.safe_dump(term, default_flow_style=True, sort_keys=False, width=1000).strip())
    return "\n".join(lines) + "\n"
