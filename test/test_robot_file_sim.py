"""A robot file's sim: robot as the sim robot node drives it (core/sim/robot_file_sim.py): position targets in
``output.joints`` order reach the PD loop in the robot file's order, and the truth row is the training env's own
observation of that state; (integration tier) `lowrl sim2sim` on the quadruped over ROS 2, right and with two
joints swapped."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, save_artifact
from lowrl_ros.core.runtime.observation import ObservationSpec
from lowrl_ros.core.runtime.robot_file import load_robot_file
from lowrl_ros.core.sim.robot_env import RobotSimEnv
from lowrl_ros.core.sim.robot_file_sim import RobotFileSim
from lowrl_ros.core.sim.reality_gap import RealityGapConfig
from lowrl_ros.core.sim.sim_robot import SimRobotConfig, WallClock, decode_truth

ROOT = Path(__file__).resolve().parents[1]
QUADRUPED = ROOT / "config/robots/quadruped.yaml"


def untrained_policy(robot_file: Path, out: Path) -> Path:
    """A deterministic untrained policy of the robot file's contract (its entry names, its joints, 50 Hz, the
    sim's action clip as limits): small weights, so the robot stands, and an output bias that holds each joint its
    own distance off the default pose (a swap of two joints then shows while the robot stands still)."""
    robot = load_robot_file(robot_file)
    names = ObservationSpec.from_robot_file(robot, 0.02).entry_names()
    clip = float(((robot.raw.get("sim") or {}).get("control") or {}).get("action_clip", 1.0))
    rng = np.random.default_rng(0)
    m = len(robot.joints)
    w = MlpWeights([(0.05 * rng.normal(size=(16, len(names))), np.zeros(16)),
                    (0.05 * rng.normal(size=(m, 16)), 0.8 * np.linspace(-1.0, 1.0, m))])
    return save_artifact(out, w, PolicyContract(names, robot.joints, [-clip] * m, [clip] * m, control_period_s=0.02))


def test_targets_in_output_order_reach_the_pd_loop_and_the_truth_is_the_training_observation(tmp_path):
    doc = yaml.safe_load(QUADRUPED.read_text())
    joints = doc["joints"]
    doc["output"]["joints"] = joints[::-1]  # a controller that lists its joints the other way round
    robot_file = tmp_path / "quadruped.yaml"
    robot_file.write_text(yaml.safe_dump(doc))
    sim = RobotFileSim(robot_file, seed=3, realtime=False)
    assert sim.topics["command_topic"] == "joint_group_position_controller/commands"
    assert (sim.topics["joint_states_topic"], sim.topics["imu_topic"], sim.topics["cmd_vel_topic"]) == \
        ("joint_states", "imu", "cmd_vel")
    np.testing.assert_array_equal(sim.hold_command, np.asarray(doc["default_pose"])[::-1])
    sim.set_velocity_command(0.4, 0.0, 0.2)

    reference = RobotSimEnv(robot_file)  # the training env: the same seed, the same targets, its own observation
    reference.reset(seed=3, options={"command": [0.4, 0.0, 0.2]})
    names = ObservationSpec.from_robot_file(load_robot_file(robot_file), 0.02).entry_names()
    sensed = np.array([not n.startswith("last_action[") for n in names])
    for k in range(5):
        y = 0.3 * np.sin(np.arange(12) + k)
        target = reference.processor.transform(y)
        command = target[::-1]  # what the policy node sends, in output.joints order
        np.testing.assert_array_equal(sim.targets(command), target)
        for _ in range(reference.sim.config.substeps):  # one physics step per call when not in real time
            sim.step(command)
        obs, *_ = reference.step(y)
        truth = decode_truth(sim.true_state(10.0 + k))
        assert truth.stamp == 10.0 + k and truth.falls == 0
        np.testing.assert_allclose(truth.command, [0.4, 0.0, 0.2])
        np.testing.assert_allclose(truth.obs[sensed], obs[sensed], atol=1e-5)
        assert not truth.obs[~sensed].any()  # last_action: the policy's to give
    assert np.abs(truth.obs[sensed]).max() > 0.05  # the robot moved: the comparison saw a state, not zeros


class FakeClock:
    """The wall clock, injected: a test moves it (the real-time stepping then runs at once)."""

    def __init__(self, now: float = 10.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_late_tick_catches_up_but_a_command_acts_only_from_the_step_after_it_arrived():
    clock = FakeClock()
    wall = WallClock(0.005, max_catch_up=8, clock=clock)
    assert wall.due() == (0, 1)  # the first tick: one step, [9.995, 10.0)
    clock.now = 10.02  # four steps due: [10.0, 10.005) ... [10.015, 10.02)
    assert wall.due(received_at=10.007) == (2, 2)  # arrived inside the second: the third is the first to use it
    clock.now = 10.03
    assert wall.due(received_at=10.007) == (0, 2)  # an old command: every step uses it
    clock.now = 10.035
    assert wall.due(received_at=None) == (0, 1)
    clock.now = 10.5  # a stall: the backlog is dropped, 8 steps run, and a command from before them acts on all
    assert wall.due(received_at=10.2) == (0, 8) and wall.steps == 16


def test_the_sim_robot_applies_a_command_from_its_arrival_not_back_in_time():
    from lowrl_ros.core.sim.robot_sim import RobotSim

    robot = load_robot_file(QUADRUPED)
    clock = FakeClock()
    sim = RobotFileSim(QUADRUPED, seed=0, clock=clock)
    reference = RobotSim(robot)
    reference.reset(seed=0)
    sim.sim.reset(seed=0)
    sim.sim.set_joints(reference.data.qpos[reference._qadr].copy())
    reference.set_joints(reference.data.qpos[reference._qadr].copy())
    hold = np.asarray(robot.default_pose, dtype=np.float64)
    bent = hold + 0.3
    sim.step(sim.hold_command)  # one step
    reference.step(hold, physics_steps=1)
    dt = sim.physics_dt
    clock.now += 5.5 * dt  # five steps due, begun at 10, 10 + dt, ... 10 + 4 dt
    sim.step(bent[sim._to_robot.argsort()], received_at=10.0 + 2.5 * dt)
    reference.step(hold, physics_steps=3)  # begun before the command came
    reference.step(bent, physics_steps=2)
    np.testing.assert_allclose(sim.sim.data.qpos, reference.data.qpos, atol=1e-12)


def test_the_node_config_builds_it_and_a_gym_gap_is_refused():
    config = SimRobotConfig(env_id="robot_file", robot_file=str(QUADRUPED), control_period_s=0.005, seed=2)
    assert RobotFileSim.from_config(config, RealityGapConfig()).joint_names[0] == "yaw_front_left"
    with pytest.raises(ValueError, match="gap"):
        RobotFileSim.from_config(config, RealityGapConfig(mass_scale=1.2))
    with pytest.raises(ValueError, match="robot_file parameter"):
        SimRobotConfig(env_id="robot_file")
    with pytest.raises(ValueError, match="real time"):
        SimRobotConfig(env_id="robot_file", robot_file=str(QUADRUPED), mode="lockstep")


def test_a_gap_file_sets_the_simulated_robots_gap_and_the_state_estimate_is_the_training_rewards_input():
    gap = ROOT / "config/gaps/quadruped_example.yaml"
    config = SimRobotConfig(env_id="robot_file", robot_file=str(QUADRUPED), control_period_s=0.005, gap_file=str(gap))
    sim = RobotFileSim.from_config(config, RealityGapConfig())
    assert sim.gap["mass_scale"] == 1.15 and sim.gap["latency_steps"] == 2
    assert "mass_scale=1.15" in sim.describe_gap() and "friction=0.7" in sim.describe_gap()
    assert RobotFileSim(QUADRUPED, realtime=False).describe_gap() == "none"
    assert sim.topics["state_estimate_topic"] == "state_estimator/twist"  # the robot file's twist reward input
    sim.realtime = False
    for _ in range(20):
        sim.step(sim.hold_command + 0.3)
    v, w = sim.state_estimate()
    v_true, w_true = sim.sim.base_velocity()
    assert np.array_equal(v, v_true) and np.array_equal(w, w_true) and np.abs(np.r_[v, w]).max() > 0.0
    with pytest.raises(ValueError, match="gap_file is for env_id robot_file"):
        SimRobotConfig(env_id="Pendulum-v1", gap_file=str(gap))
    bad = SimRobotConfig(env_id="robot_file", robot_file=str(QUADRUPED),
                         gap_file=str(ROOT / "config/robots/pendulum.yaml"))
    with pytest.raises(ValueError, match="gap file"):
        RobotFileSim.from_config(bad, RealityGapConfig())


def test_a_fall_is_counted_and_the_robot_put_back():
    sim = RobotFileSim(QUADRUPED, realtime=False)
    sim.sim.data.qpos[3:7] = [0.0, 1.0, 0.0, 0.0]  # upside down
    outcome = sim.step(sim.hold_command)
    assert outcome.terminated and sim.falls == 1 and sim.sim.base_up() > 0.9


# ---- integration tier (test/tiers.py): `lowrl sim2sim` on the quadruped over ROS 2 ----
def _sim2sim(tmp_path: Path, robot_file: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    policy = untrained_policy(QUADRUPED, tmp_path / "quadruped_untrained.onnx")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "lowrl_ros.cli", "sim2sim", str(policy), str(robot_file),
                          "--seconds", "8", "--out", str(tmp_path / "out"), *extra],
                         capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    report = tmp_path / "out" / "sim2sim.json"
    return out, (json.loads(report.read_text()) if report.is_file() else {})


def test_sim2sim_quadruped_is_in_parity(tmp_path):
    out, report = _sim2sim(tmp_path, QUADRUPED)
    assert report, out.stdout + out.stderr
    assert report["simulator"] == f"robot_sim:{QUADRUPED}" and report["matched"] >= 100
    assert [t["term"].split()[1] for t in report["terms"]] == ["imu_angular_velocity", "projected_gravity",
                                                               "velocity_command", "joint_position",
                                                               "joint_velocity", "last_action"]
    assert all(t["ok"] for t in report["terms"]), out.stdout
    assert out.returncode == (0 if report["falls"] == 0 else 1), out.stdout + out.stderr


def test_sim2sim_quadruped_with_two_joints_swapped_fails_naming_the_term(tmp_path):
    joints = yaml.safe_load(QUADRUPED.read_text())["joints"]
    swapped = joints.copy()
    swapped[4], swapped[8] = swapped[8], swapped[4]  # pitch and knee of the front left leg
    text = QUADRUPED.read_text().replace(
        "{term: joint_position, topic: joint_states,",
        f"{{term: joint_position, topic: joint_states, joints: [{', '.join(swapped)}],")
    path = tmp_path / "swapped.yaml"
    path.write_text(text)
    out, report = _sim2sim(tmp_path, path, "--deploy-check", "warn")
    assert out.returncode == 1, out.stdout + out.stderr
    assert [t["term"] for t in report["terms"] if not t["ok"]] == ["3 joint_position"], out.stdout
    assert "FAIL obs 3 joint_position: p95" in out.stdout
