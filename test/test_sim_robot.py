"""The simulated robot: named joints over gymnasium envs (core), and its node over real DDS."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from lowrl_ros.core.sim.sim_robot import SimRobot, SimRobotConfig


def test_pendulum_joint_state_matches_the_env_observation():
    robot = SimRobot(SimRobotConfig(env_id="Pendulum-v1", seed=3))
    obs, *_ = robot.env.step(np.zeros(1, np.float32))  # compare against gymnasium's own observation
    joints = robot.joints()
    assert joints.names == ("pendulum_joint",)
    np.testing.assert_allclose([math.cos(joints.position[0]), math.sin(joints.position[0]), joints.velocity[0]],
                               obs, atol=1e-5)
    assert -math.pi <= joints.position[0] < math.pi


def test_inverted_pendulum_joints_by_name_and_episode_reset():
    robot = SimRobot(SimRobotConfig(env_id="InvertedPendulum-v5", max_episode_steps=5))
    assert robot.joint_names == ("slider", "hinge")
    q = robot.env.unwrapped.data.qpos
    np.testing.assert_allclose(robot.joints().position, q)
    outcomes = [robot.step([0.0]) for _ in range(5)]
    assert outcomes[-1].episode_done and robot.episodes == 1
    assert robot.returns[0] == pytest.approx(sum(o.reward for o in outcomes))


def test_actions_clipped_and_bad_commands_rejected():
    robot = SimRobot(SimRobotConfig())
    robot.step([100.0])
    assert robot.joints().effort[0] == 2.0  # Pendulum's torque limit
    with pytest.raises(ValueError, match="command has 2 values, Pendulum-v1 takes 1"):
        robot.check_action([0.0, 0.0])
    with pytest.raises(ValueError, match="not finite"):
        robot.check_action([float("nan")])


@pytest.mark.parametrize("kwargs, message", [
    (dict(env_id="CartPole-v1"), "not supported"),
    (dict(control_period_s=0.0), "control_period_s"),
    (dict(max_episode_steps=-1), "max_episode_steps"),
])
def test_config_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SimRobotConfig(**kwargs)


def test_sim_robot_node_publishes_joints_and_ignores_malformed_commands(ros_context):
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64, Float64MultiArray

    from lowrl_ros.ros.qos import CONTROL, STATS
    from lowrl_ros.ros.sim_robot_node import SimRobotNode
    from rosutil import spin_until, wait_for_match

    sim = SimRobotNode(context=ros_context, parameter_overrides=[Parameter("max_episode_steps", value=20)])
    probe = Node("probe", context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(sim)
    executor.add_node(probe)
    states, returns = [], []
    probe.create_subscription(JointState, "/joint_states", states.append, CONTROL)
    probe.create_subscription(Float64, "/lowrl/episode_return", lambda m: returns.append(m.data), STATS)
    cmd = probe.create_publisher(Float64MultiArray, "/forward_command_controller/commands", CONTROL)
    try:
        assert wait_for_match(executor, cmd)
        cmd.publish(Float64MultiArray(data=[1.5]))
        assert spin_until(executor, lambda: sim.robot.joints().effort[0] == 1.5)
        cmd.publish(Float64MultiArray(data=[1.0, 2.0]))  # malformed: warned, zero applied
        assert spin_until(executor, lambda: sim.robot.joints().effort[0] == 0.0)
        assert spin_until(executor, lambda: len(returns) >= 1, timeout=10)
        assert states[-1].name == ["pendulum_joint"] and len(states[-1].position) == 1
        assert states[-1].header.stamp.sec > 0
    finally:
        executor.shutdown()
        sim.destroy_node()
        probe.destroy_node()


def test_gap_reaches_the_robot_and_noise_is_on_the_measurement():
    from lowrl_ros.core.sim.reality_gap import RealityGapConfig

    plain = SimRobot(SimRobotConfig(seed=2))
    noisy = SimRobot(SimRobotConfig(seed=2), RealityGapConfig(obs_noise_std=0.05))
    assert noisy.env.unwrapped.state.tolist() == plain.env.unwrapped.state.tolist()  # same true state
    assert abs(noisy.joints().velocity[0] - plain.joints().velocity[0]) > 1e-4  # measured with noise
    weak = SimRobot(SimRobotConfig(seed=2), RealityGapConfig(actuator_gain=0.5, action_delay_steps=1))
    weak.step([2.0])
    assert weak.joints().effort[0] == 0.0  # delayed: nothing commanded before
    weak.step([2.0])
    assert weak.joints().effort[0] == 1.0  # half the commanded torque acts
    offset = SimRobot(SimRobotConfig(seed=2), RealityGapConfig(joint_offset=3.0))
    assert offset.env.unwrapped.state.tolist() == plain.env.unwrapped.state.tolist()
    shifted = offset.joints().position[0] - plain.joints().position[0]
    assert math.isclose((shifted + math.pi) % (2 * math.pi) - math.pi, 3.0, abs_tol=1e-9)
    assert -math.pi <= offset.joints().position[0] < math.pi  # still a wrapped angle


def test_lockstep_node_steps_once_per_command_and_logs_episodes(ros_context, tmp_path):
    """A probe plays the policy: every joint state is answered by exactly one command, and each
    command makes exactly one step (reward count == commands), with episodes in episodes.csv."""
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64, Float64MultiArray

    from lowrl_ros.core.session.files import read_session
    from lowrl_ros.ros.qos import CONTROL, STATS
    from lowrl_ros.ros.sim_robot_node import SimRobotNode
    from rosutil import spin_until

    sim = SimRobotNode(context=ros_context, parameter_overrides=[
        Parameter("mode", value="lockstep"), Parameter("max_episode_steps", value=25),
        Parameter("session_dir", value=str(tmp_path)), Parameter("gap.mass_scale", value=1.3),
        Parameter("gap.action_delay_steps", value=1)])
    probe = Node("policy_probe", context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(sim)
    executor.add_node(probe)
    rewards, episodes, sent = [], [], []
    cmd = probe.create_publisher(Float64MultiArray, "/forward_command_controller/commands", CONTROL)

    def answer(msg: JointState) -> None:
        sent.append(msg.position[0])
        cmd.publish(Float64MultiArray(data=[-1.0 if msg.velocity[0] > 0 else 1.0]))

    probe.create_subscription(JointState, "/joint_states", answer, CONTROL)
    probe.create_subscription(Float64, "/lowrl/reward", lambda m: rewards.append(m.data), STATS)
    probe.create_subscription(Float64MultiArray, "/lowrl/episode", lambda m: episodes.append(list(m.data)), STATS)
    try:
        assert spin_until(executor, lambda: len(episodes) >= 2, timeout=30)
        assert sim.robot.gap.mass_scale == 1.3 and sim.config.mode == "lockstep"
        assert spin_until(executor, lambda: len(rewards) >= sim.steps, timeout=5)
        assert sim.steps >= 50 and abs(len(sent) - sim.steps) <= 2  # one step per command, no timer steps
        assert episodes[0][0] == 1 and episodes[0][2] == 25 and episodes[0][1] == pytest.approx(sum(rewards[:25]))
        log = read_session(tmp_path)
        assert log.n_episodes >= 2 and log.episodes["length"][0] == 25
        assert log.info["gap"] == "mass_scale=1.3, action_delay_steps=1"
    finally:
        executor.shutdown()
        sim.destroy_node()
        probe.destroy_node()


def test_session_parameter_files_are_declared_and_valid(ros_context):
    """config/sim_to_real/*.yaml: every key is a parameter its node declares, and the values build valid configs."""
    import dataclasses
    from pathlib import Path

    import yaml

    from lowrl_ros.core.sim.reality_gap import RealityGapConfig
    from lowrl_ros.ros.budget_monitor_node import BudgetMonitorNode
    from lowrl_ros.ros.sim_robot_node import GAP_PREFIX, SimRobotNode

    root = Path(__file__).resolve().parent.parent / "config"
    gap_file = yaml.safe_load((root / "sim_to_real" / "sim_robot_gap.yaml").read_text())["/**/sim_robot"]
    values = {**yaml.safe_load((root / "sim_robot.yaml").read_text())["/**/sim_robot"]["ros__parameters"],
              **gap_file["ros__parameters"]}
    gap = RealityGapConfig(**{f.name: values[GAP_PREFIX + f.name] for f in dataclasses.fields(RealityGapConfig)})
    assert gap == RealityGapConfig(mass_scale=1.3, actuator_gain=0.8, obs_noise_std=0.01, action_delay_steps=1)
    session = SimRobotConfig(**{f.name: values[f.name] for f in dataclasses.fields(SimRobotConfig)})
    assert (session.mode, session.control_period_s) == ("realtime", 0.01)  # a robot's 100 Hz loop
    for cls, file, key in ((SimRobotNode, "sim_robot_gap.yaml", "/**/sim_robot"),
                           (BudgetMonitorNode, "budget_monitor.yaml", "/**/budget_monitor")):
        node = cls(context=ros_context)
        try:
            keys = set(yaml.safe_load((root / "sim_to_real" / file).read_text())[key]["ros__parameters"])
            assert keys <= set(node._parameters), f"{file}: {keys - set(node._parameters)} not declared"
        finally:
            node.destroy_node()
    ft = yaml.safe_load((root / "sim_to_real" / "finetune_node.yaml").read_text())["finetune_node"]["ros__parameters"]
    from lowrl_ros.core.finetune.config import FineTuneConfig

    FineTuneConfig(**ft)  # only FineTuneConfig fields, valid values


