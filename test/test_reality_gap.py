"""The reality gap: every field changes the dynamics measurably; the identity changes nothing."""
from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from lowrl_ros.core.sim.reality_gap import RealityGapConfig, RealityGapWrapper, make_gapped_env

STEPS = 40


def rollout(env: gym.Env, seed: int, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    obs, _ = env.reset(seed=seed)
    observations, rewards = [obs], []
    for a in actions:
        obs, r, term, trunc, _ = env.step(a)
        observations.append(obs)
        rewards.append(r)
        if term:
            break
    return np.asarray(observations, dtype=np.float64), np.asarray(rewards, dtype=np.float64)


def actions_for(env_id: str) -> np.ndarray:
    # Small InvertedPendulum forces so the pole stays up (no termination) for all 40 steps.
    scale = 2.0 if env_id == "Pendulum-v1" else 0.3
    return np.random.default_rng(1).uniform(-scale, scale, (STEPS, 1)).astype(np.float32)


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "InvertedPendulum-v5"])
def test_identity_reproduces_the_unwrapped_env_exactly(env_id):
    acts = actions_for(env_id)
    plain = rollout(gym.make(env_id), 5, acts)
    wrapped = rollout(make_gapped_env(env_id, RealityGapConfig()), 5, acts)
    np.testing.assert_array_equal(plain[0], wrapped[0])
    np.testing.assert_array_equal(plain[1], wrapped[1])


CASES = [
    ("Pendulum-v1", dict(mass_scale=1.3)),
    ("Pendulum-v1", dict(actuator_gain=0.8)),
    ("Pendulum-v1", dict(added_damping=0.5)),
    ("Pendulum-v1", dict(obs_noise_std=0.05)),
    ("Pendulum-v1", dict(action_delay_steps=1)),
    ("InvertedPendulum-v5", dict(mass_scale=1.3)),
    ("Pendulum-v1", dict(added_friction=0.3)),
    ("InvertedPendulum-v5", dict(added_friction=0.5)),
    ("InvertedPendulum-v5", dict(damping_scale=3.0)),
    ("InvertedPendulum-v5", dict(added_damping=0.5)),
    ("InvertedPendulum-v5", dict(actuator_gain=0.8)),
    ("InvertedPendulum-v5", dict(obs_noise_std=0.05)),
    ("InvertedPendulum-v5", dict(action_delay_steps=1)),
    ("Pendulum-v1", dict(joint_offset=0.3)),
    ("InvertedPendulum-v5", dict(joint_offset=0.1)),
]


@pytest.mark.parametrize("env_id, field", CASES, ids=[f"{e}-{next(iter(f))}" for e, f in CASES])
def test_each_gap_field_changes_the_dynamics(env_id, field):
    acts = actions_for(env_id)
    base, _ = rollout(make_gapped_env(env_id, RealityGapConfig()), 5, acts)
    gapped, _ = rollout(make_gapped_env(env_id, RealityGapConfig(**field)), 5, acts)
    n = min(len(base), len(gapped))
    assert np.abs(base[:n] - gapped[:n]).max() > 1e-3, f"{field} left {env_id} unchanged"


def test_gap_directions_are_physical():
    """A weaker actuator and extra damping slow the pendulum; a delay shifts the response by one step."""
    acts = np.full((STEPS, 1), 2.0, np.float32)
    speed = lambda gap: np.abs(rollout(make_gapped_env("Pendulum-v1", gap), 0, acts)[0][:10, 2]).max()  # noqa: E731
    assert speed(RealityGapConfig(actuator_gain=0.5)) < speed(RealityGapConfig())
    assert speed(RealityGapConfig(added_damping=2.0)) < speed(RealityGapConfig())
    env = make_gapped_env("Pendulum-v1", RealityGapConfig(action_delay_steps=1))
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.array([1.5], np.float32))
    assert info["applied_action"][0] == 0.0  # nothing commanded before: zero acts first
    _, _, _, _, info = env.step(np.array([-1.0], np.float32))
    assert info["applied_action"][0] == 1.5
    model = make_gapped_env("InvertedPendulum-v5", RealityGapConfig(mass_scale=1.3, actuator_gain=0.8)).unwrapped.model
    ref = gym.make("InvertedPendulum-v5").unwrapped.model
    np.testing.assert_allclose(model.body_mass, ref.body_mass * 1.3)
    np.testing.assert_allclose(model.actuator_gear[:, 0], ref.actuator_gear[:, 0] * 0.8)


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "InvertedPendulum-v5"])
def test_joint_offset_is_on_the_measurement_only(env_id):
    """The encoders read every position shifted by the offset; the physics (rewards) is untouched."""
    acts = actions_for(env_id)
    base_obs, base_rew = rollout(make_gapped_env(env_id, RealityGapConfig()), 5, acts)
    obs, rew = rollout(make_gapped_env(env_id, RealityGapConfig(joint_offset=0.3)), 5, acts)
    np.testing.assert_array_equal(rew, base_rew)
    if env_id == "Pendulum-v1":  # the measured angle is the true one + 0.3 rad
        shift = np.arctan2(obs[:, 1], obs[:, 0]) - np.arctan2(base_obs[:, 1], base_obs[:, 0])
        np.testing.assert_allclose((shift + np.pi) % (2 * np.pi) - np.pi, 0.3, atol=1e-5)
        np.testing.assert_array_equal(obs[:, 2], base_obs[:, 2])
    else:  # qpos (cart, hinge) shifted, qvel as it was
        np.testing.assert_allclose(obs[:, :2] - base_obs[:, :2], 0.3, atol=1e-9)
        np.testing.assert_array_equal(obs[:, 2:], base_obs[:, 2:])


