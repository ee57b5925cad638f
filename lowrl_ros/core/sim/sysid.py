"""Identify the legged robot's reality gap from its own recorded steps (real-to-sim), no torch, no ROS.

What a robotics engineer does when a policy walks worse on the robot than in simulation: record the
robot, fit the simulator's gap parameters (:class:`~lowrl_ros.core.sim.reality_gap.RealityGapConfig`
fields) to the recording, improve the policy off-board in the identified simulator, deploy it.
This module is the identification; `lowrl bench sim2real --methods sysid` runs the whole loop.

Only what the robot's policy node sees is used: observations (the robot file's vector), the actions
it sent and where episodes start. Never the true gap nor the simulator state of the robot.

Two parts, as the gap has two:

- **Sensor errors, in closed form** (:func:`identify_sensors`). At an episode start the robot is
  known to be upright, at rest and at the default pose up to the reset's small random spread
  (mean zero). So the first observation of each episode reads the sensor errors directly: the
  encoder offsets are the mean joint-position entries, the gyro bias the mean angular velocity,
  the IMU tilt the roll/pitch that rotates gravity onto the mean measured gravity, and the noise
  levels the spread of the entries that are exactly zero at rest (angular and joint velocities).
- **Physics, by replay** (:func:`identify_physics`). The recorded actions are replayed open loop in
  the simulator from each episode's start (the first ``window`` policy steps, 2 s by default: the torso
  drops onto its legs and the first strides begin; a 1-s window left mass, friction and latency
  poorly determined), with candidate mass, friction, motor strength, PD stiffness and latency,
  and the identified sensor errors applied; the cross-entropy method minimises the squared
  mismatch to the recorded observations (each block scaled by its spread in the recording).

:func:`fold_sensor_offsets` then undoes the identified biases exactly in a deployed artifact: they
go into its contract's ``obs_offset`` (normalised obs = (obs - offset) * scale), so the network
reads what it read in simulation (the gravity entries to first order: a tilt is a rotation, folded
as the offset it makes at upright).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from lowrl_ros.core.sim import legged
from lowrl_ros.core.sim.reality_gap import RealityGapConfig

# Observation layout of lowrl/LeggedAnt-v0 (legged.OBS_NAMES): the blocks identification reads.
GYRO, GRAVITY, COMMAND = slice(0, 3), slice(3, 6), slice(6, 9)
JOINT_POS, JOINT_VEL, LAST_ACTION = slice(9, 17), slice(17, 25), slice(25, 33)
# The physical fields fitted by replay, each with its search range (factors; latency in physics steps).
PHYSICS_RANGES = {"mass_scale": (0.5, 2.0), "friction_scale": (0.3, 1.5), "motor_strength": (0.3, 1.5),
                  "kp_scale": (0.3, 1.5), "latency_physics_steps": (0.0, 12.0)}
SENSOR_FIELDS = ("encoder_offset", "gyro_bias", "tilt_bias", "imu_noise_std", "obs_noise_std")


def check_contract(contract, where: str = "the policy") -> None:
    """Raise ValueError unless ``contract`` (a PolicyContract) reads the observation this identifier replays
    (the legged example's, legged.OBS_NAMES): the gap is identified by replaying that simulator."""
    if tuple(contract.obs_names) != tuple(legged.OBS_NAMES):
        raise ValueError(f"{where}: offboard_method sysid identifies the legged example robot's gap; this "
                         f"artifact reads {len(contract.obs_names)} other observations")


@dataclass
class Recording:
    """The robot's recorded episodes: per episode its observations (T+1, 33) and actions sent (T, 8)."""

    observations: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)

    @property
    def steps(self) -> int:
        """Robot steps recorded (policy steps, each one action sent)."""
        return int(sum(len(a) for a in self.actions))

    @classmethod
    def from_transitions(cls, obs: np.ndarray, action: np.ndarray, next_obs: np.ndarray, done: np.ndarray,
                         first_is_start: bool = True) -> Recording:
        """Episodes out of consecutive transitions, e.g. finetune_node's transition log::

            batch, _ = read_log("WORK_DIR/transitions")   # lowrl_ros.core.finetune.transition_log
            rec = Recording.from_transitions(batch.obs, batch.action, batch.next_obs,
                                             batch.terminated | batch.truncated)

        An episode starts after each ``done`` (and at the first transition if ``first_is_start``);
        transitions before the first start are dropped (their start was not recorded)."""
        obs, action, next_obs = (np.asarray(x, dtype=np.float64) for x in (obs, action, next_obs))
        done = np.asarray(done, dtype=bool).ravel()
        if not len(obs) == len(action) == len(next_obs) == len(done):
            raise ValueError(f"transitions of different lengths: obs {len(obs)}, action {len(action)}, next_obs "
                             f"{len(next_obs)}, done {len(done)}; give one row per transition in each")
        rec, start = cls(), 0 if first_is_start else None
        for i in range(len(done)):
            if start is not None and (done[i] or i == len(done) - 1):
                rec.observations.append(np.vstack([obs[start:start + 1], next_obs[start:i + 1]]))
                rec.actions.append(action[start:i + 1])
            if done[i]:
                start = i + 1 if i + 1 < len(done) else None
        return rec

    def check(self) -> None:
        """ValueError naming the problem if the recording cannot be used for identification."""
        if not self.observations:
            raise ValueError("the recording has no episodes; record at least one episode of the robot")
        for i, (o, a) in enumerate(zip(self.observations, self.actions)):
            if o.ndim != 2 or o.shape[1] != legged.OBS_DIM or a.ndim != 2 or a.shape[1] != len(legged.JOINTS):
                raise ValueError(f"episode {i}: observations must be (T+1, {legged.OBS_DIM}) and actions "
                                 f"(T, {len(legged.JOINTS)}); got {o.shape} and {a.shape}")
            if len(o) != len(a) + 1:
                raise ValueError(f"episode {i}: {len(o)} observations for {len(a)} actions; record the "
                                 "observation after every action and the first one of the episode")


