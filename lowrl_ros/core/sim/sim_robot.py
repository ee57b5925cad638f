"""A simulated robot for demos and tests: a gymnasium environment seen as named joints (no ROS).

The sim robot node (lowrl_ros/ros/sim_robot_node.py) steps this once per control tick and
publishes the joint state; the policy node answers with a command. Joint naming:

- Pendulum-v1: one joint ``pendulum_joint`` (position θ wrapped to [-π, π), velocity θdot,
  effort = the torque applied in the last step). The policy's cos θ, sin θ, θdot come from the
  policy node's observation adapter (``cos_position``, ``sin_position``, ``velocity``).
- MuJoCo environments (InvertedPendulum-v5: ``slider`` and ``hinge``): the model's own hinge and
  slide joints, by name, with qpos/qvel/actuator force.

One env step per tick: the simulation advances by the env's own dt per tick, whatever the tick
rate, so at 100 Hz Pendulum-v1 (dt 0.05 s) runs 5x faster than its physical time.

The robot may differ from the simulation the policy was trained in: a
:class:`lowrl_ros.core.sim.reality_gap.RealityGapConfig` (mass, friction, damping, actuator gain,
action delay inside the env; observation noise on the published joint positions and velocities).

Modes (``SimRobotConfig.mode``): ``realtime`` steps on a wall-clock timer with the newest command;
``lockstep`` steps exactly once per command received and publishes the next joint state at once,
so a session runs as fast as the policy answers and no step is ever skipped or doubled.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from lowrl_ros.core.config import field
from lowrl_ros.core.sim.reality_gap import RealityGapConfig, RealityGapWrapper

SUPPORTED_ENVS = ("Pendulum-v1", "InvertedPendulum-v5", "LeggedAnt", "robot_file")
LEGGED = "LeggedAnt"  # the legged robot (core/sim/legged.py): position targets, PD at the physics rate, IMU
ROBOT_FILE = "robot_file"  # a robot file's sim: section (core/sim/robot_file_sim.py): its topics, its simulator
MODES = ("realtime", "lockstep")


@dataclass(frozen=True)
class SimRobotTopics:
    """The sim robot node's own parameters: where its joint states go and its commands come from."""

    joint_states_topic: str = field("joint_states", "joint state output")
    command_topic: str = field("forward_command_controller/commands", "command input")
    reset_topic: str = field("lowrl/reset", "std_msgs/Empty: start a new episode now (the fine-tuner's episode end)")
    ready_topic: str = field("lowrl/ready", "std_msgs/Bool true after each reset (latched): the robot stands again")
    policy_step_topic: str = field("lowrl/policy/step", "with session_dir: the policy node's step rows, read for "
                                   "the version that ran each episode")

    imu_topic: str = field("imu", "LeggedAnt: sensor_msgs/Imu of the torso")
    cmd_vel_topic: str = field("cmd_vel", "LeggedAnt: geometry_msgs/Twist velocity command (for the reward)")
    command_velocity: list = field([], "LeggedAnt: [vx, vy, yaw rate] published on cmd_vel_topic at 20 Hz "
                                       "(a joystick stand-in); []: publish nothing")
    state_estimate_topic: str = field("state_estimator/twist", "LeggedAnt: geometry_msgs/TwistStamped ground-truth "
                                      "base velocity at 50 Hz (heading frame; angular.z = yaw rate), a state "
                                      "estimator's stand-in for the fine-tuner's reward; '': none")
    truth_topic: str = field("", "LeggedAnt: Float64MultiArray of the simulator's own state with each joint state "
                             "(encode_truth: the training observation, base velocity, command, falls; lowrl "
                             "sim2sim reads it); '': none")


