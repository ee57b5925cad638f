"""A gymnasium environment for any robot file with a ``sim:`` section (off-board; MuJoCo).

The point is that the simulator and the robot compute the same observation: the simulator's state is
turned into the samples the robot's drivers publish (a JointState, an Imu, a Twist command) and fed to
the policy node's own :class:`~lowrl_ros.core.runtime.observation.ObservationBuilder`, so scales,
offsets, relative joint positions, histories and the ``last_action`` convention are the robot file's,
computed by the same code. The action goes through the robot file's ``action`` section
(:class:`~lowrl_ros.core.runtime.actions.ActionProcessor`: scale, offset, joint limits, rate limit)
into the simulator's PD targets (core/sim/robot_sim.py), exactly as the policy node sends them.

Per episode a velocity command is drawn uniformly from the ``velocity_command`` term's ``ranges``
(when the robot file has that term), or, with :meth:`use_commands`, from the commands a robot was given.
The reward is the caller's (``reward=``: a core/finetune/rewards.py ``RewardSpec`` from the robot file's
``reward:`` section; core/finetune/sim_env.py builds the env that way) or, without one, :func:`default_reward`
from the simulator's true state. An episode ends on ``episode=`` (the robot file's ``episode:`` section, parsed
by the caller) or, without one, on a tilt over 60 degrees (terminated) or ``max_episode_s`` (truncated).

Whatever the episode section says, an episode terminates when the policy's network output runs away (past
:data:`RUNAWAY` action clips, or not finite; ``info["runaway"]``). Under the ``raw`` convention the output is read
back as ``last_action``: a policy whose output feeds itself with a gain above one grows it geometrically, and PPO
can move a policy there. On the robot the clipped command would go on banging the limits; in training, the
observation and the critic's values would overflow to inf within a few hundred steps (the quadruped's retraining went
NaN that way). Terminating makes it a failure the return sees, as a fall is, and keeps every number finite.

``info`` carries the command, the reward terms and ``gap`` (the full gap in use, :meth:`Gap.as_dict`).
"""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np

from lowrl_ros.core.runtime.actions import ActionProcessor
from lowrl_ros.core.runtime.observation import ObservationBuilder, ObservationSpec
from lowrl_ros.core.runtime.robot_file import RobotFile, load_robot_file
from lowrl_ros.core.sim.robot_sim import Gap, RobotSim, SimConfigError

DEFAULT_RANGES = ((-1.0, 1.0), (-0.5, 0.5), (-1.0, 1.0))  # a velocity_command term without ranges
FALL_UP = math.cos(math.radians(60))  # default episode end: the base tilted past 60 degrees
RUNAWAY = 1e3  # a network output past this many action clips (or not finite) has run away: the episode terminates


def default_reward(v_xy: np.ndarray, w_z: float, command: np.ndarray, up: float, action: np.ndarray,
                   previous: np.ndarray) -> dict[str, float]:
    """The reward without a ``reward:`` section, by term (legged_ant.yaml's shape, core/sim/legged.py):
    1.5 exp(-|cmd_xy - v_xy|^2 / 0.25) + 0.5 exp(-(cmd_wz - w_z)^2 / 0.25) - (1 - up) - 0.01 |a - a_prev|^2."""
    return {"track_lin_vel_xy": 1.5 * math.exp(-float(np.sum((command[:2] - v_xy) ** 2)) / 0.25),
            "track_ang_vel_z": 0.5 * math.exp(-(float(command[2]) - w_z) ** 2 / 0.25),
            "upright": -(1.0 - up),
            "action_rate": -0.01 * float(np.sum((action - previous) ** 2))}


