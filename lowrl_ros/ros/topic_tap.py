"""Raw subscriptions to a session's topics (lowrl_ros/core/session/recording.py), for watchers.

A tap hands each message on as the CDR bytes the publisher sent (``raw=True``: rclpy does not
deserialize it), with its absolute topic and the receive time, to ``sink(topic, data, t_ns)``: the
MCAP recorder and the Foxglove server both take those bytes as they are. Robot topics pass a
``RateCap`` first. Every subscription is one a publisher never waits on: best effort for the robot's
topics, reliable KEEP_LAST for the rest (DDS drops the oldest for a slow reader, never blocks the writer).
"""
from __future__ import annotations

import importlib
import time
from typing import Callable, Iterable

from rclpy.qos import QoSProfile, ReliabilityPolicy

from lowrl_ros.core.session.recording import RateCap, TopicSpec, resolve
from lowrl_ros.ros import qos as qos_profiles

Sink = Callable[[str, bytes, int], None]
SENSOR = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)  # matches best-effort and reliable publishers
EVENTS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)  # /diagnostics: several nodes at 1 Hz


def message_class(type_name: str) -> type:
    """``pkg/msg/Type`` -> the rclpy message class."""
    pkg, sub, name = type_name.split("/")
    return getattr(importlib.import_module(f"{pkg}.{sub}"), name)


def profile(name: str) -> QoSProfile:
    return {"SENSOR": SENSOR, "EVENTS": EVENTS}.get(name) or getattr(qos_profiles, name)


class TopicTap:
    """Subscribes ``node`` to ``topics`` (names resolved under the node's namespace) and feeds ``sinks``.

    Args:
        node: the rclpy node that owns the subscriptions.
        topics: what to take (``TopicSpec``s).
        sinks: called with (absolute topic, CDR bytes, receive time in ns) for each message let through.
        robot_rate_hz: the cap on robot topics (``TopicSpec.robot``); 0 lets all through.
    """

    def __init__(self, node, topics: Iterable[TopicSpec], sinks: list[Sink], robot_rate_hz: float = 10.0) -> None:
        self.sinks = sinks
        self.topics: dict[str, TopicSpec] = {}
        self.counts: dict[str, int] = {}
        self._caps: dict[str, RateCap] = {}
        namespace = node.get_namespace()
        for spec in topics:
            topic = resolve(spec.name, namespace)
            self.topics[topic] = spec
            self.counts[topic] = 0
            cap = RateCap(robot_rate_hz if spec.robot else 0.0)
            node.create_subscription(message_class(spec.type), topic,
                                     lambda data, t=topic, c=cap: self._on(t, c, data), profile(spec.qos), raw=True)

    def _on(self, topic: str, cap: RateCap, data: bytes) -> None:
        now = time.time_ns()
        if not cap.admit(now):
            return
        self.counts[topic] += 1
        for sink in self.sinks:
            sink(topic, data, now)
