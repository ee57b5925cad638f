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

import struct
import time
from typing import Any, Callable

import numpy as np
from geometry_msgs.msg import Twist
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Bool, Empty, Float32MultiArray, Float64MultiArray

from lowrl_ros.core.runtime.observation import ObservationBuilder, ObservationSpec, TopicSpec
from lowrl_ros.ros.qos import CONTROL, LATCHED, STATUS

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


_CDR_LE = b"\x00\x01"  # the encapsulation of little-endian plain CDR (XCDR1), what rmw_fastrtps and cyclonedds send
_F64 = np.dtype("<f8")


_u32 = struct.Struct("<I").unpack_from


def _header_end(buf: bytes) -> int:
    """Offset (in the CDR body, after the 4-byte encapsulation) just past a std_msgs/Header."""
    return 12 + _u32(buf, 4 + 8)[0]  # stamp: int32 sec, uint32 nanosec; then frame_id's length (with its NUL)


def _align(pos: int, k: int) -> int:
    return (pos + k - 1) & ~(k - 1)


# (offset of the name count in the CDR body, the bytes of count + names, the names, offset just past them)
_LAST_NAMES: tuple[int, bytes, tuple[str, ...], int] = (-1, b"", (), 0)


def parse_joint_state(buf: bytes):
    """A serialized sensor_msgs/JointState -> (names, position, velocity, effort), or None if not plain LE CDR.

    rclpy builds a Python message field by field (~50 us for 12 joints here); reading the CDR with
    struct and numpy views costs a fraction. The names are decoded once per distinct name block.
    """
    if buf[:2] != _CDR_LE:
        return None
    pos = _align(_header_end(buf), 4)
    global _LAST_NAMES
    start, block, names, end = _LAST_NAMES
    if pos == start and buf.startswith(block, 4 + pos):
        # The same count and name strings at the same offset as the last message (a driver's steady
        # stream): the walk below would end at the same place with the same names, so skip it.
        pos = end
    else:
        start = pos
        count = _u32(buf, 4 + pos)[0]
        pos += 4
        names_start = pos
        for _ in range(count):
            pos = _align(pos, 4)
            pos += 4 + _u32(buf, 4 + pos)[0]
        names = _names(buf[4 + names_start:4 + pos], count)
        _LAST_NAMES = (start, buf[4 + start:4 + pos], names, pos)
    arrays = []
    for _ in range(3):
        pos = _align(pos, 4)
        n = _u32(buf, 4 + pos)[0]
        pos += 4
        if n:
            pos = _align(pos, 8)
        if 4 + pos + 8 * n > len(buf):
            return None
        arrays.append(np.frombuffer(buf, _F64, n, 4 + pos))
        pos += 8 * n
    return (names, *arrays)


_NAME_CACHE: dict[bytes, tuple[str, ...]] = {}


def _names(block: bytes, count: int) -> tuple[str, ...]:
    names = _NAME_CACHE.get(block)
    if names is None:
        out, pos = [], 0
        for _ in range(count):
            pos = _align(pos, 4)
            n = _u32(block, pos)[0]
            out.append(block[pos + 4:pos + 3 + n].decode())
            pos += 4 + n
        names = tuple(out)
        if len(_NAME_CACHE) > 16:  # a driver changing its names every message: do not grow
            _NAME_CACHE.clear()
        _NAME_CACHE[block] = names
    return names


def parse_imu(buf: bytes):
    """A serialized sensor_msgs/Imu -> (orientation xyzw, angular velocity, linear acceleration), or None.

    rclpy's own conversion costs ~160 us here (three covariance arrays); the doubles after the
    header are one fixed block: orientation 4, covariance 9, angular velocity 3, covariance 9,
    linear acceleration 3, covariance 9.
    """
    if buf[:2] != _CDR_LE:
        return None
    pos = _align(_header_end(buf), 8)
    if 4 + pos + 37 * 8 > len(buf):
        return None
    v = np.frombuffer(buf, _F64, 37, 4 + pos)
    return v[0:4], v[13:16], v[25:28]


_TWIST = struct.Struct("<6d")


def parse_twist(buf: bytes):
    """A serialized geometry_msgs/Twist -> (linear xyz, angular xyz) as 6 floats, or None if not plain LE CDR."""
    if buf[:2] != _CDR_LE or len(buf) < 4 + 48:
        return None
    return _TWIST.unpack_from(buf, 4)


_F32 = np.dtype("<f4")