@dataclass(frozen=True)
class SimRobotConfig:
    """Settings of the simulated robot (sim_robot_node's parameters of the same names)."""

    env_id: str = field("Pendulum-v1", "gymnasium environment: " + " | ".join(SUPPORTED_ENVS))
    control_period_s: float = field(0.01, "wall-clock period of one env step (the robot's control rate)",
                                    range=(1e-4, 10.0))
    seed: int = field(0, "seed of the first reset (later episodes continue the env's RNG)", range=(0, 2**31 - 1))
    max_episode_steps: int = field(0, "episode length in steps (0: the env's default)", range=(0, 10**9))
    mode: str = field("realtime", "stepping: realtime (a step every control_period_s) | lockstep (a step per "
                                  "command)")
    # A policy still starting up or a lost message must not stall a lockstep session.
    lockstep_resend_s: float = field(0.5, "lockstep: re-publish the joint state (without stepping) after this long "
                                          "without a command", range=(0.01, 60.0))
    session_dir: str = field("", "where the episode log (episodes.csv) goes ('' = no log)")
    robot_file: str = field("", "env_id robot_file: the robot file whose sim: section this robot runs (its topics "
                                "and simulator replace the topic parameters)")
    gap_file: str = field("", "env_id robot_file: a gap file of its simulator (docs/robot_file.md, 'Gap files'); "
                              "'' = the nominal model")

    def __post_init__(self) -> None:
        if self.env_id not in SUPPORTED_ENVS:
            raise ValueError(f"env_id {self.env_id!r} is not supported by the sim robot; use one of "
                             f"{', '.join(SUPPORTED_ENVS)}")
        if not 1e-4 <= self.control_period_s <= 10.0:
            raise ValueError(f"control_period_s={self.control_period_s} is outside 0.0001..10 s; e.g. 0.01 for 100 Hz")
        if self.max_episode_steps < 0:
            raise ValueError(f"max_episode_steps must be >= 0 (0: the env's default), got {self.max_episode_steps}")
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is unknown; use realtime (wall-clock timer) or lockstep "
                             "(one step per command)")
        if self.gap_file and self.env_id != ROBOT_FILE:
            raise ValueError(f"gap_file is for env_id robot_file; {self.env_id} takes the gap.* parameters")
        if self.env_id == ROBOT_FILE and not self.robot_file:
            raise ValueError("env_id robot_file needs the robot_file parameter: a robot file with a sim: section")
        if self.env_id in (LEGGED, ROBOT_FILE) and self.mode != "realtime":
            raise ValueError(f"the {self.env_id} robot runs in real time only (its physics steps with the wall clock); "
                             "set mode: realtime")
        if self.env_id in (LEGGED, ROBOT_FILE) and self.control_period_s > 0.02:
            raise ValueError(f"{self.env_id}: control_period_s={self.control_period_s} is its sensor (and, LeggedAnt, "
                             "physics) period, at most 0.02 s; e.g. 0.005 (200 Hz)")
        if not 0.01 <= self.lockstep_resend_s <= 60.0:
            raise ValueError(f"lockstep_resend_s={self.lockstep_resend_s} is outside 0.01..60 s; e.g. 0.5")


TRUTH_VERSION = 1
TRUTH_HEADER = ("format", "stamp", "falls", "base_vx", "base_vy", "base_yaw_rate", "command_vx", "command_vy",
                "command_yaw_rate")
_TH = len(TRUTH_HEADER)


class TrueState(NamedTuple):
    """What the simulator itself knows at one published joint state (``lowrl sim2sim``'s reference).

    ``stamp`` is the joint state's header stamp (wall clock, s), so a reader can find the sample a policy
    tick used; ``obs`` is the training environment's observation for this state, in its own order (the
    entries that come from the policy itself, such as ``last_action``, are left at zero: the simulator
    does not know them); ``velocity`` the base's (vx, vy in the heading frame, yaw rate); ``command`` the
    velocity command the robot was given; ``falls`` the falls so far."""

    stamp: float
    falls: int
    velocity: np.ndarray
    command: np.ndarray
    obs: np.ndarray


