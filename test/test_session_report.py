"""The session report: files written by the session's writers -> PNG + markdown with figures from them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lowrl_ros.core.session.analysis import swap_windows, version_returns
from lowrl_ros.core.session.files import (
    EPISODE_FIELDS, EPISODES_CSV, LATENCY_CSV, LATENCY_FIELDS, POLICY_STATS_CSV, STATS_CSV_FIELDS, SWAP_FIELDS,
    SWAPS_CSV, TIER_FIELDS, TIERS_CSV, CsvLog, is_session_dir, read_session, write_session_info,
)
from lowrl_ros.core.session.report import summarize, write_session_report


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


def make_load_session(d):
    """A recorded 60 s session: a CPU load at 20..30 s; the tier (published and applied) decimated from 21 to
    35 s; misses only while the load runs on the full tier; the fine-tuner paused 21..36 s; per-process CPU."""
    from lowrl_ros.core.session.files import (
        BUDGET_CSV, BUDGET_FIELDS, LEARNER_CSV, LEARNER_FIELDS, PROCESS_CPU_CSV, PROCESS_CPU_FIELDS,
    )

    t0 = 1000.0
    write_session_info(d, {"env_id": "Pendulum-v1", "gap": "mass_scale=1.3", "finetune": "on",
                           "started_unix": t0 + 2.0, "demo_started_unix": t0,
                           "load": {"at_s": 20.0, "seconds": 10.0, "burners": 8,
                                    "start_unix": t0 + 20.0, "end_unix": t0 + 30.0}})
    episodes = CsvLog(d / EPISODES_CSV, EPISODE_FIELDS)
    for i in range(25):
        episodes.append([t0 + 2.0 * (i + 1), i + 1, -800.0 + 10 * i, 200, 0, 1, 1])
    episodes.close()
    tiers = CsvLog(d / TIERS_CSV, TIER_FIELDS)
    for t, tier in ((1.0, 0), (10.0, 0), (21.0, 2), (25.0, 0), (25.5, 2), (35.0, 0), (50.0, 0)):
        tiers.append([t0 + t, tier])
    tiers.close()

    def tier_at(t: float) -> int:
        return 2 if 21.0 <= t < 35.0 else 0  # the published step up at 25 s did not hold (not applied here)

    stats = CsvLog(d / POLICY_STATS_CSV, STATS_CSV_FIELDS)
    lat = CsvLog(d / LATENCY_CSV, LATENCY_FIELDS)
    misses = ticks = 0
    for k in range(1, 600):  # 10 Hz stats, 0.1..59.9 s
        t = 0.1 * k
        tier = tier_at(t)
        per = 10 if tier == 0 else 3  # the decimated tier runs a quarter of the ticks (rounded)
        ticks += per
        misses += 1 if (20.05 < t < 20.95) else 0  # the load, before the monitor acted: 9 stats periods
        stats.append([t0 + t, 150.0, 250.0, misses, ticks, 10000, 10000, tier, 123])
        for j in range(per):  # one inference per tick; the decimated tier's are slower here (40 us)
            lat.append([t0 + t - 0.1 + (j + 0.5) * 0.1 / per, 40.0 if tier else 20.0])
    stats.close()
    lat.close()
    budget = CsvLog(d / BUDGET_CSV, BUDGET_FIELDS)
    learner = CsvLog(d / LEARNER_CSV, LEARNER_FIELDS)
    cpu = CsvLog(d / PROCESS_CPU_CSV, PROCESS_CPU_FIELDS)
    for s in range(60):
        budget.append([t0 + s, 100.0 if 20 <= s < 30 else 50.0, 0.0, "nan", "full"])
        state = "waiting_for_data" if s < 5 else ("waiting_for_full_tier" if 21 <= s < 36 else "learning")
        learner.append([t0 + s + 0.5, state, 10 * s, "residual: replay seeded with none: robot data only" if s else ""])
        cpu.append([t0 + s + 0.2, "finetune_node", 5.0 if 21 <= s < 35 else 55.0])
        cpu.append([t0 + s + 0.2, "policy_node", 6.0 if 21 <= s < 35 else 16.0])
    budget.close()
    learner.close()
    cpu.close()


def test_report_shows_the_load_phase_tiers_misses_and_the_fine_tuners_pause(tmp_path):
    from lowrl_ros.core.runtime.tiers import ComputeTier
    from lowrl_ros.core.session.analysis import learner_seconds, load_outcome, process_cpu_by_tier, tier_costs

    make_load_session(tmp_path)
    data = read_session(tmp_path)
    out = load_outcome(data)
    assert (out.start_s, out.end_s, out.burners) == (20.0, 30.0, 8)  # counted from the demo's start
    assert out.step_down_s == 21.0 and out.lowest_tier == ComputeTier.DECIMATED and out.back_to_full_s == 35.0
    assert out.misses[0] == 9 and out.misses_before == (0, 1000)
    assert (out.paused_s, out.resumed_s) == (21.5, 36.5)
    costs = {c.tier: c for c in tier_costs(data)}
    assert set(costs) == {ComputeTier.FULL, ComputeTier.DECIMATED}
    assert costs[ComputeTier.DECIMATED].seconds == pytest.approx(14.0, abs=0.15)
    assert costs[ComputeTier.FULL].misses == 9 and costs[ComputeTier.DECIMATED].misses == 0
    assert costs[ComputeTier.FULL].inferences_per_s == pytest.approx(100.0, rel=0.02)
    assert costs[ComputeTier.DECIMATED].inferences_per_s == pytest.approx(30.0, rel=0.02)
    assert costs[ComputeTier.DECIMATED].latency_p50_us == 40.0 and costs[ComputeTier.FULL].latency_p50_us == 20.0
    assert learner_seconds(data)["waiting_for_full_tier"] == pytest.approx(15.0)
    cpu = process_cpu_by_tier(data)
    assert cpu["finetune_node"]["full"] == pytest.approx(55.0, abs=1.0)
    assert cpu["finetune_node"]["below full"] == pytest.approx(5.0, abs=1.0)
    text = write_session_report(tmp_path).read_text()
    assert "## Adaptive compute" in text
    assert "- CPU load: 8 burner processes from t=20.0 s to t=30.0 s (10 s)" in text
    assert "full -> decimated at t=21.0 s (1.0 s into the load), back to full at t=35.0 s (5.0 s after" in text
    assert "deadline misses during the load: 9 over 363 ticks (2.5 %); in the 10 s before it: 0 over 1000" in text
    assert "paused (waiting_for_full_tier) t=21.5 s, learning again t=36.5 s" in text
    assert "Fine-tuner's notes: residual: replay seeded with none: robot data only" in text
    assert "| decimated | 14.0 s |" in text and "| full |" in text
    assert "finetune_node 55 / 5" in text
    assert (tmp_path / "session_report.png").stat().st_size > 10_000


def test_report_without_a_load_phase_says_so(tmp_path):
    make_session(tmp_path)
    text = summarize(read_session(tmp_path))
    assert "No CPU-load phase in this session (lowrl demo --no-load" in text


def test_report_says_when_the_monitor_did_not_act(tmp_path):
    make_load_session(tmp_path)
    tiers = CsvLog(tmp_path / "t.csv", TIER_FIELDS)  # replace the tiers by full only
    tiers.append([1001.0, 0])
    tiers.close()
    (tmp_path / "t.csv").replace(tmp_path / TIERS_CSV)
    text = summarize(read_session(tmp_path))
    assert "budget monitor: did **not** step the tier down during the load" in text


def test_report_shows_the_trainer_nodes_identification_and_decision(tmp_path):
    """trainer_node offboard_method sysid writes offboard/sysid/status.json (core/finetune/offboard_sysid.py)."""
    make_session(tmp_path)
    (tmp_path / "offboard" / "sysid").mkdir(parents=True)
    (tmp_path / "offboard" / "sysid" / "status.json").write_text(json.dumps({
        "state": "kept", "decision": "v2 kept: 589.0 over 3 episodes against v1's 331.0 over 4", "released": [2],
        "identified": {"describe": "mass_scale=1.46, encoder_offset=0.1,-0.1", "robot_steps": 2000, "wall_s": 21.1}}))
    text = write_session_report(tmp_path).read_text()
    assert "Off-board identification (trainer node, offboard/sysid/status.json): v2 kept: 589.0 over 3" in text
    assert "identified from 2000 robot steps in 21.1 s: mass_scale=1.46, encoder_offset=0.1,-0.1" in text
    # offboard_method retrain: the identification's own result (Identification.to_dict), no step count or time of
    # its own: its replayed steps, never "None".
    (tmp_path / "offboard" / "sysid" / "status.json").write_text(json.dumps({
        "state": "kept", "decision": "v2 kept", "released": [2],
        "identified": {"describe": "mass_scale=1.1", "details": {"steps_replayed": 2000}}}))
    text = write_session_report(tmp_path).read_text()
    assert "- identified from 2000 robot steps: mass_scale=1.1" in text and "None" not in text


def test_report_shows_the_ladder_steps_over_time_and_which_ladder_the_robot_allowed(tmp_path):
    """A legged session: the policy node stepped full -> lite (asked decimated by the latency limit) -> full,
    on the robot default ladder (lowrl/policy/tier step, requested, ladder, declared: the recorder's rows)."""
    from lowrl_ros.core.session.files import POLICY_TIER_CSV, POLICY_TIER_FIELDS

    make_load_session(tmp_path)
    log = CsvLog(tmp_path / POLICY_TIER_CSV, POLICY_TIER_FIELDS)
    for t, step, asked in ((0.5, "full", "full"), (21.0, "lite", "lite"), (23.0, "lite", "decimated"),
                           (35.0, "full", "full")):
        log.append([1000.0 + t, step, asked, "full -> lite -> safe", "False"])
    log.close()
    text = summarize(read_session(tmp_path))
    assert ("- ladder steps the policy applied: full (t=0.5 s) -> lite (t=21.0 s) -> lite (t=23.0 s, asked decimated)"
            " -> full (t=35.0 s)") in text
    assert "- the robot's ladder: full -> lite -> safe (the robot default)" in text
