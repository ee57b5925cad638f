"""The policy node's command output by interface, and its e-stop inputs (the output side of a robot file).

- ``float64_multi_array``: std_msgs/Float64MultiArray, the ros2_control forward_command_controller
  contract (its position, velocity and effort variants: ``joint_group_position_controller`` etc.),
  values in the controller's joint order (``output.joints``).
- ``joint_trajectory``: trajectory_msgs/JointTrajectory for joint_trajectory_controller: one point,
  ``joint_names`` in the controller's order, ``positions``, ``time_from_start`` = one control period,
  header stamp zero ("start now", the controller's convention).

Both go out on a lifecycle publisher, so rclpy itself keeps an inactive node silent. trajectory_msgs
comes from ``ros-trajectory-msgs`` (requirements.txt) or a ROS install; without it, configure fails
with a line saying how to install it (``trajectory_msgs_or_error``).

E-stop: std_msgs/Bool on ``safety.estop_topic`` (true latches the safe action), std_msgs/Empty on
``safety.reset_topic`` (releases it once the e-stop reads false). Both RELIABLE with a small queue, so
no e-stop edge is dropped; a TRANSIENT_LOCAL ("latched") e-stop publisher is matched too.
"""
from __future__ import annotations

import array
from typing import Any, Callable

import numpy as np
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Bool, Empty, Float64MultiArray, MultiArrayDimension

from lowrl_ros.core.runtime.actions import ActionProcessor
from lowrl_ros.ros.qos import CONTROL

# Every e-stop message counts (an assert between two ticks must not be overwritten by a release).
ESTOP_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE,
                       durability=DurabilityPolicy.VOLATILE)


def trajectory_msgs_or_error() -> Any:
    """The trajectory_msgs.msg module, or a ValueError saying how to install it (configure fails with it)."""
    try:
        import trajectory_msgs.msg as msgs
    except ImportError:
        raise ValueError("output.type joint_trajectory needs trajectory_msgs: pip install "
                         "'ros-trajectory-msgs==5.5.1' (Kilted wheels; requirements.txt) or apt install "
                         "ros-$ROS_DISTRO-trajectory-msgs") from None
    return msgs


def check_output(actions: ActionProcessor | None) -> None:
    """Raise ValueError at configure time if the output's message package is not installed."""
    if actions is not None and actions.output.type == "joint_trajectory":
        trajectory_msgs_or_error()


class CommandOutput:
    """One command publisher for the robot file's ``output`` section.

    Args:
        node: the LifecycleNode (publishers are lifecycle publishers).
        actions: the configured processor (output config, controller joint order).
        period_s: a callable giving the current control period (a trajectory point's time_from_start).
    """

    def __init__(self, node: Any, actions: ActionProcessor, period_s: Callable[[], float]) -> None:
        self._actions = actions
        self._period_s = period_s
        config = actions.output
        if config.type == "joint_trajectory":
            msgs = trajectory_msgs_or_error()
            self._point_type = msgs.JointTrajectoryPoint
            self.publisher = node.create_lifecycle_publisher(msgs.JointTrajectory, config.topic, CONTROL)
            self._msg = msgs.JointTrajectory()
            self._msg.joint_names = list(actions.controller_joints)
            self.publish = self._publish_trajectory
        else:
            self.publisher = node.create_lifecycle_publisher(Float64MultiArray, config.topic, CONTROL)
            self._msg = Float64MultiArray()
            n = len(actions.controller_joints)
            # The joint names travel in the layout label: a reader (rqt, a recorder) can tell the order.
            self._msg.layout.dim = [MultiArrayDimension(label=",".join(actions.controller_joints), size=n, stride=n)]
            # Allocated once and written in place each tick: rclpy keeps an array.array('d') as is and copies
            # it with one memcpy, where a list is checked value by value in Python (~20 us per 12 joints here).
            self._msg.data = array.array("d", bytes(8 * n))
            self._data = np.frombuffer(self._msg.data, dtype=np.float64)
            self.publish = self._publish_array

    def _publish_array(self, action: np.ndarray) -> None:
        """Publish ``action`` (policy order) in the controller's order."""
        self._data[:] = self._actions.to_controller(action)
        self.publisher.publish(self._msg)

    def _publish_trajectory(self, action: np.ndarray) -> None:
        period = float(self._period_s())
        sec = int(period)
        point = self._point_type(positions=self._actions.to_controller(action).tolist())
        point.time_from_start.sec, point.time_from_start.nanosec = sec, int(round((period - sec) * 1e9))
        self._msg.points = [point]
        self.publisher.publish(self._msg)


def create_estop(node: Any, actions: ActionProcessor, on_estop: Callable[[bool], None],
                 on_reset: Callable[[], None]) -> list:
    """Subscribe the e-stop (Bool) and its reset (Empty) from ``safety``; [] when estop_topic is ""."""
    safety = actions.safety
    if not safety.estop_topic:
        return []
    return [node.create_subscription(Bool, safety.estop_topic, lambda m: on_estop(bool(m.data)), ESTOP_QOS),
            node.create_subscription(Empty, safety.reset_topic, lambda _m: on_reset(), ESTOP_QOS)]
