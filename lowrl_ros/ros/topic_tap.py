"""Raw subscriptions to a session's topics (lowrl_ros/core/session/recording.py), for watchers.

A tap hands each message on as the CDR bytes the publisher sent (``raw=True``: rclpy does not
deserialize it), with its absolute topic and its DDS receive time, to ``sink(topic, data, t_ns)``: the
MCAP recorder and the Foxglove server both take those bytes as they are.

No callback per message: the subscriptions belong to a node no executor spins, and a timer of the
owning node takes what waits in them ``poll_hz`` times a second (each take of all readers costs ~1 ms of
Python: at 10 Hz ~1 % of a core, hence 2 Hz by default). A per-message Python callback is the cost to
avoid (docs/DESIGN.md: a bare subscriber to 1 kHz joint states uses ~26 % of a core): the
robot's topics keep only their newest sample in DDS (KEEP_LAST 1), so the rate cap costs nothing per
message, and the session's data topics are taken in batches (a reader queue of ``DATA_DEPTH``, their
natural rate). Every subscription is one a publisher never waits on: best effort for the robot's
topics, reliable KEEP_LAST for the rest (DDS drops the oldest for a slow reader, never blocks the writer).
"""
from __future__ import annotations

import importlib
from typing import Callable, Iterable

from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from lowrl_ros.core.session.recording import RateCap, TopicSpec, resolve
from lowrl_ros.ros import qos as qos_profiles

Sink = Callable[[str, bytes, int], None]
SENSOR = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)  # matches best-effort and reliable publishers
EVENTS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)  # /diagnostics: several nodes at 1 Hz
DATA_DEPTH = 1000  # a data topic's reader queue: 0.5 s of a 1 kHz step row between polls at 2 Hz


def message_class(type_name: str) -> type:
    """``pkg/msg/Type`` -> the rclpy message class."""
    pkg, sub, name = type_name.split("/")
    return getattr(importlib.import_module(f"{pkg}.{sub}"), name)


def profile(name: str, robot_rate_hz: float = 10.0) -> QoSProfile:
    """The tap's QoS for a TopicSpec.qos name: the shared profile with a deep reader queue, and for the robot's
    topics KEEP_LAST 1 best effort (their own rate when uncapped: a queue as deep as the data topics')."""
    if name == "SENSOR":
        return SENSOR if robot_rate_hz > 0 else QoSProfile(depth=DATA_DEPTH, reliability=ReliabilityPolicy.BEST_EFFORT)
    base = EVENTS if name == "EVENTS" else getattr(qos_profiles, name)
    if name == "LATCHED":
        return base
    return QoSProfile(history=base.history, depth=DATA_DEPTH, reliability=base.reliability, durability=base.durability)


class TopicTap:
    """Subscribes to ``topics`` (names resolved under ``node``'s namespace) and feeds ``sinks`` from a timer.

    Args:
        node: the rclpy node whose executor runs the polling timer.
        topics: what to take (``TopicSpec``s).
        sinks: called with (absolute topic, CDR bytes, DDS receive time in ns) for each message let through,
            in the order they arrived per topic.
        robot_rate_hz: the cap on robot topics (``TopicSpec.robot``); 0: their own rate.
        poll_hz: how often waiting messages are taken (at least ``robot_rate_hz`` when a robot topic is taken).
        on_first: called with the absolute topic when its first message is let through (discovery can take
            seconds: a watcher sees when each topic starts flowing).
    """

    def __init__(self, node, topics: Iterable[TopicSpec], sinks: list[Sink], robot_rate_hz: float = 10.0,
                 poll_hz: float = 2.0, on_first: Callable[[str], None] | None = None) -> None:
        self.sinks = sinks
        self.on_first = on_first
        self.topics: dict[str, TopicSpec] = {}
        self.counts: dict[str, int] = {}
        self._subs: list[tuple[str, object, RateCap]] = []
        namespace = node.get_namespace()
        # Never added to an executor: its subscriptions are only read by poll(). use_global_arguments=False: a
        # launcher's `-r __node:=NAME` would give it its node's name (two nodes of one name); the node's remaps
        # reach the topics through node.resolve_topic_name() instead.
        self.reader = Node(node.get_name() + "_tap", namespace=namespace, context=node.context,
                           use_global_arguments=False, start_parameter_services=False, enable_rosout=False)
        for spec in topics:
            topic = resolve(spec.name, namespace)
            self.topics[topic] = spec
            self.counts[topic] = 0
            sub = self.reader.create_subscription(message_class(spec.type), node.resolve_topic_name(topic),
                                                  lambda _m: None, profile(spec.qos, robot_rate_hz), raw=True)
            self._subs.append((topic, sub, RateCap(robot_rate_hz if spec.robot else 0.0)))
        robots = any(spec.robot for spec in self.topics.values())
        self._node = node
        self.timer = node.create_timer(1.0 / max(poll_hz, robot_rate_hz if robots else 0.0), self.poll)

    def poll(self) -> None:
        """Take every waiting message and hand on those the rate caps let through."""
        for topic, sub, cap in self._subs:
            with sub.handle:
                while (got := sub.handle.take_message(sub.msg_type, True)) is not None:
                    data, info = got
                    t_ns = int(info["received_timestamp"])
                    if not cap.admit(t_ns):
                        continue
                    self.counts[topic] += 1
                    if self.counts[topic] == 1 and self.on_first is not None:
                        self.on_first(topic)
                    for sink in self.sinks:
                        sink(topic, data, t_ns)

    def destroy(self) -> None:
        self._node.destroy_timer(self.timer)
        self.sinks.clear()
        self.reader.destroy_node()