def record(policy: Callable[[np.ndarray], np.ndarray], env, steps: int, seed: int, explore_std: float = 0.0,
           ) -> Recording:
    """Run ``policy`` on ``env`` (the robot: a gapped LeggedAnt) for ``steps`` steps, recording what the policy
    node would log. ``explore_std`` adds Gaussian noise to the actions sent (fraction of the [-1, 1] half range),
    which excites the dynamics more than the policy's own gait; an episode cut by ``steps`` is kept."""
    rng = np.random.default_rng(seed + 31)
    rec = Recording()
    obs, _ = env.reset(seed=seed)
    ep_obs, ep_act = [np.asarray(obs, dtype=np.float64)], []
    for step in range(steps):
        a = np.asarray(policy(obs), dtype=np.float64)
        if explore_std > 0.0:
            a = np.clip(a + rng.normal(0.0, explore_std, a.shape), -1.0, 1.0)
        obs, _, term, trunc, _ = env.step(a.astype(np.float32))
        ep_obs.append(np.asarray(obs, dtype=np.float64))
        ep_act.append(a)
        if term or trunc or step == steps - 1:
            rec.observations.append(np.array(ep_obs))
            rec.actions.append(np.array(ep_act))
            if step < steps - 1:
                obs, _ = env.reset()
                ep_obs, ep_act = [np.asarray(obs, dtype=np.float64)], []
    return rec


def _gravity_of_tilt(roll: float, pitch: float) -> np.ndarray:
    """The projected gravity an upright robot's IMU reads when mounted ``roll``, ``pitch`` off (as LeggedRobot)."""
    return legged.projected_gravity_wxyz(legged._quat_mul(np.array([1.0, 0.0, 0.0, 0.0]),
                                                          legged._rpy_quat(roll, pitch)))


