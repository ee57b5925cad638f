"""`lowrl check`: the robot file against the policy, term by term (core/runtime/deploy_check.py).

A correct Isaac-Lab-style 12-joint case (the run directory of test_import_onnx.py imported as `lowrl import`
does: term scales, the action scale 0.5 and the default pose folded into the artifact; last_action the raw
output) passes with and without --run-dir; each seeded mistake is caught and named. Every shipped robot
file passes with its shipped policy, so the demos still configure.
"""
from __future__ import annotations

import copy
from dataclasses import replace
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_import_onnx import DEFAULT_POS, JOINTS, make_run, write_sidecar

from lowrl_ros.cli import main as lowrl_main
from lowrl_ros.core.importers.registry import ImportOptions, load_source, write_imported
from lowrl_ros.core.importers.training import training_config
from lowrl_ros.core.runtime.artifact import last_action_convention, load_weights, save_artifact
from lowrl_ros.core.runtime.deploy_check import check_deployment, recorded_training
from lowrl_ros.core.runtime.observation import ObservationSpec
from lowrl_ros.core.runtime.robot_file import load_robot_file, parse_robot_file

ROOT = Path(__file__).resolve().parents[1]
LIMITS = ([-0.78, -0.78, -0.61, -0.61] + [-9.4] * 8, [0.61, 0.61, 0.78, 0.78] + [9.4] * 8)


def robot_doc() -> dict:
    """The robot file that matches the imported run: every scale and the action transform are the artifact's."""
    return {
        "joints": list(JOINTS), "default_pose": list(DEFAULT_POS),
        "observation": [
            {"term": "array", "name": "base_lin_vel", "topic": "state_estimator/lin_vel", "size": 3},
            {"term": "imu_angular_velocity", "name": "base_ang_vel", "topic": "imu"},
            {"term": "projected_gravity", "topic": "imu", "quaternion_order": "xyzw"},
            {"term": "velocity_command", "name": "generated_commands", "topic": "cmd_vel"},
            {"term": "joint_position", "name": "joint_pos_rel", "topic": "joint_states", "relative": True},
            {"term": "joint_velocity", "name": "joint_vel_rel", "topic": "joint_states"},
            {"term": "last_action", "convention": "raw"},
        ],
        "interface": "position",
        "action": {"limits": {"lower": LIMITS[0], "upper": LIMITS[1]}},
        "output": {"type": "float64_multi_array", "topic": "joint_group_position_controller/commands",
                   "joints": sorted(JOINTS)},
        "safety": {"safe_action": "hold"},
    }


@pytest.fixture(scope="module")
def isaac(tmp_path_factory):
    """(run dir, the imported artifact's path)."""
    tmp = tmp_path_factory.mktemp("isaac")
    run = make_run(tmp)
    imp = load_source(run, None, ImportOptions())  # an Isaac Lab import records last_action: raw
    out = write_imported(imp, tmp / "anymal.onnx", int8=True)
    return run, out


def check(isaac, doc: dict, *, run_dir: bool = True, policy: Path | None = None, period: float | None = None):
    run, artifact = isaac
    _, contract = load_weights(policy or artifact)
    training = training_config(run) if run_dir else None
    return check_deployment(contract, parse_robot_file(doc, "robot.yaml"), training=training, loop_period_s=period)


def bad(report) -> dict[str, str]:
    return {r.what: r.why for r in report.hard}


def test_the_correct_isaaclab_case_agrees(isaac):
    for run_dir in (True, False):
        report = check(isaac, robot_doc(), run_dir=run_dir)
        assert report.ok and not report.soft, report.mismatches()
    rows = {r.what: r for r in check(isaac, robot_doc()).rows}
    assert rows["obs 1 imu_angular_velocity 'base_ang_vel': scale"].expects == "1"  # the artifact applies 0.25
    assert rows["action scale (end to end)"].expects == "0.5"
    assert rows["obs 6 last_action: convention"].expects == "raw"