def test_joint_offset_refused_where_the_observation_does_not_start_with_qpos():
    env = make_gapped_env("Hopper-v5", RealityGapConfig(joint_offset=0.1))
    with pytest.raises(ValueError, match="starts with the full qpos"):
        env.reset(seed=0)


def test_noise_is_reproducible_with_the_seed():
    acts = actions_for("Pendulum-v1")
    gap = RealityGapConfig(obs_noise_std=0.1)
    a = rollout(make_gapped_env("Pendulum-v1", gap), 3, acts)[0]
    b = rollout(make_gapped_env("Pendulum-v1", gap), 3, acts)[0]
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kwargs, message", [
    (dict(mass_scale=0.0), "mass_scale=0.0 is outside"),
    (dict(actuator_gain=float("nan")), "actuator_gain=nan"),
    (dict(obs_noise_std=-0.1), "obs_noise_std=-0.1 must be"),
    (dict(action_delay_steps=1.5), "whole number"),
    (dict(damping_scale=-1.0), "damping_scale"),
    (dict(joint_offset=4.0), "joint_offset=4.0 must be finite and within -pi..pi"),
])
def test_config_errors_say_how_to_fix(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RealityGapConfig(**kwargs)


def test_friction_scale_refused_where_there_is_no_friction_to_scale():
    with pytest.raises(ValueError, match="use added_friction / added_damping"):
        RealityGapWrapper(gym.make("Pendulum-v1"), RealityGapConfig(friction_scale=2.0))
    with pytest.raises(ValueError, match="no contacts and no joint friction"):
        RealityGapWrapper(gym.make("InvertedPendulum-v5"), RealityGapConfig(friction_scale=2.0))


def test_describe_names_the_changed_fields():
    assert RealityGapConfig().describe() == "none (identity)" and RealityGapConfig().is_identity
    gap = RealityGapConfig(mass_scale=1.3, action_delay_steps=1)
    assert gap.describe() == "mass_scale=1.3, action_delay_steps=1"
    assert RealityGapConfig(**gap.to_dict()) == gap and dataclasses.is_dataclass(gap)


def test_command_line_gap_items_are_parsed_and_checked():
    from lowrl_ros.core.sim.reality_gap import parse_gap_items

    assert parse_gap_items(["joint_offset=0.3", "action_delay_steps=2"]) == {"joint_offset": 0.3,
                                                                            "action_delay_steps": 2}
    for bad, message in (("joint_offset", "use FIELD=VALUE"), ("no_such=1", "use FIELD=VALUE"),
                         ("mass_scale=heavy", "not a number"), ("mass_scale=0", "outside 0.05..20")):
        with pytest.raises(ValueError, match=message):
            parse_gap_items([bad])


def test_demo_gap_reaches_the_sim_robot_after_its_parameter_files():
    from lowrl_ros.commands.demo import set_gap
    from lowrl_ros.core.sim.reality_gap import parse_gap_items
    from lowrl_ros.launcher import PACKAGE, package_share, parse_launch

    nodes = parse_launch(package_share(PACKAGE) / "launch" / "sim_to_real.launch.yaml", {"session_dir": "/tmp/x"})
    set_gap(nodes, {"joint_offset": 0.0, "action_delay_steps": 2})
    sim = next(n for n in nodes if n.executable == "sim_robot_node")
    assert sim.params[-2:] == [("gap.joint_offset", "0.0"), ("gap.action_delay_steps", "2")]  # a float stays a float
    set_gap(nodes, parse_gap_items(["encoder_offset=0.1", "kp_scale=0.5"]))  # per-joint fields: lists
    assert sim.params[-2:] == [("gap.encoder_offset", "[0.1]"), ("gap.kp_scale", "[0.5]")]
    args = sim.ros_args()
    assert args.index("gap.joint_offset:=0.0") > max(i for i, a in enumerate(args) if a == "--params-file")