def _solve_tilt(g: np.ndarray) -> tuple[float, float]:
    """Roll and pitch whose projected gravity is closest to ``g`` (Gauss-Newton from zero; the map is smooth)."""
    x = np.zeros(2)
    for _ in range(20):
        r = _gravity_of_tilt(*x) - g
        jac = np.empty((3, 2))
        for k in range(2):
            dx = np.zeros(2)
            dx[k] = 1e-6
            jac[:, k] = (_gravity_of_tilt(*(x + dx)) - _gravity_of_tilt(*(x - dx))) / 2e-6
        step = np.linalg.lstsq(jac, -r, rcond=None)[0]
        x = np.clip(x + step, -0.5, 0.5)
        if np.abs(step).max() < 1e-10:
            break
    return float(x[0]), float(x[1])


def identify_sensors(rec: Recording) -> dict:
    """The sensor part of the gap (RealityGapConfig fields) from each episode's first observation.

    At a start the robot is upright, at rest and at the default pose up to the reset's uniform spread
    (+-0.05 rad, mean zero), so means of the first observations are the biases and the spread of the
    velocity entries (exactly zero at rest) the noise levels."""
    rec.check()
    first = np.array([o[0] for o in rec.observations])
    if len(first) < 2:
        raise ValueError("identify_sensors needs at least 2 episode starts (the noise levels are a spread); "
                         "record more, shorter episodes")
    gyro = first[:, GYRO] / legged.ANG_VEL_SCALE
    joint_vel = first[:, JOINT_VEL] / legged.JOINT_VEL_SCALE
    roll, pitch = _solve_tilt(first[:, GRAVITY].mean(axis=0))
    return {"encoder_offset": tuple(float(v) for v in first[:, JOINT_POS].mean(axis=0)),
            "gyro_bias": tuple(float(v) for v in gyro.mean(axis=0)),
            "tilt_bias": (roll, pitch),
            "imu_noise_std": float(np.sqrt(np.mean((gyro - gyro.mean(axis=0)) ** 2))),
            "obs_noise_std": float(np.sqrt(np.mean(joint_vel ** 2)))}


def _physics_fields(theta: np.ndarray) -> dict:
    """A vector in PHYSICS_RANGES order as RealityGapConfig fields (latency rounded to whole physics steps)."""
    out = {}
    for value, (name, (lo, hi)) in zip(theta, PHYSICS_RANGES.items()):
        value = float(np.clip(value, lo, hi))
        out[name] = int(round(value)) if name == "latency_physics_steps" else \
            (value,) if name in ("motor_strength", "kp_scale") else value
    return out


