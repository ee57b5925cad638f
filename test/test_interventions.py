"""The step topic, teleop interventions, rewards/ends/resets on the robot, over real DDS.

Real nodes: the sim robot (Pendulum-v1, lockstep), the policy node with a robot file, the fine-tuner
with the same robot file (a real tiny SAC kit from conftest.tiny_kit). The test publishes the
teleop action as a person's joystick node would.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from std_msgs.msg import Float64MultiArray, UInt8

from lowrl_ros.core.finetune.transition_log import read_log
from lowrl_ros.core.runtime.step_row import decode_step, row_label
from lowrl_ros.core.types import Level
from lowrl_ros.ros import diagnostics as diag
from lowrl_ros.ros.finetune_node import FineTuneNode
from lowrl_ros.core.runtime.status import INTERVENTION_STATUS
from lowrl_ros.ros.policy_node import PolicyNode
from lowrl_ros.ros.qos import CONTROL, LATCHED, RECORD
from lowrl_ros.ros.sim_robot_node import SimRobotNode
from rosutil import spin_for, spin_until

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[1]
TELEOP = 1.5  # N·m, in the policy's action units (the pendulum's torque)


def robot_file(tmp_path: Path, **sections) -> Path:
    """The shipped pendulum robot file, as an effort interface without soft start (command == action)."""
    data = yaml.safe_load((ROOT / "config/robots/pendulum.yaml").read_text())
    data.update({"interface": "effort", "safety": {"soft_start_s": 0.0, "safe_action": "zero"}, **sections})
    path = tmp_path / "pendulum_rl.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


class Operator:
    """A person at a joystick: publishes teleop actions; listens to the step topic and diagnostics."""

    def __init__(self, context) -> None:
        self.node = Node("operator", context=context)
        self.teleop = self.node.create_publisher(Float64MultiArray, "/teleop", CONTROL)
        self.tier = self.node.create_publisher(UInt8, "/lowrl/compute_tier", LATCHED)
        self.steps: list[tuple[str, np.ndarray]] = []
        self.diags: list = []
        self.node.create_subscription(Float64MultiArray, "/lowrl/policy/step",
                                      lambda m: self.steps.append((m.layout.dim[0].label, np.array(m.data))), RECORD)
        self.node.create_subscription(diag.DiagnosticArray, "/diagnostics", lambda m: self.diags.extend(m.status), 100)

    def intervention_levels(self) -> list[tuple[int, str]]:
        return [(s.level, s.message) for s in self.diags if s.name == INTERVENTION_STATUS]

    def hold(self, ex, seconds: float, value: float = TELEOP) -> None:
        """Publish the teleop action at 50 Hz for ``seconds`` (held: newer than teleop_timeout_s)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.teleop.publish(Float64MultiArray(data=[value]))
            spin_for(ex, 0.02)


