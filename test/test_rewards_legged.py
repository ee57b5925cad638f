"""The legged robot file's reward:/episode: sections (config/robots/legged_ant.yaml) against LeggedAnt's own
reward (core/sim/legged.py), and the reward-only inputs they read (no ROS; real MuJoCo)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from lowrl_ros.core.finetune.rewards import EpisodeSpec, RewardSpec
from lowrl_ros.core.runtime.observation import ObservationSpec
from lowrl_ros.core.runtime.robot_file import RobotFileError, load_robot_file, parse_robot_file
from lowrl_ros.core.sim.legged import LeggedAnt

REPO = Path(__file__).resolve().parents[1]
LEGGED_FILE = REPO / "config" / "robots" / "legged_ant.yaml"
# robot-file term -> LeggedAnt's info["reward_terms"] key
SAME = {"track_lin_vel_xy": "track_lin_vel", "track_ang_vel_z": "track_yaw", "upright": "upright",
        "action_rate": "action_rate", "joint_effort": "torque"}


def _specs():
    robot = load_robot_file(LEGGED_FILE)
    spec = ObservationSpec.from_robot_file(robot, 0.04)
    return robot, spec, RewardSpec.from_robot_file(robot, spec), EpisodeSpec.from_robot_file(robot, spec)


def test_legged_robot_file_reward_terms_equal_leggedants_for_the_same_state():
    """Each term within 1e-5 (relative, or 1e-6 absolute): the observation is float32 in LeggedAnt and the
    file's sigma is sqrt(0.05) / sqrt(0.1) to 7 digits.

    The same state: MuJoCo computes sensors (the IMU the observation's projected gravity comes from) before it
    integrates, so after a step they lag the pose LeggedAnt's upright term reads by one physics step (up to
    7e-4 on upright here). ``mj_forward`` re-evaluates them at the current pose (efforts are read first: it
    recomputes the actuator forces too)."""
    import mujoco

    from lowrl_ros.core.sim.legged import observation
    _, spec, rewards, _ = _specs()
    assert rewards.names == tuple(SAME)
    assert [x.name for x in rewards.inputs] == ["base_lin_vel", "base_yaw_rate"]
    env = LeggedAnt()
    obs, _ = env.reset(seed=3, options={"command": [0.4, 0.05, 0.1]})
    assert obs.size == spec.obs_dim
    rng = np.random.default_rng(0)
    rewards.reset()
    checked = 0
    for k in range(40):
        action = np.clip(rng.normal(0.0, 0.6, 8), -1, 1)
        next_obs, reward, terminated, truncated, info = env.step(action)
        vxy, yaw_rate = env.robot.base_velocity_yaw_frame()
        effort = env.robot.joint_efforts()
        mujoco.mj_forward(env.robot.model, env.robot.data)
        next_obs = observation(env.robot, env.command, np.clip(action, -1, 1))
        # what the state estimator stand-in (the sim robot node) publishes: heading-frame twist
        rewards.set_input("base_lin_vel", [vxy[0], vxy[1], 0.0], now=float(k))
        rewards.set_input("base_yaw_rate", [0.0, 0.0, yaw_rate], now=float(k))
        r = rewards.compute(obs, action, np.zeros(8), next_obs, effort=effort, now=float(k))
        ours = dict(zip(rewards.names, r.terms))
        for name, theirs in SAME.items():
            if name == "action_rate" and k == 0:
                continue  # LeggedAnt compares with its reset's zero action; the robot has no previous action yet
            assert ours[name] == pytest.approx(info["reward_terms"][theirs], rel=1e-5, abs=1e-6), (k, name)
        if k > 0:
            assert r.total == pytest.approx(reward, rel=1e-5, abs=1e-5)
            checked += 1
        obs = next_obs
        if terminated or truncated:
            break
    assert checked >= 10
    assert any(abs(v) > 1e-3 for v in r.terms[:2])  # the tracking terms were not trivially zero


def test_legged_episode_ends_on_a_60_degree_tilt_and_after_500_steps():
    _, spec, _, ends = _specs()
    upright = np.zeros(spec.obs_dim)
    upright[3:6] = (0, 0, -1)
    tilted = upright.copy()
    tilted[3:6] = (math.sin(math.radians(61)), 0, -math.cos(math.radians(61)))
    almost = upright.copy()
    almost[3:6] = (math.sin(math.radians(59)), 0, -math.cos(math.radians(59)))
    assert ends.step(almost, 0.0) is None
    end = ends.step(tilted, 0.04)
    assert end.kind == "terminated" and "61 deg > 60 deg" in end.reason
    assert all(ends.step(upright, 0.04 * k) is None for k in range(499))
    assert ends.step(upright, 20.0).kind == "truncated"


def test_a_stale_or_missing_reward_input_makes_the_step_untrainable():
    _, spec, rewards, _ = _specs()
    obs = np.zeros(spec.obs_dim)
    obs[3:6] = (0, 0, -1)
    effort = np.zeros(8)
    assert math.isnan(rewards.compute(obs, np.zeros(8), np.zeros(8), obs, effort=effort, now=1.0).total)  # none yet
    rewards.set_input("base_lin_vel", [0.0, 0.0, 0.0], now=1.0)
    rewards.set_input("base_yaw_rate", [0.0, 0.0, 0.0], now=1.0)
    assert math.isfinite(rewards.compute(obs, np.zeros(8), np.zeros(8), obs, effort=effort, now=1.05).total)
    assert math.isnan(rewards.compute(obs, np.zeros(8), np.zeros(8), obs, effort=effort, now=1.2).total)  # > 0.1 s
    with pytest.raises(ValueError, match="needs 3 finite values"):
        rewards.set_input("base_lin_vel", [1.0, 2.0], now=2.0)
    with pytest.raises(ValueError, match="no reward input is named 'odom'"):
        rewards.set_input("odom", [1.0, 2.0, 3.0], now=2.0)


OBS = [{"term": "imu_angular_velocity", "topic": "imu"}, {"term": "velocity_command", "topic": "cmd_vel"}]
VEL = {"name": "vel", "topic": "est/twist", "type": "twist_stamped"}


@pytest.mark.parametrize("inputs, match", [
    ("nope", r"reward.inputs must be a list"),
    ([{**VEL, "type": "odometry"}], r"reward.inputs\[0\]: type must be one of twist_stamped"),
    ([{**VEL, "field": "angle"}], r"takes field: linear \| angular"),
    ([{**VEL, "type": "float32_multi_array"}], r"float32_multi_array input takes size"),
    ([{**VEL, "rate": 3}], r"reward.inputs\[0\]: unknown key\(s\) rate"),
    ([{**VEL, "name": "imu_angular_velocity"}], r"already an observation term's"),
    ([VEL, {**VEL, "name": "other"}], r"reward.inputs other is read by no term"),
    ([{**VEL, "timeout_s": 0}], r"timeout_s must be a finite positive number"),
])
def test_bad_reward_inputs_are_refused_with_one_line_naming_the_fix(inputs, match):
    robot = parse_robot_file({"joints": ["a"], "observation": OBS, "reward": {
        "inputs": inputs, "terms": [{"term": "track_lin_vel_xy", "velocity": "vel"}]}}, "x.yaml")
    with pytest.raises(RobotFileError, match=match) as err:
        RewardSpec.from_robot_file(robot, ObservationSpec.from_robot_file(robot, 0.02))
    assert "\n" not in str(err.value) and "x.yaml" in str(err.value)


def test_without_the_velocity_input_the_tracking_term_says_how_to_read_it():
    robot = parse_robot_file({"joints": ["a"], "observation": OBS,
                              "reward": {"terms": [{"term": "track_lin_vel_xy"}]}}, "x.yaml")
    with pytest.raises(RobotFileError, match=r"no 'base_lin_vel' term.*reward-only input \(reward.inputs\)"):
        RewardSpec.from_robot_file(robot, ObservationSpec.from_robot_file(robot, 0.02))
    robot = parse_robot_file({"joints": ["a"], "observation": OBS, "reward": {
        "inputs": [{**VEL, "name": "base_lin_vel"}], "terms": [{"term": "track_lin_vel_xy"}]}}, "x.yaml")
    assert RewardSpec.from_robot_file(robot, ObservationSpec.from_robot_file(robot, 0.02)).inputs[0].topic == \
        "est/twist"  # the default reference finds the input of that name
    with pytest.raises(RobotFileError, match="reward: unknown key"):
        RewardSpec.from_robot_file(parse_robot_file({"joints": ["a"], "observation": OBS, "reward": {
            "terms": [{"term": "alive"}], "input": []}}, "x.yaml"), ObservationSpec.from_robot_file(robot, 0.02))
