"""The policy node with real rclpy: lifecycle, safety, watchdog, soft start, hot-swap, diagnostics, tiers.

A separate rclpy node (the "robot") publishes JointState and receives the commands over DDS in the
same process; artifacts are real ONNX files with weights that make the action easy to recognise.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import rclpy
from lifecycle_msgs.msg import State
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import UInt8

from lowrl_ros.core.runtime.bundle import save_bundle
from lowrl_ros.core.runtime.policy_stats import STATS_FIELDS, PolicyStats
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.ros.diagnostics import level_of
from lowrl_ros.ros.qos import CONTROL, LATCHED
from fakes import JOINT, FakeRobot, constant_policy
from rosutil import PENDULUM_FIELDS, active_policy_node, spin_for, spin_until, wait_for_match

FIELDS = PENDULUM_FIELDS

pytestmark = pytest.mark.ros


@pytest.fixture
def rig(ros_context, tmp_path):
    """A policy node (configured+active on demand), a fake robot and one executor for both."""
    executor = SingleThreadedExecutor(context=ros_context)
    made = []

    def build(policy_path=None, activate=True, **params):
        policy_path = policy_path or constant_policy(tmp_path / "a.onnx", 0.5)
        # this file's timings: a 0.5 s watchdog, diagnostics every 0.2 s
        node = active_policy_node(ros_context, policy_path, executor=executor, activate=activate,
                                  **{"watchdog_timeout_s": 0.5, "diagnostics_period_s": 0.2, **params})
        made.append(node)
        return node

    robot = FakeRobot(ros_context)
    executor.add_node(robot.node)
    yield build, robot, executor
    for node in made:
        node.destroy_node()
    robot.node.destroy_node()
    executor.shutdown()


def exchange(robot, executor, msg, timeout=5.0) -> float:
    """Publish one joint state and wait for its command (event mode answers each observation)."""
    return robot.exchange(executor, msg, timeout)


def connect(robot, executor) -> None:
    assert wait_for_match(executor, robot.js_pub)
    assert wait_for_match(executor, robot.cmd_sub)


def test_lifecycle_transitions_and_safe_action_on_deactivate(rig):
    build, robot, executor = rig
    node = build(activate=False)
    assert node.trigger_configure() == rclpy.lifecycle.TransitionCallbackReturn.SUCCESS
    assert node.controller is not None and not node.controller.active
    node.trigger_activate()
    connect(robot, executor)
    assert exchange(robot, executor, robot.joint_state()) == pytest.approx(0.5, abs=0.02)
    n = len(robot.commands)
    node.trigger_deactivate()
    assert spin_until(executor, lambda: len(robot.commands) > n)
    assert robot.commands[-1] == 0.0  # the safe action goes out on deactivate
    robot.js_pub.publish(robot.joint_state())
    assert not spin_until(executor, lambda: len(robot.commands) > n + 1, timeout=0.3)  # inactive: silent
    node.trigger_cleanup()
    assert node.controller is None
    assert node._state_machine.current_state[0] == State.PRIMARY_STATE_UNCONFIGURED


def test_configure_fails_cleanly_on_a_bad_artifact(rig, tmp_path):
    build, robot, executor = rig
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx file")
    node = build(policy_path=bad, activate=False)
    assert spin_until(executor, lambda: robot.node.count_publishers("/diagnostics") > 0)
    assert node.trigger_configure() == rclpy.lifecycle.TransitionCallbackReturn.FAILURE
    assert node.controller is None
    assert spin_until(executor, lambda: any(level_of(s) == 2 and "configure failed" in s.message
                                            for s in robot.diags))


def test_obs_fields_must_match_the_policy(rig):
    build, robot, executor = rig
    node = build(activate=False, obs_fields=FIELDS[:2])
    assert node.trigger_configure() == rclpy.lifecycle.TransitionCallbackReturn.FAILURE
    assert spin_until(executor, lambda: any("observation terms add up to 2 entries" in s.message and "reads 3" in
                                            s.message for s in robot.diags))


@pytest.mark.parametrize("case", ["nan", "inf", "wrong_size", "missing_joint"])
def test_malformed_input_gives_safe_action_and_error_diagnostic(rig, case):
    build, robot, executor = rig
    node = build()
    connect(robot, executor)
    assert exchange(robot, executor, robot.joint_state()) == pytest.approx(0.5, abs=0.02)
    bad = {
        "nan": robot.joint_state(velocity=float("nan")),
        "inf": robot.joint_state(position=float("inf")),
        "wrong_size": JointState(name=[JOINT], position=[0.1], velocity=[]),
        "missing_joint": robot.joint_state(names=("elbow",)),
    }[case]
    robot.diags.clear()
    assert exchange(robot, executor, bad) == 0.0
    expected = {"nan": "NaN/Inf", "inf": "NaN/Inf", "wrong_size": "has 0 velocity values for 1 names",
                "missing_joint": "joint 'pendulum_joint' is not in the JointState"}[case]
    assert spin_until(executor, lambda: any(level_of(s) == 2 and expected in s.message
                                            for s in robot.statuses("lowrl/policy/input")))
    # The node is still up and back on the policy with the next good observation.
    assert exchange(robot, executor, robot.joint_state()) == pytest.approx(0.5, abs=0.02)
    assert node.controller.active


def test_watchdog_sends_safe_action_when_observations_stop(rig):
    build, robot, executor = rig
    build(watchdog_timeout_s=0.1)
    connect(robot, executor)
    assert exchange(robot, executor, robot.joint_state()) == pytest.approx(0.5, abs=0.02)
    assert spin_until(executor, lambda: robot.commands[-1] == 0.0, timeout=3.0)
    assert spin_until(executor, lambda: any(level_of(s) == 2 and "watchdog" in s.message
                                            for s in robot.statuses("lowrl/policy/input")))


def test_soft_start_ramps_from_the_safe_action(rig):
    build, robot, executor = rig
    build(soft_start_steps=4)
    connect(robot, executor)
    got = [exchange(robot, executor, robot.joint_state()) for _ in range(5)]
    np.testing.assert_allclose(got, [0.125, 0.25, 0.375, 0.5, 0.5], atol=0.02)


def test_hot_swap_good_then_corrupt_artifact_while_observations_flow(rig, tmp_path):
    build, robot, executor = rig
    node = build(soft_start_steps=3)
    connect(robot, executor)
    new = constant_policy(tmp_path / "b.onnx", -1.0, version=2)
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(new.read_bytes()[: len(new.read_bytes()) // 2])
    for _ in range(5):
        exchange(robot, executor, robot.joint_state())
    node.set_parameters([Parameter("policy_path", value=str(new))])
    sent = 5
    # Every observation still gets its command while the new policy loads off the control path.
    while robot.commands[-1] > -0.99:
        exchange(robot, executor, robot.joint_state())
        sent += 1
        assert sent < 2000, "the new policy never took over"
    assert len(robot.commands) == sent
    assert node.controller.bundle.version == 2
    assert any(-0.99 < c < 0.49 for c in robot.commands[5:]), "no soft start after the swap"

    robot.diags.clear()
    node.set_parameters([Parameter("policy_path", value=str(corrupt))])
    node.swapper.wait(10.0)
    for _ in range(20):
        assert exchange(robot, executor, robot.joint_state()) == pytest.approx(-1.0, abs=0.02)
    assert node.controller.bundle.version == 2 and node.active_policy_path == str(new)
    assert spin_until(executor, lambda: any(level_of(s) == 2 and "rejected" in s.message
                                            for s in robot.statuses("lowrl/policy/policy")))


def test_a_swap_rejected_after_the_node_is_destroyed_raises_nothing(rig, tmp_path):
    """A swap worker that finishes after shutdown (a bad bundle still being checked) only logs:
    CI saw it raise InvalidHandle in the policy-swap thread when it published the ERROR diagnostic."""
    build, robot, executor = rig
    node = build()
    executor.remove_node(node)
    node.destroy_node()  # publishers gone, as after shutdown with a worker still running
    late = tmp_path / "late.onnx"
    late.write_bytes(b"checked after shutdown")
    assert node.swapper.request_path(str(late))
    assert node.swapper.wait(10.0)  # the worker ended normally: publishing the rejection did not kill it
    status = node.swapper.status()
    assert status.state == "rejected" and status.path == str(late) and "late.onnx" in status.message


def test_diagnostics_and_stats_content(rig):
    build, robot, executor = rig
    build()
    connect(robot, executor)
    for _ in range(20):
        exchange(robot, executor, robot.joint_state())
    robot.diags.clear()
    robot.stats.clear()  # stats published during the exchanges count fewer ticks
    assert spin_until(executor, lambda: {"lowrl/policy/latency", "lowrl/policy/policy", "lowrl/policy/tier",
                                         "lowrl/policy/input"} <= {s.name for s in robot.diags})
    assert spin_until(executor, lambda: len(robot.stats) > 0)
    latency = robot.statuses("lowrl/policy/latency")[-1]
    values = {kv.key: kv.value for kv in latency.values}
    assert latency.hardware_id and float(values["p50_us"]) > 0 and float(values["p99_us"]) >= float(values["p50_us"])
    assert "deadline_misses" in values
    policy = {kv.key: kv.value for kv in robot.statuses("lowrl/policy/policy")[-1].values}
    assert policy["version"] == "1"
    assert {kv.key: kv.value for kv in robot.statuses("lowrl/policy/tier")[-1].values}["tier"] == "full"
    msg = robot.stats[-1]
    assert msg.layout.dim[0].label == ",".join(STATS_FIELDS)
    stats = PolicyStats.from_list(msg.data)
    assert stats.pid == os.getpid() and stats.ticks >= 20 and stats.window_p50_us > 0


def test_tiers_applied_with_a_two_tier_bundle(rig, tmp_path):
    build, robot, executor = rig
    bundle = save_bundle(tmp_path / "p.lowrl", {
        "full": constant_policy(tmp_path / "full.onnx", 0.5, hidden=32),
        "lite": constant_policy(tmp_path / "lite.onnx", 1.0, tier="lite", hidden=4)})
    node = build(policy_path=bundle, tier_decimation=3)
    tier_pub = robot.node.create_publisher(UInt8, "/lowrl/compute_tier", LATCHED)
    connect(robot, executor)
    assert wait_for_match(executor, tier_pub)

    def set_tier(tier):
        tier_pub.publish(UInt8(data=int(tier)))
        assert spin_until(executor, lambda: node.controller.tier == tier)

    assert exchange(robot, executor, robot.joint_state()) == pytest.approx(0.5, abs=0.02)
    set_tier(ComputeTier.LITE)
    assert exchange(robot, executor, robot.joint_state()) == pytest.approx(1.0, abs=0.02)
    set_tier(ComputeTier.DECIMATED)
    steps = node.controller.policy_steps
    for _ in range(9):
        exchange(robot, executor, robot.joint_state())
    assert node.controller.policy_steps - steps == 3  # lite every 3rd tick, held between
    set_tier(ComputeTier.SAFE)
    assert exchange(robot, executor, robot.joint_state()) == 0.0
    assert spin_until(executor, lambda: any("tier safe" in s.message for s in robot.statuses("lowrl/policy/tier")))
    set_tier(ComputeTier.FULL)
    assert exchange(robot, executor, robot.joint_state()) == pytest.approx(0.5, abs=0.02)


def test_restarted_node_receives_the_latched_tier(rig):
    build, robot, executor = rig
    tier_pub = robot.node.create_publisher(UInt8, "/lowrl/compute_tier", LATCHED)
    tier_pub.publish(UInt8(data=int(ComputeTier.SAFE)))  # published before the node exists
    node = build()
    assert spin_until(executor, lambda: node.controller.tier == ComputeTier.SAFE)
    connect(robot, executor)
    assert exchange(robot, executor, robot.joint_state()) == 0.0


def test_lite_tier_with_one_policy_runs_decimated(rig):
    build, robot, executor = rig
    node = build()
    tier_pub = robot.node.create_publisher(UInt8, "/lowrl/compute_tier", LATCHED)
    assert wait_for_match(executor, tier_pub)
    tier_pub.publish(UInt8(data=int(ComputeTier.LITE)))
    assert spin_until(executor, lambda: node.controller.tier == ComputeTier.DECIMATED)


def test_fixed_rate_mode_acts_on_the_timer_with_decimation(rig):
    build, robot, executor = rig
    node = build(mode="fixed_rate", control_period_s=0.01, decimation=2)
    connect(robot, executor)
    robot.js_pub.publish(robot.joint_state())
    # Commands keep coming from the timer without further observations (until the watchdog).
    assert spin_until(executor, lambda: len(robot.commands) >= 10)
    c = node.controller
    assert c.ticks >= 10 and abs(c.policy_steps - c.ticks / 2) <= 1


def test_fixed_rate_loop_slows_down_below_lite_and_back(rig):
    """Decimated and safe tiers shed wake-ups: the loop period grows by tier_decimation."""
    build, robot, executor = rig
    node = build(mode="fixed_rate", control_period_s=0.01, tier_decimation=4, safe_period_s=0.05,
                 watchdog_timeout_s=5.0)
    tier_pub = robot.node.create_publisher(UInt8, "/lowrl/compute_tier", LATCHED)
    connect(robot, executor)
    assert wait_for_match(executor, tier_pub)
    robot.js_pub.publish(robot.joint_state())
    assert spin_until(executor, lambda: len(robot.commands) >= 5)
    assert node._loop.period_s == pytest.approx(0.01)
    tier_pub.publish(UInt8(data=int(ComputeTier.SAFE)))
    assert spin_until(executor, lambda: node.controller.tier == ComputeTier.SAFE)
    assert node._loop.period_s == pytest.approx(0.05)  # the safe action's keep-alive
    tier_pub.publish(UInt8(data=int(ComputeTier.DECIMATED)))
    assert spin_until(executor, lambda: node.controller.tier == ComputeTier.DECIMATED)
    assert node._loop.period_s == pytest.approx(0.04)
    tier_pub.publish(UInt8(data=int(ComputeTier.SAFE)))
    assert spin_until(executor, lambda: node.controller.tier == ComputeTier.SAFE)
    n = len(robot.commands)
    assert spin_until(executor, lambda: len(robot.commands) >= n + 3)  # safe action keeps coming, slower
    assert robot.commands[-1] == 0.0
    tier_pub.publish(UInt8(data=int(ComputeTier.FULL)))
    assert spin_until(executor, lambda: node.controller.tier == ComputeTier.FULL)
    assert node._loop.period_s == pytest.approx(0.01)


def test_invalid_live_parameter_is_rejected_with_a_reason(rig):
    build, robot, executor = rig
    node = build()
    result = node.set_parameters([Parameter("safe_action", value="brake")])[0]
    assert not result.successful and "safe_action 'brake' is unknown" in result.reason
    assert node.set_parameters([Parameter("soft_start_steps", value=7)])[0].successful
    assert node.controller.config.soft_start_steps == 7
    # What only the running policy can judge (PolicyController.check_config): one default_pose value per action.
    result = node.set_parameters_atomically([Parameter("safe_action", value="default_pose"),
                                             Parameter("default_pose", value=[0.1, 0.2])])
    assert not result.successful and "default_pose has 2 values but the policy has 1 actions" in result.reason
    assert node.controller.config.safe_action == "zero"


def test_plain_observation_topic_input(rig):
    from std_msgs.msg import Float32MultiArray

    build, robot, executor = rig
    build(input="observation")
    pub = robot.node.create_publisher(Float32MultiArray, "/lowrl/observation", CONTROL)
    assert wait_for_match(executor, pub) and wait_for_match(executor, robot.cmd_sub)

    def answer(values):
        n = len(robot.commands)
        pub.publish(Float32MultiArray(data=values))
        assert spin_until(executor, lambda: len(robot.commands) > n)
        return robot.commands[-1]

    assert answer([1.0, 0.0, 0.0]) == pytest.approx(0.5, abs=0.02)
    assert answer([1.0, 0.0]) == 0.0  # wrong size -> safe action
    assert spin_until(executor, lambda: any("the message has 2 values, size is 3" in s.message
                                            for s in robot.statuses("lowrl/policy/input")))
    assert answer([1.0, 0.0, 0.0]) == pytest.approx(0.5, abs=0.02)


def test_extra_observation_is_appended(rig, tmp_path):
    from std_msgs.msg import Float32MultiArray

    build, robot, executor = rig
    node = build(obs_fields=FIELDS[:2], extra_obs_dim=1)
    extra = robot.node.create_publisher(Float32MultiArray, "/lowrl/extra_observation", CONTROL)
    connect(robot, executor)
    robot.js_pub.publish(robot.joint_state())  # no extra observation yet: incomplete, so nothing is commanded
    assert not spin_until(executor, lambda: robot.commands, timeout=0.3)
    assert "'array' (topic lowrl/extra_observation): no message received yet" in node.controller.last_error
    assert wait_for_match(executor, extra)
    extra.publish(Float32MultiArray(data=[0.25]))
    spin_for(executor, 0.05)  # DDS delivers it; the next joint state's tick takes it
    assert exchange(robot, executor, robot.joint_state()) == pytest.approx(0.5, abs=0.02)


def test_safe_action_reaches_the_robot_before_the_lifecycle_publishers_go_silent(rig):
    """Deactivate and shutdown send the safe action (here a recognisable default pose) to a real
    subscriber first; after deactivate rclpy's lifecycle publisher, not a hand check, drops commands."""
    build, robot, executor = rig
    node = build(safe_action="default_pose", default_pose=[0.25])
    connect(robot, executor)
    assert exchange(robot, executor, robot.joint_state()) == pytest.approx(0.5, abs=0.02)
    n = len(robot.commands)
    node.trigger_deactivate()
    assert spin_until(executor, lambda: len(robot.commands) > n)
    assert robot.commands[-1] == pytest.approx(0.25)
    assert not node._outputs.command.is_activated
    robot.js_pub.publish(robot.joint_state())
    assert not spin_until(executor, lambda: len(robot.commands) > n + 1, timeout=0.3)
    assert node.controller.ticks > 0  # the observation was handled: the publisher dropped the command
    node.trigger_activate()
    assert exchange(robot, executor, robot.joint_state()) == pytest.approx(0.5, abs=0.02)
    n = len(robot.commands)
    node.trigger_shutdown()
    assert spin_until(executor, lambda: len(robot.commands) > n)
    assert robot.commands[-1] == pytest.approx(0.25)


