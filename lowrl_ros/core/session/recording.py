"""What a session records and serves to a viewer, at which rate, and the MCAP file it goes to (no ROS).

One table (``SESSION_TOPICS``) says, per topic, its ROS 2 type, how a watcher subscribes (a QoS
name of lowrl_ros/ros/qos.py) and its rate cap. Both the Foxglove server and the MCAP recorder
(lowrl_ros/ros/monitor_node.py, and the demo's recorder) take the same raw CDR bytes the robot
published: nothing is deserialized or re-encoded, so a message costs the watcher one copy, and the
file and the viewer show the robot's own messages with their ROS 2 schemas.

Rates, decided per topic (docs/monitoring_foxglove.md):

- the lowrl topics, /diagnostics and the episode signals are the session's data: their natural rate
  (the step row at the control rate is what the fine-tuner learns from; a report needs every one);
- the robot's joint states, IMU and commands only when asked (``robot_topics``), then capped at
  ``robot_rate_hz`` (default 10 Hz): the step row already carries the observation, the action and the
  command of every tick, so the raw robot topics are for plots only. Off by default because the cap
  cannot stop DDS from handing the watcher every sample: a 1 kHz joint_state_broadcaster alone costs
  the watcher ~1.4 % of a core (bench_results/loop/monitoring.md), more than the rest of monitoring.

The file follows the MCAP ``ros2`` profile as rosbag2_storage_mcap writes and reads it: profile
``ros2``, schema encoding ``ros2msg`` (the .msg text with each dependency after a ``====`` line and
``MSG: pkg/Type``), schema name ``pkg/msg/Type``, message encoding ``cdr``, absolute topic names and
each channel's ``offered_qos_profiles`` metadata. So ``ros2 bag info/play``, the mcap and
mcap-ros2 readers and Foxglove open it. A size cap rotates it: ``session.mcap`` grows to
``max_bytes``, then ``session_001.mcap``, ``session_002.mcap``, ... each a complete, indexed file.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from lowrl_ros.core.config import field, require

ROS2MSG_SEPARATOR = "=" * 80
PRIMITIVES = {"bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32",
              "uint32", "int64", "uint64", "string", "wstring"}
_ARRAY = re.compile(r"\[[^\]]*\]$")
_BOUND = re.compile(r"<=\d+$")


@dataclass(frozen=True)
class TopicSpec:
    """One topic a session records and serves.

    Attributes:
        name: relative to the robot's namespace (``lowrl/policy/stats``) or absolute (``/diagnostics``).
        type: the ROS 2 type, ``pkg/msg/Type``.
        qos: how a watcher subscribes, a profile name of lowrl_ros/ros/qos.py: ``LATCHED`` to get the
            current value on joining, ``RECORD``/``STATS``/``EVENTS`` reliable (nothing lost at natural
            rate), ``SENSOR`` best effort (the robot's own topics, whatever their publisher offers).
        robot: a robot topic (capped at ``robot_rate_hz``) rather than a session data topic.
    """

    name: str
    type: str
    qos: str
    robot: bool = False


SESSION_TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec("lowrl/policy/step", "std_msgs/msg/Float64MultiArray", "RECORD"),
    TopicSpec("lowrl/policy/stats", "std_msgs/msg/Float64MultiArray", "STATS"),
    TopicSpec("lowrl/policy/latency_us", "std_msgs/msg/Float64", "STATS"),
    TopicSpec("lowrl/compute_tier", "std_msgs/msg/UInt8", "LATCHED"),
    TopicSpec("lowrl/policy_bundle", "std_msgs/msg/UInt8MultiArray", "LATCHED"),
    TopicSpec("lowrl/policy_bundle/status", "std_msgs/msg/String", "STATS"),
    TopicSpec("lowrl/reward", "std_msgs/msg/Float64", "RECORD"),
    TopicSpec("lowrl/episode", "std_msgs/msg/Float64MultiArray", "STATS"),
    TopicSpec("lowrl/episode_return", "std_msgs/msg/Float64", "STATS"),
    TopicSpec("/diagnostics", "diagnostic_msgs/msg/DiagnosticArray", "EVENTS"),
)


@dataclass(frozen=True)
class MonitorConfig:
    """The monitor node's parameters (lowrl_ros/ros/monitor_node.py; `lowrl monitor` flags)."""

    foxglove: bool = field(False, "serve a Foxglove WebSocket server (ws://HOST:PORT)")
    foxglove_host: str = field("0.0.0.0", "address the Foxglove server binds (127.0.0.1: this machine only)")
    foxglove_port: int = field(8765, "the Foxglove server's port (0: any free port, printed at start)",
                               range=(0, 65535))
    record_path: str = field("", "write the session to this MCAP file (rotated beside it); '' records nothing")
    record_max_mb: int = field(512, "size after which the MCAP file rotates (file_001.mcap, ...); 0 never",
                               range=(0, 1000000))
    robot_topics: bool = field(False, "also take the robot's joint states, IMU and commands (capped at "
                               "robot_rate_hz); off by default: DDS hands this process every sample of a 1 kHz "
                               "joint state (~2 % of a core) and the step row already carries every tick")
    robot_rate_hz: float = field(10.0, "cap on the robot's joint states, IMU and commands (0: their own rate); "
                                 "the step row carries every tick", range=(0.0, 1000.0))
    poll_hz: float = field(2.0, "how often the monitor takes what waits in its readers (at least robot_rate_hz "
                           "with robot_topics): a viewer sees data up to 1/poll_hz late; each take costs Python time "
                           "(10 Hz: ~1 % of a core)", range=(0.5, 100.0))
    joint_states_topic: str = field("joint_states", "the robot's sensor_msgs/JointState ('' leaves it out)")
    imu_topic: str = field("imu", "the robot's sensor_msgs/Imu ('' leaves it out)")
    commands_topic: str = field("forward_command_controller/commands", "the policy's commands ('' leaves them out)")

    def __post_init__(self) -> None:
        require(self.foxglove or self.record_path, "neither foxglove nor record_path is set: nothing to do; "
                "set foxglove:=true and/or record_path:=FILE.mcap", owner="monitor")
        require(self.robot_rate_hz >= 0 and self.record_max_mb >= 0, "robot_rate_hz and record_max_mb are >= 0",
                owner="monitor")

    def topics(self) -> tuple[TopicSpec, ...]:
        if not self.robot_topics:
            return SESSION_TOPICS
        return SESSION_TOPICS + robot_topics(self.joint_states_topic, self.imu_topic, self.commands_topic)


def robot_topics(joint_states: str = "joint_states", imu: str = "imu",
                 commands: str = "forward_command_controller/commands",
                 observation: str = "lowrl/observation") -> tuple[TopicSpec, ...]:
    """The robot's own topics (names as the launch file remaps them; "" leaves one out)."""
    table = ((joint_states, "sensor_msgs/msg/JointState"), (imu, "sensor_msgs/msg/Imu"),
             (commands, "std_msgs/msg/Float64MultiArray"), (observation, "std_msgs/msg/Float32MultiArray"))
    return tuple(TopicSpec(name, kind, "SENSOR", robot=True) for name, kind in table if name)


def resolve(name: str, namespace: str) -> str:
    """The absolute topic name of ``name`` under ``namespace`` (ROS's rule for relative names)."""
    if name.startswith("/"):
        return name
    ns = namespace.strip("/")
    return f"/{ns}/{name}" if ns else f"/{name}"


class RateCap:
    """Lets a message through when at least ``1 / hz`` has passed since the last one let through.

    ``hz <= 0`` lets everything through. The first message always passes; the clock is the caller's
    (nanoseconds), so it is tested without waiting.
    """

    def __init__(self, hz: float) -> None:
        self.period_ns = int(1e9 / hz) if hz > 0 else 0
        self._next_ns: int | None = None

    def admit(self, now_ns: int) -> bool:
        if self.period_ns == 0:
            return True
        if self._next_ns is not None and now_ns < self._next_ns:
            return False
        # Next slot from the due time, not from now, so jitter does not lower the rate; after a gap
        # (now far past the slot) restart from now instead of bursting to catch up.
        due = self._next_ns if self._next_ns is not None and now_ns - self._next_ns < self.period_ns else now_ns
        self._next_ns = due + self.period_ns
        return True


def _field_type(line: str) -> str | None:
    """The (non-primitive) type a .msg line refers to, or None (a comment, a constant of a primitive...)."""
    line = line.split("#", 1)[0].strip()
    if not line:
        return None
    kind = _BOUND.sub("", _ARRAY.sub("", line.split()[0]))
    return None if kind in PRIMITIVES else kind


def message_definition(type_name: str, share_dirs: Iterable[str | Path]) -> str:
    """The ros2msg schema text of ``pkg/msg/Type``: its .msg file, then each dependency (depth first,
    once) after a separator line and ``MSG: pkg/Type``, as rosbag2 and Foxglove expect.

    Args:
        type_name: ``pkg/msg/Type``.
        share_dirs: where ``PKG/msg/TYPE.msg`` files are installed (``<prefix>/share`` of each
            ROS prefix: AMENT_PREFIX_PATH, or the Python environment's ``share`` for the PyPI wheels).
    Raises:
        FileNotFoundError: naming the .msg file and where it was looked for.
    """
    dirs = [Path(d) for d in share_dirs]

    def text_of(pkg: str, kind: str) -> str:
        for d in dirs:
            path = d / pkg / "msg" / f"{kind}.msg"
            if path.is_file():
                return path.read_text()
        raise FileNotFoundError(f"{pkg}/msg/{kind}.msg not found under {', '.join(map(str, dirs)) or 'nothing'}; "
                                "install the message package or source its workspace")

    pkg, _, kind = type_name.split("/")
    root = text_of(pkg, kind)
    parts, seen = [root.rstrip("\n")], {f"{pkg}/{kind}"}

    def walk(text: str, package: str) -> None:
        for line in text.splitlines():
            ref = _field_type(line)
            if ref is None:
                continue
            if "/" in ref:  # pkg/Type (pkg/msg/Type in some files)
                dep_pkg, dep = ref.split("/")[0], ref.split("/")[-1]
            else:  # a type of the same package; Header is std_msgs' (the .msg convention)
                dep_pkg, dep = ("std_msgs" if ref == "Header" else package), ref
            key = f"{dep_pkg}/{dep}"
            if key in seen:
                continue
            seen.add(key)
            dep_text = text_of(dep_pkg, dep)
            parts.append(f"{ROS2MSG_SEPARATOR}\nMSG: {key}\n{dep_text.rstrip(chr(10))}")
            walk(dep_text, dep_pkg)

    walk(root, pkg)
    return "\n".join(parts) + "\n"


def share_dirs() -> list[Path]:
    """Where installed ROS packages keep their .msg files: each AMENT_PREFIX_PATH entry's ``share``, and
    the Python environment's (the PyPI ROS wheels install there)."""
    import sys

    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p] + [sys.prefix]
    return [Path(p) / "share" for p in prefixes]


