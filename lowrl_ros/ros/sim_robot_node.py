"""sim_robot_node: a gymnasium env as a robot: `/joint_states` out, `<controller>/commands` in.

Steps the env once per control period on a wall-clock timer, with the newest command (zero until
the first one; a malformed one is ignored with a warning and zero is applied). Publishes the reward
(`/lowrl/reward`, std_msgs/Float64) each step and the return of each finished episode
(`/lowrl/episode_return`, std_msgs/Float64), and logs episode returns.

Benchmarks hook into it in-process: ``on_published`` callables get the time of each joint state
(`lowrl bench loop` measures round trips from it), and ``redirect_joint_states`` moves the output.
"""
from __future__ import annotations

import signal
import sys
import threading
import time

import numpy as np
import rclpy
import rclpy.executors
from rcl_interfaces.msg import IntegerRange, FloatingPointRange, ParameterDescriptor
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, Float64MultiArray

from lowrl_ros.core.sim_robot import SimRobot, SimRobotConfig
from lowrl_ros.ros.qos import CONTROL, STATS


def make_executor(context=None):
    """rclpy's EventsExecutor where present (measured ~2x lower pub->sub latency here), else single-threaded."""
    try:
        from rclpy.experimental import EventsExecutor

        return EventsExecutor(context=context)
    except ImportError:
        return rclpy.executors.SingleThreadedExecutor(context=context)


def spin(node: Node) -> None:
    """Spin until SIGINT/SIGTERM (the node owns the signals: EventsExecutor.spin() ignores Ctrl-C here)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    executor = make_executor()
    executor.add_node(node)
    while not stop.is_set() and rclpy.ok():
        executor.spin_once(timeout_sec=0.1)


def _descriptor(text: str, read_only: bool = False, floats: tuple[float, float] | None = None,
                ints: tuple[int, int] | None = None) -> ParameterDescriptor:
    d = ParameterDescriptor(description=text, read_only=read_only)
    if floats:
        d.floating_point_range = [FloatingPointRange(from_value=floats[0], to_value=floats[1], step=0.0)]
    if ints:
        d.integer_range = [IntegerRange(from_value=ints[0], to_value=ints[1], step=1)]
    return d


class SimRobotNode(Node):
    """Wraps :class:`lowrl_ros.core.sim_robot.SimRobot` in topics and a timer."""

    def __init__(self, node_name: str = "sim_robot", **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        defaults = SimRobotConfig()
        p = self.declare_parameter
        p("env_id", defaults.env_id, _descriptor("gymnasium environment", read_only=True))
        p("control_period_s", defaults.control_period_s,
          _descriptor("wall-clock period of one env step", read_only=True, floats=(1e-4, 10.0)))
        p("seed", defaults.seed, _descriptor("seed of the first reset", read_only=True, ints=(0, 2**31 - 1)))
        p("max_episode_steps", defaults.max_episode_steps,
          _descriptor("episode length (0: env default)", read_only=True, ints=(0, 10**9)))
        p("joint_states_topic", "/joint_states", _descriptor("joint state output", read_only=True))
        p("command_topic", "/forward_command_controller/commands", _descriptor("command input", read_only=True))
        get = lambda name: self.get_parameter(name).value  # noqa: E731
        self.config = SimRobotConfig(env_id=get("env_id"), control_period_s=get("control_period_s"),
                                     seed=get("seed"), max_episode_steps=get("max_episode_steps"))
        self.robot = SimRobot(self.config)
        self._command = np.zeros(self.robot.action_dim)
        self._pub_js = self.create_publisher(JointState, get("joint_states_topic"), CONTROL)
        self._js_pubs = {get("joint_states_topic"): self._pub_js}
        self._pub_reward = self.create_publisher(Float64, "/lowrl/reward", STATS)
        self._pub_return = self.create_publisher(Float64, "/lowrl/episode_return", STATS)
        self.create_subscription(Float64MultiArray, get("command_topic"), self._on_command, CONTROL)
        self._published_at: float | None = None
        self.steps = 0
        self.on_published: list = []  # callables(perf_counter time) run after each joint state: bench hooks
        self._warned = 0.0
        self._msg = JointState(name=list(self.robot.joint_names))
        self._timer = self.create_timer(self.config.control_period_s, self._tick)
        self.get_logger().info(f"sim robot {self.config.env_id} at {1 / self.config.control_period_s:.0f} Hz, "
                               f"joints {', '.join(self.robot.joint_names)}")

    def redirect_joint_states(self, topic: str) -> None:
        """Publish joint states on ``topic`` from the next tick on (benchmarks alternate receivers)."""
        if topic not in self._js_pubs:
            self._js_pubs[topic] = self.create_publisher(JointState, topic, CONTROL)
        self._pub_js = self._js_pubs[topic]

    def _on_command(self, msg: Float64MultiArray) -> None:
        now = time.perf_counter()
        try:
            self._command = self.robot.check_action(msg.data)
        except ValueError as exc:
            self._command = np.zeros(self.robot.action_dim)
            if now - self._warned > 1.0:  # a stream of bad commands must not flood the log
                self._warned = now
                self.get_logger().warning(f"ignoring command, applying zero: {exc}")

    def _tick(self) -> None:
        outcome = self.robot.step(self._command)
        self.steps += 1
        self._pub_reward.publish(Float64(data=outcome.reward))
        if outcome.episode_done:
            self._pub_return.publish(Float64(data=outcome.episode_return))
            self.get_logger().info(f"episode {self.robot.episodes}: return {outcome.episode_return:.1f} "
                                   f"over {outcome.episode_steps} steps")
        joints = self.robot.joints()
        msg = self._msg
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.position, msg.velocity = joints.position.tolist(), joints.velocity.tolist()
        msg.effort = joints.effort.tolist()
        self._published_at = time.perf_counter()
        self._pub_js.publish(msg)
        for hook in self.on_published:
            hook(self._published_at)

    def destroy_node(self) -> None:
        if getattr(self, "robot", None) is not None:
            self.robot.close()
            self.robot = None
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    rclpy.init(args=args if args is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    node = None
    try:
        node = SimRobotNode()
        spin(node)
    except (KeyboardInterrupt, SystemExit, ExternalShutdownException):
        pass
    except ValueError as exc:  # bad parameters: say which and how to fix, no traceback
        print(f"sim_robot_node: {exc}", file=sys.stderr)
        return 2
    finally:
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
