"""Transition log: round trip, CDR equal to rclpy's, crash (SIGKILL) mid-write, torn records, disk bounds."""
from __future__ import annotations

import logging
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from lowrl_ros.core.transition_log import (
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


def test_cdr_matches_rclpy_serialisation():
    rclpy_serialization = pytest.importorskip("rclpy.serialization")
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
    mcap_ros2 = pytest.importorskip("mcap_ros2.reader")
    msgs = list(mcap_ros2.read_ros2_messages(str(tmp_path / "transitions_000001.mcap")))
    assert len(msgs) == 40 and msgs[0].channel.topic == "/lowrl/transitions"
    assert list(msgs[3].ros_msg.data)[:3] == [3.0, 3.5, -3.0]


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
    from lowrl_ros.core.transition_log import TransitionLogConfig, TransitionLogWriter
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


def feed_robot(asm: TransitionAssembler, steps: int, *, swap_reward_at=(), lose_reward_at=(), end_at=(),
               dt: float = 0.01):
    """Messages as the sim robot and the policy node send them: reward r(t-1) [end], obs(t), command(t)."""
    out = []
    for k in range(steps):
        t = 1.0 + k * dt
        if k > 0 and k - 1 not in lose_reward_at:
            if k - 1 in swap_reward_at:  # the reward arrives just after the observation it precedes
                out += asm.observation([k, 0.0], t, version=7)
                asm.reward(-(k - 1), t + 0.0003)
            else:
                asm.reward(-(k - 1), t - 0.0002)
                if k - 1 in end_at:
                    asm.episode_end("truncated", t - 0.0001)
                out += asm.observation([k, 0.0], t, version=7)
        else:
            out += asm.observation([k, 0.0], t, version=7)
        asm.command([k / 10], t + 0.001)
    return out


def test_assembler_pairs_steps_in_order():
    asm = TransitionAssembler()
    asm.reward(99.0, 0.5)  # before the first observation: a step we never saw
    out = feed_robot(asm, 7, end_at={2})
    # Step 0 is not formed (start-up); step 5 is open until observation 7 seals it.
    assert [t.obs[0] for t in out] == [1, 2, 3, 4]
    assert [t.reward for t in out] == [-1, -2, -3, -4]
    assert [t.action[0] for t in out] == [0.1, 0.2, 0.3, 0.4]
    assert [t.next_obs[0] for t in out] == [2, 3, 4, 5]
    assert [t.truncated for t in out] == [False, True, False, False] and not any(t.terminated for t in out)
    assert all(t.policy_version == 7 for t in out)
    last = asm.flush()
    assert len(last) == 1 and last[0].obs[0] == 5 and last[0].reward == -5 and asm.incomplete == 0


def test_assembler_tolerates_late_rewards_and_drops_lost_ones():
    asm = TransitionAssembler(max_reward_delay_s=0.05)
    out = feed_robot(asm, 8, swap_reward_at={2})  # a reward just after the observation it precedes
    assert [t.reward for t in out] == [-1, -2, -3, -4, -5] and asm.incomplete == 0
    # Rewards of steps 1 and 2 held back by a retransmission until after observation 3.
    asm = TransitionAssembler(max_reward_delay_s=0.05)
    out = []
    for k, t in enumerate((0.00, 0.01, 0.02, 0.03)):
        if k == 1:
            asm.reward(-0.0, t - 0.0002)
        out += asm.observation([k, 0.0], t, version=1)
        asm.command([k / 10], t + 0.001)
    asm.reward(-1.0, 0.035)
    asm.reward(-2.0, 0.036)
    asm.reward(-3.0, 0.0398)
    out += asm.observation([4, 0.0], 0.04, version=1)
    out += asm.observation([5, 0.0], 0.05, version=1)
    assert [(t.obs[0], t.action[0], t.reward, t.next_obs[0]) for t in out] == [
        (1, 0.1, -1.0, 2), (2, 0.2, -2.0, 3), (3, 0.3, -3.0, 4)]
    # A step whose reward never comes is dropped after max_reward_delay_s, not guessed.
    asm = TransitionAssembler(max_reward_delay_s=0.05)
    out = feed_robot(asm, 4)
    for k in range(4, 14):  # the reward publisher died
        out += asm.observation([k, 0.0], 1.0 + k * 0.01, version=7)
    assert [t.obs[0] for t in out] == [1, 2] and asm.incomplete >= 3
    with pytest.raises(ValueError, match="terminated or truncated"):
        asm.episode_end("done", 0.0)
    with pytest.raises(ValueError, match="max_reward_delay_s"):
        TransitionAssembler(0.0)
