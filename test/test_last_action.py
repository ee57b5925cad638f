"""The last-action convention: recorded at import, read by one accessor, followed by the observation builder.

Isaac Lab, rsl_rl's envs and rl_sar read back the network's raw output y as ``last_action``; a gymnasium env
(SB3, our kits) reads back the action it was given. These tests pin each piece of that path without ROS.
"""
from __future__ import annotations

import numpy as np
import pytest

from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, last_action_convention, save_artifact
from lowrl_ros.core.runtime.bundle import load_bundle
from lowrl_ros.core.runtime.control import ControlConfig, PolicyController, StepResult
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.runtime.observation import ObservationBuilder, ObservationSpec
from lowrl_ros.core.runtime.robot_file import RobotFileError, parse_robot_file

OFFSET = np.array([0.1, -0.2])
SCALE = np.array([0.25, 0.5])


def contract(last_action: str | None = None, n_obs: int = 2) -> PolicyContract:
    prov = {} if last_action is None else {"last_action": last_action}
    return PolicyContract(obs_names=tuple(f"obs_{i}" for i in range(n_obs)), action_names=("j0", "j1"),
                          action_low=(-0.3, -0.4), action_high=(0.3, 0.4), action_scale=tuple(SCALE),
                          action_offset=tuple(OFFSET), provenance=prov)


def artifact(tmp_path, last_action: str | None, name: str = "p.onnx"):
    """A linear 2 -> 2 policy y = W x + b, action = clip(offset + scale * y, low, high)."""
    w = np.array([[1.0, 0.5], [-0.5, 2.0]], np.float32)
    weights = MlpWeights([(w, np.array([0.2, -0.1], np.float32))], "relu", "none")
    return save_artifact(tmp_path / name, weights, contract(last_action)), w


def spec(term: dict) -> ObservationSpec:
    robot = parse_robot_file({"joints": ["j0", "j1"], "observation": [{"term": "array", "topic": "x", "size": 2},
                                                                      term]}, "robot.yaml")
    return ObservationSpec.from_robot_file(robot, 0.02)


@pytest.mark.parametrize("prov,want", [(None, "action"), ("raw", "raw"), ("action", "action")])
def test_accessor_defaults_to_action(prov, want):
    assert last_action_convention(contract(prov)) == want


def test_accessor_refuses_an_unknown_value():
    with pytest.raises(ValueError, match="'last_action' is 'joint_targets'"):
        last_action_convention(contract("joint_targets"))


@pytest.mark.parametrize("engine", ["ort", "numpy"])
def test_engine_hands_over_the_raw_output_before_transform_and_clip(tmp_path, engine):
    path, w = artifact(tmp_path, "raw")
    policy = load_artifact(path, engine=engine)
    obs = np.array([3.0, -2.0])  # y far outside the limits: the clip must not leak into raw_output
    y = w.astype(np.float64) @ obs + np.array([0.2, -0.1])
    action = policy.act(obs)
    np.testing.assert_allclose(action, np.clip(OFFSET + SCALE * y, [-0.3, -0.4], [0.3, 0.4]), atol=1e-6)
    np.testing.assert_allclose(policy.raw_output, y, atol=1e-5)
    # The inverse transform cannot see past the clip: that is why the engine's own y is used.
    assert not np.allclose(policy.raw_from_action(action), y, atol=1e-3)


def _run(tmp_path, last_action, term, obs=(3.0, -2.0)):
    path, _ = artifact(tmp_path, last_action)
    bundle = load_bundle(path, engine="numpy")
    controller = PolicyController(ControlConfig(soft_start_steps=0), bundle, clock=lambda: 0.0)
    builder = ObservationBuilder(spec(term), last_action_convention(bundle.contract))
    controller.activate()
    controller.observe(np.array(obs))
    result = controller.step(0.0)
    builder.update("x", list(obs), 0.0)
    builder.after_step(result)
    return builder.build(0.0)[2:], result