def parse_float32_array(buf: bytes):
    """A serialized std_msgs/Float32MultiArray -> its data (a float32 view), or None if not plain LE CDR.

    The layout (dim labels, sizes, strides, data_offset) is skipped: the observation reads ``data`` only.
    """
    if buf[:2] != _CDR_LE:
        return None
    count = _u32(buf, 4)[0]  # the dim sequence's length
    pos = 4
    for _ in range(count):
        pos = _align(pos, 4)
        pos += 4 + _u32(buf, 4 + pos)[0]  # label (length with its NUL)
        pos = _align(pos, 4) + 8  # size, stride
    pos = _align(pos, 4) + 4  # data_offset
    n = _u32(buf, 4 + pos)[0]
    pos += 4
    if 4 + pos + 4 * n > len(buf):
        return None
    return np.frombuffer(buf, _F32, n, 4 + pos)


FAST_PARSERS = {"joint_state": parse_joint_state, "imu": parse_imu, "twist": parse_twist,
                "array": parse_float32_array}


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
        # Never added to an executor: its subscriptions are read only by take(). use_global_arguments=False: a
        # launcher's `-r __node:=policy_node` would give it the policy node's name (two nodes of one name); the
        # policy node's remaps reach its topics through node.resolve_topic_name() instead.
        self._inner = Node(f"{node.get_name()}_inputs", namespace=node.get_namespace(), context=node.context,
                           use_global_arguments=False, start_parameter_services=False, enable_rosout=False)
        self._taken: list[tuple[TopicSpec, Any]] = []
        self._subs: list[tuple[Node, Any]] = []
        trigger_topic = builder.clock_topic if trigger is not None else None
        self.mode = "take"
        for topic in spec.topics:
            msg_type, qos = MSG_TYPES[topic.msg_type], qos_profile(topic.qos)
            if topic.topic == trigger_topic:
                sub = node.create_subscription(msg_type, topic.topic, self._callback(topic, trigger), qos)
                self._subs.append((node, sub))
                continue
            # Raw (serialized) where a fast parser exists: rclpy's message conversion is the cost at the tick.
            sub = self._inner.create_subscription(msg_type, node.resolve_topic_name(topic.topic), lambda _msg: None,
                                                  qos, raw=topic.msg_type in FAST_PARSERS)
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
        now = wall_ns = None  # read once per take, at the first fresh sample: the topics differ by microseconds
        for topic, sub in self._taken:
            # KEEP_LAST depth 1: DDS holds at most one sample, the newest, so one take gets it (a loop
            # until None would cost a second call per topic and tick, measured ~1 % of a core at 50 Hz).
            with sub.handle:
                newest = sub.handle.take_message(sub.msg_type, sub.raw)
            if newest is None:
                continue
            if now is None:
                now, wall_ns = self._clock(), time.time_ns()
            msg, info = newest
            received = info.get("received_timestamp") if isinstance(info, dict) else None
            age = (wall_ns - received) * 1e-9 if received else 0.0
            if sub.raw:
                sample = FAST_PARSERS[topic.msg_type](msg)
                if sample is None:  # not plain little-endian CDR: rclpy's own conversion
                    sample = to_sample(topic.msg_type, deserialize_message(msg, sub.msg_type))
            else:
                sample = to_sample(topic.msg_type, msg)
            self._builder.update(topic.topic, sample, now - min(max(age, 0.0), 10.0))
            fresh += 1
        return fresh

    def destroy(self) -> None:
        """Drop every subscription and the internal node."""
        for owner, sub in self._subs:
            owner.destroy_subscription(sub)
        self._subs.clear()
        self._taken.clear()
        self._inner.destroy_node()


def create_operator_inputs(node: Node, *, teleop_topic: str, reset_topic: str, ready_topic: str,
                           on_teleop: Callable, on_reset: Callable, on_ready: Callable) -> list:
    """The operator's topics on the policy node: a teleop action (Float64MultiArray, ``teleop_topic`` set) and,
    with ``ready_topic`` set, a reset request (std_msgs/Empty on ``reset_topic``) and the ready flag
    (std_msgs/Bool, latched). Returns the subscriptions."""
    subs = []
    if teleop_topic:
        subs.append(node.create_subscription(Float64MultiArray, teleop_topic, on_teleop, CONTROL))
    if ready_topic:
        subs.append(node.create_subscription(Empty, reset_topic, on_reset, STATUS))
        subs.append(node.create_subscription(Bool, ready_topic, on_ready, LATCHED))
    return subs
