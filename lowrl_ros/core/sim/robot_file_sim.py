"""A robot file's ``sim:`` robot as the sim robot node drives it (``env_id: robot_file``; no ROS).

The node publishes what the robot file's observation terms read, on the robot file's own topics
(``topics``): a JointState (robot-file joint order), the IMU as sensor_msgs/Imu (orientation x, y, z, w,
the IMU site's angular velocity and acceleration) and, when the robot file has a ``velocity_command`` term,
a fixed velocity command (the node's ``command_velocity``). It takes position targets on the robot file's
output topic, in ``output.joints`` order (the robot file's joints when it lists none), and hands them to the
simulator's PD loop (core/sim/robot_sim.py ``RobotSim``); until the first one it holds the default pose.

Physics keeps the wall clock: each ``step`` runs the physics steps (``sim.control.physics_dt``) due since
the last call (at least 1, at most ``max_catch_up``), so how often the node calls it sets only how often
the robot's sensors are published; a command acts from the first physics step that begins after it arrived
(core/sim/sim_robot.py ``WallClock``). The simulator is the one :class:`RobotSimEnv` holds, and the truth row
(``true_state``) is that env's own observation of the state just published: the policy node's
ObservationBuilder over the simulator's true samples, so `lowrl sim2sim` compares the ROS path with the
training path itself. Exact only on the nominal model (no sensor noise: the sensors would draw again).
A fall (the base tilted past 60 degrees, RobotSimEnv's default end) counts and puts the robot back.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable

import numpy as np

from lowrl_ros.core.sim.reality_gap import RealityGapConfig
from lowrl_ros.core.runtime.robot_file import RobotFile
from lowrl_ros.core.sim.robot_env import FALL_UP, RobotSimEnv
from lowrl_ros.core.sim.robot_sim import Gap, load_gap_file
from lowrl_ros.core.sim.sim_robot import JointReading, SimRobotConfig, StepOutcome, WallClock, encode_truth


class RobotFileSim:
    """The sim robot node's interface (``step``, ``joints``, ``imu``, ``true_state``, ``check_action``,
    ``hold_command``, ``set_velocity_command``, ``topics``) over a robot file's simulator."""

    def __init__(self, robot_file: str | Path, seed: int = 0, max_episode_steps: int = 0, realtime: bool = True,
                 max_catch_up: int = 8, clock: Callable[[], float] = time.monotonic, gap: Gap | None = None) -> None:
        import mujoco

        self.env = RobotSimEnv(robot_file, gap)
        self.env.reset(seed=seed, options={"command": np.zeros(3)})
        self.sim = self.env.sim
        robot = self.env.robot
        self.joint_names = tuple(robot.joints)
        output = robot.raw.get("output") or {}
        self.controller_joints = tuple(output.get("joints") or robot.joints)
        unknown = sorted(set(self.controller_joints) - set(self.joint_names))
        if unknown or len(self.controller_joints) != len(self.joint_names):
            raise ValueError(f"{robot.where('output.joints')}: {', '.join(unknown) or 'a joint count'} does not match "
                             f"the robot file's joints ({', '.join(self.joint_names)})")
        self._to_robot = np.array([self.controller_joints.index(j) for j in self.joint_names], dtype=np.intp)
        pose = np.asarray(robot.default_pose, dtype=np.float64)
        self.hold_command = np.array([pose[self.joint_names.index(j)] for j in self.controller_joints])
        self.action_dim = len(self.joint_names)
        spec = self.env.spec_obs
        by_type = {t.msg_type: t.topic for t in spec.topics}
        self.topics = {"joint_states_topic": by_type.get("joint_state", "joint_states"),
                       "imu_topic": by_type.get("imu", "imu"), "cmd_vel_topic": by_type.get("twist", "cmd_vel"),
                       "command_topic": output.get("topic") or "joint_group_position_controller/commands",
                       "state_estimate_topic": _state_estimate_topic(robot)}
        self.physics_dt = self.sim.config.physics_dt
        self.max_episode_steps, self.realtime = max_episode_steps, realtime
        self._wall = WallClock(self.physics_dt, max_catch_up, clock)
        self._base = mujoco.mj_name2id(self.sim.model, mujoco.mjtObj.mjOBJ_BODY, self.sim.config.base_body or "")
        self.episodes, self.falls = 0, 0
        self.returns: list[float] = []
        self._steps = 0
        self._targets = self.hold_command[self._to_robot].copy()

    @classmethod
    def from_config(cls, config: SimRobotConfig, gap: RealityGapConfig | None = None) -> RobotFileSim:
        """The sim robot node's ``env_id: robot_file``: its ``robot_file``, ``seed``, ``max_episode_steps``. The
        node's ``gap.*`` parameters are the gymnasium envs' gap, not this simulator's (core/sim/robot_sim.py
        ``Gap``): a non-identity one is refused rather than silently ignored."""
        if gap is not None and gap != RealityGapConfig():
            raise ValueError(f"env_id robot_file takes its reality gap from gap_file (a gap file of the robot file's "
                             f"simulator); the gap.* parameters ({gap.describe()}) are LeggedAnt's: leave them at "
                             "their defaults")
        return cls(config.robot_file, seed=config.seed, max_episode_steps=config.max_episode_steps,
                   gap=load_gap_file(config.gap_file) if config.gap_file else None)

    @property
    def gap(self) -> dict:
        """The full gap the simulator runs (every parameter), to print and record."""
        return self.env.gap

    def describe_gap(self) -> str:
        """The gap's parameters that differ from the nominal model, one line ('none' on the nominal model)."""
        return self.env.sim.gap.describe()

    def state_estimate(self) -> tuple[np.ndarray, np.ndarray]:
        """The base's true (linear, angular) velocity in sim.state_estimate_frame: what the robot file's twist reward
        inputs read in training (RobotSimEnv), standing in for the real robot's state estimator."""
        return self.env.sim.state_estimate()

    @property
    def command(self) -> np.ndarray:
        return self.env.command

    def set_velocity_command(self, vx: float, vy: float, yaw_rate: float) -> None:
        self.env.command = np.array([vx, vy, yaw_rate], dtype=np.float64)

    def check_action(self, action) -> np.ndarray:
        """Position targets (``output.joints`` order) as a float array; ValueError naming the fix otherwise."""
        arr = np.asarray(action, dtype=np.float64).ravel()
        if arr.size != self.action_dim:
            raise ValueError(f"command has {arr.size} values, the robot takes {self.action_dim} position targets "
                             f"in output.joints order ({', '.join(self.controller_joints)})")
        if not np.isfinite(arr).all():
            raise ValueError(f"command {arr.tolist()} is not finite; the controller sent NaN/Inf")
        return arr

    def targets(self, action) -> np.ndarray:
        """The PD targets (robot-file joint order) a command in ``output.joints`` order asks for."""
        return self.check_action(action)[self._to_robot]

    def step(self, action, received_at: float | None = None) -> StepOutcome:
        """Apply the targets and advance the physics to the wall clock (one physics step when not realtime); the
        steps that began before the command arrived (``received_at``, on ``clock``) keep the previous targets
        (sim_robot.py ``WallClock``)."""
        targets = self.targets(action)
        old, new = self._wall.due(received_at) if self.realtime else (0, 1)
        if old:
            self.sim.step(self._targets, physics_steps=old)
        if new:
            self.sim.step(targets, physics_steps=new)
        self._targets = targets
        n = old + new
        self._steps += n
        fell = self.sim.base_up() < FALL_UP
        done = fell or (self.max_episode_steps > 0 and self._steps >= self.max_episode_steps)
        outcome = StepOutcome(0.0, bool(done), 0.0, self._steps, bool(fell))
        if done:
            self.episodes += 1
            self.falls += int(fell)
            self.returns.append(0.0)
            self.reset()
        return outcome

    def reset(self) -> None:
        """Back to the default pose (the robot file's reset noise), holding it until the next command; the velocity
        command is kept."""
        self._steps = 0
        self._targets = self.hold_command[self._to_robot].copy()
        self.sim.reset()
        self.env.builder.reset(self.sim.time)

    def joints(self) -> JointReading:
        names, q, v, effort = self.sim.joint_state()
        return JointReading(tuple(names), q, v, effort)

    def imu(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(orientation x, y, z, w; angular velocity; linear acceleration), as sensor_msgs/Imu carries them."""
        return self.sim.imu()

    def true_state(self, stamp: float) -> np.ndarray:
        """The truth row (sim_robot.encode_truth): the training env's observation of this state (entry names
        ObservationSpec.entry_names(); ``last_action`` zero, the policy's to give), the base's (vx, vy, yaw
        rate) as its state estimate reports them (sim.state_estimate_frame), the command, the falls."""
        v, w = self.sim.state_estimate()
        return encode_truth(stamp, self.falls, (v[0], v[1], w[2]), self.env.command, self.env.observe())

    def position_xy(self) -> np.ndarray:
        """The base body's world x, y (m): ground truth for the node's walk log."""
        return self.sim.data.xpos[self._base, :2].copy()

    def heading(self) -> float:
        """The base body's world yaw (rad)."""
        m = self.sim.data.xmat[self._base]
        return math.atan2(m[3], m[0])

    def close(self) -> None:
        self.env.close()


def _state_estimate_topic(robot: RobotFile) -> str:
    """The topic of the robot file's first twist reward input ('' = none): where the state estimate goes."""
    inputs = ((robot.raw.get("reward") or {}).get("inputs") or [])
    return next((str(i.get("topic")) for i in inputs if isinstance(i, dict) and i.get("type") == "twist_stamped"), "")
