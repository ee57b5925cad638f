"""The robot's simulator as a training environment with the robot file's own reward and episode ends.

core/sim/robot_env.py builds the environment from the robot file's ``sim:`` section; the ``reward:``
and ``episode:`` sections are parsed here (core/finetune/rewards.py), where core.sim may not reach, and
handed to it, so a policy retrained in simulation (issue 27) is judged by the same terms as on the robot.
"""
from __future__ import annotations

from pathlib import Path

from lowrl_ros.core.finetune.rewards import EpisodeSpec, RewardSpec
from lowrl_ros.core.runtime.robot_file import RobotFile, load_robot_file
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
