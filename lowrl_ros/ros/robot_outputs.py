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
import time
from typing import Any, Callable

import numpy as np
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message, serialize_message
from std_msgs.msg import Bool, Empty, Float64, Float64MultiArray, MultiArrayDimension

from lowrl_ros.core.runtime import step_row
from lowrl_ros.core.runtime.actions import ActionProcessor
from lowrl_ros.core.runtime.control import RESET
from lowrl_ros.core.runtime.policy_stats import STATS_FIELDS, WindowMax
from lowrl_ros.ros.qos import CONTROL, RECORD, STATS

try:  # rclpy >= Iron (Jazzy, Kilted): publisher events, with ``matched``
    from rclpy.event_handler import PublisherEventCallbacks
except ImportError:  # Humble: rclpy.qos_event, without matched events (Listened falls back to asking)
    PublisherEventCallbacks = None

# Every e-stop message counts (an assert between two ticks must not be overwritten by a release).
ESTOP_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE,
                       durability=DurabilityPolicy.VOLATILE)


class ArrayOut:
    """One Float64MultiArray of fixed layout and length, published by writing only its values.

    Fill :attr:`values` (a float64 view) and call :meth:`publish`. The message is serialized once at
    construction with probe values; where its bytes end with exactly those values (plain CDR, what
    every rmw sends) the serialized layout is kept as a prefix and each publish sends ``prefix +
    values`` as a serialized message: rclpy's Python-to-C conversion of the layout (its label names
    every joint) and the values is skipped (~40 us of each control tick here). An rclpy whose
    publishers refuse bytes (TypeError, before anything is sent) gets the message itself from then on.

    Args:
        publisher: a publisher of std_msgs/Float64MultiArray (lifecycle or plain).
        dims: the layout's dimensions; size: the number of values.
    """

    def __init__(self, publisher: Any, dims: list, size: int) -> None:
        self.publisher = publisher
        self.msg = Float64MultiArray()
        self.msg.layout.dim = dims
        self.msg.data = array.array("d", bytes(8 * size))  # rclpy keeps an array.array('d') as is
        self.values = np.frombuffer(self.msg.data, dtype=np.float64)
        self._prefix = _raw_prefix(self.msg, self.values)

    @property
    def raw(self) -> bool:
        """Whether publish sends the serialized bytes (False: the message, converted by rclpy)."""
        return self._prefix is not None

    def publish(self) -> None:
        """Publish the current :attr:`values`."""
        if self._prefix is not None:
            try:
                self.publisher.publish(self._prefix + self.values.tobytes())
                return
            except TypeError:  # this rclpy publishes messages only
                self._prefix = None
        self.publisher.publish(self.msg)


class Listened:
    """A lifecycle publisher with its subscriber count kept by matched events: reading it makes no rclpy call.

    The control tick publishes volatile topics (the step message, the latency) only while someone
    subscribes; asking ``get_subscription_count()`` (rcl, rmw, the DDS writer's lock) twice per tick
    cost ~17 us of each 50 Hz tick in ``lowrl bench loop --legged``. Here the executor thread keeps
    the count from the publisher's matched events (rclpy >= Iron) and :meth:`count` reads an int.
    Where matched events do not exist (Humble) :meth:`count` asks the publisher each time, as before.
    :meth:`refresh` (the diagnostics timer, executor thread) re-reads the true count: a safety net should an
    executor ever not deliver the events.

    Args:
        node: the LifecycleNode; msg_type, topic, qos: as for ``create_lifecycle_publisher``.
    """

    def __init__(self, node: Any, msg_type: type, topic: str, qos: Any) -> None:
        events = None
        if PublisherEventCallbacks is not None:
            try:
                events = PublisherEventCallbacks(matched=self._on_matched)
            except TypeError:  # an rclpy with the module but without matched events
                events = None
        # 0 until the first matched event: a new publisher has no subscriber yet. None: ask each time.
        self._count: int | None = None if events is None else 0
        kwargs = {} if events is None else {"event_callbacks": events}
        self.publisher = node.create_lifecycle_publisher(msg_type, topic, qos, **kwargs)

    @property
    def from_events(self) -> bool:
        """Whether the count comes from matched events (False: asked of the publisher per call)."""
        return self._count is not None

    def _on_matched(self, info: Any) -> None:
        self._count = int(info.current_count)

    def count(self) -> int:
        """How many subscriptions are matched now (from the events; else asked of the publisher)."""
        count = self._count
        return self.publisher.get_subscription_count() if count is None else count

    def refresh(self) -> None:
        """Re-read the true count from the publisher (executor thread; no-op without events)."""
        if self._count is not None:
            self._count = self.publisher.get_subscription_count()


def _raw_prefix(msg: Float64MultiArray, values: np.ndarray) -> bytes | None:
    """The serialized message up to its values, or None if its bytes do not end with the values as stored."""
    probe = np.arange(values.size, dtype=np.float64) + 0.25
    values[:] = probe
    try:
        raw = serialize_message(msg)
        prefix = raw[:len(raw) - 8 * values.size]
        same = raw.endswith(probe.tobytes()) and np.array_equal(
            np.asarray(deserialize_message(prefix + probe.tobytes(), Float64MultiArray).data), probe)
    except Exception:  # noqa: BLE001 - any doubt: the message path
        same = False
    finally:
        values[:] = 0.0
    return prefix if same else None


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
            n = len(actions.controller_joints)
            # The joint names travel in the layout label: a reader (rqt, a recorder) can tell the order.
            self._array = ArrayOut(self.publisher, [MultiArrayDimension(label=",".join(actions.controller_joints),
                                                                        size=n, stride=n)], n)
            self.publish = self._publish_array

    def _publish_array(self, action: np.ndarray) -> None:
        """Publish ``action`` (policy order) in the controller's order."""
        self._array.values[:] = self._actions.to_controller(action)
        self._array.publish()

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


