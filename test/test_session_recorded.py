"""The session report from the session's MCAP recording (lowrl_ros/core/session/recorded.py) equals the one from
the demo recorder's CSV logs: test/data/session_mcap is a real 14 s `lowrl demo` session (fine-tuner on, the
load phase; `lowrl demo --seconds 14 --session-dir DIR`, then its session.json, episodes.csv, the recorder's
CSVs and session.mcap kept), in which both listened to the same topics.

The two listeners are two processes: the recorder lives in the demo process and starts before the nodes, the
monitor node starts with them and stops with them, so the recording misses the first ~0.4 s of policy stats
and the last one. Over the time both listened (the stats rows both hold), each frame holds the same messages
and the analysis the report prints is the same; the times are each listener's receive times.
"""
from __future__ import annotations

import dataclasses
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from lowrl_ros.core.session import analysis
from lowrl_ros.core.session.files import SessionData, read_session
from lowrl_ros.core.session.recorded import SESSION_MCAP, read_recording
from lowrl_ros.core.session.recording import McapSessionWriter, message_definition, share_dirs

FIXTURE = Path(__file__).parent / "data" / "session_mcap"
FRAMES = ("stats", "latency", "tiers", "swaps", "budget", "learner")
RECEIVE_SKEW_S = 0.5  # the recorder's executor runs up to ~0.3 s late while the burners fill both cores; the
# monitor's times are DDS receive times


def aligned(csv: dict, mcap: dict, lo: float, hi: float) -> tuple[dict, dict]:
    """A frame's rows the recording received in [lo, hi], and as many CSV rows from the one received nearest
    the first of them: the same messages, if the reader is right and neither listener lost one."""
    if not mcap:
        return csv, mcap
    keep = (mcap["time_s"] >= lo) & (mcap["time_s"] <= hi)
    mcap = {k: v[keep] for k, v in mcap.items()}
    if not keep.any() or not csv:
        return {}, {}
    start = int(np.argmin(np.abs(csv["time_s"] - mcap["time_s"][0])))
    return {k: v[start:start + int(keep.sum())] for k, v in csv.items()}, mcap


def both_listened() -> tuple[SessionData, SessionData]:
    """(from the CSVs, from the recording), each frame cut to the messages received while both listened: from
    the first to the last stats row both hold."""
    csv, mcap = read_session(FIXTURE, source="csv"), read_session(FIXTURE, source="mcap")
    common = np.intersect1d(csv.stats["ticks"], mcap.stats["ticks"])
    assert len(common) > 50, "the recording and the CSVs share too few stats rows to compare"
    t, ticks = mcap.stats["time_s"], mcap.stats["ticks"]
    lo, hi = t[ticks == common[0]][0], t[ticks == common[-1]][0]
    frames = {name: aligned(getattr(csv, name), getattr(mcap, name), lo, hi) for name in FRAMES}
    return (dataclasses.replace(csv, **{k: v[0] for k, v in frames.items()}),
            dataclasses.replace(mcap, **{k: v[1] for k, v in frames.items()}))


def same(a, b, path="") -> None:
    """Equal structures: ints and strings exactly, floats to the CSV's rounding (latency .2f, stats %g) or, for
    times and durations (seconds), to the two listeners' receive skew."""
    if dataclasses.is_dataclass(a):
        a, b = dataclasses.asdict(a), dataclasses.asdict(b)
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and not isinstance(a, bool):
        timed = any(w in path for w in ("time", "seconds", "_s"))
        assert b == pytest.approx(a, abs=RECEIVE_SKEW_S if timed else 0.01, rel=1e-5), path
    else:
        assert a == b, path


def test_the_recording_holds_the_csv_frames_message_for_message():
    csv, mcap = both_listened()
    for name in FRAMES:
        a, b = getattr(csv, name), getattr(mcap, name)
        assert a.keys() == b.keys(), name
        for column in a:
            if column == "time_s":
                assert np.abs(a[column] - b[column]).max(initial=0.0) < RECEIVE_SKEW_S, name
            elif a[column].dtype.kind == "U":
                assert list(a[column]) == list(b[column]), (name, column)
            else:  # the CSV keeps %g (stats) or .2f (latency) of what the recording holds exactly
                np.testing.assert_allclose(a[column], b[column], rtol=1e-5, atol=0.005, err_msg=f"{name}.{column}")
    assert len(mcap.stats["ticks"]) > 50 and len(mcap.latency["latency_us"]) > 500 and len(mcap.tiers["tier"])
    assert len(mcap.budget["cpu_load_pct"]) and len(mcap.learner["state"])
    whole_csv, whole_mcap = read_session(FIXTURE, source="csv"), read_session(FIXTURE, source="mcap")
    assert list(whole_csv.swaps["version"]) == list(whole_mcap.swaps["version"]) == [1.0]  # the running version


def test_the_report_analysis_from_the_recording_equals_the_one_from_the_csvs():
    csv, mcap = both_listened()
    for figure in (analysis.tier_costs, analysis.swap_windows, analysis.version_returns, analysis.load_outcome,
                   analysis.learner_seconds):
        same(figure(csv), figure(mcap), figure.__name__)
    assert analysis.tier_costs(mcap)[0].ticks > 500


def test_read_session_takes_the_recording_when_there_is_one(tmp_path):
    session = tmp_path / "s"
    shutil.copytree(FIXTURE, session)
    assert len(read_session(session).stats["ticks"]) == len(read_session(session, source="mcap").stats["ticks"])
    (session / SESSION_MCAP).unlink()
    assert len(read_session(session).stats["ticks"]) == len(read_session(session, source="csv").stats["ticks"])
    with pytest.raises(FileNotFoundError):
        read_session(session, source="mcap")


def test_a_recording_cut_short_gives_its_complete_chunks(tmp_path):
    """A recorder killed mid-file leaves no summary and a torn last chunk: the rows before it are read."""
    kind = "std_msgs/msg/Float64"
    path = tmp_path / SESSION_MCAP
    writer = McapSessionWriter(path, {kind: message_definition(kind, share_dirs())}, chunk_bytes=1024)
    writer.add_channel("/lowrl/policy/latency_us", kind, "STATS")
    for i in range(500):  # CDR: little-endian encapsulation header, then the float64
        writer.write("/lowrl/policy/latency_us", b"\x00\x01\x00\x00" + struct.pack("<d", 100.0 + i), 10**9 + i * 10**6)
    writer.close()
    whole = read_recording(path)["latency"]
    assert [row[1] for row in whole] == [100.0 + i for i in range(500)]
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    cut = read_recording(path)["latency"]
    assert 100 < len(cut) < 500 and cut == whole[: len(cut)]
