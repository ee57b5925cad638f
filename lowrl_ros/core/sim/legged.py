"""A legged robot in MuJoCo run like a ros2_control robot, and the gymnasium task its policy trains on (no ROS).

The body is gymnasium's Ant model (``gymnasium/envs/mujoco/assets/ant.xml``: a torso and four legs,
8 hinge joints ``hip_1..4`` / ``ankle_1..4``, torque motors of gear 150), so it installs from PyPI
with gymnasium and mujoco. Three things make it a robot rather than an RL benchmark:

- **Position control at the physics rate**: :class:`LeggedRobot` takes joint position targets and a
  PD loop turns them into torques every physics step (``tau = kp (q* - q) - kd qdot``, clipped to the
  motor range +-150 N m), as a ros2_control position interface on a real leg does.
- **Sensors as a robot has them**: joint positions/velocities/efforts by name, and an IMU on the
  torso (orientation quaternion, angular velocity in the body frame, linear acceleration from an
  accelerometer site, which reads +9.81 m/s^2 up when standing still).
- **A velocity command** (vx, vy, yaw rate), what a ``cmd_vel`` Twist carries.

:class:`LeggedAnt` (gymnasium id ``lowrl/LeggedAnt-v0``) is the training task. Its observation is
exactly what the policy node builds from ``config/robots/legged_ant.yaml`` (the robot file) for the
same robot state: base angular velocity * 0.25, projected gravity, the velocity command (clipped to
the file's ranges), joint positions minus the default pose, joint velocities * 0.05, the last
action. The action is Isaac Lab's joint position offset: ``target = default_pose + 0.5 * a`` with
``a`` clipped to [-1, 1], then clamped to the joint limits and rate limited, as the robot file's
``action`` section makes the policy node do. The reward tracks the commanded velocity (exp kernels
on the body-frame xy velocity and the yaw rate) with upright, action-rate and torque penalties; a
new command is drawn per episode, and an episode ends on a fall or after ``max_episode_steps``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lowrl_ros.core.sim.reality_gap import RealityGapConfig, edit_mujoco_model
from lowrl_ros.core.sim.sim_robot import JointReading, SimRobotConfig, StepOutcome, WallClock, encode_truth

ENV_ID = "lowrl/LeggedAnt-v0"
# The policy's joint order (the model's joint order) and the controller's order (the actuator order
# of ant.xml): they differ on purpose, the robot file maps one onto the other by name.
JOINTS = ("hip_1", "ankle_1", "hip_2", "ankle_2", "hip_3", "ankle_3", "hip_4", "ankle_4")
CONTROLLER_JOINTS = ("hip_4", "ankle_4", "hip_1", "ankle_1", "hip_2", "ankle_2", "hip_3", "ankle_3")
# Standing pose: hips straight, each ankle at the middle of its range (30..70 deg, sign by leg).
DEFAULT_POSE = (0.0, 0.87, 0.0, -0.87, 0.0, -0.87, 0.0, 0.87)
ACTION_SCALE = 0.5
RATE_LIMIT = 15.0  # rad/s: the robot file's action.rate_limit
ANG_VEL_SCALE = 0.25
JOINT_VEL_SCALE = 0.05
COMMAND_RANGES = ((-1.0, 1.0), (-0.5, 0.5), (-1.0, 1.0))  # the robot file's velocity_command ranges
OBS_DIM = 3 + 3 + 3 + 8 + 8 + 8


@dataclass(frozen=True)
class LeggedConfig:
    """Physics and control settings of the legged robot (the sim robot node exposes the main ones)."""

    physics_dt: float = 0.005  # s: 200 Hz physics, the PD loop and the JointState rate
    kp: float = 100.0  # N m / rad
    kd: float = 10.0  # N m s / rad
    torque_limit: float = 150.0  # N m: ant.xml's motor gear 150 times ctrlrange 1

    def __post_init__(self) -> None:
        if not 1e-4 <= self.physics_dt <= 0.02:
            raise ValueError(f"physics_dt={self.physics_dt} s is outside 0.0001..0.02; e.g. 0.005 (200 Hz)")
        if self.kp <= 0 or self.kd < 0 or self.torque_limit <= 0:
            raise ValueError(f"PD gains must be kp > 0, kd >= 0, torque_limit > 0; got kp={self.kp}, kd={self.kd}, "
                             f"torque_limit={self.torque_limit}")


def ant_xml_path() -> Path:
    """gymnasium's ant.xml (the model this robot is built from)."""
    import gymnasium  # the sim is off-board / test only; the robot side never imports it

    return Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / "ant.xml"


