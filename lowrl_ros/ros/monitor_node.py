"""Watch a robot's session from beside it: a Foxglove WebSocket server and/or an MCAP recording.

One process of its own (``lowrl monitor --foxglove``, ``lowrl launch robot.launch.yaml foxglove:=true
record:=FILE.mcap``), so nothing it does (a slow viewer, a disk) can hold up the policy node: it
only subscribes (lowrl_ros/ros/topic_tap.py: raw CDR bytes, publishers never wait on it).

Foxglove: each topic is a channel with its ROS 2 message definition as a ``ros2msg`` schema and the
publisher's CDR bytes as ``cdr`` messages, which is what foxglove_bridge serves. So Foxglove decodes
them as ROS messages: its Diagnostics panel reads /diagnostics as a DiagnosticArray, its Plot panel
takes ``/lowrl/policy/stats.data[3]`` or ``/joint_states.position[0]``, and no byte is re-encoded
here (a JSON schema would mean deserializing and re-encoding every message in Python). The server
(lowrl_ros/core/session/foxglove_sink.py) drops for a slow client instead of waiting for it.

Recording: lowrl_ros/core/session/recording.py ``McapSessionWriter`` (ros2 profile, rotated by size).

The log says when each topic's first message arrives (``taking /joint_states (0.4 s after start)``): DDS discovery
can take seconds, and a topic that never appears there is not reaching this process.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from rclpy.node import Node

from lowrl_ros.core.session.foxglove_sink import FoxgloveSink
from lowrl_ros.core.session.recording import McapSessionWriter, MonitorConfig, message_definition, share_dirs
from lowrl_ros.ros.params import config_from_params, declare_config
from lowrl_ros.ros.spinning import make_executor, run_node
from lowrl_ros.ros.topic_tap import TopicTap

class MonitorNode(Node):
    """Subscribes to the session's topics and serves/records them (see the module docstring)."""

    def __init__(self, **kwargs) -> None:
        super().__init__("lowrl_monitor", **kwargs)
        declare_config(self, MonitorConfig)
        self.config: MonitorConfig = config_from_params(self, MonitorConfig)
        specs = self.config.topics()
        dirs = share_dirs()
        definitions = {s.type: message_definition(s.type, dirs) for s in specs}
        sinks = []
        self.recorder: McapSessionWriter | None = None
        self.foxglove: FoxgloveSink | None = None
        # The tap resolves names under this node's namespace; build it first, then the sinks that use them.
        self._started = time.monotonic()
        self.tap = TopicTap(self, specs, sinks, self.config.robot_rate_hz, self.config.poll_hz, self._first)
        if self.config.record_path:
            self.recorder = McapSessionWriter(Path(self.config.record_path).expanduser(), definitions,
                                              max_bytes=int(self.config.record_max_mb * 1e6))
            for topic, spec in self.tap.topics.items():
                self.recorder.add_channel(topic, spec.type, spec.qos)
            sinks.append(self.recorder.write)
            self.get_logger().info(f"recording to {self.recorder.path} (rotated at {self.config.record_max_mb:g} MB)")
        if self.config.foxglove:
            self.foxglove = FoxgloveSink({t: s.type for t, s in self.tap.topics.items()}, definitions,
                                         self.config.foxglove_host, self.config.foxglove_port)
            sinks.append(self.foxglove)
            self.get_logger().info(f"Foxglove: ws://{self.config.foxglove_host}:{self.foxglove.port} "
                                   f"({len(self.tap.topics)} topics; layout config/foxglove_layout.json)")

    def _first(self, topic: str) -> None:
        # DDS discovery can take seconds (a missed announcement waits for the next one): say when each topic flows
        self.get_logger().info(f"taking {topic} ({time.monotonic() - self._started:.1f} s after start)")

    def close(self) -> None:
        self.tap.destroy()
        if self.foxglove is not None:
            self.foxglove.close()
        if self.recorder is not None:
            self.recorder.close()


def _make_node() -> MonitorNode:
    try:
        return MonitorNode()
    except FileNotFoundError as exc:  # a message definition not installed: a configuration error too
        raise ValueError(str(exc)) from exc


def main(args: list[str] | None = None) -> int:
    # Single-threaded: the EventsExecutor burns a share of a core with nothing to do (budget_monitor_node).
    return run_node("monitor_node", _make_node, args=args, make_executor_fn=lambda _node: make_executor(events=False))


if __name__ == "__main__":
    sys.exit(main())
