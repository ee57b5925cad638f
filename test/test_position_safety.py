"""Safety on a position-controlled robot, with real nodes over DDS (issue 18 §4, §2's outputs).

``PositionRobot`` is a real rclpy node playing a ros2_control robot with a position interface: it
publishes JointState from its own joint positions (in its own name order, with a joint the policy does
not use) and tracks the position commands it receives with a speed-limited servo, so the measured pose
lags the command as a real robot's does. The policy node runs a real ONNX artifact whose action is
constant (zero output weights), configured by a real robot file in the test's tmp dir.
"""
from __future__ import annotations

import numpy as np
import pytest
import rclpy
import yaml
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Empty, Float64MultiArray, UInt8

from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, save_artifact
from lowrl_ros.ros.diagnostics import DiagnosticArray, level_of
from lowrl_ros.ros.qos import CONTROL, LATCHED
from rosutil import active_policy_node, spin_for, spin_until, wait_for_match

pytestmark = pytest.mark.ros

JOINTS = ["hip", "knee", "ankle"]  # the policy's order
CONTROLLER = ["ankle", "hip", "knee"]  # the controller's order (by name)
DEFAULT_POSE = [0.0, 0.8, -1.5]
START = {"hip": 0.3, "knee": 0.6, "ankle": -0.9}  # where the robot stands when the test begins
Y = [0.2, 0.4, -0.2]  # the policy's constant output
TARGET = {j: d + 0.5 * y for j, d, y in zip(JOINTS, DEFAULT_POSE, Y)}  # default_pose + 0.5 * y
COMMANDS = "pos_controller/commands"


def policy(path, y=Y, version=1):
    """A 3-joint artifact acting ``y`` whatever it observes (tanh output over [-1, 1]: the identity)."""
    rng = np.random.default_rng(version)
    weights = MlpWeights([(rng.normal(size=(8, 3)).astype(np.float32) * 0.1, np.zeros(8, np.float32)),
                          (np.zeros((3, 8), np.float32), np.arctanh(np.array(y)).astype(np.float32))])
    contract = PolicyContract(obs_names=tuple(f"{j}.position" for j in JOINTS), action_names=tuple(JOINTS),
                              action_low=(-1.0,) * 3, action_high=(1.0,) * 3, control_period_s=0.02, version=version)
    return save_artifact(path, weights, contract)


def robot_file(path, *, output=None, safety=None, interface="position"):
    data = {
        "joints": JOINTS, "default_pose": DEFAULT_POSE, "interface": interface,
        "observation": [{"term": "joint_position", "topic": "joint_states"}],  # read by the observation side
        "action": {"scale": 0.5, "offset": "default_pose",
                   "limits": {"lower": [-1.0, -1.0, -2.0], "upper": [1.0, 1.5, 0.0]}},
        "output": output or {"type": "float64_multi_array", "topic": COMMANDS, "joints": CONTROLLER},
        "safety": {"estop_topic": "estop", "reset_topic": "estop_reset", "soft_start_s": 0.5, **(safety or {})},
    }
    path.write_text(yaml.safe_dump(data))
    return path


class PositionRobot:
    """A position-controlled robot as one node: JointState out (50 Hz), position commands in, a servo
    moving each joint towards its command at ``speed`` rad/s (``servo = False`` holds it still). ``droop``
    (rad) is a load's steady-state error: the servo settles that far below its command."""

    def __init__(self, context, *, trajectory: bool = False, speed: float = 1.0) -> None:
        self.node = Node("position_robot", context=context)
        self.q = dict(START)
        self.speed, self.servo, self.publishing, self.droop = speed, True, False, 0.0
        self.command: dict[str, float] | None = None
        self.commands: list[dict[str, float]] = []
        self.trajectories: list = []
        self.diags: list = []
        self.js_pub = self.node.create_publisher(JointState, "/joint_states", CONTROL)
        if trajectory:
            from trajectory_msgs.msg import JointTrajectory

            self.cmd_sub = self.node.create_subscription(JointTrajectory, "/jtc/joint_trajectory",
                                                         self._on_trajectory, CONTROL)
        else:
            self.cmd_sub = self.node.create_subscription(Float64MultiArray, "/" + COMMANDS, self._on_array, CONTROL)
        self.estop = self.node.create_publisher(Bool, "/estop", 10)
        self.reset = self.node.create_publisher(Empty, "/estop_reset", 10)
        self.tier = self.node.create_publisher(UInt8, "/lowrl/compute_tier", LATCHED)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: self.diags.extend(m.status), 100)
        self.dt = 0.02
        self.node.create_timer(self.dt, self._tick)

    def _on_array(self, msg: Float64MultiArray) -> None:
        self._command(dict(zip(CONTROLLER, msg.data)))

    def _on_trajectory(self, msg) -> None:
        self.trajectories.append(msg)
        self._command(dict(zip(msg.joint_names, msg.points[0].positions)))

    def _command(self, by_name: dict[str, float]) -> None:
        self.command = by_name
        self.commands.append(by_name)

    def _tick(self) -> None:
        if self.servo and self.command is not None:
            step = self.speed * self.dt
            for j, target in self.command.items():
                self.q[j] += float(np.clip(target - self.droop - self.q[j], -step, step))
        if self.publishing:  # its own order, plus a joint the policy does not use
            names = ["knee", "wrist", "ankle", "hip"]
            self.js_pub.publish(JointState(name=names, position=[self.q.get(n, 0.0) for n in names],
                                           velocity=[0.0] * 4, effort=[0.0] * 4))

    def pose(self) -> np.ndarray:
        return np.array([self.q[j] for j in JOINTS])

    def last(self) -> np.ndarray:
        """The newest command in the policy's joint order (mapped back by name)."""
        return np.array([self.commands[-1][j] for j in JOINTS])

    def has_diag(self, name: str, level: int, text: str) -> bool:
        return any(s.name == name and level_of(s) == level and text in s.message for s in self.diags)