def test_swapped_joints(isaac):
    doc = robot_doc()
    doc["joints"][0], doc["joints"][1] = doc["joints"][1], doc["joints"][0]
    names = bad(check(isaac, doc))
    assert "action joint order" in names and "obs 4 joint_position 'joint_pos_rel': joint order" in names
    assert "default pose" not in names  # same values for the two swapped hips: only the order is wrong
    doc["default_pose"][4], doc["default_pose"][5] = doc["default_pose"][5], doc["default_pose"][4]
    assert "default pose" in bad(check(isaac, doc))


def test_the_controller_joints_are_named_and_generic_action_names_are_not_an_order(isaac):
    doc = robot_doc()
    doc["output"]["joints"] = sorted(JOINTS)[:-1] + ["toe"]
    row = next(r for r in check(isaac, doc).hard if r.what == "controller joints")
    assert "'toe', not a policy joint" in row.gives and f"lacks {sorted(JOINTS)[-1]!r}" in row.gives
    # a policy whose actions name no joint ("torque", "u", "action_0") has no order to compare with
    run, artifact = isaac
    _, contract = load_weights(artifact)
    generic = dataclasses.replace(contract, action_names=tuple(f"action_{i}" for i in range(len(JOINTS))))
    report = check_deployment(generic, parse_robot_file(robot_doc(), "robot.yaml"))
    order = next(r for r in report.rows if r.what == "action joint order")
    assert order.ok and "name no joint" in order.expects


def test_scale_applied_twice_and_missing(isaac, tmp_path):
    doc = robot_doc()
    doc["observation"][1]["scale"] = 0.25  # the artifact already applies Isaac Lab's 0.25
    why = bad(check(isaac, doc))["obs 1 imu_angular_velocity 'base_ang_vel': scale"]
    assert "applied twice" in why
    # The same network imported with a sidecar that leaves the term scales to the robot: the robot must apply them.
    run, _ = isaac
    side = {"observations": [{"name": n, "size": s} for n, s in (("base_lin_vel", 3), ("base_ang_vel", 3),
                                                                  ("projected_gravity", 3), ("generated_commands", 3))]
            + [{"name": "joint_pos_rel", "names": list(JOINTS)}, {"name": "joint_vel_rel", "names": list(JOINTS)},
               {"name": "last_action", "size": 12}],
            "actions": {"names": list(JOINTS), "scale": 0.5, "offset": list(DEFAULT_POS)}, "control_period_s": 0.02}
    write_sidecar(tmp_path / "side.yaml", side)
    imp = load_source(run / "exported" / "policy.onnx", "onnx", ImportOptions(sidecar=tmp_path / "side.yaml"))
    plain = write_imported(imp, tmp_path / "plain.onnx")
    report = check(isaac, robot_doc(), policy=plain)
    assert bad(report)["obs 1 imu_angular_velocity 'base_ang_vel': scale"].startswith("missing scale: set scale: 0.25")
    assert "obs 5 joint_velocity 'joint_vel_rel': scale" in bad(report)
    fixed = robot_doc()
    fixed["observation"][1]["scale"], fixed["observation"][5]["scale"] = 0.25, 0.05
    assert check(isaac, fixed, policy=plain).ok


def test_offset_applied_twice(isaac):
    doc = robot_doc()
    doc["action"].update(scale=0.5, offset="default_pose")  # the artifact already folds both
    names = bad(check(isaac, doc))
    assert {"action scale/offset applied once", "action scale (end to end)", "action offset (end to end)"} <= set(names)
    doc = robot_doc()
    doc["observation"][4]["offset"] = list(DEFAULT_POS)  # relative: true already subtracts the default pose
    assert "twice" in bad(check(isaac, doc))["obs 4 joint_position 'joint_pos_rel': offset"]
    doc["observation"][4].pop("offset")
    doc["observation"][4]["relative"] = False
    assert "obs 4 joint_position 'joint_pos_rel': relative" in bad(check(isaac, doc))