def encode_truth(stamp: float, falls: int, velocity, command, obs) -> np.ndarray:
    """One truth row: ``TRUTH_HEADER`` then the observation (float64)."""
    return np.concatenate([[TRUTH_VERSION, stamp, falls], np.asarray(velocity, dtype=np.float64).ravel()[:3],
                           np.asarray(command, dtype=np.float64).ravel()[:3], np.asarray(obs, dtype=np.float64)])


def decode_truth(data) -> TrueState:
    """A truth row back; ValueError when it is not one of this version (another lowrl_ros on the sim side)."""
    row = np.asarray(data, dtype=np.float64)
    if row.ndim != 1 or row.size < _TH or row[0] != TRUTH_VERSION:
        raise ValueError(f"not a version-{TRUTH_VERSION} sim truth row ({row.size} values, format "
                         f"{row[0] if row.size else 'none'}): the sim robot node comes from another lowrl_ros")
    return TrueState(float(row[1]), int(row[2]), row[3:6], row[6:9], row[_TH:])


@dataclass
class JointReading:
    """A joint state as plain arrays (the node copies them into sensor_msgs/JointState)."""

    names: tuple[str, ...]
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray


class WallClock:
    """The physics steps a real-time sim robot runs at each tick of its node, on the wall clock (``clock``).

    Each call to :meth:`due` hands out the physics steps (``dt`` each) due since the last one: at least 1 (a tick
    always moves the robot), at most ``max_catch_up`` (a stall drops its backlog instead of racing). Physics step
    p covers [t0 + p dt, t0 + (p + 1) dt) of the wall clock, so the steps a late tick catches up lie in the past;
    a command that arrived at ``received_at`` acts only on the steps that begin at or after its arrival (as a
    motor driver would), the earlier ones keep the previous command. Without that, every late tick would apply
    the newest command back in time, up to ``max_catch_up`` steps before it arrived: a shorter latency than the
    robot's, which the identification from the robot's steps would then fit."""

    def __init__(self, dt: float, max_catch_up: int = 8, clock=None) -> None:
        import time

        self.dt, self.max_catch_up = float(dt), int(max_catch_up)
        self._clock = clock or time.monotonic
        self._t0: float | None = None
        self.steps = 0  # physics steps run so far

    def due(self, received_at: float | None = None) -> tuple[int, int]:
        """(steps that keep the previous command, steps that take the newest one) for this tick."""
        now = self._clock()
        if self._t0 is None:
            self._t0 = now - self.dt
        due = int((now - self._t0) / self.dt) - self.steps
        n = min(max(due, 1), self.max_catch_up)
        if due > self.max_catch_up:  # a stall: drop the backlog instead of racing
            self._t0 = now - (self.steps + n) * self.dt
        old = 0
        if received_at is not None:  # the first step beginning at or after the arrival
            first = math.ceil((received_at - self._t0) / self.dt - 1e-9)
            old = min(max(first - self.steps, 0), n)
        self.steps += n
        return old, n - old


@dataclass
class StepOutcome:
    reward: float
    episode_done: bool
    episode_return: float  # the finished episode's return when episode_done, else the running sum
    episode_steps: int
    terminated: bool = False  # the episode ended in a terminal state (not on the time limit)


