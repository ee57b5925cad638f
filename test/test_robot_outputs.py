"""ros/robot_outputs.py ArrayOut: a Float64MultiArray published as prefix + values, read back over real DDS."""
from __future__ import annotations

import numpy as np
import pytest
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import Float64MultiArray, MultiArrayDimension

from lowrl_ros.ros.qos import STATS
from lowrl_ros.ros.robot_outputs import ArrayOut
from rosutil import spin_until, wait_for_match

pytestmark = pytest.mark.ros

LABEL = "FL_hip,FL_thigh,FL_calf"  # an odd length: the padding before the values must come out right


def test_array_out_sends_the_serialized_layout_and_values(ros_context):
    node = Node("array_out_test", context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(node)
    got: list = []
    node.create_subscription(Float64MultiArray, "array_out", got.append, STATS)
    out = ArrayOut(node.create_publisher(Float64MultiArray, "array_out", STATS),
                   [MultiArrayDimension(label=LABEL, size=3, stride=3)], 3)
    try:
        assert out.raw  # plain CDR here: the serialized path is taken
        assert wait_for_match(executor, out.publisher)
        for k in range(3):
            out.values[:] = [0.5 * k, -1.0, np.pi]
            out.publish()
        assert spin_until(executor, lambda: len(got) == 3)
        assert [list(m.data) for m in got] == [[0.5 * k, -1.0, np.pi] for k in range(3)]
        assert got[-1].layout.dim[0].label == LABEL and got[-1].layout.dim[0].size == 3
    finally:
        executor.shutdown()
        node.destroy_node()


class _MessagesOnly:
    """Stand-in for an rclpy publisher that refuses serialized bytes (an rclpy without publish_raw): no such
    rclpy is installed here, so the fallback is checked against this double."""

    def __init__(self) -> None:
        self.sent: list = []

    def publish(self, msg) -> None:
        if isinstance(msg, bytes):
            raise TypeError("Expected Float64MultiArray, got bytes")
        self.sent.append(list(msg.data))


def test_array_out_falls_back_to_the_message_when_bytes_are_refused():
    pub = _MessagesOnly()
    out = ArrayOut(pub, [MultiArrayDimension(label=LABEL, size=2, stride=2)], 2)
    out.values[:] = [1.0, 2.0]
    out.publish()
    out.values[:] = [3.0, 4.0]
    out.publish()
    assert pub.sent == [[1.0, 2.0], [3.0, 4.0]] and not out.raw


def test_listened_counts_subscribers_from_matched_events(ros_context):
    """The count the control tick reads comes from matched events: it follows a subscriber coming and going
    over real DDS (the executor delivers the events), and refresh() agrees with the publisher."""
    from rclpy.lifecycle import LifecycleNode

    from lowrl_ros.ros.robot_outputs import Listened

    node = LifecycleNode("listened_test", context=ros_context)
    other = Node("listened_reader", context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(node)
    executor.add_node(other)
    listened = Listened(node, Float64MultiArray, "listened", STATS)
    try:
        assert listened.from_events  # this rclpy (>= Iron) has matched events
        assert listened.count() == 0
        sub = other.create_subscription(Float64MultiArray, "listened", lambda _m: None, STATS)
        assert spin_until(executor, lambda: listened.count() == 1)
        other.destroy_subscription(sub)
        assert spin_until(executor, lambda: listened.count() == 0)
        listened._count = 5  # a count gone wrong (an executor that lost an event): refresh() restores the truth
        listened.refresh()
        assert listened.count() == listened.publisher.get_subscription_count() == 0
    finally:
        executor.shutdown()
        other.destroy_node()
        node.destroy_node()


class _CountingPublisher:
    """Stand-in for the publisher of an rclpy without matched events (Humble): none is installed here."""

    def __init__(self) -> None:
        self.asked = 0

    def get_subscription_count(self) -> int:
        self.asked += 1
        return 2


class _NodeWithoutEvents:
    def create_lifecycle_publisher(self, *_args, **kwargs):
        assert "event_callbacks" not in kwargs
        return _CountingPublisher()


def test_listened_asks_the_publisher_without_matched_events(monkeypatch):
    from lowrl_ros.ros import robot_outputs

    monkeypatch.setattr(robot_outputs, "PublisherEventCallbacks", None)
    listened = robot_outputs.Listened(_NodeWithoutEvents(), Float64MultiArray, "t", STATS)
    assert not listened.from_events
    assert listened.count() == 2 and listened.count() == 2 and listened.publisher.asked == 2
    listened.refresh()  # nothing kept, nothing to refresh
    assert listened.publisher.asked == 2