def test_swap_outcomes_are_published_as_keys_a_reader_can_use(rig, tmp_path):
    """What the fine-tuner sees: a rejected policy_path as swap_* keys (diagnostics.swap_rejection), then a
    good one as swapped, on the real /diagnostics topic."""
    from lowrl_ros.ros.diagnostics import swap_rejection

    build, robot, executor = rig
    node = build()
    connect(robot, executor)
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"not an onnx file")
    robot.diags.clear()
    node.set_parameters([Parameter("policy_path", value=str(corrupt))])
    assert spin_until(executor, lambda: any(swap_rejection(s) == (str(corrupt), 0) for s in robot.diags))
    status = next(s for s in robot.diags if swap_rejection(s))
    values = {kv.key: kv.value for kv in status.values}
    assert level_of(status) == 2 and values["swap_code"] == "invalid_artifact" and values["version"] == "1"
    assert status.message.startswith(f"rejected {corrupt}: ")  # the text rqt shows is unchanged

    good = constant_policy(tmp_path / "v2.onnx", -1.0, version=2)
    node.set_parameters([Parameter("policy_path", value=str(good))])
    node.swapper.wait(10.0)
    assert exchange(robot, executor, robot.joint_state()) == pytest.approx(-1.0, abs=0.02)
    robot.diags.clear()

    def swapped() -> bool:
        return any({kv.key: kv.value for kv in s.values}.get("swap_state") == "swapped"
                   for s in robot.statuses("lowrl/policy/policy"))
    assert spin_until(executor, swapped)
    values = {kv.key: kv.value for kv in robot.statuses("lowrl/policy/policy")[-1].values}
    assert (values["swap_path"], values["swap_version"], values["swap_code"], values["version"]) == (
        str(good), "2", "", "2")
    assert swap_rejection(robot.statuses("lowrl/policy/policy")[-1]) is None