def _model_xml(physics_dt: float) -> str:
    """ant.xml with an IMU site and sensors on the torso and our physics step."""
    xml = ant_xml_path().read_text()
    xml = re.sub(r'timestep="[0-9.]+"', f'timestep="{physics_dt!r}"', xml, count=1)
    xml = xml.replace('<geom name="torso_geom"', '<site name="imu" pos="0 0 0" size="0.01"/>\n      '
                                                  '<geom name="torso_geom"', 1)
    sensors = ('<sensor><framequat name="imu_quat" objtype="site" objname="imu"/>'
               '<gyro name="imu_gyro" site="imu"/><accelerometer name="imu_acc" site="imu"/></sensor>')
    return xml.replace("</mujoco>", sensors + "\n</mujoco>")


def quat_wxyz_to_xyzw(q: np.ndarray) -> np.ndarray:
    """MuJoCo's (w, x, y, z) as ROS's (x, y, z, w)."""
    return np.array([q[1], q[2], q[3], q[0]], dtype=np.float64)


def _rpy_quat(roll: float, pitch: float) -> np.ndarray:
    """(w, x, y, z) of a rotation by ``roll`` about x then ``pitch`` about y (body frame)."""
    cr, sr, cp, sp = math.cos(roll / 2), math.sin(roll / 2), math.cos(pitch / 2), math.sin(pitch / 2)
    return np.array([cr * cp, sr * cp, cr * sp, sr * sp])


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of (w, x, y, z) quaternions."""
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def projected_gravity_wxyz(q: np.ndarray) -> np.ndarray:
    """Gravity's direction in the body frame from a body-to-world quaternion (w, x, y, z); upright -> (0, 0, -1)."""
    w, x, y, z = (float(v) for v in q / np.linalg.norm(q))
    return -np.array([2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)])