# rosbag2's QoS YAML (offered_qos_profiles): numeric enums, as every rosbag2 since Foxy reads them.
# (history, depth, reliability, durability): history 1 keep_last; reliability 1 reliable, 2 best effort;
# durability 1 transient_local, 2 volatile.
_QOS = {
    "LATCHED": (1, 1, 1, 1), "RECORD": (1, 200, 1, 2), "STATS": (1, 10, 1, 2), "EVENTS": (1, 50, 1, 2),
    "SENSOR": (1, 10, 2, 2),
}
_INFINITE = "    sec: 2147483647\n    nsec: 4294967295\n"


def offered_qos_yaml(qos: str) -> str:
    """The ``offered_qos_profiles`` metadata rosbag2 needs on each channel (what ``ros2 bag play`` offers)."""
    history, depth, reliability, durability = _QOS[qos]
    return (f"- history: {history}\n  depth: {depth}\n  reliability: {reliability}\n  durability: {durability}\n"
            f"  deadline:\n{_INFINITE}  lifespan:\n{_INFINITE}  liveliness: 1\n"
            f"  liveliness_lease_duration:\n{_INFINITE}  avoid_ros_namespace_conventions: false\n")


def rotated_path(path: Path, index: int) -> Path:
    """``session.mcap`` for index 0, then ``session_001.mcap``, ``session_002.mcap``, ..."""
    return path if index == 0 else path.with_name(f"{path.stem}_{index:03d}{path.suffix}")


