"""Reward terms and episode ends of the robot file (core/finetune/rewards.py), the transition log's
intervention/reward-term columns, the demo buffer, and the teleop override of the controller (no ROS)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from lowrl_ros.core.finetune.demos import DemoBuffer, load_demos
from lowrl_ros.core.finetune.rewards import EpisodeSpec, RewardSpec
from lowrl_ros.core.finetune.transition_log import (Transition, TransitionLogError, TransitionLogWriter,
                                                    decode_transition, encode_transition, read_log)
from lowrl_ros.core.runtime.observation import ObservationSpec
from lowrl_ros.core.runtime.robot_file import RobotFileError, load_robot_file, parse_robot_file
from lowrl_ros.core.train.replay import Batch

REPO = Path(__file__).resolve().parents[1]

LEGGED_OBS = [
    {"term": "imu_angular_velocity", "topic": "imu", "scale": 0.25},
    {"term": "projected_gravity", "topic": "imu", "quaternion_order": "xyzw"},
    {"term": "velocity_command", "topic": "cmd_vel"},
    {"term": "array", "name": "base_lin_vel", "topic": "odom_vel", "size": 3, "scale": 2.0},
    {"term": "joint_effort", "topic": "joint_states"},
]


def legged(reward=None, episode=None):
    data = {"joints": ["a", "b"], "observation": LEGGED_OBS}
    if reward is not None:
        data["reward"] = reward
    if episode is not None:
        data["episode"] = episode
    robot = parse_robot_file(data, "legged.yaml")
    return robot, ObservationSpec.from_robot_file(robot, 0.02)


def obs_of(ang=(0, 0, 0), grav=(0, 0, -1), cmd=(0, 0, 0), lin=(0, 0, 0), effort=(0, 0)):
    """The observation the builder makes (scaled as the terms say: ang x0.25, lin x2)."""
    return np.concatenate([np.multiply(ang, 0.25), grav, cmd, np.multiply(lin, 2.0), effort]).astype(float)


def test_locomotion_terms_are_computed_as_configured():
    robot, spec = legged(reward={"terms": [
        {"term": "track_lin_vel_xy", "weight": 1.0, "sigma": 0.5},
        {"term": "track_ang_vel_z", "weight": 0.5},
        {"term": "upright", "weight": 2.0},
        {"term": "action_rate", "weight": 0.1},
        {"term": "joint_effort", "weight": 1e-3},
        {"term": "alive", "weight": 0.2}]})
    rewards = RewardSpec.from_robot_file(robot, spec)
    assert rewards.names == ("track_lin_vel_xy", "track_ang_vel_z", "upright", "action_rate", "joint_effort", "alive")
    before = obs_of()
    after = obs_of(ang=(0, 0, 0.3), grav=(0.6, 0, -0.8), cmd=(1.0, 0.2, 0.5), lin=(0.6, 0.2, 0), effort=(3, 4))
    r1 = rewards.compute(before, np.array([0.5, 0.0]), np.zeros(2), after)
    expected = [math.exp(-0.16 / 0.25), 0.5 * math.exp(-0.04 / 0.0625), 2.0 * -0.36, 0.0, 1e-3 * -25, 0.2]
    assert r1.terms == pytest.approx(expected)  # raw values un-scaled: lin 0.6 (not 1.2), ang 0.3 (not 0.075)
    assert r1.total == pytest.approx(sum(expected))
    r2 = rewards.compute(after, np.array([0.0, 1.0]), np.zeros(2), after, fell=True)
    assert r2.terms[3] == pytest.approx(0.1 * -(0.25 + 1.0))  # action rate from the previous action
    assert r2.terms[5] == 0.0  # no alive bonus on a fall
    rewards.reset()
    assert rewards.compute(after, np.array([0.0, 1.0]), np.zeros(2), after).terms[3] == 0.0


def test_pendulum_term_is_pendulum_v1_reward_on_the_shipped_robot_file():
    import gymnasium as gym

    robot = load_robot_file(REPO / "config/robots/pendulum.yaml")
    robot = parse_robot_file({**robot.raw, "reward": {"terms": [{"term": "pendulum"}]}}, robot.path)
    spec = ObservationSpec.from_robot_file(robot, 0.05)
    rewards = RewardSpec.from_robot_file(robot, spec)
    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=1)
    for u in (-2.0, 0.5, 1.7, 0.0):
        nxt, reward, *_ = env.step(np.array([u], dtype=np.float32))
        got = rewards.compute(obs.astype(float), np.array([u]), np.array([u]), nxt.astype(float))
        assert got.total == pytest.approx(float(reward), rel=1e-5, abs=1e-5)
        obs = nxt


def test_joint_effort_without_an_effort_observation_reads_the_joint_state():
    robot = parse_robot_file({"joints": ["a"], "observation": LEGGED_OBS[:3],
                              "reward": {"terms": [{"term": "joint_effort", "weight": 2.0}]}}, "x.yaml")
    rewards = RewardSpec.from_robot_file(robot, ObservationSpec.from_robot_file(robot, 0.02))
    assert rewards.needs_effort
    obs = obs_of()[:9]
    assert math.isnan(rewards.compute(obs, np.zeros(1), np.zeros(1), obs).total)  # no JointState yet: not trained on
    assert rewards.compute(obs, np.zeros(1), np.zeros(1), obs, effort=np.array([3.0])).total == -18.0
    _, spec = legged()
    assert not RewardSpec.parse({"terms": [{"term": "joint_effort"}]}, spec).needs_effort  # observed: the term


def test_reward_config_errors_name_the_entry_and_the_fix():
    with pytest.raises(RobotFileError, match=r"reward.terms\[0\].*term must be one of"):
        RewardSpec.from_robot_file(*legged(reward={"terms": [{"term": "speed"}]}))
    with pytest.raises(RobotFileError, match="no observation term is named 'odom'"):
        RewardSpec.from_robot_file(*legged(reward={"terms": [{"term": "track_lin_vel_xy", "velocity": "odom"}]}))
    with pytest.raises(RobotFileError, match="sigma must be a finite positive number"):
        RewardSpec.from_robot_file(*legged(reward={"terms": [{"term": "track_ang_vel_z", "sigma": 0}]}))
    with pytest.raises(RobotFileError, match="either terms"):
        RewardSpec.from_robot_file(*legged(reward={"terms": [], "topic": "r"}))
    with pytest.raises(RobotFileError, match="unknown top-level key"):
        parse_robot_file({"joints": ["a"], "observation": LEGGED_OBS, "rewards": {}}, "x.yaml")
    assert RewardSpec.from_robot_file(*legged(reward={"topic": "/my/reward"})).topic == "/my/reward"
    assert RewardSpec.from_robot_file(*legged()) is None


def test_episode_ends_on_a_fall_or_the_time_limit():
    robot, spec = legged(episode={"fall_tilt_deg": 45, "time_limit_steps": 5, "time_limit_s": 100.0})
    ends = EpisodeSpec.from_robot_file(robot, spec)
    upright = obs_of()
    tilted = obs_of(grav=(math.sin(math.radians(50)), 0, -math.cos(math.radians(50))))
    assert ends.tilt(tilted) == pytest.approx(math.radians(50))
    assert [ends.step(upright, t) for t in range(4)] == [None] * 4
    end = ends.step(upright, 4.0)
    assert end.kind == "truncated" and "5 steps" in end.reason
    end = ends.step(tilted, 5.0)  # the count restarted; a fall ends at once
    assert end.kind == "terminated" and "50 deg > 45 deg" in end.reason
    timed = EpisodeSpec.parse({"time_limit_s": 1.0}, spec)
    assert timed.step(upright, 10.0) is None and timed.step(upright, 11.0).kind == "truncated"
    with pytest.raises(RobotFileError, match="fall_tilt_deg 200 must be below 180"):
        EpisodeSpec.from_robot_file(*legged(episode={"fall_tilt_deg": 200}))
    with pytest.raises(RobotFileError, match="unknown key"):
        EpisodeSpec.from_robot_file(*legged(episode={"max_steps": 3}))


def test_cut_first_ends_the_recorded_episodes_sooner_then_the_file_limits_again():
    robot, spec = legged(episode={"fall_tilt_deg": 45, "time_limit_steps": 5})
    upright, tilted = obs_of(), obs_of(grav=(math.sin(math.radians(50)), 0, -math.cos(math.radians(50))))
    ends = EpisodeSpec.from_robot_file(robot, spec)
    ends.cut_first(2, 3)
    seen = [ends.step(upright, float(t)) for t in range(3 + 3 + 5)]
    assert [(i, e.kind) for i, e in enumerate(seen) if e] == [(2, "cut"), (5, "cut"), (10, "truncated")]
    assert "cut for the identification's recording: 3 steps" in seen[2].reason
    ends.cut_first(1, 3)
    assert ends.step(tilted, 0.0).kind == "terminated"  # a fall is a fall, and it was the cut episode
    assert [ends.step(upright, 0.0) for _ in range(4)] == [None] * 4 and ends.step(upright, 0.0).kind == "truncated"
    assert ends.whole_steps(0.02) == 4  # 90 % of the limit: a dropped transition leaves an episode whole
    assert EpisodeSpec.parse({"time_limit_s": 1.0}, spec).whole_steps(0.02) == 45
    assert EpisodeSpec.parse({"fall_tilt_deg": 45}, spec).whole_steps(0.02) is None
    with pytest.raises(ValueError, match="record_time_limit_steps 0"):
        ends.cut_first(1, 0)


def transition(k: int, **extra) -> Transition:
    return Transition(np.full(3, k, float), np.array([k / 10]), -k, np.full(3, k + 1, float), False, False, 1,
                      float(k), **extra)


def test_log_keeps_interventions_and_reward_terms_and_reads_old_records(tmp_path):
    t = transition(2, intervention=True, reward_terms=(0.5, -0.25))
    back = decode_transition(encode_transition(t))
    assert back.intervention and back.reward_terms == (0.5, -0.25) and back.reward == -2
    old = decode_transition(encode_transition(transition(3)))  # no extras: the format as before
    assert not old.intervention and old.reward_terms == ()
    writer = TransitionLogWriter(tmp_path)
    for k in range(6):
        writer.append(transition(k, intervention=k in (2, 3), reward_terms=(float(k),)))
    writer.close()
    batch, _ = read_log(tmp_path)
    assert batch.intervention.tolist() == [False, False, True, True, False, False]
    assert len(load_demos(tmp_path)) == 6
    (tmp_path / "empty").mkdir()
    with pytest.raises(TransitionLogError, match="holds no transitions"):
        load_demos(tmp_path / "empty")


def test_demo_buffer_fills_half_of_every_batch():
    demos = DemoBuffer(3, 1, capacity=10)
    rng = np.random.default_rng(0)
    online = Batch(np.zeros((8, 3), np.float32), np.zeros((8, 1), np.float32), np.zeros(8, np.float32),
                   np.zeros((8, 3), np.float32), np.ones(8, np.float32))
    assert demos.mix(online, rng) is online  # no demos yet: the batch as sampled
    demos.add(np.ones(3), np.ones(1), 5.0, np.ones(3), False)
    mixed = demos.mix(online, rng)
    assert mixed.reward.tolist() == [5.0] * 4 + [0.0] * 4 and mixed.obs.shape == (8, 3)
    assert demos.sampled == 4 and len(demos) == 1
    online.reward[4:] = 7.0  # rows 4.. are RLPD's prior data: kept; half of the 4 robot rows become demos
    assert demos.mix(online, rng, online_rows=4).reward.tolist() == [5.0] * 2 + [0.0] * 2 + [7.0] * 4
    with pytest.raises(ValueError, match="fraction"):
        DemoBuffer(3, 1, fraction=1.0)


def test_learner_puts_interventions_and_given_demos_into_the_demo_buffer(tiny_kit, tmp_path):
    from lowrl_ros.core.finetune.config import FineTuneConfig
    from lowrl_ros.core.finetune.kit import load_kit
    from lowrl_ros.core.finetune.learner import FineTuner

    kit_dir, base = tiny_kit
    tuner = FineTuner(load_kit(kit_dir), FineTuneConfig(min_transitions=4, batch_size=8), tmp_path / "ft", str(base))
    for k in range(6):
        tuner.add(np.full(3, 0.1 * k), np.array([0.5]), -1.0, np.full(3, 0.1 * k + 0.1), False, False,
                  intervention=k >= 4)
    assert len(tuner.buffer) == 6 and len(tuner.demos) == 2  # HIL-SERL: both buffers
    writer = TransitionLogWriter(tmp_path / "demos")
    for k in range(5):
        writer.append(transition(k))
    writer.close()
    assert tuner.add_demos(load_demos(tmp_path / "demos")) == 5 and len(tuner.demos) == 7
    assert tuner.update(3) == 3 and tuner.demos.sampled == 3 * 4  # half of each batch of 8


class _Policy:
    """A fixed policy with the contract fields the controller reads (a test double: no artifact needed)."""

    def __init__(self) -> None:
        from types import SimpleNamespace

        self.contract = SimpleNamespace(obs_dim=3, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
        self.obs_dim, self.action_dim = 3, 1

    def act(self, obs):
        return np.array([0.25])


def test_teleop_override_replaces_the_policy_action_while_held():
    from types import SimpleNamespace

    from lowrl_ros.core.runtime.control import ControlConfig, PolicyController

    now = [0.0]
    policy = _Policy()
    bundle = SimpleNamespace(policies={"full": policy}, smallest=lambda: policy)
    c = PolicyController(ControlConfig(soft_start_steps=0, watchdog_timeout_s=10.0), bundle, clock=lambda: now[0])
    c.activate()
    c.observe(np.zeros(3))
    c.set_override([5.0], now=0.0)
    r = c.step()
    assert r.intervention and r.own_action.tolist() == [0.25]
    assert r.action.tolist() == [2.0]  # the limits still apply to the teleop action
    now[0] = 0.3  # older than override_timeout_s (0.2): the policy again
    c.observe(np.zeros(3))
    r = c.step()
    assert not r.intervention and r.action.tolist() == [0.25] and c.interventions == 1
    with pytest.raises(ValueError, match="send 1 finite values"):
        c.set_override([1.0, 2.0])
    c.hold_until_ready("reset requested")
    r = c.step()
    assert r.source == "safe" and r.reason == "reset requested"
    c.release_hold()
    assert c.step().source == "policy"