class LeggedRobot:
    """The Ant body under PD position control: ``set_targets`` then ``step`` (one physics step).

    ``gap`` (a :class:`RealityGapConfig`) makes it the "real" robot: this class is the one place the
    legged gap is applied, for :class:`LeggedAnt` (in-process) and :class:`LeggedSim` (the sim robot
    node) alike: model edits here, latency in :meth:`step`, sensor errors in the sensor methods.
    """

    def __init__(self, config: LeggedConfig | None = None, gap: RealityGapConfig | None = None) -> None:
        import mujoco

        self.config = config or LeggedConfig()
        self._mj = mujoco
        self.model = mujoco.MjModel.from_xml_string(_model_xml(self.config.physics_dt))
        self.data = mujoco.MjData(self.model)
        jid = [mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, n) for n in JOINTS]
        self._qpos = np.array([self.model.jnt_qposadr[j] for j in jid], dtype=np.intp)
        self._qvel = np.array([self.model.jnt_dofadr[j] for j in jid], dtype=np.intp)
        self.lower = np.array([self.model.jnt_range[j][0] for j in jid])
        self.upper = np.array([self.model.jnt_range[j][1] for j in jid])
        # actuator i drives joint _act[i] (policy order index). The PD loop runs inside MuJoCo's step:
        # each motor becomes an affine actuator, force = kp ctrl - kp q - kd qdot, clipped to the motor's
        # force range (gear 150 x ctrlrange 1 in ant.xml), with ctrl the position target. One mj_step call
        # then runs many physics steps with the loop closed at every one of them.
        act_joint = [int(self.model.actuator_trnid[i][0]) for i in range(self.model.nu)]
        self._act = np.array([jid.index(j) for j in act_joint], dtype=np.intp)
        c = self.config
        for i in range(self.model.nu):
            self.model.actuator_gear[i, 0] = 1.0
            self.model.actuator_gaintype[i] = mujoco.mjtGain.mjGAIN_FIXED
            self.model.actuator_gainprm[i, :3] = (c.kp, 0.0, 0.0)
            self.model.actuator_biastype[i] = mujoco.mjtBias.mjBIAS_AFFINE
            self.model.actuator_biasprm[i, :3] = (0.0, -c.kp, -c.kd)
            self.model.actuator_ctrllimited[i] = 0
            self.model.actuator_forcelimited[i] = 1
            self.model.actuator_forcerange[i] = (-c.torque_limit, c.torque_limit)
        self._sensor = {}
        for name in ("imu_quat", "imu_gyro", "imu_acc"):
            s = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SENSOR, name)
            adr, dim = int(self.model.sensor_adr[s]), int(self.model.sensor_dim[s])
            self._sensor[name] = slice(adr, adr + dim)
        self._torso = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, "torso")
        # implicitfast: the PD damping is integrated implicitly (stable at any kd), and it is ~3x cheaper
        # than ant.xml's RK4 per step.
        self.model.opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
        self._torque_idx = np.argsort(self._act)  # policy order -> actuator index
        self.targets = np.array(DEFAULT_POSE)
        self.time = 0.0
        self.gap = RealityGapConfig()
        self._latency: list[np.ndarray] = []
        self._noise = np.random.default_rng(0)
        if gap is not None and not gap.is_identity:
            self.apply_gap(gap)

    def apply_gap(self, gap: RealityGapConfig) -> None:
        """Make this robot differ from the simulation by ``gap`` (once, on a fresh robot); ValueError if a field
        does not apply to the legged robot."""
        if not self.gap.is_identity:
            raise ValueError("this LeggedRobot already has a reality gap; make a new one for another gap")
        if gap.action_delay_steps:
            raise ValueError("action_delay_steps is not used by the legged robot (its control step differs between "
                             "LeggedAnt and the sim robot node); use latency_physics_steps instead")
        n = len(JOINTS)
        per = {name: RealityGapConfig.per_joint(getattr(gap, name), n, name)
               for name in ("motor_strength", "kp_scale", "kd_scale", "encoder_offset")}
        self._gyro_bias = RealityGapConfig.per_joint(gap.gyro_bias, 3, "gyro_bias")
        self._tilt_bias = RealityGapConfig.per_joint(gap.tilt_bias, 2, "tilt_bias")
        self._offset = per["encoder_offset"] + gap.joint_offset
        edit_mujoco_model(self.model, gap)  # mass, inertia, friction, damping, actuator_gain: as the wrapper does
        c = self.config
        for i in range(self.model.nu):
            j = self._act[i]  # the policy-order joint motor i drives
            kp, kd = c.kp * per["kp_scale"][j], c.kd * per["kd_scale"][j]
            self.model.actuator_gainprm[i, 0] = kp
            self.model.actuator_biasprm[i, 1:3] = (-kp, -kd)
            limit = c.torque_limit * per["motor_strength"][j]
            self.model.actuator_forcerange[i] = (-limit, limit)
        self.gap = gap
        self._latency = []

    def _measured_noise(self, shape: int, std: float) -> np.ndarray:
        return self._noise.normal(0.0, std, shape) if std > 0.0 else np.zeros(shape)

    @property
    def dt(self) -> float:
        return self.config.physics_dt

    def reset(self, rng: np.random.Generator | None = None, noise: float = 0.0) -> None:
        """Default pose, torso 0.75 m up (it settles onto its legs in ~0.3 s), targets = default pose."""
        self._mj.mj_resetData(self.model, self.data)
        self.data.qpos[:3] = (0.0, 0.0, 0.6)
        self.data.qpos[3:7] = (1.0, 0.0, 0.0, 0.0)
        pose = np.array(DEFAULT_POSE)
        if rng is not None and noise > 0:
            pose = pose + rng.uniform(-noise, noise, pose.shape)
        self.data.qpos[self._qpos] = np.clip(pose, self.lower, self.upper)
        # The latency line is emptied first, so set_targets writes the default pose into ctrl (mj_resetData zeroed
        # it) and the line below starts full of it, in every episode, not only the first.
        self._latency = []
        self.set_targets(np.array(DEFAULT_POSE))
        self.time = 0.0
        g = self.gap
        # The latency line starts full of the default pose; noise reseeded from the episode's rng (only when
        # there is noise: the identity draws nothing and stays bit-identical).
        self._latency = [self.data.ctrl.copy() for _ in range(g.latency_physics_steps)]
        if rng is not None and (g.obs_noise_std > 0.0 or g.imu_noise_std > 0.0):
            self._noise = np.random.default_rng(int(rng.integers(2**62)))
        self._mj.mj_forward(self.model, self.data)

    def set_targets(self, targets: np.ndarray) -> None:
        """Joint position targets in the policy order (rad); NaN/Inf or a wrong size is refused."""
        t = np.asarray(targets, dtype=np.float64).ravel()
        if t.size != len(JOINTS) or not np.isfinite(t).all():
            raise ValueError(f"position targets must be {len(JOINTS)} finite values ({', '.join(JOINTS)}); got "
                             f"{t.tolist()}")
        self.targets = t
        if not self._latency:
            self.data.ctrl[:] = t[self._act]

    def step(self, n: int = 1) -> None:
        """``n`` physics steps with the PD loop closed on the current targets at every one of them.

        With ``latency_physics_steps`` d the motors act at each physics step on the targets set d steps
        before (a FIFO of one entry per physics step)."""
        if not self._latency:
            self._mj.mj_step(self.model, self.data, n)
        else:
            want = self.targets[self._act]
            for _ in range(n):
                self._latency.append(want)
                self.data.ctrl[:] = self._latency.pop(0)
                self._mj.mj_step(self.model, self.data, 1)
        self.time += n * self.config.physics_dt

    # ----- sensors -----
    def joint_positions(self) -> np.ndarray:
        """Measured joint positions (rad, policy order): with a gap, plus encoder offsets and noise."""
        q = self.data.qpos[self._qpos].copy()
        if self.gap.is_identity:
            return q
        return q + self._offset + self._measured_noise(q.size, self.gap.obs_noise_std)

    def joint_velocities(self) -> np.ndarray:
        qd = self.data.qvel[self._qvel].copy()
        if self.gap.obs_noise_std > 0.0:
            qd = qd + self._measured_noise(qd.size, self.gap.obs_noise_std)
        return qd

    def true_joint_positions(self) -> np.ndarray:
        """The joint positions without the gap's sensor errors (ground truth)."""
        return self.data.qpos[self._qpos].copy()

    def joint_efforts(self) -> np.ndarray:
        """The PD torque applied in the last step (N m, policy order), as a motor's current sensor reads it."""
        return self.data.actuator_force[self._torque_idx].copy()

    def imu(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(orientation x, y, z, w; angular velocity rad/s in the body frame; linear acceleration m/s^2, body)."""
        s = self.data.sensordata
        quat, gyro = s[self._sensor["imu_quat"]].copy(), s[self._sensor["imu_gyro"]].copy()
        g = self.gap
        if not g.is_identity:
            gyro = gyro + self._gyro_bias + self._measured_noise(3, g.imu_noise_std)
            roll, pitch = self._tilt_bias + self._measured_noise(2, g.imu_noise_std)
            if roll != 0.0 or pitch != 0.0:  # the IMU's frame is off by a small roll/pitch rotation
                quat = _quat_mul(quat, _rpy_quat(roll, pitch))
        return quat_wxyz_to_xyzw(quat), gyro, s[self._sensor["imu_acc"]].copy()

    def base_quat_wxyz(self) -> np.ndarray:
        return self.data.qpos[3:7].copy()

    def base_height(self) -> float:
        return float(self.data.qpos[2])

    def heading(self) -> float:
        """The torso's yaw in the world (rad, + left of the world x axis)."""
        w, x, y, z = self.data.qpos[3:7]
        return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))

    def base_velocity_yaw_frame(self) -> tuple[np.ndarray, float]:
        """Linear velocity (x, y) in the heading frame and the yaw rate (world z)."""
        w, x, y, z = self.data.qpos[3:7]
        yaw = self.heading()
        v = self.data.qvel[0:3]
        c, s = math.cos(yaw), math.sin(yaw)
        vxy = np.array([c * v[0] + s * v[1], -s * v[0] + c * v[1]])
        # qvel[3:6] of a free joint is the angular velocity in the body frame; world z = R row 3 . omega
        omega = self.data.qvel[3:6]
        r3 = np.array([2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)])
        return vxy, float(r3 @ omega)


