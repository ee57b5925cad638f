"""`lowrl launch demo.launch.yaml foxglove:=true record:=FILE` against a running session (process level):
a Foxglove client gets the session's topics with their schemas and decodes the same messages a plain
ROS subscriber gets, while clients come and go; after Ctrl-C the recording reads back with the mcap-ros2
decoder, the robot's joint states at no more than the 10 Hz cap. The demo launch runs no fine-tuner."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from foxglove_client import collect, connect_and_leave
from lowrl_ros.core.session.recording import recorded_files
from lowrl_ros.ros.topic_tap import profile
from rosutil import spin_until

LOWRL = [sys.executable, "-m", "lowrl_ros.cli"]
pytestmark = pytest.mark.ros


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_foxglove_and_recording_of_a_running_demo_session(ros_context, tmp_path):
    port, record = free_port(), tmp_path / "session.mcap"
    proc = subprocess.Popen(LOWRL + ["launch", "demo.launch.yaml", "foxglove:=true", f"foxglove_port:={port}",
                                     f"record:={record}", "robot_topics:=true", "--log-dir", str(tmp_path / "logs")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    node = Node("monitor_probe", context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(node)
    seen: list[tuple] = []
    # a best-effort reader with a deep queue: at depth 1 the probe lost the messages that arrived while
    # Foxglove's client held the interpreter (CI, Jazzy tier), and Foxglove then had 'extra' ones
    node.create_subscription(JointState, "/joint_states", lambda m: seen.append(tuple(m.position)),
                             profile("SENSOR", robot_rate_hz=0))
    lines: list[str] = []  # the launcher's output, read as it comes

    def read_output() -> None:
        for line in proc.stdout:
            lines.append(line)

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    recorded = ("/lowrl/policy/step", "/lowrl/policy/stats", "/diagnostics", "/joint_states")

    def recording(topic: str) -> bool:  # the recorder says when a topic's first message arrived
        return any(line.startswith("[session_recorder]") and f"taking {topic} (" in line for line in list(lines))

    try:
        assert spin_until(executor, lambda: len(seen) > 20, timeout=90), "the demo's sim robot never published"
        assert spin_until(executor, lambda: ("foxglove", "/") in node.get_node_names_and_namespaces(), timeout=60)
        url = f"ws://127.0.0.1:{port}"
        stop = threading.Event()  # the probe keeps receiving while the Foxglove client runs
        spinner = threading.Thread(
            target=lambda: [executor.spin_once(timeout_sec=0.02) for _ in iter(stop.is_set, True)])
        spinner.start()
        for _ in range(5):
            assert connect_and_leave(url) == "serverInfo"
        info, channels, got = collect(url, {"/joint_states": 3, "/lowrl/policy/stats": 2, "/diagnostics": 2,
                                            "/forward_command_controller/commands": 2}, timeout=30)
        time.sleep(0.5)  # the probe's copy of the last messages Foxglove got (no claim rests on this wait)
        stop.set()
        spinner.join(5)
        assert channels["/joint_states"]["schemaName"] == "sensor_msgs/msg/JointState"
        foxglove_joints = [tuple(deserialize_message(b, JointState).position) for b in got["/joint_states"]]
        assert len(foxglove_joints) >= 3 and set(foxglove_joints) <= set(seen)  # the very messages published
        stats = [deserialize_message(b, Float64MultiArray) for b in got["/lowrl/policy/stats"]]
        assert len(stats) >= 2 and all(len(m.data) > 3 for m in stats)
        from diagnostic_msgs.msg import DiagnosticArray
        names = {s.name for b in got["/diagnostics"] for s in deserialize_message(b, DiagnosticArray).status}
        assert any(n.startswith("lowrl/") for n in names), names
        assert got["/forward_command_controller/commands"]
        # DDS discovery can leave the recorder without a publisher for seconds: stop once it has each topic
        assert spin_until(executor, lambda: all(recording(t) for t in recorded), timeout=30), \
            [t for t in recorded if not recording(t)]
        time.sleep(0.5)  # a span of step rows for the rate check below
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        reader.join(10)
        out = "".join(lines)
    finally:
        if proc.poll() is None:  # the launcher and every node it started (its own process group)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        executor.shutdown()
        node.destroy_node()
    assert proc.returncode == 0, out[-3000:]

    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    per_topic: dict[str, list[int]] = {}
    for path in recorded_files(record):
        with open(path, "rb") as f:
            for _, channel, message, decoded in make_reader(f, decoder_factories=[DecoderFactory()]) \
                    .iter_decoded_messages():
                per_topic.setdefault(channel.topic, []).append(message.log_time)
    for topic in recorded:
        assert per_topic.get(topic), (topic, sorted(per_topic))
    times = per_topic["/joint_states"]
    span_s = (times[-1] - times[0]) / 1e9
    assert len(times) <= 10 * span_s + 2  # the sim robot publishes at 100 Hz; the recording caps it at 10 Hz
    steps = per_topic["/lowrl/policy/step"]  # the step row keeps its natural rate (the sim's 100 Hz)
    assert len(steps) > 30 * (steps[-1] - steps[0]) / 1e9 > 0
    assert Path(os.fspath(record)).stat().st_size > 0
