"""The policy node follows the robot file's fallback ladder over ROS: a decimation the robot forbids is
never taken, the tier status names the step, and a ladder the bundle cannot run fails configure."""
from __future__ import annotations

from pathlib import Path

import pytest
import rclpy
import yaml
from rclpy.executors import SingleThreadedExecutor
from std_msgs.msg import UInt8

from lowrl_ros.core.runtime.bundle import save_bundle
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.ros.diagnostics import level_of
from lowrl_ros.ros.qos import LATCHED
from fakes import FakeRobot, constant_policy
from rosutil import active_policy_node, spin_until, wait_for_match

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[1]


def robot_file(tmp_path: Path, fallback: list[str]) -> Path:
    """The shipped pendulum robot file (effort, command == action) with a fallback ladder."""
    data = yaml.safe_load((ROOT / "config/robots/pendulum.yaml").read_text())
    data.update(safety={"soft_start_s": 0.0, "safe_action": "zero"}, fallback=fallback)
    for term, name in zip(data["observation"], ("cos_theta", "sin_theta", "theta_dot")):
        term["name"] = name  # constant_policy's observation names
    path = tmp_path / "pendulum_ladder.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def rig(ros_context):
    executor = SingleThreadedExecutor(context=ros_context)
    robot = FakeRobot(ros_context)
    executor.add_node(robot.node)
    made = []
    yield executor, robot, made
    for node in made:
        node.destroy_node()
    robot.node.destroy_node()
    executor.shutdown()


def test_the_node_runs_lite_where_decimation_is_asked_for_and_names_the_step(rig, ros_context, tmp_path):
    executor, robot, made = rig
    bundle = save_bundle(tmp_path / "p.lowrl", {
        "full": constant_policy(tmp_path / "full.onnx", 0.5, hidden=32),
        "lite": constant_policy(tmp_path / "lite.onnx", 1.0, tier="lite", hidden=4)})
    node = active_policy_node(ros_context, bundle, executor=executor, robot_timing="parameters",
                              robot_file=str(robot_file(tmp_path, ["lite", "safe"])), diagnostics_period_s=0.1)
    made.append(node)
    tier_pub = robot.node.create_publisher(UInt8, "/lowrl/compute_tier", LATCHED)
    assert wait_for_match(executor, robot.js_pub) and wait_for_match(executor, robot.cmd_sub)
    assert wait_for_match(executor, tier_pub)
    assert robot.exchange(executor, robot.joint_state(), 5.0) == pytest.approx(0.5, abs=0.02)

    tier_pub.publish(UInt8(data=int(ComputeTier.DECIMATED)))  # what a latency limit asks for
    assert spin_until(executor, lambda: node.controller.requested_tier == ComputeTier.DECIMATED)
    assert node.controller.tier == ComputeTier.LITE  # the robot's ladder has no decimated step
    steps = node.controller.policy_steps
    for _ in range(5):
        assert robot.exchange(executor, robot.joint_state(), 5.0) == pytest.approx(1.0, abs=0.02)
    assert node.controller.policy_steps - steps == 5  # lite on every tick: the full rate
    assert spin_until(executor, lambda: any(
        "no cheaper policy step than lite left: the next step is safe" in s.message
        for s in robot.statuses("lowrl/policy/tier")))
    values = {kv.key: kv.value for kv in robot.statuses("lowrl/policy/tier")[-1].values}
    assert values["step"] == "lite" and values["ladder"] == "full -> lite -> safe"

    tier_pub.publish(UInt8(data=int(ComputeTier.SAFE)))
    assert spin_until(executor, lambda: node.controller.tier == ComputeTier.SAFE)
    assert robot.exchange(executor, robot.joint_state(), 5.0) == 0.0
    tier_pub.publish(UInt8(data=int(ComputeTier.FULL)))
    assert spin_until(executor, lambda: node.controller.tier == ComputeTier.FULL)
    assert robot.exchange(executor, robot.joint_state(), 5.0) == pytest.approx(0.5, abs=0.02)


def test_a_ladder_naming_lite_fails_configure_with_a_one_policy_artifact(rig, ros_context, tmp_path):
    executor, robot, made = rig
    node = active_policy_node(ros_context, constant_policy(tmp_path / "a.onnx", 0.5), executor=executor,
                              activate=False, robot_timing="parameters",
                              robot_file=str(robot_file(tmp_path, ["lite", "safe"])))
    made.append(node)
    assert spin_until(executor, lambda: robot.node.count_publishers("/diagnostics") > 0)
    assert node.trigger_configure() == rclpy.lifecycle.TransitionCallbackReturn.FAILURE
    assert node.controller is None
    assert spin_until(executor, lambda: any(level_of(s) == 2 and "fallback lists 'lite'" in s.message
                                            for s in robot.diags))