class ReplayObjective:
    """Mismatch between the recording and an open-loop replay of its actions in the simulator with a candidate gap.

    Args:
        rec: the robot's recording.
        sensors: the identified sensor fields (:func:`identify_sensors`), applied to the replay's sensors without
            their noise, so the replay reads what the robot's sensors would read.
        window: policy steps replayed from each episode start.
        episodes: at most this many episode starts are used (the first ones).
        period_s: the policy period (lowrl/LeggedAnt-v0: 0.04 s).
    """

    def __init__(self, rec: Recording, sensors: dict, window: int = 50, episodes: int = 16,
                 period_s: float = 0.04) -> None:
        rec.check()
        self.sensors = {**sensors, "imu_noise_std": 0.0, "obs_noise_std": 0.0}
        self.window = int(window)
        self.period = float(period_s)
        self.obs = [o[:self.window + 1] for o in rec.observations[:episodes] if len(o) > 2]
        self.act = [a[:self.window] for a in rec.actions[:episodes] if len(a) > 1]
        if not self.obs:
            raise ValueError("the recording has no episode of 2 or more steps to replay")
        cat = np.concatenate([o[1:] for o in self.obs])
        # Each block counts equally: squared errors over its entries' spread in the recording.
        self.blocks = (GYRO, GRAVITY, JOINT_POS, JOINT_VEL)
        self.scale = [1.0 / max(float(np.var(cat[:, b])), 1e-6) for b in self.blocks]
        self.evaluations = 0

    def replay(self, gap: RealityGapConfig | legged.LeggedRobot, i: int) -> np.ndarray:
        """Episode ``i``'s actions replayed open loop on a simulated robot with ``gap`` (or on ``robot``, reset here,
        which saves building one per episode): its observations (T+1, 33)."""
        robot = gap if isinstance(gap, legged.LeggedRobot) else legged.LeggedRobot(gap=gap)
        robot.reset()
        offset = np.asarray(self.sensors["encoder_offset"], dtype=np.float64)
        # The start pose: the recorded first joint positions less the identified encoder offsets.
        pose = np.clip(np.array(legged.DEFAULT_POSE) + self.obs[i][0, JOINT_POS] - offset, robot.lower, robot.upper)
        robot.data.qpos[robot._qpos] = pose
        robot._mj.mj_forward(robot.model, robot.data)
        substeps = int(round(self.period / robot.dt))
        command = self.obs[i][0, COMMAND]
        out = [legged.observation(robot, command, np.zeros(len(legged.JOINTS)))]
        for a in self.act[i]:
            a = np.clip(a, -1.0, 1.0)
            robot.set_targets(legged.action_to_targets(a, robot.targets, self.period, robot))
            robot.step(substeps)
            out.append(legged.observation(robot, command, a))
        return np.array(out, dtype=np.float64)

    def __call__(self, physics: dict) -> float:
        """Mean scaled squared mismatch over the replayed steps for the physical fields ``physics``."""
        self.evaluations += 1
        robot = legged.LeggedRobot(gap=RealityGapConfig(**{**self.sensors, **physics}))
        total, n = 0.0, 0
        for i in range(len(self.obs)):
            pred = self.replay(robot, i)[1:]
            real = self.obs[i][1:len(pred) + 1]
            total += sum(s * float(np.sum((pred[:, b] - real[:, b]) ** 2)) / (b.stop - b.start)
                         for b, s in zip(self.blocks, self.scale))
            n += len(pred)
        return total / max(n, 1)


@dataclass
class Identified:
    """What identification found: the gap fields, the objective at the end and what it cost."""

    sensors: dict
    physics: dict
    objective: float
    evaluations: int
    wall_s: float
    robot_steps: int
    history: list = field(default_factory=list)

    def gap(self, noise: bool = True, biases: bool = True) -> RealityGapConfig:
        """The identified gap as a RealityGapConfig: physics, plus the sensor noise / biases if asked."""
        s = dict(self.sensors)
        if not noise:
            s.update(imu_noise_std=0.0, obs_noise_std=0.0)
        if not biases:
            for name in ("encoder_offset", "gyro_bias", "tilt_bias"):
                s.pop(name)
        return RealityGapConfig(**{**s, **self.physics})

    def to_dict(self) -> dict:
        return {"sensors": self.sensors, "physics": self.physics, "objective": self.objective,
                "evaluations": self.evaluations, "wall_s": self.wall_s, "robot_steps": self.robot_steps,
                "history": self.history}


def identify_physics(objective: ReplayObjective, iterations: int = 8, population: int = 20, elite: int = 5,
                     seed: int = 0, log: Callable[[str], None] | None = None) -> tuple[dict, float, list]:
    """The cross-entropy method over PHYSICS_RANGES: (best fields, their objective, per-iteration history)."""
    rng = np.random.default_rng(seed)
    lo = np.array([r[0] for r in PHYSICS_RANGES.values()])
    hi = np.array([r[1] for r in PHYSICS_RANGES.values()])
    # Start in the middle of the ranges, wide enough to reach their ends; the simulation itself competes too.
    mean = (lo + hi) / 2.0
    std = (hi - lo) / 4.0
    best = np.array([1.0, 1.0, 1.0, 1.0, 0.0])
    best_f, history = objective(_physics_fields(best)), []
    for it in range(iterations):
        samples = np.clip(mean + std * rng.standard_normal((population, len(mean))), lo, hi)
        samples[0] = best  # the best so far competes again (elitism)
        scores = np.array([objective(_physics_fields(x)) for x in samples])
        order = np.argsort(scores)
        if scores[order[0]] < best_f:
            best, best_f = samples[order[0]].copy(), float(scores[order[0]])
        top = samples[order[:elite]]
        mean, std = top.mean(axis=0), np.maximum(top.std(axis=0), (hi - lo) * 0.01)
        history.append({"iteration": it + 1, "best": best_f, "fields": _physics_fields(best)})
        if log:
            log(f"  sysid CEM {it + 1}/{iterations}: objective {best_f:.4f} at {_physics_fields(best)}")
    return _physics_fields(best), best_f, history


