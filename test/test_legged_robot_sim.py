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
    assert m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_ACTUATION)
    assert cfg.substeps == 8 and m.opt.timestep == 0.005
    assert m.opt.integrator == int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST)
    assert list(cfg.torque_limit) == [150.0] * 8 and list(cfg.kp) == [100.0] * 8 and list(cfg.kd) == [10.0] * 8
    site = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, "imu")  # added by sim.add_sites, as LeggedRobot adds it
    assert mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, int(m.site_bodyid[site])) == "torso"
    assert np.array_equal(m.site_pos[site], [0.0, 0.0, 0.0])
    orientation, gyro, _ = sim.imu()
    np.testing.assert_allclose(orientation, [0.0, 0.0, 0.0, 1.0], atol=1e-9)  # upright at reset, x y z w


def test_same_seed_and_command_give_legged_ants_start_and_nearly_its_first_steps():
    """Reset noise is drawn from one stream in the same order: the first observation is LeggedAnt's exactly.
    A step apart the PD damping's integration differs (RobotSim computes the torque per physics step, LeggedRobot
    hands MuJoCo an affine actuator it integrates implicitly): thousandths, not a different robot."""
    old = legged.LeggedAnt()
    new = make_robot_env(ROBOT, last_action="action")
    command = {"command": [0.3, 0.0, 0.1]}
    a, _ = old.reset(seed=7, options=command)
    b, _ = new.reset(seed=7, options=command)
    np.testing.assert_allclose(a, b, atol=1e-6)
    action = np.array([0.5, -0.5, 0.2, 0.1, -0.3, 0.4, 0.0, -0.2], dtype=np.float32)
    for _ in range(3):
        a, *_ = old.step(action)
        b, *_ = new.step(action)
    assert 1e-6 < np.abs(a - b).max() < 0.02


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