@pytest.fixture
def rig(ros_context, tmp_path):
    executor = SingleThreadedExecutor(context=ros_context)
    made = []

    def build(*, trajectory=False, speed=1.0, activate=True, output=None, safety=None, **params):
        robot = PositionRobot(ros_context, trajectory=trajectory, speed=speed)
        executor.add_node(robot.node)
        path = robot_file(tmp_path / "robot.yaml", output=output, safety=safety)
        node = active_policy_node(ros_context, policy(tmp_path / "p.onnx"), executor=executor, activate=activate,
                                  **{"obs_fields": [f"{j}.position" for j in JOINTS], "robot_file": str(path),
                                     "watchdog_timeout_s": 0.2, "diagnostics_period_s": 0.2, **params})
        made.extend([node, robot.node])
        if activate:
            assert wait_for_match(executor, robot.js_pub) and wait_for_match(executor, robot.cmd_sub)
        return node, robot

    yield build, executor
    for node in made:
        node.destroy_node()
    executor.shutdown()


def target() -> np.ndarray:
    return np.array([TARGET[j] for j in JOINTS])


def test_nothing_before_the_first_observation_then_soft_start_from_the_measured_pose(rig):
    build, executor = rig
    node, robot = build(speed=100.0)  # a stiff servo: the robot follows each command within a tick
    spin_for(executor, 0.5)  # active, watchdog ticking (0.2 s), but no joint state yet
    assert robot.commands == []  # not the safe action, not zeros: nothing
    robot.publishing = True
    assert spin_until(executor, lambda: len(robot.commands) >= 1)
    np.testing.assert_allclose([robot.commands[0][j] for j in JOINTS], [START[j] for j in JOINTS])  # measured
    assert spin_until(executor, lambda: np.allclose(robot.last(), target(), atol=1e-9), timeout=5.0)
    ramp = np.array([[c[j] for j in JOINTS] for c in robot.commands])
    start = np.array([START[j] for j in JOINTS])
    # Every command lies between the measured start and the target, moving towards it: a blend, not a jump.
    fraction = (ramp - start) / (target() - start)
    assert len(ramp) >= 10 and np.all(np.diff(fraction, axis=0) >= -1e-6)
    assert np.all((fraction >= -1e-6) & (fraction <= 1 + 1e-6))  # float32 weights: 1e-6
    np.testing.assert_allclose(fraction, fraction[:, :1] * np.ones(3), atol=1e-6)  # all joints blend together