def tracking_terms(robot: LeggedRobot, command: np.ndarray) -> tuple[dict[str, float], np.ndarray, float]:
    """Velocity tracking (exp kernels) and upright reward terms; also the heading-frame velocity and yaw rate."""
    vxy, yaw_rate = robot.base_velocity_yaw_frame()
    gravity = projected_gravity_wxyz(robot.base_quat_wxyz())
    lin_err = float(np.sum((command[:2] - vxy) ** 2))
    yaw_err = (command[2] - yaw_rate) ** 2
    terms = {"track_lin_vel": 1.5 * math.exp(-lin_err / 0.05), "track_yaw": 0.5 * math.exp(-yaw_err / 0.1),
             "upright": -1.0 * float(gravity[0] ** 2 + gravity[1] ** 2)}
    return terms, vxy, yaw_rate


def fallen(robot: LeggedRobot) -> bool:
    """Torso on the ground or tilted more than 60 degrees."""
    return robot.base_height() < 0.28 or projected_gravity_wxyz(robot.base_quat_wxyz())[2] > -0.5


def observation(robot: LeggedRobot, command: np.ndarray, last_action: np.ndarray) -> np.ndarray:
    """The policy's observation for the robot's state, term by term as the robot file defines it."""
    quat_xyzw, gyro, _ = robot.imu()
    w_first = np.array([quat_xyzw[3], *quat_xyzw[:3]])
    cmd = np.clip(np.asarray(command, dtype=np.float64), [r[0] for r in COMMAND_RANGES],
                  [r[1] for r in COMMAND_RANGES])
    return np.concatenate([gyro * ANG_VEL_SCALE, projected_gravity_wxyz(w_first), cmd,
                           robot.joint_positions() - np.array(DEFAULT_POSE),
                           robot.joint_velocities() * JOINT_VEL_SCALE, last_action]).astype(np.float32)


