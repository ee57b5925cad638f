"""Transition log: round trip, CDR equal to rclpy's, crash (SIGKILL) mid-write, torn records, disk bounds."""
from __future__ import annotations

import dataclasses
import logging
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import mcap_ros2.reader
import numpy as np
import pytest

from lowrl_ros.core.finetune.transition_log import (
    Transition, TransitionAssembler, TransitionLogConfig, TransitionLogError, TransitionLogWriter, decode_transition,
    encode_transition, read_log,
)

REPO = Path(__file__).resolve().parents[1]


def make(i: int) -> Transition:
    """A transition whose every field encodes its index, so order and content can be checked."""
    return Transition(obs=np.array([i, i + 0.5, -i]), action=np.array([i / 7.0]), reward=-float(i),
                      next_obs=np.array([i + 1, i + 1.5, -i - 1]), terminated=i % 11 == 0, truncated=i % 13 == 0,
                      policy_version=1 + i // 50, stamp=1000.0 + i)


def check_prefix(batch, n: int) -> None:
    for i in range(n):
        expected = make(i)
        assert np.array_equal(batch.obs[i], expected.obs), i
        assert np.array_equal(batch.action[i], expected.action), i
        assert batch.reward[i] == expected.reward
        assert np.array_equal(batch.next_obs[i], expected.next_obs)
        assert batch.terminated[i] == expected.terminated and batch.truncated[i] == expected.truncated
        assert batch.policy_version[i] == expected.policy_version and batch.stamp[i] == expected.stamp


@pytest.mark.ros
def test_cdr_matches_rclpy_serialisation():
    import rclpy.serialization as rclpy_serialization  # here: the core run (-m "not ros") never imports rclpy
    from std_msgs.msg import Float64MultiArray

    payload = encode_transition(make(5))
    msg = rclpy_serialization.deserialize_message(payload, Float64MultiArray)
    assert msg.layout.dim[0].label.startswith("obs:3;action:1;reward:1;next_obs:3")
    assert list(msg.data)[:3] == [5.0, 5.5, -5.0]
    # And ours decodes rclpy's bytes (compared by value: CDR padding bytes are unspecified).
    back = decode_transition(rclpy_serialization.serialize_message(msg))
    assert back.policy_version == 1 and back.reward == -5.0 and back.obs.tolist() == [5.0, 5.5, -5.0]
    assert back.terminated is False and back.truncated is False and back.stamp == 1005.0


def test_round_trip_and_files_are_standard_mcap(tmp_path):
    writer = TransitionLogWriter(tmp_path, TransitionLogConfig(segment_transitions=40))
    for i in range(100):
        assert writer.append(make(i)) == i + 1
    writer.close()
    batch, report = read_log(tmp_path)
    assert len(batch) == report.transitions == 100
    assert report.segments == report.complete_segments == 3 and report.from_wal == 0
    check_prefix(batch, 100)
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".mcap"] * 3
    # A third-party ROS 2 decoder reads the files (what Foxglove and rosbag2 tools rely on).
    msgs = list(mcap_ros2.reader.read_ros2_messages(str(tmp_path / "transitions_000001.mcap")))
    assert len(msgs) == 40 and msgs[0].channel.topic == "/lowrl/transitions"
    assert list(msgs[3].ros_msg.data)[:3] == [3.0, 3.5, -3.0]


def test_the_command_sent_is_logged_with_the_reward_terms_and_read_back_as_a_column(tmp_path):
    writer = TransitionLogWriter(tmp_path, TransitionLogConfig(segment_transitions=4))
    for i in range(6):
        writer.append(dataclasses.replace(make(i), reward_terms=(float(i), -1.0), command=np.array([i, 2.0 * i])))
    writer.close()
    batch, _ = read_log(tmp_path)
    np.testing.assert_array_equal(batch.command, [[i, 2.0 * i] for i in range(6)])
    assert batch.row(5).command.tolist() == [5.0, 10.0] and batch.row(5).reward_terms == (5.0, -1.0)
    msgs = list(mcap_ros2.reader.read_ros2_messages(str(tmp_path / "transitions_000001.mcap")))
    assert msgs[1].ros_msg.layout.dim[0].label.endswith(";intervention:1;reward_terms:2;command:2")
    # a log without commands reads as before: no command column
    plain = tmp_path / "plain"
    writer = TransitionLogWriter(plain, TransitionLogConfig())
    writer.append(make(0))
    writer.close()
    assert read_log(plain)[0].command is None and read_log(plain)[0].row(0).command is None


def test_reopening_continues_after_the_last_segment(tmp_path):
    w = TransitionLogWriter(tmp_path, TransitionLogConfig(segment_transitions=10))
    for i in range(15):
        w.append(make(i))
    w.close()
    w = TransitionLogWriter(tmp_path, TransitionLogConfig(segment_transitions=10))
    for i in range(15, 22):
        w.append(make(i))
    w.close()
    batch, report = read_log(tmp_path)
    assert len(batch) == 22 and report.segments == 3
    check_prefix(batch, 22)


CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, {test_dir!r})
    from test_transition_log import make
    from lowrl_ros.core.finetune.transition_log import TransitionLogConfig, TransitionLogWriter
    w = TransitionLogWriter({log_dir!r}, TransitionLogConfig(segment_transitions=64, chunk_bytes=4096,
                                                            fsync_interval_s=10.0))
    i = 0
    while True:
        n = w.append(make(i))
        i += 1
        print(n, flush=True)  # 'reported as written' only after append returned
""")


def test_sigkill_mid_write_loses_nothing_reported(tmp_path):
    log_dir = tmp_path / "log"
    code = CHILD.format(test_dir=str(Path(__file__).parent), log_dir=str(log_dir))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=REPO, text=True)
    reported = 0
    deadline = time.monotonic() + 60
    try:
        # Kill it well inside a segment (not at a boundary) after a few segments were closed.
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            reported = int(line)
            if reported >= 64 * 3 + 37:
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(10)
    assert reported >= 64 * 3 + 37, "the writer did not get going"
    assert any(p.suffix == ".wal" for p in log_dir.iterdir()), "the open segment's WAL should be left behind"

    batch, report = read_log(log_dir)  # read-only: nothing repaired yet
    assert report.transitions >= reported
    assert report.from_wal == 1 and report.truncated_segments == 0 and not report.problems
    check_prefix(batch, len(batch))  # in order, no corrupt record

    # Re-opening repairs: the WAL becomes a complete MCAP, and writing continues after it.
    writer = TransitionLogWriter(log_dir, TransitionLogConfig(segment_transitions=64))
    assert writer.repaired >= 37
    n = len(batch)
    for i in range(n, n + 5):
        writer.append(make(i))
    writer.close()
    batch2, report2 = read_log(log_dir)
    assert report2.transitions == n + 5 and report2.complete_segments == report2.segments
    check_prefix(batch2, n + 5)


def test_torn_last_record_is_dropped_and_reported(tmp_path):
    w = TransitionLogWriter(tmp_path, TransitionLogConfig(segment_transitions=1000))
    for i in range(10):
        w.append(make(i))
    wal = next(tmp_path.glob("*.wal"))
    with wal.open("ab") as f:  # a record header and half its payload: the process died mid-write
        f.write(wal.read_bytes()[10:10 + 16 + 50])
    batch, report = read_log(tmp_path)
    assert len(batch) == 10 and report.torn_bytes == 66
    check_prefix(batch, 10)
    # A flipped byte inside a record stops the read at that record (CRC), never returns garbage.
    blob = bytearray(wal.read_bytes())
    blob[10 + 16 + 5 * (16 + len(encode_transition(make(0))))] ^= 0xFF
    wal.write_bytes(bytes(blob))
    batch, report = read_log(tmp_path)
    assert len(batch) == 5
    check_prefix(batch, 5)


def test_truncated_mcap_without_wal_reads_whole_chunks(tmp_path):
    w = TransitionLogWriter(tmp_path, TransitionLogConfig(segment_transitions=200, chunk_bytes=2048))
    for i in range(200):
        w.append(make(i))
    w.close()
    path = next(tmp_path.glob("*.mcap"))
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])
    batch, report = read_log(tmp_path)
    assert report.truncated_segments == 1 and report.problems
    assert 0 < len(batch) < 200
    check_prefix(batch, len(batch))


def test_disk_is_bounded_oldest_dropped_with_a_log_line(tmp_path, caplog):
    cfg = TransitionLogConfig(segment_transitions=5, max_files=3)
    with caplog.at_level(logging.WARNING, logger="lowrl.transition_log"):
        w = TransitionLogWriter(tmp_path, cfg)
        for i in range(40):
            w.append(make(i))
        w.close()
    assert len(list(tmp_path.iterdir())) == 3 and w.dropped_segments == 5
    assert any("deleted the oldest segment" in r.message for r in caplog.records)
    batch, _ = read_log(tmp_path)
    assert batch.reward.tolist() == [-float(i) for i in range(25, 40)]  # the newest are kept
    # byte bound
    other = tmp_path / "bytes"
    w = TransitionLogWriter(other, TransitionLogConfig(segment_transitions=100, max_bytes=65536, compression="none"))
    for i in range(2000):
        w.append(make(i))
    w.close()
    assert sum(p.stat().st_size for p in other.iterdir()) <= 65536


@pytest.mark.parametrize("kwargs", [dict(segment_transitions=0), dict(compression="gzip"), dict(max_files=1),
                                    dict(fsync_interval_s=-1.0), dict(segment_seconds=0.0)])
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match="must|unknown"):
        TransitionLogConfig(**kwargs)


def test_missing_directory_and_mixed_sizes(tmp_path):
    with pytest.raises(TransitionLogError, match="does not exist"):
        read_log(tmp_path / "nope")
    w = TransitionLogWriter(tmp_path)
    w.append(make(0))
    w.append(Transition(np.zeros(2), np.zeros(1), 0.0, np.zeros(2), False, False, 1, 0.0))
    w.close()
    with pytest.raises(TransitionLogError, match="mixes"):
        read_log(tmp_path)
    with pytest.raises(TransitionLogError, match="next_obs"):
        encode_transition(Transition(np.zeros(2), np.zeros(1), 0.0, np.zeros(3), False, False, 1, 0.0))


def feed_robot(asm: TransitionAssembler, steps: int, *, lose_reward_at=(), lose_obs_at=(), end_at=(),
               arrival_shuffle: bool = False, dt: float = 0.01):
    """Messages as the sim robot and the policy node send them: reward r(k-1) [end], obs(k), command(k).

    Send times follow that order; with ``arrival_shuffle`` each step's messages are handed over in
    reverse order (what DDS may do across publishers): only the send times keep the truth.
    """
    out = []
    for k in range(steps):
        t = 1.0 + k * dt
        events = []
        if k > 0 and k - 1 not in lose_reward_at:
            events.append(lambda k=k, t=t: asm.reward(-(k - 1), t - 0.0002, now=t))
        if k - 1 in end_at:
            events.append(lambda t=t: asm.episode_end("truncated", t - 0.0001))
        if k not in lose_obs_at:
            events.append(lambda k=k, t=t: asm.observation([k, 0.0], t, version=7, now=t))
        events.append(lambda k=k, t=t: asm.command([k / 10], t + 0.001, now=t))
        for e in reversed(events) if arrival_shuffle else events:
            out += e() or []
    return out


def test_assembler_pairs_steps_by_send_time():
    asm = TransitionAssembler()
    asm.reward(99.0, 0.5)  # sent before the first observation: a step we never saw
    out = feed_robot(asm, 7, end_at={2})
    # Step 5 (obs 5 -> 6) waits for a reward sent after obs 6 (the next step's) to be sealed.
    assert [t.obs[0] for t in out] == [0, 1, 2, 3, 4]
    assert [t.reward for t in out] == [0, -1, -2, -3, -4]
    assert [t.action[0] for t in out] == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert [t.next_obs[0] for t in out] == [1, 2, 3, 4, 5]
    assert [t.truncated for t in out] == [False, False, True, False, False] and not any(t.terminated for t in out)
    # A command that arrives after the next observation (another publisher) is still step k's.
    late = TransitionAssembler()
    got = late.observation([0, 0.0], 1.00, version=1, now=1.00)
    got += late.observation([1, 0.0], 1.01, version=1, now=1.01)
    got += late.command([0.5], 1.001, now=1.012)  # sent between obs 0 and obs 1, arrived after obs 1
    got += late.reward(-9.0, 1.0098, now=1.013)
    got += late.reward(-10.0, 1.0198, now=1.02)
    assert got == []  # no command sent after obs 1 has arrived yet: step 0 may still change
    got += late.command([0.7], 1.011, now=1.02)
    assert [(t.action[0], t.reward) for t in got] == [(0.5, -9.0)]
    assert all(t.policy_version == 7 for t in out)
    last = asm.flush()
    assert len(last) == 1 and last[0].obs[0] == 5 and last[0].reward == -5 and asm.incomplete == 0


def test_assembler_is_indifferent_to_arrival_order():
    a, b = TransitionAssembler(), TransitionAssembler()
    in_order = feed_robot(a, 20, end_at={7}) + a.flush()
    shuffled = feed_robot(b, 20, end_at={7}, arrival_shuffle=True) + b.flush()
    key = lambda ts: [(t.obs[0], t.action[0], t.reward, t.next_obs[0], t.truncated) for t in ts]  # noqa: E731
    assert key(in_order) == key(shuffled) and len(in_order) == 19


def test_assembler_drops_steps_it_cannot_pair():
    asm = TransitionAssembler(max_reward_delay_s=0.05)
    out = feed_robot(asm, 10, lose_reward_at={3}, lose_obs_at={6}) + asm.flush()
    # Step 3 has no reward; obs 6 is lost, so the step 5 -> 7 holds two rewards: both dropped.
    assert [t.obs[0] for t in out] == [0, 1, 2, 4, 7, 8] and asm.incomplete == 2
    assert [t.reward for t in out] == [0, -1, -2, -4, -7, -8]
    # The reward publisher dies: steps are given up after max_reward_delay_s, not guessed.
    asm = TransitionAssembler(max_reward_delay_s=0.05)
    out = feed_robot(asm, 4)
    for k in range(4, 14):
        out += asm.observation([k, 0.0], 1.0 + k * 0.01, version=7, now=1.0 + k * 0.01)
    assert [t.obs[0] for t in out] == [0, 1, 2] and asm.incomplete >= 3
    with pytest.raises(ValueError, match="terminated or truncated"):
        asm.episode_end("done", 0.0)
    with pytest.raises(ValueError, match="max_reward_delay_s"):
        TransitionAssembler(0.0)


def test_read_log_can_read_only_the_newest(tmp_path):
    w = TransitionLogWriter(tmp_path, TransitionLogConfig(segment_transitions=10))
    for i in range(55):
        w.append(make(i))
    w.close()
    batch, report = read_log(tmp_path, max_transitions=12)
    assert batch.reward.tolist() == [-float(i) for i in range(43, 55)]
    assert report.segments == 2 and report.skipped_segments == 4
