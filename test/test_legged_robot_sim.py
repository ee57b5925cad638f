"""The legged example as one config of the generic simulator: config/robots/legged_ant.yaml's sim: section
(core/sim/robot_sim.py) against LeggedAnt (core/sim/legged.py), and its gap file config/gaps/legged_example_sim.yaml.
The return and gap figures: scripts/legged_sim_parity.py, docs/sim_to_real.md."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from lowrl_ros.core.finetune.sim_env import make_robot_env
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.runtime.robot_file import load_robot_file
from lowrl_ros.core.sim import legged
from lowrl_ros.core.sim.robot_sim import RobotSim, load_gap_file

ROOT = Path(__file__).resolve().parents[1]
ROBOT = ROOT / "config/robots/legged_ant.yaml"
GAP = ROOT / "config/gaps/legged_example_sim.yaml"
POLICY = ROOT / "models/legged_ant_int8.onnx"


def test_the_sim_section_resolves_joints_actuation_and_the_imu():
    import mujoco

    sim = RobotSim(load_robot_file(ROBOT))
    cfg, m = sim.config, sim.model
    assert cfg.joints == legged.JOINTS and cfg.actuators == ()  # ant.xml's motors are unnamed: torques to the joints
    assert cfg.substeps == 8 and m.opt.timestep == 0.005 and cfg.state_estimate_frame == "heading"
    assert m.opt.integrator == int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST)
    # pd: implicit: one affine actuator per joint, kp ctrl - kp q - kd qdot within +-150 N m; ant.xml's 8 motors off
    pd = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, f"lowrl_pd_{j}") for j in legged.JOINTS]
    assert min(pd) >= 8 and m.nu == 16 and not m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_ACTUATION)
    assert [int(m.jnt_qposadr[m.actuator_trnid[a, 0]]) for a in pd] == list(sim._qadr)
    np.testing.assert_array_equal(m.actuator_biasprm[pd, :3], [[0.0, -100.0, -10.0]] * 8)
    np.testing.assert_array_equal(m.actuator_forcerange[pd], [[-150.0, 150.0]] * 8)
    assert not m.actuator_gainprm[:8].any() and not m.actuator_biasprm[:8].any()
    site = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, "imu")  # added by sim.add_sites, as LeggedRobot adds it
    assert mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, int(m.site_bodyid[site])) == "torso"
    assert np.array_equal(m.site_pos[site], [0.0, 0.0, 0.0])
    orientation, gyro, _ = sim.imu()
    np.testing.assert_allclose(orientation, [0.0, 0.0, 0.0, 1.0], atol=1e-9)  # upright at reset, x y z w


@pytest.mark.parametrize("gap", [None, "without noise"])
def test_same_seed_and_command_give_legged_ants_trajectory_bit_for_bit(gap):
    """One seed draws the same start (reset noise from one stream, in the same order); the implicit PD, the
    integrator and the file's exact joint limits make every later observation LeggedAnt's too, on the nominal
    model and under the legged gap without its sensor noise (whose draws come from other streams)."""
    from lowrl_ros.bench.sim2real import legged_gap_preset
    from lowrl_ros.core.sim.reality_gap import RealityGapConfig

    preset = {k: v for k, v in legged_gap_preset().items() if k not in ("imu_noise_std", "obs_noise_std")}
    sim_gap = {k: v for k, v in yaml.safe_load(GAP.read_text())["gap"].items() if not k.endswith("noise")}
    old = legged.LeggedAnt(gap=RealityGapConfig(**preset) if gap else None)
    new = make_robot_env(ROBOT, gap=sim_gap if gap else None, last_action="action")
    policy = load_artifact(POLICY, engine="numpy")
    command = {"command": [0.3, 0.0, 0.1]}
    a, _ = old.reset(seed=7, options=command)
    b, _ = new.reset(seed=7, options=command)
    for step in range(40):
        assert np.array_equal(a, b), f"step {step}: max |difference| {np.abs(a - b).max():.2g}"
        action = policy.act(a)
        a, *_ = old.step(action)
        b, *_ = new.step(action)


def test_the_state_estimate_is_leggedants_heading_frame_velocity():
    """sim.state_estimate_frame: heading: the reward's twist inputs read what LeggedAnt's reward reads."""
    old, new = legged.LeggedAnt(), make_robot_env(ROBOT, last_action="action")
    policy = load_artifact(POLICY, engine="numpy")
    a, _ = old.reset(seed=5, options={"command": [0.4, 0.0, 0.3]})
    new.reset(seed=5, options={"command": [0.4, 0.0, 0.3]})
    for _ in range(30):
        action = policy.act(a)
        a, *_ = old.step(action)
        new.step(action)
    vxy, yaw_rate = old.robot.base_velocity_yaw_frame()
    v, w = new.sim.state_estimate()
    np.testing.assert_allclose([v[0], v[1], w[2]], [vxy[0], vxy[1], yaw_rate], atol=1e-9)
    assert abs(vxy[0]) > 0.05  # walking: the comparison is not between two zeros


def test_the_shipped_policy_stays_upright_in_the_generic_simulator():
    """Structural, not a return claim: 100 policy steps (4 s) walking at 0.3 m/s without a fall."""
    policy = load_artifact(POLICY, engine="numpy")
    env = make_robot_env(ROBOT, last_action="action")
    obs, _ = env.reset(seed=3, options={"command": [0.3, 0.0, 0.0]})
    for step in range(100):
        obs, _, terminated, truncated, _ = env.step(policy.act(obs))
        assert not (terminated or truncated), f"ended at step {step}"
        height = float(env.sim.data.xpos[env.sim._base][2])
        assert env.sim.base_up() > math.cos(math.radians(60)) and height > 0.28, f"fell at step {step}"


def test_the_legged_gap_file_loads_inside_the_priors_and_is_applied():
    gap = load_gap_file(GAP)
    priors = yaml.safe_load(ROBOT.read_text())["sim"]["gap_priors"]
    given = yaml.safe_load(GAP.read_text())["gap"]
    for key in given:
        lo, hi = priors[key]
        values = np.ravel(getattr(gap, key))
        assert ((lo <= values) & (values <= hi)).all(), f"{key} {values} outside the prior [{lo}, {hi}]"
    sim = RobotSim(load_robot_file(ROBOT), gap)
    assert list(sim._limit) == pytest.approx([90.0] * 8) and list(sim._kp) == pytest.approx([60.0] * 8)
    assert len(sim._queue) == 7  # 6 physics steps of latency