class RobotSimEnv(gym.Env):
    """The robot file's robot in its simulator (see the module docstring).

    Args:
        robot: a RobotFile or the path of one, with a ``sim:`` section.
        gap: the reality gap (a Gap or a gap mapping); None: the nominal model.
        last_action: the policy's ``last_action`` convention ("raw": the network output, Isaac Lab and
            rsl_rl; "action": clipped to the action space), as artifact.last_action_convention says.
        reward: an object with ``compute(obs, action, command, next_obs, fell, effort, now)`` returning
            ``.total``/``.terms`` and ``reset()`` (RewardSpec); None: :func:`default_reward`.
        episode: an object with ``step(obs, now)`` returning None or an end with ``.kind``
            ("terminated"/"truncated") and ``reset()`` (EpisodeSpec); None: tilt > 60 deg or max_episode_s.
        max_episode_s: the default time limit.
    """

    metadata = {"render_modes": []}

    def __init__(self, robot: RobotFile | str | Path, gap: Gap | dict | None = None, *, last_action: str = "raw",
                 reward: Any = None, episode: Any = None, max_episode_s: float = 20.0) -> None:
        self.robot = robot if isinstance(robot, RobotFile) else load_robot_file(robot)
        gap = Gap.from_dict(gap) if isinstance(gap, dict) else gap
        self.sim = RobotSim(self.robot, gap)
        cfg = self.sim.config
        self.spec_obs = ObservationSpec.from_robot_file(self.robot, cfg.period_s)
        arrays = [t.describe() for t in self.spec_obs.terms if t.source == "array"]
        if arrays:
            raise SimConfigError(self.robot.where(f"sim: {arrays[0]} has no simulated source (only joint states, the "
                                                  "IMU, the velocity command and the last action are simulated)"))
        self.builder = ObservationBuilder(self.spec_obs, last_action=last_action)
        n = len(self.robot.joints)
        contract = SimpleNamespace(action_dim=n, action_names=tuple(self.robot.joints), action_scale=None,
                                   action_offset=None)
        try:
            self.processor = ActionProcessor.from_robot_dict(self.robot.raw, contract)
        except ValueError as exc:
            raise SimConfigError(self.robot.where(str(exc))) from exc
        self._topics = {t.msg_type: t.topic for t in self.spec_obs.topics}
        self._imu_array = next((t for t in self.spec_obs.terms if t.source == "imu" and t.msg_type == "array"), None)
        cmd = next((t for t in self.spec_obs.terms if t.term == "velocity_command"), None)
        self._ranges = None if cmd is None else np.array(DEFAULT_RANGES if cmd.ranges is None else cmd.ranges)
        self.reward_spec, self.episode_spec = reward, episode
        self.max_episode_s = float(max_episode_s)
        clip = cfg.action_clip
        self.action_space = gym.spaces.Box(-clip, clip, (n,), np.float32)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (self.spec_obs.obs_dim,), np.float32)
        self.command = np.zeros(3)
        self._commands: np.ndarray | None = None  # use_commands()
        self._command_share = 0.0
        self._prev_action = np.zeros(n)
        self._target: np.ndarray | None = None
        self._obs = np.zeros(self.spec_obs.obs_dim)

    @property
    def gap(self) -> dict[str, Any]:
        """The full gap in use (every parameter), to print and record."""
        return self.sim.gap.as_dict()

    def set_gap(self, gap: Gap | dict) -> None:
        """Use ``gap`` from the next reset on (applied to the model now)."""
        self.sim.set_gap(Gap.from_dict(gap) if isinstance(gap, dict) else gap)

    def use_commands(self, commands: np.ndarray | None, share: float) -> None:
        """From the next reset on, a share ``share`` of the episodes take their velocity command from ``commands``
        (rows of vx, vy, yaw rate: the commands a robot was given, as often as it was given them), the rest from the
        ranges; None or share 0: the ranges only."""
        commands = None if commands is None else np.asarray(commands, dtype=np.float64).reshape(-1, 3)
        self._commands = commands if commands is not None and len(commands) and share > 0 else None
        self._command_share = float(share)

    # ---- gymnasium ------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.sim.rng = self.np_random  # one seeded stream: reset noise, sensor noise, the command
        self.sim.reset()
        if self._ranges is not None:
            self.command = self.np_random.uniform(self._ranges[:, 0], self._ranges[:, 1])
            if self._commands is not None and self.np_random.random() < self._command_share:
                self.command = self._commands[self.np_random.integers(len(self._commands))].copy()
        if options and "command" in options:
            self.command = np.asarray(options["command"], dtype=np.float64)
        self.builder.reset(0.0)
        self._prev_action = np.zeros(self.action_space.shape[0])
        self._target = None
        for spec in (self.reward_spec, self.episode_spec):
            if spec is not None:
                spec.reset()
        self._obs = self.observe()
        return self._obs.astype(np.float32), {"command": self.command.copy(), "gap": self.gap}

    def step(self, action: np.ndarray, raw: np.ndarray | None = None) -> tuple[np.ndarray, float, bool, bool, dict]:
        """As gymnasium's; ``raw``: the network output behind ``action`` where the caller clipped it first (the
        ``raw`` last_action convention reads it back, as the policy node does); None: ``action`` is that output."""
        y = np.clip(np.asarray(action, dtype=np.float64).ravel(), self.action_space.low, self.action_space.high)
        raw = np.asarray(action if raw is None else raw, dtype=np.float64).ravel()
        target = self.processor.transform(y)
        target = self.processor.limit_rate(target, self._target, self.sim.config.period_s)
        self._target = target
        self.sim.step(target)
        runaway = not (np.isfinite(raw).all() and np.abs(raw).max(initial=0.0) <= RUNAWAY * self.action_space.high[0])
        self.builder.set_last_action(y, raw=y if runaway else raw)
        obs = self.observe()
        now = self.sim.time
        fell = self.sim.base_up() < FALL_UP
        if self.reward_spec is not None:
            self._feed_reward_inputs(now)
            res = self.reward_spec.compute(self._obs, y, target, obs, fell=fell, effort=self.sim.torque, now=now)
            reward, terms = res.total, dict(zip(self.reward_spec.names, res.terms.tolist()))
        else:
            v, w = self.sim.base_velocity()
            terms = default_reward(v[:2], float(w[2]), self.command, self.sim.base_up(), y, self._prev_action)
            reward = sum(terms.values())
        terminated = truncated = False
        if self.episode_spec is not None:
            end = self.episode_spec.step(obs, now)
            terminated = end is not None and end.kind == "terminated"
            truncated = end is not None and not terminated
        else:
            terminated, truncated = fell, now >= self.max_episode_s - 1e-9
        terminated = terminated or runaway
        truncated = truncated and not runaway
        self._prev_action, self._obs = y, obs
        info = {"command": self.command.copy(), "reward_terms": terms, "target": target, "runaway": runaway}
        return obs.astype(np.float32), float(reward), bool(terminated), bool(truncated), info

    # ---- the robot's samples, built into the observation by the policy node's own builder --------
    def observe(self) -> np.ndarray:
        """The observation of the simulator's current state, built by the policy node's own builder (also the sim
        robot node's truth, core/sim/robot_file_sim.py)."""
        now = self.sim.time
        b = self.builder
        if "joint_state" in self._topics:
            b.update(self._topics["joint_state"], self.sim.joint_state(), now)
        if "imu" in self._topics or self._imu_array is not None:
            orientation, gyro, acc = self.sim.imu()
            if "imu" in self._topics:
                b.update(self._topics["imu"], (orientation, gyro, acc), now)
            if self._imu_array is not None:
                x, y, z, w = orientation
                q = [x, y, z, w] if self._imu_array.quaternion_order == "xyzw" else [w, x, y, z]
                b.update(self._imu_array.topic, np.array(q), now)
        if "twist" in self._topics:
            c = self.command
            b.update(self._topics["twist"], (c[0], c[1], 0.0, 0.0, 0.0, c[2]), now)
        return b.build(now)

    def _feed_reward_inputs(self, now: float) -> None:
        """Reward-only inputs from the simulator's truth: a twist's linear field is the base's linear velocity,
        its angular field the base's angular velocity (in sim.state_estimate_frame: RobotSim.state_estimate)."""
        estimate = None
        for inp in getattr(self.reward_spec, "inputs", ()):
            if inp.type == "float32_multi_array":
                raise SimConfigError(self.robot.where(f"reward input {inp.name} (a float32_multi_array) has no "
                                                      "simulated source"))
            if estimate is None:
                estimate = self.sim.state_estimate()
            self.reward_spec.set_input(inp.name, estimate[0] if inp.field == "linear" else estimate[1], now)