def test_the_joint_state_that_comes_with_the_ready_is_the_reset_state(ros_context, tmp_path):
    """A reset's first joint state is the episode's first observation (the identification's rest sample): the
    reset state itself, as the training env's reset returns it, not one period later. With reset noise (0.05 rad
    around the pose) the quadruped's stiff PD snaps its joints at over 1 rad/s within that period."""
    import yaml
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from std_msgs.msg import Bool, Empty

    from lowrl_ros.ros.qos import LATCHED, STATUS
    from lowrl_ros.ros.sim_robot_node import SimRobotNode
    from rosutil import spin_until, wait_for_match

    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "config/robots/quadruped.yaml").read_text())
    data["sim"]["reset"].update(joint_noise=0.05, velocity_noise=0.1)
    robot_file = tmp_path / "quadruped.yaml"
    robot_file.write_text(yaml.safe_dump(data))
    sim = SimRobotNode(context=ros_context, parameter_overrides=[
        Parameter("env_id", value="robot_file"), Parameter("robot_file", value=str(robot_file)),
        Parameter("control_period_s", value=0.02)])
    published: list = []  # (reset count, joint velocities) of each joint state, as the node publishes it
    sim.on_published.append(lambda _t: published.append((sim.resets, sim.robot.joints().velocity.copy())))
    probe = Node("probe", context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    for n in (sim, probe):
        executor.add_node(n)
    ready: list = []
    probe.create_subscription(Bool, "/lowrl/ready", lambda m: ready.append(m.data), LATCHED)
    reset = probe.create_publisher(Empty, "/lowrl/reset", STATUS)
    try:
        assert wait_for_match(executor, reset)
        for k in range(1, 4):
            reset.publish(Empty())
            assert spin_until(executor, lambda: len(ready) >= k and sum(r == k for r, _ in published) > 2)
            states = [v for r, v in published if r == k]
            assert np.abs(states[0]).max() <= 0.1 + 1e-9, (k, states[0])  # the reset's velocity noise, +-0.1
            assert np.abs(states[1]).max() > 0.5  # one period on: the snap (what went out first before)
    finally:
        executor.shutdown()
        for n in (sim, probe):
            n.destroy_node()