class SimRobot:
    """A gymnasium env behind a joint-level interface: ``step(action)`` then ``joints()``.

    Args:
        config: the robot's settings.
        gap: how this robot differs from the simulation (default: not at all).
    """

    def __init__(self, config: SimRobotConfig, gap: RealityGapConfig | None = None) -> None:
        import gymnasium as gym  # the sim is off-board / test only; the robot side never imports it

        self.config = config
        self.gap = gap or RealityGapConfig()
        kwargs = {"max_episode_steps": config.max_episode_steps} if config.max_episode_steps else {}
        self.env = RealityGapWrapper(gym.make(config.env_id, **kwargs), self.gap, noise_seed=config.seed)
        space = self.env.action_space
        self.action_low = np.asarray(space.low, dtype=np.float64)
        self.action_high = np.asarray(space.high, dtype=np.float64)
        self.action_dim = int(np.prod(space.shape))
        self._mujoco = config.env_id != "Pendulum-v1"
        if self._mujoco:
            import mujoco

            model = self.env.unwrapped.model
            keep = [i for i in range(model.njnt)
                    if int(model.jnt_type[i]) in (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))]
            self.joint_names = tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, i) for i in keep)
            self._qpos = np.asarray([model.jnt_qposadr[i] for i in keep], dtype=np.intp)
            self._qvel = np.asarray([model.jnt_dofadr[i] for i in keep], dtype=np.intp)
        else:
            self.joint_names = ("pendulum_joint",)
        self.episodes = 0
        self.returns: list[float] = []
        self._return = 0.0
        self._steps = 0
        self._last_action = np.zeros(self.action_dim)
        self.env.reset(seed=config.seed)

    def check_action(self, action) -> np.ndarray:
        """The action as a float array of the right size; ValueError (with the fix) otherwise."""
        arr = np.asarray(action, dtype=np.float64).ravel()
        if arr.size != self.action_dim:
            raise ValueError(f"command has {arr.size} values, {self.config.env_id} takes {self.action_dim}; "
                             "check the policy's action_names against the robot")
        if not np.isfinite(arr).all():
            raise ValueError(f"command {arr.tolist()} is not finite; the controller sent NaN/Inf")
        return arr

    def step(self, action, received_at: float | None = None) -> StepOutcome:
        """Advance one env step with ``action`` (clipped to the action space); resets at episode end. One env step
        per tick, whenever the command came (``received_at`` is for the real-time robots' :class:`WallClock`)."""
        act = np.clip(self.check_action(action), self.action_low, self.action_high)
        _, reward, terminated, truncated, info = self.env.step(act.astype(np.float32))
        # The effort is what acted (after the gap's delay, gain and damping), as a torque sensor reads it.
        self._last_action = np.asarray(info["applied_action"], dtype=np.float64)
        self._return += float(reward)
        self._steps += 1
        outcome = StepOutcome(float(reward), bool(terminated or truncated), self._return, self._steps,
                              bool(terminated))
        if outcome.episode_done:
            self.episodes += 1
            self.returns.append(self._return)
            self._return, self._steps = 0.0, 0
            self.env.reset()
        return outcome

    def reset(self) -> None:
        """Start a new episode now (a reset request from the fine-tuner); the unfinished one is not counted."""
        self._return, self._steps = 0.0, 0
        self.env.reset()

    def joints(self) -> JointReading:
        """The current joint positions/velocities/efforts, by name."""
        u = self.env.unwrapped
        if self._mujoco:
            pos = np.asarray(u.data.qpos[self._qpos], dtype=np.float64)
            vel = np.asarray(u.data.qvel[self._qvel], dtype=np.float64)
            eff = np.asarray(u.data.qfrc_actuator[self._qvel], dtype=np.float64)
        else:
            theta, theta_dot = (float(v) for v in u.state)
            wrapped = (theta + math.pi) % (2 * math.pi) - math.pi
            pos, vel, eff = np.array([wrapped]), np.array([theta_dot]), self._last_action.copy()
        pos = pos + self.gap.joint_offset  # the encoders' zero offset (0: none)
        if self.gap.obs_noise_std > 0.0:  # sensor noise on what is measured (positions, velocities)
            pos = pos + self.env.noise(pos.shape)
            vel = vel + self.env.noise(vel.shape)
        if not self._mujoco and (self.gap.obs_noise_std > 0.0 or self.gap.joint_offset != 0.0):
            pos = (pos + math.pi) % (2 * math.pi) - math.pi
        return JointReading(self.joint_names, pos, vel, eff)

    def close(self) -> None:
        self.env.close()

