"""The legged robot's reality gap (RealityGapConfig applied by LeggedRobot, core/sim/legged.py): each field's effect."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from lowrl_ros.core.sim import legged
from lowrl_ros.core.sim.legged import DEFAULT_POSE, JOINTS, LeggedAnt, LeggedRobot, LeggedSim
from lowrl_ros.core.sim.reality_gap import RealityGapConfig, RealityGapWrapper, make_gapped_env, parse_gap_items
from lowrl_ros.core.sim.sim_robot import SimRobotConfig

OFFSETS = (0.1, -0.2, 0.05, 0.0, -0.1, 0.15, 0.2, -0.05)


def _roll(env, steps: int = 60, seed: int = 3):
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(0)
    out = [obs]
    for _ in range(steps):
        obs, r, term, trunc, _ = env.step(rng.uniform(-1, 1, 8).astype(np.float32))
        out.append(np.append(obs, r))
        if term or trunc:
            break
    return out


def test_identity_gap_changes_nothing_bitwise():
    plain = _roll(LeggedAnt())
    for env in (LeggedAnt(gap=RealityGapConfig()), make_gapped_env("LeggedAnt", RealityGapConfig()).unwrapped,
                LeggedAnt(gap=RealityGapConfig(motor_strength=(1.0,) * 8, encoder_offset=(0.0,) * 8))):
        got = _roll(env)
        assert len(got) == len(plain)
        for a, b in zip(plain, got):
            assert np.array_equal(a, b)


def _stand(gap: RealityGapConfig | None, seconds: float = 1.5) -> tuple[float, float]:
    """Height and mean |torque| of the robot holding its default pose."""
    robot = LeggedRobot(gap=gap)
    robot.reset()
    efforts = []
    for _ in range(int(seconds / robot.dt)):
        robot.step()
        efforts.append(np.abs(robot.joint_efforts()).sum())
    return robot.base_height(), float(np.mean(efforts[-50:]))


def test_heavier_body_stands_lower_with_more_effort():
    h0, e0 = _stand(None)
    h1, e1 = _stand(RealityGapConfig(mass_scale=1.8))
    assert h1 < h0 - 0.001  # the legs give a little more under the weight (0.530 -> 0.528 m)
    assert e1 > 1.5 * e0  # and the motors push harder (about 1.8x)


def test_encoder_offsets_shift_measured_positions_exactly():
    robot = LeggedRobot(gap=RealityGapConfig(encoder_offset=OFFSETS, joint_offset=0.01))
    robot.reset()
    robot.step(20)
    # exactly the offsets (up to the float rounding of q + offset - q)
    np.testing.assert_allclose(robot.joint_positions() - robot.true_joint_positions(), np.asarray(OFFSETS) + 0.01,
                               rtol=0, atol=1e-14)
    # the physics is untouched: the same trajectory as without the offset
    plain = LeggedRobot()
    plain.reset()
    plain.step(20)
    assert np.array_equal(plain.joint_positions(), robot.true_joint_positions())


def test_latency_delays_the_targets_by_whole_physics_steps():
    new = np.array(DEFAULT_POSE) + 0.3
    late = LeggedRobot(gap=RealityGapConfig(latency_physics_steps=3))
    held, now = LeggedRobot(), LeggedRobot()
    for r in (late, held, now):
        r.reset()
    late.set_targets(new)
    now.set_targets(new)
    late.step(3)
    held.step(3)  # still on the default pose: the new targets have not arrived
    now.step(3)
    assert np.array_equal(late.data.qpos, held.data.qpos)
    assert not np.array_equal(late.data.qpos, now.data.qpos)
    late.step(5)
    assert np.abs(late.true_joint_positions() - held.true_joint_positions()).max() > 1e-3  # then they act


def test_motor_strength_and_gains_per_joint():
    strength = (0.3, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    robot = LeggedRobot(gap=RealityGapConfig(motor_strength=strength, kp_scale=0.5, kd_scale=(2.0,)))
    robot.reset()
    robot.set_targets(np.array(DEFAULT_POSE) + np.array([1.0, 0, 0, 0, 0, 0, 0, 0]))  # a large error on hip_1
    robot.step()
    assert abs(robot.joint_efforts()[0]) == pytest.approx(0.3 * 150.0)  # saturated at the weaker limit
    i = int(np.where(robot._act == JOINTS.index("ankle_2"))[0][0])
    assert robot.model.actuator_gainprm[i, 0] == 50.0 and tuple(robot.model.actuator_biasprm[i, 1:3]) == (-50.0, -20.0)


def test_imu_bias_and_noise():
    gap = RealityGapConfig(gyro_bias=(0.1, -0.2, 0.3), tilt_bias=(0.2, 0.0))
    biased, plain = LeggedRobot(gap=gap), LeggedRobot()
    for r in (biased, plain):
        r.reset()
        r.step(40)
    assert np.allclose(biased.imu()[1] - plain.imu()[1], [0.1, -0.2, 0.3], atol=1e-12)
    quat = biased.imu()[0]
    g = legged.projected_gravity_wxyz(np.array([quat[3], *quat[:3]]))
    g0 = legged.projected_gravity_wxyz(plain.base_quat_wxyz())
    # a 0.2 rad roll error of the IMU shows as gravity 0.2 rad off the body's own
    assert np.degrees(np.arccos(np.clip(g @ g0, -1, 1))) == pytest.approx(np.degrees(0.2), abs=0.01)
    noisy = [LeggedRobot(gap=RealityGapConfig(imu_noise_std=0.05)) for _ in range(2)]
    for r in noisy:
        r.reset(np.random.default_rng(5))
    a, b = noisy[0].imu()[1], noisy[1].imu()[1]
    assert np.array_equal(a, b)  # seeded by the episode's rng
    assert np.abs(a - plain.imu()[1]).max() > 1e-3


def test_same_gap_in_process_and_in_the_sim_robot_node_robot():
    gap = RealityGapConfig(encoder_offset=OFFSETS, mass_scale=1.2)
    sim = LeggedSim.from_config(SimRobotConfig(env_id="LeggedAnt", control_period_s=0.005), gap)
    assert sim.robot.gap == gap
    assert sim.robot.model.body_mass[1] == pytest.approx(1.2 * LeggedRobot().model.body_mass[1])
    reading = sim.joints()
    assert np.allclose(reading.position - sim.robot.true_joint_positions(), OFFSETS)
    env = make_gapped_env(legged.ENV_ID, gap)
    assert env.unwrapped.robot.gap == gap


@pytest.mark.parametrize("kwargs, words", [
    (dict(motor_strength=(0.0,)), "motor_strength"),
    (dict(kp_scale=(1.0, float("nan"))), "kp_scale"),
    (dict(gyro_bias=(0.1, 0.2)), "gyro_bias takes 1 or 3"),
    (dict(latency_physics_steps=-1), "latency_physics_steps"),
    (dict(tilt_bias=(0.9,)), "tilt_bias"),
    (dict(encoder_offset="x"), "encoder_offset"),
])
def test_bad_values_are_refused(kwargs, words):
    with pytest.raises(ValueError, match=words):
        RealityGapConfig(**kwargs)


def test_fields_that_do_not_apply_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="give 1 \\(all\\) or 8"):
        LeggedRobot(gap=RealityGapConfig(encoder_offset=(0.1, 0.2, 0.3)))
    with pytest.raises(ValueError, match="use latency_physics_steps"):
        LeggedAnt(gap=RealityGapConfig(action_delay_steps=1))
    with pytest.raises(ValueError, match="legged robot only"):
        RealityGapWrapper(gym.make("Pendulum-v1"), RealityGapConfig(gyro_bias=(0.1,)))
    with pytest.raises(ValueError, match="applies the gap itself"):
        RealityGapWrapper(gym.make(legged.ENV_ID), RealityGapConfig(mass_scale=1.1))


def test_command_line_items_take_per_joint_lists():
    got = parse_gap_items(["encoder_offset=0.1,-0.1", "latency_physics_steps=2", "mass_scale=1.2"])
    assert got == {"encoder_offset": (0.1, -0.1), "latency_physics_steps": 2, "mass_scale": 1.2}
    assert "encoder_offset=0.1,-0.1" in RealityGapConfig(**got).describe()


def test_the_preset_is_a_gap_and_a_sim_robot_params_file():
    from lowrl_ros.bench.sim2real import legged_gap_preset

    fields = legged_gap_preset()
    gap = RealityGapConfig(**fields)
    assert not gap.is_identity and gap.latency_physics_steps > 0 and len(gap.encoder_offset) == 8
    LeggedRobot(gap=gap)  # applies


def test_the_docs_table_is_the_preset():
    """docs/sim_to_real.md's table of the preset's values is config/gaps/legged_example.yaml, field by field."""
    import re
    from pathlib import Path

    import yaml

    from lowrl_ros.bench.sim2real import legged_gap_preset

    doc = (Path(__file__).resolve().parents[1] / "docs" / "sim_to_real.md").read_text()
    table = doc[doc.index("| preset field | value |"):]
    table = table[:table.index("\n\n")]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", table, re.MULTILINE)
    documented = {name: yaml.safe_load(value) for name, value in rows}
    assert documented == legged_gap_preset()