def action_to_targets(action: np.ndarray, previous: np.ndarray, period_s: float, robot: LeggedRobot) -> np.ndarray:
    """The robot file's action section: clip a to [-1, 1], default + 0.5 a, joint limits, rate limit."""
    a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
    target = np.clip(np.array(DEFAULT_POSE) + ACTION_SCALE * a, robot.lower, robot.upper)
    step = RATE_LIMIT * period_s
    return previous + np.clip(target - previous, -step, step)


try:
    import gymnasium as gym
    from gymnasium import spaces
except ImportError:  # pragma: no cover - gymnasium comes with the package's sim extras
    gym = None


class LeggedAnt(gym.Env if gym is not None else object):
    """Velocity tracking with the legged Ant: see the module docstring for observation, action, reward.

    Args:
        policy_period_s: seconds per policy step (a whole number of physics steps; 0.02..0.05).
        max_episode_steps: time limit in policy steps (the registered id sets it through gymnasium too).
        command_ranges: ((vx lo, hi), (vy lo, hi), (yaw rate lo, hi)) the per-episode command is drawn from.
        config: physics and PD settings.
        gap: the reality gap of the robot (None: the simulation itself); LeggedRobot applies it.
    """

    metadata = {"render_modes": []}
    render_mode = None

    def __init__(self, policy_period_s: float = 0.04, max_episode_steps: int = 500,
                 command_ranges=((0.0, 0.6), (-0.1, 0.1), (-0.2, 0.2)), config: LeggedConfig | None = None,
                 gap: RealityGapConfig | None = None) -> None:
        self.robot = LeggedRobot(config, gap)
        substeps = policy_period_s / self.robot.dt
        if not 0.02 <= policy_period_s <= 0.05 or abs(substeps - round(substeps)) > 1e-6:
            raise ValueError(f"policy_period_s={policy_period_s} must be 0.02..0.05 s and a whole number of physics "
                             f"steps ({self.robot.dt} s); e.g. 0.04")
        self.substeps = int(round(substeps))
        self.period = policy_period_s
        self.max_episode_steps = max_episode_steps
        self.command_ranges = np.asarray(command_ranges, dtype=np.float64)
        self.observation_space = spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (len(JOINTS),), np.float32)
        self.command = np.zeros(3)
        self.last_action = np.zeros(len(JOINTS))
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.robot.reset(self.np_random, noise=0.05)
        lo, hi = self.command_ranges[:, 0], self.command_ranges[:, 1]
        self.command = self.np_random.uniform(lo, hi)
        if options and "command" in options:
            self.command = np.asarray(options["command"], dtype=np.float64)
        self.last_action = np.zeros(len(JOINTS))
        self._steps = 0
        return observation(self.robot, self.command, self.last_action), {"command": self.command.copy()}

    def step(self, action):
        a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        r = self.robot
        r.set_targets(action_to_targets(a, r.targets, self.period, r))
        r.step(self.substeps)
        tau = r.data.actuator_force
        torque_sq = float(tau @ tau)  # at the last physics step of the period
        terms, vxy, yaw_rate = tracking_terms(r, self.command)
        terms["action_rate"] = -0.02 * float(np.sum((a - self.last_action) ** 2))
        terms["torque"] = -2e-6 * torque_sq
        reward = sum(terms.values())
        self.last_action = a
        self._steps += 1
        fell = fallen(r)
        truncated = self._steps >= self.max_episode_steps
        info = {"command": self.command.copy(), "velocity": np.array([vxy[0], vxy[1], yaw_rate]),
                "reward_terms": terms}
        return observation(r, self.command, a), float(reward), bool(fell), bool(truncated and not fell), info


