"""`lowrl sim2sim`: the parity, tracking and verdict logic on synthetic rows (core/sim/sim2sim.py), the sim
robot's truth row, and (integration tier) the command on the shipped legged policy, right and with two
joints swapped."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from lowrl_ros.core.runtime.robot_file import load_robot_file
from lowrl_ros.core.runtime.step_row import decode_step, encode_step, row_size
from lowrl_ros.core.sim import sim2sim
from lowrl_ros.core.sim.sim_robot import TrueState, decode_truth, encode_truth

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("joint_position[a]", "joint_position[b]", "joint_velocity[a]", "joint_velocity[b]", "last_action[a]",
         "last_action[b]")
SIM = sim2sim.Simulator("test.launch.yaml", "Test", NAMES)
CONTRACT = SimpleNamespace(obs_names=NAMES, action_names=("a", "b"), action_low=(-1.0, -1.0),
                           action_high=(1.0, 1.0), control_period_s=0.04)
PHYSICS = 0.005


def state(t: float) -> np.ndarray:
    """The simulator's training observation at time t (last_action left at zero, as the sim robot does)."""
    return np.array([np.sin(3 * t), np.cos(2 * t), 0.5 * np.cos(3 * t), -0.3 * np.sin(2 * t), 0.0, 0.0])


def run(seconds=3.0, lag_samples=(1, 2), edit=None, safe_at=(), drop_at=(), falls_at=None, t0=1000.0):
    """Truth at 200 Hz and policy rows at 25 Hz whose observation is the truth 1-2 samples before (a jittery
    transport), ``edit(obs, action_prev)`` seeding a mistake; returns (rows, truths)."""
    rng = np.random.default_rng(0)
    truths = []
    for k in range(int(seconds / PHYSICS)):
        t = t0 + k * PHYSICS
        falls = int(falls_at is not None and t - t0 >= falls_at)
        truths.append(decode_truth(encode_truth(t, falls, (0.28, 0.01, -0.02), (0.3, 0.0, 0.0), state(t - t0))))
    rows, prev_action = [], np.zeros(2)
    buf = np.zeros(row_size(6, 2))
    for i in range(int((seconds - 0.2) / 0.04)):
        stamp = t0 + 0.1 + i * 0.04
        k = int(np.floor((stamp - t0) / PHYSICS)) - int(rng.choice(lag_samples))
        obs = truths[k].obs.copy()
        obs[4:6] = prev_action
        if edit is not None:
            edit(obs, prev_action)
        safe = i in safe_at
        raw = np.array([1.5 * np.sin(i), np.cos(i)])  # one entry above the action space: clipped for last_action
        encode_step(buf, stamp=stamp, safe=safe, intervention=False, estop=False, policy_version=1,
                    obs=obs, policy_action=None if safe else raw, action=None if safe else np.clip(raw, -1, 1),
                    command=np.zeros(2))
        prev_action = np.zeros(2) if safe else np.clip(raw, -1, 1)
        if i not in drop_at:
            rows.append(decode_step(buf.copy(), 6, 2))
    return rows, truths


def judge(rows, truths, stats=None):
    return sim2sim.evaluate(rows, truths, CONTRACT, SIM, "action", stats)


def test_the_right_observation_passes_every_term_whatever_the_transport_lag():
    report = judge(*run(), stats=[10, 20, 3, 100, 40000, 40000, 0, 1])
    assert report.ok, report.summary()
    assert [t.term for t in report.terms] == ["0 joint_position", "1 joint_velocity", "2 last_action"]
    assert all(t.p95 < 1e-9 and t.ticks >= 60 for t in report.terms)
    assert report.matched == report.policy_ticks and report.unmatched == 0
    assert 5.0 <= report.lag_ms_p50 <= 10.0  # one to two physics samples before the row
    assert (report.deadline_misses, report.control_ticks) == (3, 100)
    assert report.tracking.command == (0.3, 0.0, 0.0) and report.tracking.achieved == (0.28, 0.01, -0.02)
    assert json.loads(json.dumps(report.to_dict()))["ok"] is True