def policy_node(context, policy: Path, robot: Path, **params) -> PolicyNode:
    values = {"policy_path": str(policy), "engine": "numpy", "robot_file": str(robot), "teleop_topic": "/teleop",
              "diagnostics_period_s": 0.1, "watchdog_timeout_s": 1.0, **params}
    node = PolicyNode(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
    node.trigger_configure()
    assert node.controller is not None
    node.trigger_activate()
    return node


def test_step_message_layout_and_an_intervention_replaces_the_action(ros_context, tmp_path):
    sim = SimRobotNode(context=ros_context, parameter_overrides=[
        Parameter("mode", value="lockstep"), Parameter("seed", value=1)])
    policy = policy_node(ros_context, ROOT / "models/pendulum_sac_int8.onnx", robot_file(tmp_path))
    op = Operator(ros_context)
    ex = SingleThreadedExecutor(context=ros_context)
    for n in (sim, policy, op.node):
        ex.add_node(n)
    try:
        # The 5th step or later that acted on a fresh observation (on a starved machine an early one may be
        # the safe action, its observation stale: NaN).
        rows = lambda: [decode_step(d, 3, 1) for _, d in op.steps]  # noqa: E731
        assert spin_until(ex, lambda: len(op.steps) >= 5 and not rows()[-1].safe, 15.0), op.steps[-3:]
        label, data = op.steps[-1]
        assert label == row_label(3, 1)
        row = decode_step(data, 3, 1)
        assert (row.safe, row.intervention, row.estop) == (False, False, False)
        assert row.policy_version >= 1
        assert abs(row.stamp - time.time()) < 5.0
        assert row.obs[0] ** 2 + row.obs[1] ** 2 == pytest.approx(1.0, abs=1e-5)  # cos θ, sin θ as the policy saw
        assert row.policy_action[0] == row.action[0] == row.command[0]  # no intervention: own = executed = command
        op.hold(ex, 1.0)
        held = [r for r in rows() if r.intervention]
        assert len(held) >= 5, "the teleop action never replaced the policy's"
        for r in held:
            assert r.action[0] == TELEOP and r.command[0] == TELEOP and np.isfinite(r.policy_action[0])  # own kept
        assert any(r.policy_action[0] != TELEOP for r in held)
        assert spin_until(ex, lambda: (Level.WARN, "intervention active") in
                          [(int.from_bytes(lv, "little") if isinstance(lv, bytes) else lv, m)
                           for lv, m in op.intervention_levels()], 2.0), op.intervention_levels()[-3:]
        n = len(op.steps)
        spin_for(ex, 0.5)  # no teleop for longer than teleop_timeout_s: the policy again
        assert not rows()[-1].intervention and len(op.steps) > n
        assert policy.controller.interventions >= len(held)
    finally:
        ex.shutdown()
        for n in (sim, policy, op.node):
            n.destroy_node()


def test_finetuner_computes_rewards_ends_resets_and_learns_from_interventions(ros_context, tiny_kit, tmp_path):
    kit_dir, base = tiny_kit
    robot = robot_file(tmp_path, reward={"terms": [{"term": "pendulum", "weight": 1.0},
                                                   {"term": "joint_effort", "weight": 0.5}]},  # effort not observed
                       episode={"time_limit_steps": 15})
    sim = SimRobotNode(context=ros_context, parameter_overrides=[
        Parameter("mode", value="lockstep"), Parameter("seed", value=2), Parameter("max_episode_steps", value=1000)])
    policy = policy_node(ros_context, base, robot, ready_topic="/lowrl/ready")
    tuner = FineTuneNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in {
        "kit_path": str(kit_dir), "work_dir": str(tmp_path / "ft"), "robot_file": str(robot),
        "min_transitions": 10, "batch_size": 16, "diagnostics_period_s": 0.2, "ready_topic": "/lowrl/ready",
        "memory_cap_mb": 1e6}.items()])  # the cap would measure this whole pytest process
    op = Operator(ros_context)
    ex = SingleThreadedExecutor(context=ros_context)
    for n in (sim, policy, tuner, op.node):
        ex.add_node(n)
    try:
        op.tier.publish(UInt8(data=0))  # FULL: learning allowed
        assert spin_until(ex, lambda: tuner.recorded >= 3, 15.0), tuner.recorded
        op.hold(ex, 1.5)
        assert spin_until(ex, lambda: tuner.recorded >= 60 and tuner.tuner.demos.sampled > 0, 40.0), \
            (tuner.recorded, len(tuner.tuner.demos), tuner.tuner.updates)
        assert spin_until(ex, lambda: sim.resets >= tuner.resets_requested and not policy.controller.waiting_ready,
                          3.0)  # the last request too, and the robot's ready after it
    finally:
        tuner.close()
        ex.shutdown()
        for n in (sim, policy, tuner, op.node):
            n.destroy_node()
    batch, _ = read_log(tmp_path / "ft" / "transitions")
    assert len(batch) >= 60 and tuner.bad_inputs == 0 and tuner.callback_errors == 0
    # Rewards: the robot file's pendulum term is Pendulum-v1's reward of the recorded step; joint_effort reads the
    # sim's JointState effort (the torque it applied: the step's command, as float32), weighted; the total is the sum.
    theta = np.arctan2(batch.obs[:, 1], batch.obs[:, 0])
    u = np.clip(batch.action[:, 0], -2.0, 2.0)
    terms = batch.reward_terms
    assert terms.shape == (len(batch), 2) and np.allclose(batch.reward, terms.sum(axis=1))
    assert np.allclose(terms[:, 0], -(theta ** 2 + 0.1 * batch.obs[:, 2] ** 2 + 0.001 * u ** 2), atol=1e-6)
    effort = -0.5 * u.astype(np.float32).astype(np.float64) ** 2
    assert np.isclose(terms[:, 1], effort, atol=1e-5).mean() >= 0.8  # the JointState of the step's result
    # Interventions: flagged with the teleop action, and in the learner's demo buffer too.
    assert batch.intervention.sum() >= 5 and np.all(batch.action[batch.intervention, 0] == TELEOP)
    trained = batch.intervention & ~batch.truncated  # a time-limit cut is logged, never trained on
    assert len(tuner.tuner.demos) == trained.sum() and tuner.interventions > 0
    # Ends: every 15th transition is a time-limit end; each asked for a reset the sim robot honoured.
    ends = np.flatnonzero(batch.truncated)
    assert len(ends) >= 3 and np.all(np.diff(ends) == 15) and not batch.terminated.any()
    assert sim.resets == tuner.resets_requested >= len(ends)
    # The policy node held the safe action from a reset request until the sim robot reported ready.
    assert sum(decode_step(d, 3, 1).safe for _, d in op.steps) >= 1
    # Within an episode the steps chain (a safe tick, e.g. an observation late on this loaded machine, breaks
    # the chain: no transition spans it); never across an end: the next episode starts from the reset state.
    inner = np.setdiff1d(np.arange(len(batch) - 1), ends)
    chained = np.all(batch.next_obs[:-1] == batch.obs[1:], axis=1)
    assert chained[inner].mean() >= 0.8, chained[inner].mean()
    assert not chained[ends[ends < len(batch) - 1]].any()


