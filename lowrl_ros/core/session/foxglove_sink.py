"""A Foxglove WebSocket server for a session's topics (foxglove-sdk; no ROS: it takes CDR bytes).

Each topic is a channel with ``message_encoding="cdr"`` and a ``ros2msg`` schema (the ROS 2 message
definition, lowrl_ros/core/session/recording.py ``message_definition``), as foxglove_bridge serves them,
so Foxglove decodes them as ROS messages (its Diagnostics panel needs diagnostic_msgs/DiagnosticArray).
The server runs on foxglove-sdk's own (Rust) threads: ``log`` copies the bytes into each subscribed
client's queue of at most ``BACKLOG`` messages and returns; a slow client loses its oldest messages,
a client that connects and goes away costs nothing after it left.
"""
from __future__ import annotations

BACKLOG = 256  # messages queued per Foxglove client before the oldest are dropped for it


class FoxgloveSink:
    """A Foxglove WebSocket server with one ``cdr``/``ros2msg`` channel per topic."""

    def __init__(self, topics: dict[str, str], definitions: dict[str, str], host: str, port: int,
                 name: str = "lowrl_ros") -> None:
        import foxglove

        self.context = foxglove.Context()
        self.channels = {
            topic: foxglove.Channel(topic, message_encoding="cdr", context=self.context,
                                    schema=foxglove.Schema(name=kind, encoding="ros2msg",
                                                           data=definitions[kind].encode()))
            for topic, kind in topics.items()}
        self.server = foxglove.start_server(name=name, host=host, port=port, context=self.context,
                                            message_backlog_size=BACKLOG)

    @property
    def port(self) -> int:
        return self.server.port

    def __call__(self, topic: str, data: bytes, t_ns: int) -> None:
        channel = self.channels[topic]
        if channel.has_sinks():  # nobody subscribed: not even a copy into Rust
            channel.log(data, log_time=t_ns)

    def close(self) -> None:
        self.server.stop()