@pytest.mark.parametrize("kwargs, message", [
    (dict(policy_path="p.onnx", input="camera"), "input 'camera' is unknown; use one of joint_states, observation"),
    (dict(policy_path="p.onnx", engine="tensorrt"), "engine 'tensorrt' is unknown; use one of auto, ort, numpy"),
])
def test_node_settings_are_checked_when_built(kwargs, message):
    from lowrl_ros.ros.policy_node import PolicyNodeSettings

    with pytest.raises(ValueError, match=message):
        PolicyNodeSettings(**kwargs)
    assert PolicyNodeSettings("p.onnx").engine == "auto"


def test_configure_fails_on_an_empty_policy_path_with_a_hint(rig):
    build, robot, executor = rig
    node = build(activate=False)
    assert node.set_parameters([Parameter("policy_path", value="")])[0].successful
    assert spin_until(executor, lambda: robot.node.count_publishers("/diagnostics") > 0)
    assert node.trigger_configure() == rclpy.lifecycle.TransitionCallbackReturn.FAILURE
    assert spin_until(executor, lambda: any("policy_path is empty; set it to a .onnx artifact" in s.message
                                            for s in robot.diags))


def test_configure_fails_on_an_unknown_engine_with_the_settings_message(rig):
    build, robot, executor = rig
    node = build(activate=False, engine="tensorrt")
    assert spin_until(executor, lambda: robot.node.count_publishers("/diagnostics") > 0)
    assert node.trigger_configure() == rclpy.lifecycle.TransitionCallbackReturn.FAILURE
    assert spin_until(executor, lambda: any("engine 'tensorrt' is unknown" in s.message for s in robot.diags))