def test_wrong_quaternion_order(isaac, tmp_path):
    weights, contract = load_weights(isaac[1])
    recorded = save_artifact(tmp_path / "q.onnx", weights, replace(
        contract, provenance={**contract.provenance, "quaternion_order": "xyzw"}))
    doc = robot_doc()
    doc["observation"][2].update(type="array", topic="orientation", quaternion_order="wxyz")
    assert "obs 2 projected_gravity: quaternion order" in bad(check(isaac, doc, policy=recorded))
    doc["observation"][2]["quaternion_order"] = "xyzw"
    assert check(isaac, doc, policy=recorded).ok


def test_wrong_period(isaac, tmp_path):
    run, _ = isaac
    wrong = write_imported(load_source(run, None, ImportOptions(control_period_s=0.01)), tmp_path / "p.onnx")
    assert "control period vs training" in bad(check(isaac, robot_doc(), policy=wrong))
    slow = check(isaac, robot_doc(), period=0.04)  # the node's loop at another rate: a warning
    assert slow.ok and [r.what for r in slow.soft] == ["control loop period"]


def test_wrong_last_action_convention(isaac, tmp_path):
    doc = robot_doc()
    doc["observation"][6]["convention"] = "action"
    assert "raw network output" in bad(check(isaac, doc))["obs 6 last_action: convention"]
    doc["observation"][6].pop("convention")
    assert check(isaac, doc).ok  # the node follows the contract's recorded convention: raw
    weights, contract = load_weights(isaac[1])
    assert last_action_convention(contract) == "raw"
    old = save_artifact(tmp_path / "old.onnx", weights, replace(  # imported before conventions were recorded
        contract, provenance={k: v for k, v in contract.provenance.items() if k != "last_action"}))
    assert "obs 6 last_action: convention" in bad(check(isaac, doc, policy=old))


def test_term_order_size_and_safety(isaac):
    doc = robot_doc()
    doc["observation"][1], doc["observation"][2] = doc["observation"][2], doc["observation"][1]
    names = bad(check(isaac, doc, run_dir=False))
    assert "obs 1 projected_gravity: order" in names and "obs 2 imu_angular_velocity 'base_ang_vel': order" in names
    doc = robot_doc()
    del doc["observation"][0]
    assert "observation size" in bad(check(isaac, doc, run_dir=False))
    doc = robot_doc()
    doc["default_pose"][8] = 12.0
    doc["action"].pop("limits")
    report = check(isaac, doc, run_dir=False)
    assert [r.what for r in report.soft] == ["joint limits"]