def test_builder_feeds_raw_or_action_as_the_policy_recorded(tmp_path):
    y = np.array([[1.0, 0.5], [-0.5, 2.0]]) @ np.array([3.0, -2.0]) + np.array([0.2, -0.1])
    fed, result = _run(tmp_path, "raw", {"term": "last_action"})
    np.testing.assert_allclose(fed, y, atol=1e-5)
    fed, result = _run(tmp_path, None, {"term": "last_action"})  # no key: the executed action (our kits)
    np.testing.assert_allclose(fed, result.policy_action)


@pytest.mark.parametrize("recorded,override", [("raw", "action"), ("action", "raw")])
def test_robot_file_term_overrides_the_recorded_convention(tmp_path, recorded, override):
    fed, result = _run(tmp_path, recorded, {"term": "last_action", "convention": override})
    np.testing.assert_allclose(fed, result.raw_action if override == "raw" else result.policy_action, atol=1e-6)
    assert not np.allclose(result.raw_action, result.policy_action)


def test_term_convention_is_checked():
    with pytest.raises(RobotFileError, match="convention 'targets' is unknown"):
        spec({"term": "last_action", "convention": "targets"})


def test_intervention_feeds_the_teleop_actions_y(tmp_path):
    path, _ = artifact(tmp_path, "raw")
    bundle = load_bundle(path, engine="numpy")
    controller = PolicyController(ControlConfig(soft_start_steps=0), bundle, clock=lambda: 0.0)
    controller.activate()
    controller.observe(np.array([0.0, 0.0]))
    teleop = np.array([0.2, 0.1])
    controller.set_override(teleop, 0.0)
    result = controller.step(0.0)
    assert result.intervention
    np.testing.assert_allclose(result.raw_action, (teleop - OFFSET) / SCALE)


def test_a_fake_policy_without_raw_output_feeds_its_action():
    b = ObservationBuilder(spec({"term": "last_action"}), "raw")
    b.update("x", [0.0, 0.0], 0.0)
    executed = np.array([0.1, 0.2])
    b.after_step(StepResult(executed, "policy", policy_action=executed))  # raw_action None: the action
    np.testing.assert_allclose(b.build(0.0)[2:], executed)
    b.after_step(StepResult(np.zeros(2), "safe", "watchdog"))
    np.testing.assert_allclose(b.build(0.0)[2:], np.zeros(2))


def test_hot_swap_refuses_a_policy_with_another_convention(tmp_path):
    raw, _ = artifact(tmp_path, "raw", "raw.onnx")
    act, _ = artifact(tmp_path, "action", "act.onnx")
    controller = PolicyController(ControlConfig(), load_bundle(raw, engine="numpy"), clock=lambda: 0.0)
    with pytest.raises(ValueError, match="reads back its last action as 'action', the running one as 'raw'"):
        controller.check_compatible(load_bundle(act, engine="numpy"))


def test_inspect_gives_the_right_advice_per_file_kind(tmp_path, capsys):
    """A plain ONNX is imported with its contract, never sent to `lowrl import-sb3` (an SB3-only command)."""
    import onnx
    from onnx import TensorProto, helper

    from lowrl_ros.cli import main as lowrl_main

    plain = tmp_path / "policy.onnx"
    graph = helper.make_graph([helper.make_node("Identity", ["obs"], ["act"])], "g",
                              [helper.make_tensor_value_info("obs", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("act", TensorProto.FLOAT, [1, 2])])
    onnx.save(helper.make_model(graph), plain)
    assert lowrl_main(["inspect", str(plain)]) == 2
    err = capsys.readouterr().err
    assert "plain ONNX" in err and "lowrl import policy.onnx --sidecar" in err and "import-sb3" not in err
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not onnx at all")
    assert lowrl_main(["inspect", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "lowrl import SOURCE" in err and "import-sb3" not in err
