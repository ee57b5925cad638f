"""The session report: files written by the session's writers -> PNG + markdown with figures from them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lowrl_ros.core.sim.session_report import (
    EPISODE_FIELDS, EPISODES_CSV, LATENCY_CSV, LATENCY_FIELDS, POLICY_STATS_CSV, STATS_CSV_FIELDS, SWAP_FIELDS,
    SWAPS_CSV, TIER_FIELDS, TIERS_CSV, CsvLog, is_session_dir, read_session, summarize, swap_windows,
    version_returns, write_session_info, write_session_report,
)


def make_session(d, *, latency: bool = True):
    write_session_info(d, {"env_id": "Pendulum-v1", "gap": "mass_scale=1.3", "finetune": "on", "started_unix": 100.0})
    episodes = CsvLog(d / EPISODES_CSV, EPISODE_FIELDS)
    rows = [(1, -700.0, 1, 1), (2, -650.0, 1, 1), (3, -400.0, 1, 2), (4, -300.0, 2, 2), (5, -250.0, 2, 2)]
    for i, (ep, ret, v0, v1) in enumerate(rows):
        episodes.append([100.0 + 2 * i, ep, ret, 200, 0, v0, v1])
    episodes.close()
    (d / "finetune").mkdir()
    (d / "finetune" / "versions.json").write_text(json.dumps({"current": 2, "best": 2, "versions": [
        {"version": 1, "parent_version": None, "path": "base.onnx", "updates": 0, "returns": [-700, -650],
         "status": "good"},
        {"version": 2, "parent_version": 1, "path": "v2.onnx", "updates": 1000, "returns": [-300, -250],
         "status": "good"}]}))
    if latency:
        lat = CsvLog(d / LATENCY_CSV, LATENCY_FIELDS)
        for i, v in enumerate(np.linspace(10.0, 30.0, 101)):
            lat.append([100.0 + i * 0.01, v])
        lat.close()
        tiers = CsvLog(d / TIERS_CSV, TIER_FIELDS)
        for t, tier in ((100.0, 0), (105.0, 1), (107.0, 0)):
            tiers.append([t, tier])
        tiers.close()
        stats = CsvLog(d / POLICY_STATS_CSV, STATS_CSV_FIELDS)
        stats.append([100.0, 20.0, 29.0, 3, 1000, 10000, 10000, 0, 123])
        stats.append([100.1, 20.0, 29.0, 4, 1010, 10000, 10000, 0, 123])
        stats.close()


def test_report_from_session_files(tmp_path):
    make_session(tmp_path)
    assert is_session_dir(tmp_path)
    md = write_session_report(tmp_path)
    text = md.read_text()
    assert (tmp_path / "session_report.png").stat().st_size > 10_000
    assert "| v1 | 2 | -675.0 |" in text and "| v2 | 2 | -275.0 |" in text  # the swap-straddling episode is left out
    assert "current v2, best v2" in text and "v2 (parent v1, 1000 updates): good" in text
    assert "p50 20.0 us" in text and "Compute tiers seen: full, lite (2 changes)" in text
    assert "Control ticks 1010, deadline misses 4" in text and "Not recorded" not in text


def test_deadline_misses_are_counted_around_each_hot_swap(tmp_path):
    make_session(tmp_path, latency=False)
    stats = CsvLog(tmp_path / POLICY_STATS_CSV, STATS_CSV_FIELDS)
    misses = 0
    for k in range(100):  # 10 s of stats at 10 Hz, 10 ticks each; two misses at 5.0 s, none elsewhere
        t = 200.0 + 0.1 * k
        misses += 2 if k == 50 else 0
        stats.append([t, 20.0, 29.0, misses, 10 * k, 10000, 10000, 0, 123])
    stats.close()
    swaps = CsvLog(tmp_path / SWAPS_CSV, SWAP_FIELDS)
    for t, v in ((200.05, 1), (202.0, 2), (205.3, 3), (209.9, 4)):  # v4: too late for a whole window
        swaps.append([t, v])
    swaps.close()
    w = swap_windows(read_session(tmp_path))
    assert [(x.old, x.new) for x in w] == [(1, 2), (2, 3)]
    assert [x.misses for x in w] == [0, 2]  # the misses at 5.0 s fall in v3's window (3.8..5.8 s)
    assert all(x.ticks >= 190 for x in w)  # ~2 s of 100 ticks/s
    assert "Hot-swaps: 2 (v1->v2, v2->v3)" in summarize(read_session(tmp_path))


def test_version_returns_skip_episodes_across_a_swap(tmp_path):
    make_session(tmp_path)
    assert version_returns(read_session(tmp_path)) == {1: [-700.0, -650.0], 2: [-300.0, -250.0]}


def test_missing_parts_are_named_and_a_torn_row_skipped(tmp_path):
    make_session(tmp_path, latency=False)
    with open(tmp_path / EPISODES_CSV, "a") as f:
        f.write("110.0,6,-2")  # a writer killed mid-row
    data = read_session(tmp_path)
    assert data.n_episodes == 5
    text = summarize(data)
    assert "Not recorded in this session: latency_us.csv, tiers.csv, policy_stats.csv" in text
    write_session_report(tmp_path)  # still draws


def test_not_a_session_dir_says_what_to_give(tmp_path):
    assert not is_session_dir(tmp_path)
    with pytest.raises(ValueError, match="not a session directory"):
        write_session_report(tmp_path)


def test_csv_log_rejects_wrong_row_length(tmp_path):
    log = CsvLog(tmp_path / "x.csv", ("a", "b"))
    with pytest.raises(ValueError, match="needs 2 values"):
        log.append([1])
    log.close()