def test_live_parameters_apply_on_an_rclpy_without_post_set_callbacks(rig, monkeypatch):
    """Humble's rclpy has no add_post_set_parameters_callback: the node must still start, apply an
    accepted live change (on the next spin) and never apply a refused one."""
    import rclpy.node

    monkeypatch.delattr(rclpy.node.Node, "add_post_set_parameters_callback")
    build, robot, executor = rig
    node = build()
    assert node.set_parameters([Parameter("soft_start_steps", value=7)])[0].successful
    assert spin_until(executor, lambda: node.controller.config.soft_start_steps == 7)
    safe_before = node.controller.config.safe_action
    assert not node.set_parameters([Parameter("safe_action", value="brake")])[0].successful
    spin_for(executor, 0.3)
    assert node.controller.config.safe_action == safe_before


@pytest.mark.parametrize("robot_timing", ["contract", "parameters"])
def test_without_a_robot_file_the_contracts_period_rules_unless_robot_timing_parameters(rig, robot_timing):
    """One input path: the old parameters read through a robot file, timed like any robot file (the test
    policy's contract names 0.01 s; the parameters say event mode)."""
    build, robot, executor = rig
    node = build(robot_timing=robot_timing, mode="event", control_period_s=0.02)
    config = node.controller.config
    if robot_timing == "contract":
        assert (config.mode, config.control_period_s, node._loop.period_s) == ("fixed_rate", 0.01, 0.01)
        assert spin_until(executor, lambda: robot.has_diag("lowrl/policy/timing", 0, "fixed_rate at the policy's"))
    else:  # the parameters apply, and a WARN says the policy does not run at its contract's period
        assert (config.mode, config.control_period_s, node._loop) == ("event", 0.02, None)
        assert spin_until(executor, lambda: robot.has_diag("lowrl/policy/timing", 1, "acts on each observation "
                                                           "(mode event), not at the control period its contract "
                                                           "names (0.01 s)"))


def test_the_step_row_goes_out_without_a_robot_file(rig):
    from std_msgs.msg import Float64MultiArray

    from lowrl_ros.core.runtime.step_row import decode_step
    from lowrl_ros.ros.qos import RECORD

    build, robot, executor = rig
    build()
    rows = []
    sub = robot.node.create_subscription(Float64MultiArray, "/lowrl/policy/step",
                                         lambda m: rows.append(decode_step(m.data, 3, 1)), RECORD)
    connect(robot, executor)
    assert wait_for_match(executor, sub)
    assert exchange(robot, executor, robot.joint_state(position=0.0, velocity=2.0)) == pytest.approx(0.5, abs=0.02)
    assert spin_until(executor, lambda: rows)
    row = rows[-1]
    assert not row.safe and row.policy_version == 1
    np.testing.assert_allclose(row.obs, [1.0, 0.0, 2.0])  # cos 0, sin 0, velocity: obs_fields through the robot file
    assert row.command[0] == pytest.approx(0.5, abs=0.02)