def test_estop_latches_hold_of_the_measured_pose_until_reset_and_is_diagnosed(rig, tmp_path):
    build, executor = rig
    node, robot = build(speed=0.5)  # a slow servo: the measured pose lags the command
    robot.publishing = True
    assert spin_until(executor, lambda: len(robot.commands) >= 10)
    assert spin_until(executor, lambda: robot.has_diag("lowrl/policy/estop", 0, "e-stop clear"))
    robot.estop.publish(Bool(data=True))
    assert spin_until(executor, lambda: node._estop_latch is not None and node._estop_latch.latched)
    spin_for(executor, 0.3)
    held = robot.last()
    # The hold is the MEASURED pose (what the robot reports), not the last command, not zeros.
    np.testing.assert_allclose(held, robot.pose(), atol=1e-6)
    assert np.abs(held - target()).max() > 0.05 and np.abs(held).max() > 0.1
    assert spin_until(executor, lambda: robot.has_diag("lowrl/policy/estop", 2, "e-stop latched by estop"))
    # A load makes the joints settle 4 mrad below their command: the hold stays where it was measured,
    # it does not follow the sag down (25 ticks of it would be 0.1 rad).
    robot.droop = 0.004
    spin_for(executor, 0.5)
    np.testing.assert_allclose(robot.last(), held, atol=1e-9)
    np.testing.assert_allclose(robot.pose(), held - 0.004, atol=1e-6)
    # A reset while the e-stop still reads true is refused; a swap and tier changes keep the latch.
    robot.reset.publish(Empty())
    other = policy(tmp_path / "q.onnx", y=[-0.5, -0.5, -0.5], version=2)
    assert node.set_parameters([Parameter("policy_path", value=str(other))])[0].successful
    node.swapper.wait(10.0)
    robot.tier.publish(UInt8(data=3))
    spin_for(executor, 0.2)
    robot.tier.publish(UInt8(data=0))
    spin_for(executor, 0.3)
    assert node.active_policy_path == str(other) and node._estop_latch.latched
    np.testing.assert_allclose(robot.last(), held, atol=1e-6)
    # Release, then reset: the policy takes over through the soft start, from the held pose.
    robot.estop.publish(Bool(data=False))
    spin_for(executor, 0.1)
    n = len(robot.commands)
    robot.reset.publish(Empty())
    assert spin_until(executor, lambda: not node._estop_latch.latched)
    assert spin_until(executor, lambda: robot.has_diag("lowrl/policy/estop", 0, "e-stop clear"))
    new_target = np.array([d + 0.5 * -0.5 for d in DEFAULT_POSE])
    assert spin_until(executor, lambda: np.allclose(robot.last(), new_target, atol=1e-9), timeout=5.0)
    after = np.array([[c[j] for j in JOINTS] for c in robot.commands[n:]])
    assert np.abs(after[0] - held).max() < 0.1  # the first command after the reset starts near the held pose


def test_deactivate_and_shutdown_hold_the_measured_pose(rig):
    build, executor = rig
    node, robot = build()
    robot.publishing = True
    assert spin_until(executor, lambda: len(robot.commands) >= 5)
    robot.servo = False  # the joints stop following (a blocked leg): measured and commanded now differ
    spin_for(executor, 0.2)
    measured = robot.pose()
    assert np.abs(robot.last() - measured).max() > 1e-3
    n = len(robot.commands)
    node.trigger_deactivate()
    assert spin_until(executor, lambda: len(robot.commands) > n)
    np.testing.assert_allclose(robot.last(), measured, atol=1e-9)
    robot.q["knee"] += 0.1  # pushed while inactive
    node.trigger_activate()
    assert spin_until(executor, lambda: len(robot.commands) > n + 3)
    n = len(robot.commands)
    node.trigger_shutdown()
    assert spin_until(executor, lambda: len(robot.commands) > n)
    np.testing.assert_allclose(robot.last(), robot.pose(), atol=1e-9)


def test_joint_trajectory_output_in_the_controller_order(rig):
    build, executor = rig
    order = ["knee", "ankle", "hip"]
    node, robot = build(trajectory=True, speed=100.0, control_period_s=0.02,
                        output={"type": "joint_trajectory", "topic": "jtc/joint_trajectory", "joints": order})
    robot.publishing = True
    assert spin_until(executor, lambda: robot.commands and np.allclose(robot.last(), target(), atol=1e-9))
    msg = robot.trajectories[-1]
    assert list(msg.joint_names) == order and len(msg.points) == 1
    np.testing.assert_allclose(msg.points[0].positions, [TARGET[j] for j in order])
    assert (msg.points[0].time_from_start.sec, msg.points[0].time_from_start.nanosec) == (0, 20_000_000)


@pytest.mark.parametrize("safety, output, expected", [
    ({"safe_action": "zero"}, None, "safe_action 'zero' is refused for interface position"),
    (None, {"type": "float64_multi_array", "topic": COMMANDS, "joints": ["hip", "knee", "toe"]},
     "output.joints names 'toe'"),
])
def test_unsafe_or_mismatched_robot_files_fail_configure(rig, safety, output, expected):
    build, executor = rig
    node, robot = build(activate=False, safety=safety, output=output)
    assert node.trigger_configure() == rclpy.lifecycle.TransitionCallbackReturn.FAILURE
    assert node.controller is None
    assert spin_until(executor, lambda: robot.has_diag("lowrl/policy/policy", 2, expected))


def test_joint_trajectory_without_trajectory_msgs_fails_configure_saying_how_to_install(rig, monkeypatch):
    import sys

    build, executor = rig
    node, robot = build(activate=False, output={"type": "joint_trajectory", "topic": "jtc/joint_trajectory"})
    monkeypatch.setitem(sys.modules, "trajectory_msgs", None)  # as on a robot without the package
    monkeypatch.setitem(sys.modules, "trajectory_msgs.msg", None)
    assert node.trigger_configure() == rclpy.lifecycle.TransitionCallbackReturn.FAILURE
    assert spin_until(executor, lambda: robot.has_diag("lowrl/policy/policy", 2, "pip install 'ros-trajectory-msgs"))
