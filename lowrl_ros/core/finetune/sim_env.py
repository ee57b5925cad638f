"""The robot's simulator as a training environment with the robot file's own reward and episode ends.

core/sim/robot_env.py builds the environment from the robot file's ``sim:`` section; the ``reward:``
and ``episode:`` sections are parsed here (core/finetune/rewards.py), where core.sim may not reach, and
handed to it, so a policy retrained in simulation (issue 27) is judged by the same terms as on the robot.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lowrl_ros.core.finetune.rewards import EpisodeSpec, RewardSpec
from lowrl_ros.core.runtime.robot_file import RobotFile, load_robot_file
from lowrl_ros.core.sim.evaluate import EVAL_SEED
from lowrl_ros.core.sim.robot_env import RobotSimEnv
from lowrl_ros.core.sim.robot_sim import Gap, load_gap_file


def make_robot_env(robot: RobotFile | str | Path, gap: Gap | dict | None = None, gap_file: str | Path | None = None,
                   *, last_action: str = "raw", max_episode_s: float = 20.0) -> RobotSimEnv:
    """The robot file's simulator env with its reward/episode sections (or the env's defaults without them).

    ``gap_file`` (YAML ``gap: {...}``) and ``gap`` are exclusive; neither: the nominal model."""
    if gap is not None and gap_file is not None:
        raise ValueError("give gap or gap_file, not both")
    robot = robot if isinstance(robot, RobotFile) else load_robot_file(robot)
    env = RobotSimEnv(robot, load_gap_file(gap_file) if gap_file is not None else gap, last_action=last_action,
                      max_episode_s=max_episode_s)
    reward = RewardSpec.from_robot_file(robot, env.spec_obs)
    # A reward the robot's own stack publishes (reward.topic) has no simulated source: the env's default then.
    env.reward_spec = None if reward is None or reward.topic else reward
    env.episode_spec = EpisodeSpec.from_robot_file(robot, env.spec_obs)
    return env


def artifact_episodes(policy_path: str | Path, robot: RobotFile | str | Path, episodes: int = 10, seed: int = EVAL_SEED,
                      gap_file: str | Path | None = None, command: tuple[float, float, float] | None = None,
                      engine: str = "auto") -> list[dict]:
    """A deployed artifact or bundle (int8 as shipped, on the robot runtime's own engine, no torch) in the robot's
    simulator: one row per seeded episode (seed, seed + 1, ...): return, steps, fell, command, and the mean base
    velocity (body frame: vx, vy, yaw rate) after the episode's first second. The network's raw output goes back to the
    environment, which clips it and, for a ``raw``-convention policy, reads it back as ``last_action``, as the
    policy node does. ``command``: a fixed velocity command; None: drawn per episode from the robot file's ranges."""
    from lowrl_ros.core.runtime.artifact import last_action_convention
    from lowrl_ros.core.runtime.bundle import load_bundle

    policy = load_bundle(policy_path, engine).policies["full"]  # the tier the policy node runs at full compute
    env = make_robot_env(robot, gap_file=gap_file, last_action=last_action_convention(policy.contract))
    rows = []
    for ep in range(episodes):
        options = None if command is None else {"command": list(command)}
        obs, info = env.reset(seed=seed + ep, options=options)
        total, n, fell, vel = 0.0, 0, False, []
        while True:
            policy.act(obs)
            obs, reward, term, trunc, _ = env.step(policy.raw_output.copy())
            total += reward
            n += 1
            if n * env.sim.config.period_s > 1.0:
                v, w = env.sim.base_velocity()
                vel.append((v[0], v[1], w[2]))
            if term or trunc:
                fell = bool(term)
                break
        v = np.mean(vel, axis=0) if vel else np.zeros(3)
        rows.append({"seed": seed + ep, "return": float(total), "steps": n, "seconds": n * env.sim.config.period_s,
                     "fell": fell, "command": [float(c) for c in info["command"]],
                     "vx": float(v[0]), "vy": float(v[1]), "yaw_rate": float(v[2])})
    return rows
