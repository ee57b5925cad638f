"""The session recording's decisions (lowrl_ros/core/session/recording.py), without ROS."""
from __future__ import annotations

import os

import pytest

from lowrl_ros.core.session.recording import (
    McapSessionWriter, MonitorConfig, RateCap, message_definition, recorded_files, resolve, share_dirs)


def test_rate_cap_lets_through_at_most_its_rate_and_restarts_after_a_gap():
    cap = RateCap(10.0)
    times = [int(i * 1e9 / 1000) for i in range(1000)]  # 1 s at 1 kHz
    assert sum(cap.admit(t) for t in times) == 10
    assert cap.admit(int(5e9)) and not cap.admit(int(5e9) + 1)  # after a gap: one, not a burst
    assert all(RateCap(0).admit(t) for t in times)


def test_message_definition_lists_each_dependency_once_as_rosbag2_writes_it():
    text = message_definition("sensor_msgs/msg/JointState", share_dirs())
    assert text.startswith("# This is a message that holds data")
    assert text.count("MSG: std_msgs/Header") == 1 and text.count("MSG: builtin_interfaces/Time") == 1
    assert "=" * 80 + "\nMSG: std_msgs/Header\n" in text
    with pytest.raises(FileNotFoundError, match="no_pkg/msg/X.msg"):
        message_definition("no_pkg/msg/X", share_dirs())


def test_names_resolve_under_the_namespace():
    assert resolve("lowrl/policy/stats", "/r1") == "/r1/lowrl/policy/stats"
    assert resolve("joint_states", "/") == "/joint_states"
    assert resolve("/diagnostics", "/r1") == "/diagnostics"


def test_writer_rotates_at_the_size_cap_into_complete_files(tmp_path):
    from mcap.reader import make_reader

    kind = "std_msgs/msg/UInt8MultiArray"
    w = McapSessionWriter(tmp_path / "s.mcap", {kind: message_definition(kind, share_dirs())},
                          max_bytes=64 * 1024, chunk_bytes=16 * 1024)
    w.add_channel("/blob", kind, "STATS")
    payload = bytes(range(256)) * 16  # 4 KB, incompressible enough to need several files
    for i in range(80):
        w.write("/blob", os.urandom(4096) if i % 2 else payload, i * 1000)
    w.close()
    files = recorded_files(tmp_path / "s.mcap")
    assert files[:2] == [tmp_path / "s.mcap", tmp_path / "s_001.mcap"] and len(files) == w.index + 1 >= 3
    total = 0
    for path in files:
        assert path.stat().st_size < 64 * 1024 + 2 * 16 * 1024
        with open(path, "rb") as f:
            reader = make_reader(f)
            assert reader.get_header().profile == "ros2"
            total += sum(1 for _ in reader.iter_messages())
    assert total == 80


def test_monitor_config_refuses_nothing_to_do():
    with pytest.raises(ValueError, match="foxglove:=true"):
        MonitorConfig()
    names = [t.name for t in MonitorConfig(foxglove=True, robot_topics=True, imu_topic="").topics()]
    assert "imu" not in names and "/diagnostics" in names and "joint_states" in names
    # by default no robot topic: a 1 kHz joint state would cost the robot more than all the rest
    assert not any(t.robot for t in MonitorConfig(foxglove=True).topics())


def test_latency_cap_hands_out_the_worst_of_each_period():
    from lowrl_ros.core.runtime.policy_stats import WindowMax

    cap = WindowMax(10.0)
    out = [cap.offer(v, t / 100) for t, v in enumerate([5, 1, 1, 9, 1, 1, 1, 1, 1, 1, 2, 3, 1])]  # 100 Hz
    assert [v for v in out if v is not None] == [5, 9] and out[10] == 9  # the spike at t=0.03 is not lost
    assert [WindowMax(0).offer(v, 0.0) for v in (1.0, 2.0)] == [1.0, 2.0]