class PolicyOutputs:
    """The policy node's lifecycle publishers and what a tick sends on them (silent unless the node is active).

    The command: the robot file's output (:class:`CommandOutput`), or without one Float64MultiArray on
    ``<controller_name>/commands``; the latency of each inference (``lowrl/policy/latency_us``); the stats
    (``lowrl/policy/stats``, STATS_FIELDS order); the step row on ``step_topic`` (core/runtime/step_row.py,
    written in place into one preallocated message). The per-tick volatile topics (latency, step) are built
    only while someone subscribes (:class:`Listened`: ~60 us of each tick here otherwise).

    Args:
        node: the LifecycleNode; actions: the robot file's output side (None: the command parameters).
        period_s: the output period now (a trajectory point's time_from_start).
        controller_name: without a robot file, commands go to ``<controller_name>/commands`` (relative).
        step_topic: "" for no step row; obs_dim, action_dim: the row's sizes.
    """

    def __init__(self, node: Any, actions: ActionProcessor | None, period_s: Callable[[], float], *,
                 controller_name: str, step_topic: str, obs_dim: int, action_dim: int) -> None:
        self._output = CommandOutput(node, actions, period_s) if actions is not None else None
        self.command = self._output.publisher if self._output is not None else node.create_lifecycle_publisher(
            Float64MultiArray, f"{controller_name.strip('/')}/commands", CONTROL)
        self._cmd_msg = Float64MultiArray()
        self.latency = Listened(node, Float64, "lowrl/policy/latency_us", STATS)
        self._latency_msg = Float64()  # one message, reused: no construction per tick
        # Capped (WindowMax: the worst of each period) at the latency_rate_hz parameter where the node has one.
        hz = node.get_parameter("latency_rate_hz").value if node.has_parameter("latency_rate_hz") else 0.0
        self._latency_cap = WindowMax(hz)
        self.stats = node.create_lifecycle_publisher(Float64MultiArray, "lowrl/policy/stats", STATS)
        n = len(STATS_FIELDS)
        self._stats_msg = Float64MultiArray()
        self._stats_msg.layout.dim = [MultiArrayDimension(label=",".join(STATS_FIELDS), size=n, stride=n)]
        self.step: Listened | None = None
        self._no_command = np.full(action_dim, np.nan)  # a reset's rows: nothing went out
        if step_topic:
            size = step_row.row_size(obs_dim, action_dim)
            self.step = Listened(node, Float64MultiArray, step_topic, RECORD)
            dim = MultiArrayDimension(label=step_row.row_label(obs_dim, action_dim), size=size, stride=size)
            self._step_out = ArrayOut(self.step.publisher, [dim], size)
        self.publishers = [self.command, self.latency.publisher, self.stats] + \
            ([self.step.publisher] if self.step is not None else [])

    def publish_command(self, action: np.ndarray) -> None:
        if self._output is not None:
            self._output.publish(action)  # the robot file's message, in the controller's joint order
            return
        self._cmd_msg.data = action.tolist()
        self.command.publish(self._cmd_msg)

    def publish_tick(self, result: Any, command: np.ndarray | None, *, estop: bool, policy_version: int,
                     obs: np.ndarray | None) -> None:
        """After a tick: its step row (a policy or safe tick that sent ``command``, or a reset's tick, which sent
        nothing) and its inference latency.

        ``result`` is ``PolicyController.step``'s (None: the step failed, the safe action went out)."""
        if command is None and result is not None and result.source == RESET:  # the row marks the reset all the same
            command = self._no_command
        if command is not None and self.step is not None and (result is None or result.source != "hold") \
                and self.step.count():
            policy = result is not None and result.source == "policy"
            step_row.encode_step(self._step_out.values, stamp=time.time(), safe=not policy,
                                 intervention=policy and result.intervention, estop=estop,
                                 policy_version=policy_version, obs=obs,
                                 policy_action=result.own_action if policy else None,
                                 action=result.policy_action if policy and result.own_action is not None else None,
                                 command=command)
            self._step_out.publish()
        if result is not None and result.latency_s is not None and self.latency.count():
            worst = self._latency_cap.offer(result.latency_s * 1e6, time.monotonic())
            if worst is not None:
                self._latency_msg.data = worst
                self.latency.publisher.publish(self._latency_msg)

    def publish_stats(self, values: list[float]) -> None:
        self._stats_msg.data = values
        self.stats.publish(self._stats_msg)

    def refresh(self) -> None:
        """Re-read the matched counts (the diagnostics timer: Listened's safety net)."""
        for listened in (self.step, self.latency):
            if listened is not None:
                listened.refresh()

    def destroy(self, node: Any) -> None:
        for pub in self.publishers:
            node.destroy_lifecycle_publisher(pub)