def recorded_files(path: str | Path) -> list[Path]:
    """The files of a recording in order (the first and its rotations that exist)."""
    path = Path(path)
    out, i = [], 0
    while rotated_path(path, i).is_file():
        out.append(rotated_path(path, i))
        i += 1
    return out


class McapSessionWriter:
    """Writes raw CDR messages to a ros2-profile MCAP file, rotating it at ``max_bytes``.

    Args:
        path: the first file (``.mcap``); rotations go beside it (``rotated_path``).
        definitions: ``pkg/msg/Type`` -> ros2msg text (``message_definition``), for every type written.
        max_bytes: size after which the file is closed and the next one started (0: never); the size
            is checked after each chunk is flushed, so a file ends at most one chunk over it.
        chunk_bytes: MCAP chunk size: the unit of compression and of what a crash can lose.
    """

    def __init__(self, path: str | Path, definitions: dict[str, str], max_bytes: int = 0,
                 chunk_bytes: int = 256 * 1024) -> None:
        if max_bytes and max_bytes < 4 * chunk_bytes:
            raise ValueError(f"max_bytes {max_bytes} is below 4 chunks ({4 * chunk_bytes} B); "
                             "raise it or lower chunk_bytes")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.definitions = dict(definitions)
        self.max_bytes = int(max_bytes)
        self.chunk_bytes = int(chunk_bytes)
        self.index = 0
        self.messages = 0
        self._channels: dict[str, tuple[str, str]] = {}  # topic -> (type, qos), re-registered in each file
        self._open()

    def _open(self) -> None:
        from mcap.writer import CompressionType, Writer

        self._file = open(rotated_path(self.path, self.index), "wb")
        self._writer = Writer(self._file, chunk_size=self.chunk_bytes, compression=CompressionType.ZSTD)
        self._writer.start(profile="ros2", library="lowrl_ros session recorder")
        self._schema_ids: dict[str, int] = {}
        self._channel_ids: dict[str, int] = {}
        self._sequence = 0
        for topic, (kind, qos) in self._channels.items():
            self._register(topic, kind, qos)

    def _register(self, topic: str, kind: str, qos: str) -> int:
        if kind not in self._schema_ids:
            if kind not in self.definitions:
                raise KeyError(f"no message definition for {kind}; pass it in definitions")
            self._schema_ids[kind] = self._writer.register_schema(kind, "ros2msg", self.definitions[kind].encode())
        cid = self._writer.register_channel(topic, "cdr", self._schema_ids[kind],
                                            metadata={"offered_qos_profiles": offered_qos_yaml(qos)})
        self._channel_ids[topic] = cid
        return cid

    def add_channel(self, topic: str, kind: str, qos: str) -> None:
        """Declare an absolute ``topic`` of ``kind`` (``pkg/msg/Type``), subscribed with ``qos``."""
        if not topic.startswith("/"):
            raise ValueError(f"topic {topic!r} must be absolute (rosbag2 stores absolute names)")
        self._channels[topic] = (kind, qos)
        self._register(topic, kind, qos)

    def write(self, topic: str, data: bytes, log_time_ns: int) -> None:
        """Append one CDR message of a declared topic; rotates when the file passed ``max_bytes``."""
        self._writer.add_message(self._channel_ids[topic], log_time=log_time_ns, data=data,
                                 publish_time=log_time_ns, sequence=self._sequence)
        self._sequence += 1
        self.messages += 1
        if self.max_bytes and self._file.tell() >= self.max_bytes:
            self._close_file()
            self.index += 1
            self._open()

    def files(self) -> list[Path]:
        return [rotated_path(self.path, i) for i in range(self.index + 1)]

    def _close_file(self) -> None:
        self._writer.finish()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def close(self) -> None:
        if not self._file.closed:
            self._close_file()
