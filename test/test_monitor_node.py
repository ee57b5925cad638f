"""The monitor node (lowrl_ros/ros/monitor_node.py) in-process: a Foxglove client sees the session's
topics with their ROS 2 schemas and decodes the values that were published; clients that connect and
leave repeatedly do not disturb it; the MCAP it records reads back with the mcap-ros2 decoder.
A session with no fine-tuner, no IMU and no budget monitor: those channels are advertised, empty."""
from __future__ import annotations

import threading
import time

import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from foxglove_client import collect, connect_and_leave
from lowrl_ros.core.session.recording import recorded_files
from lowrl_ros.ros.monitor_node import MonitorNode
from lowrl_ros.ros.qos import STATS

pytestmark = pytest.mark.ros


class Session:
    """A publisher standing in for the robot: stats, diagnostics and joint states, published on a timer."""

    def __init__(self, context, executor) -> None:
        self.node = Node("fake_robot", context=context)
        self.stats = self.node.create_publisher(Float64MultiArray, "/lowrl/policy/stats", STATS)
        self.diag = self.node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.joints = self.node.create_publisher(JointState, "/joint_states", 10)
        self.k = 0
        self.node.create_timer(0.02, self.tick)
        executor.add_node(self.node)

    def tick(self) -> None:
        self.k += 1
        self.stats.publish(Float64MultiArray(data=[float(self.k), 2.5, 99.0]))
        status = DiagnosticStatus(level=DiagnosticStatus.OK, name="lowrl/policy/tier", message="full",
                                  values=[KeyValue(key="tier", value="full")])
        self.diag.publish(DiagnosticArray(status=[status]))
        self.joints.publish(JointState(name=["hinge"], position=[0.1 * self.k]))


@pytest.fixture
def running(ros_context, tmp_path):
    executor = SingleThreadedExecutor(context=ros_context)
    monitor = MonitorNode(context=ros_context, parameter_overrides=[
        Parameter("foxglove", value=True), Parameter("foxglove_host", value="127.0.0.1"),
        Parameter("foxglove_port", value=0), Parameter("record_path", value=str(tmp_path / "s.mcap")),
        Parameter("robot_topics", value=True)])
    executor.add_node(monitor)
    session = Session(ros_context, executor)
    stop = threading.Event()
    thread = threading.Thread(target=lambda: [executor.spin_once(timeout_sec=0.05) for _ in iter(stop.is_set, True)])
    thread.start()
    try:
        yield monitor, session
    finally:
        stop.set()
        thread.join(5)
        monitor.close()
        executor.shutdown()


def test_foxglove_client_decodes_what_was_published_and_the_recording_reads_back(running, tmp_path):
    monitor, session = running
    url = f"ws://127.0.0.1:{monitor.foxglove.port}"
    for _ in range(5):  # viewers come and go; the server and the node carry on
        assert connect_and_leave(url) == "serverInfo"
    info, channels, got = collect(url, {"/lowrl/policy/stats": 3, "/diagnostics": 2, "/joint_states": 2})
    assert info["name"] == "lowrl_ros"
    for topic, kind in [("/lowrl/policy/stats", "std_msgs/msg/Float64MultiArray"),
                        ("/diagnostics", "diagnostic_msgs/msg/DiagnosticArray"), ("/imu", "sensor_msgs/msg/Imu")]:
        ch = channels[topic]
        assert (ch["encoding"], ch["schemaName"], ch["schemaEncoding"]) == ("cdr", kind, "ros2msg")
    assert "MSG: diagnostic_msgs/KeyValue" in channels["/diagnostics"]["schema"]
    stats = [deserialize_message(b, Float64MultiArray) for b in got["/lowrl/policy/stats"]]
    assert len(stats) >= 3 and all(list(m.data)[1:] == [2.5, 99.0] for m in stats)
    ks = [m.data[0] for m in stats]
    assert ks == sorted(ks) and 0 < ks[0] <= session.k
    diag = deserialize_message(got["/diagnostics"][0], DiagnosticArray)
    assert (diag.status[0].name, diag.status[0].values[0].value) == ("lowrl/policy/tier", "full")
    joints = [deserialize_message(b, JointState) for b in got["/joint_states"]]
    assert joints[0].name == ["hinge"]
    # Joint states at 50 Hz pass the default 10 Hz cap: the tap let through about a fifth of them.
    assert monitor.tap.counts["/joint_states"] <= session.k / 5 + 2

    monitor.close()  # finish the MCAP file
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    files = recorded_files(tmp_path / "s.mcap")
    assert files == [tmp_path / "s.mcap"]
    with open(files[0], "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        assert reader.get_header().profile == "ros2"
        summary = reader.get_summary()
        qos = {c.topic: c.metadata["offered_qos_profiles"] for c in summary.channels.values()}
        assert "reliability: 2" in qos["/joint_states"] and "durability: 1" in qos["/lowrl/compute_tier"]
        recorded = [(c.topic, m) for _, c, _, m in reader.iter_decoded_messages(topics=["/lowrl/policy/stats"])]
    assert [m.data[1:] for _, m in recorded[:3]] == [[2.5, 99.0]] * 3
    assert len(recorded) >= len(stats)


def test_the_log_says_when_each_topic_starts_flowing_once(running):
    """DDS discovery can take seconds: the tap calls on_first (the monitor logs it) once per topic, on its first
    message, and never for a topic nothing reaches. The log line itself is read in test_foxglove_session.py."""
    from lowrl_ros.ros.topic_tap import TopicTap

    monitor, session = running
    firsts: list[str] = []
    tap = TopicTap(monitor, monitor.config.topics(), [], on_first=firsts.append)  # a second tap, on the spun node
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not {"/lowrl/policy/stats", "/joint_states"} <= set(firsts):
            time.sleep(0.05)
        k = session.k
        time.sleep(0.5)  # more messages of each: still one call per topic
        assert session.k > k and tap.counts["/joint_states"] > 1
        assert {"/lowrl/policy/stats", "/diagnostics", "/joint_states"} <= set(firsts)
        assert len(firsts) == len(set(firsts)) and "/imu" not in firsts  # nothing published there: nothing said
    finally:
        tap.destroy()