def test_two_joints_swapped_fail_the_term_naming_it():
    def swap(obs, _):
        obs[0], obs[1] = obs[1], obs[0]

    report = judge(*run(edit=swap))
    assert not report.ok
    bad = [t for t in report.terms if not t.ok]
    assert [t.term for t in bad] == ["0 joint_position"] and bad[0].p95 > 0.1
    assert any(r.startswith("obs 0 joint_position: p95") for r in report.reasons)
    assert "OUT" in report.table() and "sim2sim: 1 failure(s)" in report.summary()


def test_a_wrong_scale_fails_that_term_only():
    def scale(obs, _):
        obs[2:4] *= 20.0  # a 0.05 joint-velocity scale forgotten

    report = judge(*run(edit=scale))
    assert [t.term for t in report.terms if not t.ok] == ["1 joint_velocity"]


def test_last_action_as_the_joint_targets_fails_against_the_raw_training_convention():
    def targets(obs, prev):
        obs[4:6] = 0.87 + 0.5 * prev  # what the node sent, not what the network said

    report = judge(*run(edit=targets))
    assert [t.term for t in report.terms if not t.ok] == ["2 last_action"]


def raw_rows(rows, network):
    """``rows`` re-made as a ``raw``-convention policy gives them: the executed action is the network's output
    through an action transform (0.87 + 0.5 y, clipped), and last_action reads the previous raw output y."""
    out, buf, prev_y = [], np.zeros(row_size(6, 2)), np.zeros(2)
    for r in rows:
        obs = r.obs.copy()
        obs[4:6] = prev_y
        y = network(obs)
        action = np.clip(0.87 + 0.5 * y, -1, 1)
        encode_step(buf, stamp=r.stamp, safe=False, intervention=False, estop=False, policy_version=1, obs=obs,
                    policy_action=action, action=action, command=np.zeros(2))
        out.append(decode_step(buf.copy(), 6, 2))
        prev_y = y
    return out


def test_a_raw_last_action_is_the_network_output_run_again_not_the_executed_action():
    def network(obs):
        return np.array([2.0 * obs[0] + 0.3 * obs[4], -1.5 * obs[1]])  # often beyond what the clip lets through

    rows, truths = run()
    rows = raw_rows(rows, network)
    report = sim2sim.evaluate(rows, truths, CONTRACT, SIM, "raw", raw_of=network)
    assert report.ok, report.summary()
    # the old reading (the executed action, after the transform and the clip) is caught
    def executed_action(obs):
        return np.clip(0.87 + 0.5 * network(obs), -1, 1)

    executed = sim2sim.evaluate(rows, truths, CONTRACT, SIM, "raw", raw_of=executed_action)
    assert [t.term for t in executed.terms if not t.ok] == ["2 last_action"]
    # without the network the raw term is not compared (unknown), never passed on a guess
    blind = sim2sim.evaluate(rows, truths, CONTRACT, SIM, "raw")
    assert next(t for t in blind.terms if t.term.endswith("last_action")).ticks == 0


def test_last_action_is_zero_after_a_safe_tick_and_unknown_after_a_lost_row():
    rows, truths = run(safe_at=(10,), drop_at=(30,))
    report = judge(rows, truths)
    assert report.ok, report.summary()
    last = next(t for t in report.terms if t.term.endswith("last_action"))
    joint = next(t for t in report.terms if t.term.endswith("joint_position"))
    assert last.ticks == joint.ticks - 2  # the first tick and the one after the lost row are not compared
    assert np.isnan(sim2sim.training_last_action(None, rows[0], "action", np.full(2, -1.0), np.ones(2), 0.04)).all()
    # "action" clips the previous output to the action space
    prev = rows[1]
    clipped = sim2sim.training_last_action(prev, rows[2], "action", np.full(2, -1.0), np.ones(2), 0.04)
    assert np.array_equal(clipped, np.clip(prev.policy_action, -1, 1))