def test_cli_table_and_exit_codes(isaac, tmp_path, capsys):
    run, artifact = isaac
    good, wrong = tmp_path / "good.yaml", tmp_path / "wrong.yaml"
    good.write_text(yaml.safe_dump(robot_doc()))
    doc = copy.deepcopy(robot_doc())
    doc["joints"][0], doc["joints"][1] = doc["joints"][1], doc["joints"][0]
    wrong.write_text(yaml.safe_dump(doc))
    assert lowrl_main(["check", str(artifact), str(good), "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert "policy expects" in out and "robot file gives" in out and "MISMATCH" not in out
    assert lowrl_main(["check", str(artifact), str(wrong)]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH action joint order" in out
    assert lowrl_main(["check", str(tmp_path / "none.onnx"), str(good)]) == 2
    assert lowrl_main(["check", str(artifact), str(tmp_path / "none.yaml")]) == 2
    assert "lowrl check:" in capsys.readouterr().err


def _untrained_policy(tmp_path: Path, name: str) -> Path:
    """A robot file shipped without a policy: a random one with its entry names, as an Isaac Lab import names them."""
    robot = load_robot_file(ROOT / "config/robots" / name)
    names = ObservationSpec.from_robot_file(robot, 0.02).entry_names()
    from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract

    rng = np.random.default_rng(0)
    m = len(robot.joints)
    w = MlpWeights([(rng.normal(size=(16, len(names))), np.zeros(16)), (rng.normal(size=(m, 16)), np.zeros(m))])
    c = PolicyContract(names, robot.joints, [-1.0] * m, [1.0] * m, control_period_s=0.02)
    return save_artifact(tmp_path / name.replace(".yaml", ".onnx"), w, c)


def test_every_shipped_robot_file_with_its_policy(tmp_path):
    """The shipped pairs agree (no hard mismatch, no warning), so the demos configure with deploy_check: refuse."""
    pairs = {"pendulum.yaml": ROOT / "models/pendulum_sac_int8.onnx",
             "legged_ant.yaml": ROOT / "models/legged_ant_int8.onnx",
             "legged_example.yaml": _untrained_policy(tmp_path, "legged_example.yaml"),
             "quadruped.yaml": ROOT / "models/quadruped.lowrl"}  # its walking rsl_rl policy
    assert sorted(pairs) == sorted(p.name for p in (ROOT / "config/robots").glob("*.yaml"))
    for name, policy in pairs.items():
        _, contract = load_weights(policy)
        training = recorded_training(contract, ROOT)
        report = check_deployment(contract, load_robot_file(ROOT / "config/robots" / name), training=training)
        assert report.ok and not report.soft, (name, report.mismatches())
        assert (training is not None) == (name in ("legged_ant.yaml", "quadruped.yaml"))  # they record it


def test_legged_ant_against_its_training_robot_file(tmp_path):
    """lowrl's own policy records the robot file it was trained with: a changed scale or quaternion order is named."""
    _, contract = load_weights(ROOT / "models/legged_ant_int8.onnx")
    doc = yaml.safe_load((ROOT / "config/robots/legged_ant.yaml").read_text())
    doc["observation"][4]["scale"] = 0.1
    doc["observation"][1].update(type="array", topic="orientation", quaternion_order="wxyz")
    report = check_deployment(contract, parse_robot_file(doc), training=recorded_training(contract, ROOT))
    assert {"obs 4 joint_velocity: scale", "obs 1 projected_gravity: quaternion order"} <= set(bad(report))



def test_policy_node_configure_refuses_or_warns(isaac, tmp_path):
    """PolicySetup (the node's configure): a hard mismatch fails it under deploy_check: refuse (the default) and is
    logged as an ERROR and diagnosed under warn; the correct file configures with an OK diagnostic."""
    from lowrl_ros.core.runtime.policy_settings import PolicyNodeSettings, PolicySetup
    from lowrl_ros.core.types import Level

    weights, contract = load_weights(isaac[1])
    contract = replace(contract, provenance={**contract.provenance, "quaternion_order": "xyzw"})
    artifact = save_artifact(tmp_path / "q.onnx", weights, contract)
    docs = {"good": robot_doc(), "wrong": robot_doc()}
    docs["wrong"]["observation"][2].update(type="array", topic="orientation", quaternion_order="wxyz")
    for doc in docs.values():  # the node's parser takes the convention key once issue 29 item 1 lands
        doc["observation"][6].pop("convention")
    good, wrong = tmp_path / "good.yaml", tmp_path / "wrong.yaml"
    for path, doc in ((good, docs["good"]), (wrong, docs["wrong"])):
        path.write_text(yaml.safe_dump(doc))

    def plan(path, mode="refuse"):
        settings = PolicyNodeSettings(str(artifact), robot_file=str(path), deploy_check=mode)
        return PolicySetup.plan(settings, contract, legacy=None, mode="fixed_rate", control_period_s=0.02,
                                watchdog_timeout_s=0.5, estop=None)

    assert plan(good).deploy.status().level == Level.OK
    with pytest.raises(ValueError, match="deploy_check: refuse.*projected_gravity: quaternion order"):
        plan(wrong)
    setup = plan(wrong, "warn")
    assert setup.deploy.status().level == Level.ERROR and "quaternion order" in setup.deploy.status().message
    assert any(level == Level.ERROR and "MISMATCH obs 2 projected_gravity: quaternion order" in line
               for level, line in setup.log_lines(str(wrong)))
    with pytest.raises(ValueError, match="deploy_check"):
        PolicyNodeSettings(str(artifact), deploy_check="maybe")