def identify(rec: Recording, window: int = 50, episodes: int = 16, iterations: int = 8, population: int = 20,
             seed: int = 0, log: Callable[[str], None] | None = None) -> Identified:
    """Sensors in closed form, then physics by replay (:func:`identify_sensors`, :func:`identify_physics`)."""
    t0 = time.perf_counter()
    sensors = identify_sensors(rec)
    objective = ReplayObjective(rec, sensors, window=window, episodes=episodes)
    physics, value, history = identify_physics(objective, iterations, population, seed=seed, log=log)
    return Identified(sensors, physics, value, objective.evaluations, round(time.perf_counter() - t0, 1),
                      rec.steps, history)


def sensor_obs_offset(sensors: dict) -> np.ndarray:
    """What the identified biases add to each observation entry of an upright robot (zero elsewhere)."""
    d = np.zeros(legged.OBS_DIM)
    d[GYRO] = np.asarray(RealityGapConfig.per_joint(tuple(sensors.get("gyro_bias", (0.0,))), 3, "gyro_bias")) \
        * legged.ANG_VEL_SCALE
    d[GRAVITY] = _gravity_of_tilt(*RealityGapConfig.per_joint(tuple(sensors.get("tilt_bias", (0.0,))), 2,
                                                                "tilt_bias")) - np.array([0.0, 0.0, -1.0])
    d[JOINT_POS] = RealityGapConfig.per_joint(tuple(sensors.get("encoder_offset", (0.0,))), len(legged.JOINTS),
                                              "encoder_offset")
    return d


def fold_sensor_offsets(src: str | Path, dst: str | Path, sensors: dict, version: int | None = None,
                        parent_version: int | None = None) -> Path:
    """Write ``src``'s artifact to ``dst`` with the identified sensor biases folded into its ``obs_offset``.

    The network then reads (obs - bias - offset) * scale: the robot's biased readings become the simulator's.
    The weights (int8 included) are unchanged; only the contract's offset and provenance differ (and its
    ``version`` / ``parent_version`` when given: a release to the robot must be newer than what it runs)."""
    # rewrite_artifact puts the stored (already quantised) layers back as they are: no re-quantisation.
    from lowrl_ros.core.runtime.artifact import parse_artifact, read_artifact_bytes, rewrite_artifact

    parsed = parse_artifact(read_artifact_bytes(src), str(src))
    c = parsed.contract
    if tuple(c.obs_names) != tuple(legged.OBS_NAMES):
        raise ValueError(f"{src}: its observation is not the legged robot file's ({len(c.obs_names)} entries); "
                         "fold_sensor_offsets works on lowrl/LeggedAnt-v0 artifacts")
    offset = np.asarray(c.obs_offset) + sensor_obs_offset(sensors)
    contract = dataclasses.replace(c, obs_offset=tuple(float(v) for v in offset),
                                   provenance={**c.provenance, "sensor_offsets_folded": "lowrl_ros.core.sim.sysid"})
    if version is not None:
        contract = dataclasses.replace(contract, version=int(version), parent_version=parent_version)
    return rewrite_artifact(parsed, dst, contract)


def true_fields(gap: RealityGapConfig) -> dict:
    """The fields identification estimates, from a known gap (for checks against the truth only)."""
    d = gap.to_dict()
    return {k: d[k] for k in (*SENSOR_FIELDS, *PHYSICS_RANGES)}