def test_a_fall_fails_the_run_and_too_few_ticks_is_no_evidence():
    report = judge(*run(falls_at=1.5))
    assert report.falls == 1 and any("fell 1 time" in r for r in report.reasons)
    rows, truths = run()
    short = judge(rows[:5], truths)
    assert not short.ok and any("only 5 policy ticks" in r for r in short.reasons)
    late = judge(rows, [t for t in truths if t.stamp > 1000.0 + 10])  # no truth at all in the run: none matched
    assert late.matched == 0 and not late.ok


def test_simulator_choice_and_the_legged_truth_row(tmp_path):
    legged_file = ROOT / "config/robots/legged_ant.yaml"
    assert sim2sim.simulator_for(load_robot_file(legged_file)).env_id == f"robot_sim:{legged_file}"  # its sim:
    without_sim = yaml.safe_load(legged_file.read_text())
    del without_sim["sim"]
    (tmp_path / "legged.yaml").write_text(yaml.safe_dump(without_sim))
    assert sim2sim.simulator_for(load_robot_file(tmp_path / "legged.yaml")).env_id == "LeggedAnt"
    with pytest.raises(ValueError, match="no simulator"):
        sim2sim.simulator_for(load_robot_file(ROOT / "config/robots/pendulum.yaml"))
    from lowrl_ros.core.sim.legged import JOINTS, LeggedSim, OBS_NAMES, observation

    sim = LeggedSim(realtime=False)
    sim.set_velocity_command(2.0, 0.0, 0.1)
    for _ in range(20):
        sim.step(sim.hold_command)
    truth = decode_truth(sim.true_state(12.5))
    assert isinstance(truth, TrueState) and truth.stamp == 12.5 and truth.falls == 0
    assert truth.obs.size == len(OBS_NAMES) and np.array_equal(truth.command, [2.0, 0.0, 0.1])
    np.testing.assert_allclose(truth.obs, observation(sim.robot, sim.command, np.zeros(len(JOINTS))))
    with pytest.raises(ValueError, match="sim truth row"):
        decode_truth([2.0, 1.0])


# ---- integration tier (test/tiers.py): the command, over ROS 2, on the shipped legged policy ----
def _sim2sim(tmp_path: Path, robot_file: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "lowrl_ros.cli", "sim2sim", str(ROOT / "models/legged_ant_int8.onnx"),
                          str(robot_file), "--seconds", "6", "--out", str(tmp_path / "out"), *extra],
                         capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    report = tmp_path / "out" / "sim2sim.json"
    return out, (json.loads(report.read_text()) if report.is_file() else {})


def test_sim2sim_shipped_legged_policy_is_in_parity(tmp_path):
    out, report = _sim2sim(tmp_path, ROOT / "config/robots/legged_ant.yaml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert report["ok"] and report["falls"] == 0 and report["matched"] >= 100
    assert [t["term"].split()[1] for t in report["terms"]] == ["imu_angular_velocity", "projected_gravity",
                                                               "velocity_command", "joint_position",
                                                               "joint_velocity", "last_action"]
    assert all(t["ok"] for t in report["terms"])
    assert "control loop period" in out.stdout and "sim2sim: ok" in out.stdout  # the deploy check ran first


def test_sim2sim_with_two_joints_swapped_fails_naming_the_term(tmp_path):
    text = (ROOT / "config/robots/legged_ant.yaml").read_text().replace(
        "{term: joint_position, topic: joint_states,",
        "{term: joint_position, topic: joint_states, joints: [ankle_1, hip_1, hip_2, ankle_2, hip_3, ankle_3, "
        "hip_4, ankle_4],")
    swapped = tmp_path / "swapped.yaml"
    swapped.write_text(text)
    refused, _ = _sim2sim(tmp_path, swapped)
    assert refused.returncode == 1 and "--deploy-check warn" in refused.stderr  # refused before any run
    out, report = _sim2sim(tmp_path, swapped, "--deploy-check", "warn")
    assert out.returncode == 1, out.stdout + out.stderr
    assert [t["term"] for t in report["terms"] if not t["ok"]] == ["3 joint_position"]
    assert "FAIL obs 3 joint_position: p95" in out.stdout