def register() -> None:
    """Register ``lowrl/LeggedAnt-v0`` with gymnasium (idempotent)."""
    if gym is not None and ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point="lowrl_ros.core.sim.legged:LeggedAnt", max_episode_steps=500)


register()


def make(**kwargs: Any) -> gym.Env:
    """``gym.make(ENV_ID, **kwargs)``: the env factory to hand SB3's ``make_vec_env`` (``make_vec_env(legged.make,
    env_kwargs=...)``). Given the id string instead, make_vec_env asks gym.make for ``render_mode="rgb_array"``
    (for video recording), which LeggedAnt does not render, so gymnasium warns at every env it makes."""
    return gym.make(ENV_ID, **kwargs)


# One name per observation entry, as the policy node's robot file terms name them (contract obs_names).
OBS_NAMES = tuple(
    [f"imu_angular_velocity[{a}]" for a in "xyz"] + [f"projected_gravity[{a}]" for a in "xyz"]
    + [f"velocity_command[{a}]" for a in ("lin_x", "lin_y", "ang_z")]
    + [f"joint_position[{j}]" for j in JOINTS] + [f"joint_velocity[{j}]" for j in JOINTS]
    + [f"last_action[{j}]" for j in JOINTS])


class LeggedSim:
    """The legged robot as the sim robot node drives it (``env_id: LeggedAnt``): one physics step per tick.

    The same interface as :class:`lowrl_ros.core.sim.sim_robot.SimRobot` (``step``, ``joints``,
    ``check_action``, ``joint_names``, ``action_dim``, ``episodes``) plus ``imu()`` and
    ``set_velocity_command()``. A command is joint position targets in the CONTROLLER's order
    (``CONTROLLER_JOINTS``, ant.xml's actuator order, as a forward_command_controller's ``joints``
    parameter lists them); until the first one arrives the robot holds its default pose
    (``hold_command``). ``step`` runs the physics steps the wall clock asks for since the last call
    (at least 1, at most ``max_catch_up``), so the simulation keeps real time when a tick comes late.
    A fall (``fallen``) or ``max_episode_steps`` physics steps end an episode; the robot is put back
    on its feet at the default pose. The reward is the velocity-tracking and upright terms of
    :class:`LeggedAnt` for the newest ``cmd_vel``.
    """

    def __init__(self, physics_dt: float = 0.005, max_episode_steps: int = 0, seed: int = 0,
                 realtime: bool = True, max_catch_up: int = 8, gap: RealityGapConfig | None = None) -> None:
        self.robot = LeggedRobot(LeggedConfig(physics_dt=physics_dt), gap)
        self._wall = WallClock(physics_dt, max_catch_up)
        self._rng = np.random.default_rng(seed)
        self.joint_names = JOINTS
        self.controller_joints = CONTROLLER_JOINTS
        self.action_dim = len(JOINTS)
        self._to_policy = np.array([CONTROLLER_JOINTS.index(j) for j in JOINTS], dtype=np.intp)
        self.hold_command = np.array([DEFAULT_POSE[JOINTS.index(j)] for j in CONTROLLER_JOINTS])
        self.max_episode_steps = max_episode_steps
        self.realtime = realtime
        self.command = np.zeros(3)
        self.episodes = 0
        self.returns: list[float] = []
        self.falls = 0
        self._return, self._steps = 0.0, 0
        self.robot.reset(self._rng, noise=0.0)

    @classmethod
    def from_config(cls, config: SimRobotConfig, gap: RealityGapConfig | None = None) -> LeggedSim:
        """The sim robot node's LeggedAnt: physics step = ``config.control_period_s``; ``gap`` as LeggedAnt's."""
        return cls(physics_dt=config.control_period_s, max_episode_steps=config.max_episode_steps, seed=config.seed,
                   gap=gap)

    def check_action(self, action) -> np.ndarray:
        """Position targets (controller order) as a float array; ValueError naming the fix otherwise."""
        arr = np.asarray(action, dtype=np.float64).ravel()
        if arr.size != self.action_dim:
            raise ValueError(f"command has {arr.size} values, the legged robot takes {self.action_dim} position "
                             f"targets in the controller's order ({', '.join(CONTROLLER_JOINTS)})")
        if not np.isfinite(arr).all():
            raise ValueError(f"command {arr.tolist()} is not finite; the controller sent NaN/Inf")
        return arr

    def state_estimate(self) -> tuple[np.ndarray, np.ndarray]:
        """The base's (linear, angular) velocity as the legged reward reads it: x, y in the heading frame, the yaw
        rate about world z (ground truth standing in for a state estimator)."""
        vxy, yaw_rate = self.robot.base_velocity_yaw_frame()
        return np.array([vxy[0], vxy[1], 0.0]), np.array([0.0, 0.0, yaw_rate])

    def set_velocity_command(self, vx: float, vy: float, yaw_rate: float) -> None:
        self.command = np.array([vx, vy, yaw_rate], dtype=np.float64)

    def step(self, action, received_at: float | None = None):
        """Apply the targets (controller order) and advance the physics to the wall clock; the steps that began
        before the command arrived (``received_at``, time.monotonic) keep the previous targets (``WallClock``)."""
        targets = self.check_action(action)[self._to_policy]
        old, new = self._wall.due(received_at) if self.realtime else (0, 1)
        if old:
            self.robot.step(old)
        self.robot.set_targets(targets)
        if new:
            self.robot.step(new)
        n = old + new
        terms, _, _ = tracking_terms(self.robot, self.command)
        reward = sum(terms.values()) * self.robot.dt * n  # per second of tracking, summed over the steps
        self._return += reward
        self._steps += n
        fell = fallen(self.robot)
        done = fell or (self.max_episode_steps > 0 and self._steps >= self.max_episode_steps)
        outcome = StepOutcome(float(reward), bool(done), self._return, self._steps, bool(fell))
        if done:
            self.episodes += 1
            self.falls += int(fell)
            self.returns.append(self._return)
            self._return, self._steps = 0.0, 0
            self.robot.reset(self._rng)
        return outcome

    def reset(self) -> None:
        """Start a new episode now (a reset request from the fine-tuner); the unfinished one is not counted."""
        self._return, self._steps = 0.0, 0
        self.robot.reset(self._rng)

    def joints(self):
        r = self.robot
        return JointReading(JOINTS, r.joint_positions(), r.joint_velocities(), r.joint_efforts())

    def imu(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.robot.imu()

    def true_state(self, stamp: float) -> np.ndarray:
        """The truth row (sim_robot.encode_truth) of the state just published: LeggedAnt's own observation
        (names OBS_NAMES; last_action zero, the policy's to give), the base velocity, the command, the falls.
        Exact only without sensor noise in the gap (the sensors would draw new noise for it)."""
        vxy, yaw_rate = self.robot.base_velocity_yaw_frame()
        obs = observation(self.robot, self.command, np.zeros(len(JOINTS)))
        return encode_truth(stamp, self.falls, (vxy[0], vxy[1], yaw_rate), self.command, obs)

    def position_xy(self) -> np.ndarray:
        """The torso's world x, y (m): ground truth a real robot would need odometry for."""
        return self.robot.data.qpos[:2].copy()

    def heading(self) -> float:
        """The torso's world yaw (rad): ground truth, as position_xy."""
        return self.robot.heading()

    def close(self) -> None:
        pass
