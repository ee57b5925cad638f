"""The monitor's ROS side: subscribe to what the lowrl nodes publish, decode, feed the monitor model.

Used by ``lowrl top`` and the rqt plugin (lowrl_ros/rqt/). Robot namespaces are discovered from the
graph (a ``<ns>/lowrl/policy/stats``, ``<ns>/lowrl/compute_tier`` or ``<ns>/lowrl/episode`` topic, and
the namespace in front of a ``lowrl/...`` diagnostic name), once a second.

The robot never waits for a viewer: the high-rate streams (stats, step rows, episodes) are taken
best effort with a depth of 1, so a slow or vanished viewer costs a publisher no resends or
acknowledgements; the latched tier and /diagnostics (1 Hz) keep the nodes' reliable profiles.
Decoding is the model's (core/monitor/model.py); this module only converts messages.
"""
from __future__ import annotations

from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Bool, Empty, Float64MultiArray, UInt8

from lowrl_ros.core.monitor.model import MonitorModel, split_name
from lowrl_ros.ros.diagnostics import level_of
from lowrl_ros.ros.qos import LATCHED
from lowrl_ros.ros.robot_outputs import ESTOP_QOS

# Never asks a publisher for a resend, keeps only the newest sample.
VIEWER = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.BEST_EFFORT,
                    durability=DurabilityPolicy.VOLATILE)
# The robot topics a namespace is recognised by (and subscribed to): suffix -> (type, QoS, feed).
_TOPICS = {
    "lowrl/policy/stats": (Float64MultiArray, VIEWER, "stats"),
    "lowrl/policy/step": (Float64MultiArray, VIEWER, "step"),
    "lowrl/compute_tier": (UInt8, LATCHED, "tier"),
    "lowrl/episode": (Float64MultiArray, VIEWER, "episode"),
}


def namespace_of(topic: str, suffix: str) -> str | None:
    """``/r1`` for ``/r1/<suffix>``, ``/`` for ``/<suffix>``, None for another topic."""
    if topic != "/" + suffix and not topic.endswith("/" + suffix):
        return None
    return "/" + topic[: -len(suffix)].strip("/")


def resolve(ns: str, topic: str) -> str:
    """A robot-file topic as the policy node in ``ns`` resolves it (relative names go under the namespace)."""
    if topic.startswith("/"):
        return topic
    return f"/{ns.strip('/')}/{topic}".replace("//", "/")


class MonitorListener:
    """Feeds ``model`` from a node of its own, created on ``context``; spin :attr:`node` to run it.

    Args:
        model: the monitor model fed.
        namespace: watch only this robot namespace (None: every one found).
        context: the rclpy context (None: the default one).
        node: an existing node to subscribe on (rqt_gui_py's ``context.node``, spun by rqt); None: one of
            its own, named ``node_name``, which the caller spins and :meth:`close` destroys.
    """

    def __init__(self, model: MonitorModel, namespace: str | None = None, context: Any = None,
                 node_name: str = "lowrl_monitor", node: Any = None) -> None:
        import rclpy

        self.model = model
        self.only = None if namespace is None else "/" + namespace.strip("/")
        self._own = node is None
        self.node = rclpy.create_node(node_name, context=context, start_parameter_services=False) if node is None \
            else node
        self._subscribed: set[str] = set()  # full topic names
        self._publishers: dict[tuple[str, type], Any] = {}
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 50)
        self.node.create_timer(1.0, self.discover)
        self.discover()

    def _wanted(self, ns: str) -> bool:
        return self.only is None or ns == self.only

    def discover(self) -> None:
        """Subscribe to the lowrl topics of every robot namespace in the graph not subscribed yet."""
        for topic, _types in self.node.get_topic_names_and_types():
            if topic in self._subscribed:
                continue
            for suffix, (msg_type, qos, feed) in _TOPICS.items():
                ns = namespace_of(topic, suffix)
                if ns is not None and self._wanted(ns):
                    self.node.create_subscription(msg_type, topic, self._feed(feed, ns), qos)
                    self._subscribed.add(topic)
        for ns in filter(self._wanted, self.model.namespaces()):  # matched before a button is pressed
            snap = self.model.snapshot(ns)
            self._publisher(resolve(ns, snap.estop_topic), Bool)
            self._publisher(resolve(ns, snap.estop_reset_topic), Empty)

    def _feed(self, kind: str, ns: str):
        m = self.model
        if kind == "stats":
            return lambda msg: m.on_stats(ns, msg.data)
        if kind == "step":
            return lambda msg: m.on_step(ns, msg.data)
        if kind == "episode":
            return lambda msg: m.on_episode(ns, msg.data)
        return lambda msg: m.on_tier(ns, int(msg.data))

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for s in msg.status:
            ns, name = split_name(s.name)
            if name.startswith("lowrl/") and self._wanted(ns):
                self.model.on_status(ns, name, level_of(s), s.message, {kv.key: kv.value for kv in s.values})

    # ---- the e-stop buttons -------------------------------------------------------------------
    def _publisher(self, topic: str, msg_type: type):
        key = (topic, msg_type)
        if key not in self._publishers:
            self._publishers[key] = self.node.create_publisher(msg_type, topic, ESTOP_QOS)
        return self._publishers[key]

    def estop(self, ns: str) -> str:
        """Assert the e-stop of the robot in ``ns`` (std_msgs/Bool true on its robot file's ``estop_topic``)."""
        topic = resolve(ns, self.model.snapshot(ns).estop_topic)
        self._publisher(topic, Bool).publish(Bool(data=True))
        return topic

    def estop_reset(self, ns: str) -> str:
        """Release the e-stop (false on ``estop_topic``), then ask for a reset (Empty on ``reset_topic``):
        the policy node refuses a reset while the e-stop still reads true."""
        snap = self.model.snapshot(ns)
        topic = resolve(ns, snap.estop_topic)
        self._publisher(topic, Bool).publish(Bool(data=False))
        reset = resolve(ns, snap.estop_reset_topic)
        self._publisher(reset, Empty).publish(Empty())
        return reset

    def close(self) -> None:
        """Destroy the node if it is this listener's own (rqt's is rqt's)."""
        if self._own:
            self.node.destroy_node()
