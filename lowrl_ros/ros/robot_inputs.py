"""The policy node's robot inputs: one subscription per robot-file topic, the newest sample taken at the tick.

A robot's joint_state_broadcaster publishes at 500-1000 Hz; a Python callback per message costs
~26 % of a core here (docs/architecture.md, "Measured baselines"), for samples the 50 Hz policy
throws away. So the subscriptions live on an internal node that no executor ever spins, each
KEEP_LAST depth 1: DDS keeps only the newest sample (in its own C++ threads), and at each control
tick :meth:`RobotInputs.take` takes it with the subscription handle's ``take_message``, the very
call rclpy's executors make (rclpy 3.x Humble, 7.x Jazzy, 9.x Kilted). No Python code runs per
message. Where ``take_message`` is missing (an rclpy this was not written for) the inputs fall back
to ordinary callbacks on the policy node that store the newest sample.

Event mode (``mode: event`` with ``robot_timing: parameters``): the trigger topic (the joint states,
else the first topic) keeps a callback on the policy node, which acts on each of its messages;
the other topics are still taken at that moment.

QoS per topic (robot file ``qos``): ``best_effort`` (default: matches both RELIABLE and
BEST_EFFORT publishers, e.g. SensorDataQoS drivers), ``reliable`` (only RELIABLE publishers match)
or ``sensor_data`` (rclpy's SensorDataQoS); always KEEP_LAST, depth 1 for the control path.

Topics are relative in the robot file and resolve under the policy node's namespace.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from geometry_msgs.msg import Twist
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float32MultiArray

from lowrl_ros.core.runtime.observation import ObservationBuilder, ObservationSpec, TopicSpec

MSG_TYPES: dict[str, type] = {"joint_state": JointState, "imu": Imu, "twist": Twist, "array": Float32MultiArray}


def qos_profile(name: str) -> QoSProfile:
    """The control-path QoS for a robot-file ``qos`` value (KEEP_LAST, depth 1)."""
    if name == "sensor_data":
        return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=qos_profile_sensor_data.reliability,
                          durability=qos_profile_sensor_data.durability)
    reliability = ReliabilityPolicy.RELIABLE if name == "reliable" else ReliabilityPolicy.BEST_EFFORT
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=reliability,
                      durability=DurabilityPolicy.VOLATILE)


def to_sample(kind: str, msg: Any) -> Any:
    """A message as the plain sample core/runtime/observation.py reads (see its module docstring)."""
    if kind == "joint_state":
        return tuple(msg.name), msg.position, msg.velocity, msg.effort
    if kind == "imu":
        o, w, a = msg.orientation, msg.angular_velocity, msg.linear_acceleration
        return (o.x, o.y, o.z, o.w), (w.x, w.y, w.z), (a.x, a.y, a.z)
    if kind == "twist":
        return (msg.linear.x, msg.linear.y, msg.linear.z, msg.angular.x, msg.angular.y, msg.angular.z)
    return msg.data


def can_take(subscription) -> bool:
    """Whether this rclpy lets a subscription be read without an executor (Subscription handle take_message)."""
    return hasattr(getattr(subscription, "handle", None), "take_message")


class RobotInputs:
    """The robot file's topics for one policy node: subscribe, keep the newest, feed the builder."""

    def __init__(self, node: Node, spec: ObservationSpec, builder: ObservationBuilder, *,
                 clock: Callable[[], float] = time.perf_counter,
                 trigger: Callable[[float], None] | None = None) -> None:
        """Args:
            node: the policy node (namespace, context, and the fallback/trigger subscriptions).
            trigger: event mode: called with the arrival time after each message of the trigger topic.
        """
        self._node, self._builder, self._clock = node, builder, clock
        # Never added to an executor: its subscriptions are read only by take().
        self._inner = Node(f"{node.get_name()}_inputs", namespace=node.get_namespace(), context=node.context,
                           start_parameter_services=False, enable_rosout=False)
        self._taken: list[tuple[TopicSpec, Any]] = []
        self._subs: list[tuple[Node, Any]] = []
        trigger_topic = None
        if trigger is not None and spec.topics:
            trigger_topic = next((t for t in spec.topics if t.msg_type == "joint_state"), spec.topics[0]).topic
        self.mode = "take"
        for topic in spec.topics:
            msg_type, qos = MSG_TYPES[topic.msg_type], qos_profile(topic.qos)
            if topic.topic == trigger_topic:
                sub = node.create_subscription(msg_type, topic.topic, self._callback(topic, trigger), qos)
                self._subs.append((node, sub))
                continue
            sub = self._inner.create_subscription(msg_type, topic.topic, lambda _msg: None, qos)
            if can_take(sub):
                self._subs.append((self._inner, sub))
                self._taken.append((topic, sub))
            else:  # not this rclpy: a callback per message after all
                self._inner.destroy_subscription(sub)
                self.mode = "callback"
                self._subs.append((node, node.create_subscription(msg_type, topic.topic,
                                                                  self._callback(topic, None), qos)))

    @property
    def topics(self) -> list[str]:
        """Fully qualified names of the subscribed topics."""
        return [sub.topic_name for _, sub in self._subs]

    def subscriptions(self) -> list:
        """The rclpy subscriptions (tests wait on their publisher counts)."""
        return [sub for _, sub in self._subs]

    def _callback(self, topic: TopicSpec, trigger: Callable[[float], None] | None):
        kind, name = topic.msg_type, topic.topic

        def on_message(msg) -> None:
            now = self._clock()
            self._builder.update(name, to_sample(kind, msg), now)
            if trigger is not None:
                trigger(now)
        return on_message

    def take(self) -> int:
        """Take the newest waiting sample of every taken topic into the builder; returns how many topics had one.

        The sample's stamp is its DDS reception time (``received_timestamp``) moved onto this
        clock, so a sample that waited in the queue is as old as it really is.
        """
        fresh = 0
        for topic, sub in self._taken:
            # KEEP_LAST depth 1: DDS holds at most one sample, the newest, so one take gets it (a loop
            # until None would cost a second call per topic and tick, measured ~1 % of a core at 50 Hz).
            with sub.handle:
                newest = sub.handle.take_message(sub.msg_type, sub.raw)
            if newest is None:
                continue
            now = self._clock()
            msg, info = newest
            received = info.get("received_timestamp") if isinstance(info, dict) else None
            age = (time.time_ns() - received) * 1e-9 if received else 0.0
            self._builder.update(topic.topic, to_sample(topic.msg_type, msg), now - min(max(age, 0.0), 10.0))
            fresh += 1
        return fresh

    def destroy(self) -> None:
        """Drop every subscription and the internal node."""
        for owner, sub in self._subs:
            owner.destroy_subscription(sub)
        self._subs.clear()
        self._taken.clear()
        self._inner.destroy_node()