def test_with_a_reward_topic_the_step_messages_pair_with_the_robots_reward(ros_context, tiny_kit, tmp_path):
    """No reward: section: the sim robot's /lowrl/reward is paired with the step messages as before, and
    the intervention flag still reaches the log."""
    kit_dir, base = tiny_kit
    robot = robot_file(tmp_path)
    sim = SimRobotNode(context=ros_context, parameter_overrides=[
        Parameter("mode", value="lockstep"), Parameter("seed", value=4), Parameter("max_episode_steps", value=1000)])
    # A tick per joint state (event mode): at its contract's fixed rate the policy node acts again on the joint
    # state it already acted on when the lockstep robot is late (a busy machine), and that second command steps
    # the robot once more from where the first left it: the reward that comes back is not the formula's of the
    # logged observation. The demo's policy node runs the sim robot so too (docs/policy_node.md).
    policy = policy_node(ros_context, base, robot, robot_timing="parameters", mode="event")
    tuner = FineTuneNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in {
        "kit_path": str(kit_dir), "work_dir": str(tmp_path / "ft"), "robot_file": str(robot),
        "min_transitions": 10_000}.items()])
    op = Operator(ros_context)
    ex = SingleThreadedExecutor(context=ros_context)
    for n in (sim, policy, tuner, op.node):
        ex.add_node(n)
    try:
        assert spin_until(ex, lambda: tuner.recorded >= 3, 15.0), tuner.recorded
        op.hold(ex, 1.0)
        assert spin_until(ex, lambda: tuner.recorded >= 40, 20.0), tuner.recorded
    finally:
        tuner.close()
        ex.shutdown()
        for n in (sim, policy, tuner, op.node):
            n.destroy_node()
    batch, _ = read_log(tmp_path / "ft" / "transitions")
    assert len(batch) >= 40 and tuner.received["reward"] >= len(batch) and tuner.received["step"] >= len(batch)
    theta = np.arctan2(batch.obs[:, 1], batch.obs[:, 0])
    u = np.clip(batch.action[:, 0], -2.0, 2.0).astype(np.float32).astype(np.float64)
    assert np.allclose(batch.reward, -(theta ** 2 + 0.1 * batch.obs[:, 2] ** 2 + 0.001 * u ** 2), rtol=1e-5, atol=1e-5)
    assert batch.intervention.sum() >= 5 and np.all(batch.action[batch.intervention, 0] == TELEOP)
    assert not np.any(batch.action[~batch.intervention, 0] == TELEOP)


@pytest.mark.parametrize("interface", ["effort", "position"])
def test_a_reset_request_is_answered_at_once_and_its_row_marks_the_reset(ros_context, tmp_path, interface):
    """No tick need be due: the policy node answers the request itself, so the fine-tuner sees the reset begin in the
    step rows' own order (whatever order the ready arrives in) and the next episode's last_action starts at zero.
    An effort robot is sent zero; a position robot nothing: its reset owns the joints (a hold measured before it,
    arriving after, pulled the quadruped's joints back toward the old pose)."""
    from std_msgs.msg import Empty

    from lowrl_ros.ros.qos import STATUS

    sections = {} if interface == "effort" else {"interface": "position", "safety": {"soft_start_s": 0.0,
                                                                                     "safe_action": "hold"}}
    sim = SimRobotNode(context=ros_context, parameter_overrides=[
        Parameter("mode", value="lockstep"), Parameter("seed", value=1)])
    policy = policy_node(ros_context, ROOT / "models/pendulum_sac_int8.onnx", robot_file(tmp_path, **sections),
                         ready_topic="/lowrl/ready", robot_timing="parameters", mode="event")
    op = Operator(ros_context)
    sent: list[list[float]] = []
    op.node.create_subscription(Float64MultiArray, "/forward_command_controller/commands",
                                lambda m: sent.append(list(m.data)), CONTROL)
    reset = op.node.create_publisher(Empty, "/lowrl/reset", STATUS)
    ex = SingleThreadedExecutor(context=ros_context)
    for n in (sim, policy, op.node):
        ex.add_node(n)
    rows = lambda: [decode_step(d, 3, 1) for _, d in op.steps]  # noqa: E731
    try:
        assert spin_until(ex, lambda: len(op.steps) >= 5 and not rows()[-1].safe, 15.0)
        ex.remove_node(sim)  # no joint state from here on: nothing else makes the policy node tick
        spin_for(ex, 0.2)
        before, commands = len(op.steps), len(sent)
        reset.publish(Empty())
        assert spin_until(ex, lambda: len(op.steps) > before, 0.5)  # the watchdog would tick only after 1 s
        spin_for(ex, 0.1)
        assert [r.safe for r in rows()[before:]] == [True] and policy.controller.waiting_ready
        assert sent[commands:] == ([[0.0]] if interface == "effort" else [])
    finally:
        ex.shutdown()
        for n in (sim, policy, op.node):
            n.destroy_node()
