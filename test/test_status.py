"""The pure status functions (Autoware's determine_diagnostics style): levels and words from plain
state, no node; and the one place that maps a Level to a DiagnosticStatus byte."""
from __future__ import annotations

import pytest
from diagnostic_msgs.msg import DiagnosticStatus, KeyValue

from lowrl_ros.core.budget.monitor import BudgetConfig, BudgetMonitor, Reading, Severity, budget_status
from lowrl_ros.core.runtime.observation import InputSeen
from lowrl_ros.core.runtime.status import (ERROR_HOLD_S, POLICY_STATUS, InputErrorReports, RunningPolicy, TierView,
                                           policy_status)
from lowrl_ros.core.runtime.swap import StreamStatus, SwapState, SwapStatus
from lowrl_ros.core.runtime.tiers import ComputeTier as T
from lowrl_ros.core.types import Level, Silence
from lowrl_ros.ros import diagnostics as diag

pytestmark = pytest.mark.ros  # the level rules are pure; some cases check their ROS messages too

STATS = {"window_p50_us": 20.0, "window_p99_us": 41.4, "deadline_misses": 0.0, "ticks": 500.0,
         "deadline_us": 10000.0}
RUNNING = RunningPolicy(version=3, path="/m/v3.onnx", tiers=("full", "lite"), active=True,
                        bundle_topic="/lowrl/policy_bundle")
FULL = TierView(T.FULL, T.FULL)


def by_name(entries) -> dict:
    return {e.name: e for e in entries}


def test_all_ok_gives_the_five_statuses_and_their_words():
    s = by_name(policy_status(STATS, SwapStatus(), StreamStatus(), FULL, 100.0, RUNNING))
    assert list(s) == ["lowrl/policy/latency", "lowrl/policy/input", POLICY_STATUS, "lowrl/policy/bundle",
                       "lowrl/policy/tier"]
    assert all(e.level == Level.OK for e in s.values())
    assert s["lowrl/policy/latency"].message == "p99 41 us, 0 deadline misses"
    assert s["lowrl/policy/input"].message == "observations OK"
    assert s["lowrl/policy/input"].values == {"last_error": "none"}
    assert s[POLICY_STATUS].message == "v3 /m/v3.onnx"
    values = s[POLICY_STATUS].values
    assert (values["version"], values["path"], values["tiers"], values["active"]) == (3, "/m/v3.onnx", "full,lite",
                                                                                     True)
    assert (values["swap"], values["swap_state"], values["swap_code"]) == ("no swap requested", "none", "")
    assert s["lowrl/policy/bundle"].message == "no bundle received"
    assert s["lowrl/policy/bundle"].values["topic"] == "/lowrl/policy_bundle"
    assert s["lowrl/policy/tier"].message == "tier full"


def test_deadline_misses_warn():
    s = by_name(policy_status({**STATS, "deadline_misses": 2.0}, SwapStatus(), StreamStatus(), FULL, 0.0, RUNNING))
    assert s["lowrl/policy/latency"].level == Level.WARN
    assert s["lowrl/policy/latency"].message == "p99 41 us, 2 deadline misses"


@pytest.mark.parametrize("age, level", [(0.0, Level.ERROR), (ERROR_HOLD_S - 0.01, Level.ERROR),
                                        (ERROR_HOLD_S, Level.OK), (10.0, Level.OK)])
def test_a_recent_input_error_is_an_error_for_a_hold_time(age, level):
    running = RunningPolicy(3, "p", ("full",), True, last_error="joint elbow missing", last_error_time=50.0)
    entry = by_name(policy_status(STATS, SwapStatus(), StreamStatus(), FULL, 50.0 + age, running))["lowrl/policy/input"]
    assert entry.level == level
    assert entry.message == ("joint elbow missing" if level == Level.ERROR else "observations OK")
    assert entry.values == {"last_error": "joint elbow missing"}


@pytest.mark.parametrize("applied, requested, level", [(T.FULL, T.FULL, Level.OK), (T.LITE, T.LITE, Level.WARN),
                                                      (T.DECIMATED, T.LITE, Level.WARN), (T.SAFE, T.SAFE, Level.WARN)])
def test_any_tier_below_full_warns(applied, requested, level):
    entry = by_name(policy_status(STATS, SwapStatus(), StreamStatus(), TierView(applied, requested), 0.0,
                                  RUNNING))["lowrl/policy/tier"]
    assert entry.level == level and entry.message == f"tier {applied.label}"
    assert entry.values == {"tier": applied.label, "requested": requested.label, "tier_value": int(applied)}


def test_a_rejected_swap_is_an_error_with_its_keys_and_the_old_text():
    swap = SwapStatus(SwapState.REJECTED, "/m/v4.onnx", 4, "invalid_artifact", "rejected /m/v4.onnx: truncated")
    stream = StreamStatus(Level.ERROR, "rejected v5: [unsigned] no", 0, "unsigned", False, True, False)
    s = by_name(policy_status(STATS, swap, stream, FULL, 0.0, RUNNING))
    policy = s[POLICY_STATUS]
    assert policy.level == Level.ERROR and policy.message == "rejected /m/v4.onnx: truncated"
    assert {k: policy.values[k] for k in ("swap_state", "swap_path", "swap_version", "swap_code")} == {
        "swap_state": "rejected", "swap_path": "/m/v4.onnx", "swap_version": 4, "swap_code": "invalid_artifact"}
    assert policy.values["version"] == 3  # still the running one
    bundle = s["lowrl/policy/bundle"]
    assert bundle.level == Level.ERROR and bundle.values["last_code"] == "unsigned"
    assert bundle.values["resend_requested"] is False and bundle.values["key"] == "none"


def test_a_swapped_policy_is_ok_and_names_the_running_version():
    swap = SwapStatus(SwapState.SWAPPED, "/m/v3.onnx", 3, "", "swapped to /m/v3.onnx v3")
    policy = by_name(policy_status(STATS, swap, StreamStatus(), FULL, 0.0, RUNNING))[POLICY_STATUS]
    assert policy.level == Level.OK and policy.message == "v3 /m/v3.onnx"
    assert policy.values["swap"] == "swapped to /m/v3.onnx v3" and policy.values["swap_state"] == "swapped"


WALL = 1_800_000_000.0  # 2027-01-15T08:00:00Z: the wall clock at the node clock's 100.0


def inputs_at(now: float, joint_last: float | None, imu_last: float | None, active: bool = True) -> dict:
    """The statuses with two robot-file topics activated at node time 90.0, on an injected clock."""
    seen = (InputSeen("joint_states", 0.1, joint_last, 90.0), InputSeen("/imu", 0.5, imu_last, 90.0))
    running = RunningPolicy(3, "p", ("full",), active, inputs=seen)
    return by_name(policy_status(STATS, SwapStatus(), StreamStatus(), FULL, now, running, WALL + now - 100.0))


def test_an_input_heard_within_its_timeout_is_ok_and_carries_the_same_keys():
    s = inputs_at(100.0, joint_last=99.95, imu_last=99.7)
    joints, imu = s["lowrl/policy/input/joint_states"], s["lowrl/policy/input/imu"]
    assert joints.level == imu.level == s["lowrl/policy/input"].level == Level.OK
    assert joints.message == "heard 50 ms ago"
    assert joints.values == {"topic": "joint_states", "timeout_s": 0.1, "stale_since": "", "silent_s": 0.05}
    assert s["lowrl/policy/input"].values == {"last_error": "none"}


def test_an_input_not_heard_for_longer_than_its_timeout_is_stale_and_says_since_when():
    s = inputs_at(100.0, joint_last=99.95, imu_last=97.0)  # the IMU stopped 3 s ago, its timeout is 0.5 s
    imu = s["lowrl/policy/input/imu"]
    assert imu.level == Level.STALE and s["lowrl/policy/input/joint_states"].level == Level.OK
    # stale since its last message + timeout = 2.5 s before WALL
    assert imu.values["stale_since"] == "2027-01-15T07:59:57Z" and imu.values["silent_s"] == 3.0
    assert imu.message == "/imu stale since 07:59:57 UTC: no message for 3.0 s (timeout 0.5 s)"
    # the summary entry is STALE too (no input error to outrank it) and names the stale topics
    summary = s["lowrl/policy/input"]
    assert summary.level == Level.STALE and summary.message == imu.message and summary.values["stale"] == "/imu"


def test_an_input_never_heard_is_stale_a_timeout_after_the_activation():
    assert inputs_at(90.05, joint_last=None, imu_last=None)["lowrl/policy/input/joint_states"].message == \
        "waiting for the first message"
    joints = inputs_at(100.0, joint_last=None, imu_last=99.9)["lowrl/policy/input/joint_states"]
    assert joints.level == Level.STALE and joints.values["stale_since"] == "2027-01-15T07:59:50Z"
    assert joints.message.endswith("nothing heard in 10.0 s (timeout 0.1 s)")


def test_an_inactive_node_reads_no_input_so_none_is_stale():
    s = inputs_at(100.0, joint_last=None, imu_last=50.0, active=False)
    assert {e.level for e in s.values()} == {Level.OK}
    assert s["lowrl/policy/input/imu"].message == "not read: the node is inactive"


def test_an_input_error_outranks_a_stale_input():
    seen = (InputSeen("imu", 0.1, 95.0, 90.0),)
    running = RunningPolicy(3, "p", ("full",), True, last_error="imu: stale", last_error_time=99.9, inputs=seen)
    s = by_name(policy_status(STATS, SwapStatus(), StreamStatus(), FULL, 100.0, running, WALL))
    assert s["lowrl/policy/input"].level == Level.ERROR and s["lowrl/policy/input/imu"].level == Level.STALE


def test_silence_is_none_while_fresh_or_unwatched():
    assert Silence.of("x", 9.9, 0.0, 0.5, 10.0, WALL) is None
    assert Silence.of("x", None, None, 0.5, 10.0, WALL) is None  # not watched yet
    assert Silence.of("x", 9.0, 0.0, 0.5, 10.0, WALL) == Silence("x", True, 1.0, 0.5, WALL - 0.5)


def test_input_errors_are_reported_at_once_but_a_flood_is_rate_limited():
    reports = InputErrorReports(interval_s=0.2)
    assert not reports.due(None, 10.0)  # no error yet
    assert reports.due(10.0, 10.0)  # a new error: now
    assert not reports.due(10.0, 10.5)  # the same error again: already said
    assert not reports.due(10.1, 10.1)  # a new one 0.1 s later: held back...
    assert reports.due(10.1, 10.25)  # ...and said once the interval has passed
    assert not reports.due(10.1, 11.0)


# ---- budget ---------------------------------------------------------------------------------------

def test_budget_status_maps_severity_and_tier_to_levels():
    assert [s.level for s in Severity] == [Level.OK, Level.WARN, Level.ERROR, Level.STALE]
    m = BudgetMonitor(BudgetConfig(escalate_after=1, policy_rss_limit_mb=100.0))
    last = m.step(0.0, {"policy_rss": Reading(100.0, "psutil"), "cpu_temperature": Reading(None, "none", "no sensor")})
    entries = by_name(budget_status(last, m.decider.tier, None, last.reason))
    rss = entries["lowrl/budget/policy_rss"]
    assert rss.level == Level.ERROR and rss.values["asks_tier"] == "safe" and rss.values["unit"] == "MB"
    assert entries["lowrl/budget/cpu_temperature"].level == Level.STALE
    tier = entries["lowrl/budget/tier"]
    assert tier.level == Level.ERROR and tier.message == "compute tier safe"  # the safe action is an ERROR
    assert tier.values["policy_applies"] == "" and tier.values["last_change"] == last.reason


def test_budget_policy_stats_not_heard_are_stale_and_say_since_when():
    m = BudgetMonitor(BudgetConfig(), stats_timeout_s=2.0)
    first = by_name(budget_status(m.step(10.0, {}, WALL), T.FULL, None, "none yet"))
    assert first["lowrl/budget/latency_p99"].message == "waiting for the first policy stats"
    assert first["lowrl/budget/latency_p99"].values["stale_since"] == ""
    never = by_name(budget_status(m.step(13.0, {}, WALL + 3.0), T.FULL, None, "none yet"))
    lat = never["lowrl/budget/latency_p99"]
    assert lat.level == Level.STALE and lat.values["stale_since"] == "2027-01-15T08:00:02Z"  # awaited since 10.0
    assert "nothing heard in 3.0 s (timeout 2 s)" in lat.message
    m.on_policy_stats(13.0, [300.0, 800.0, 0.0, 10.0, 20000.0, 20000.0, 0.0, 1.0])
    heard = by_name(budget_status(m.step(14.0, {}, WALL + 4.0), T.FULL, m.policy, "none yet"))
    assert heard["lowrl/budget/latency_p99"].level == Level.OK and heard["lowrl/budget/latency_p99"].values[
        "stale_since"] == ""
    quiet = by_name(budget_status(m.step(20.0, {}, WALL + 10.0), T.FULL, m.policy, "none yet"))
    miss = quiet["lowrl/budget/deadline_miss_rate"]
    assert miss.level == Level.STALE and miss.values["stale_since"] == "2027-01-15T08:00:05Z"  # 13.0 + 2 s
    assert "no message for 7.0 s" in miss.message


@pytest.mark.parametrize("tier, level", [(T.FULL, Level.OK), (T.LITE, Level.WARN), (T.DECIMATED, Level.WARN),
                                         (T.SAFE, Level.ERROR)])
def test_budget_tier_levels(tier, level):
    m = BudgetMonitor(BudgetConfig())
    last = m.step(0.0, {})
    entry = by_name(budget_status(last, tier, None, "none yet", prefix="x"))["x/tier"]
    assert entry.level == level


# ---- the ROS mapping ------------------------------------------------------------------------------

def test_levels_map_to_the_message_bytes():
    for level, byte in ((Level.OK, DiagnosticStatus.OK), (Level.WARN, DiagnosticStatus.WARN),
                        (Level.ERROR, DiagnosticStatus.ERROR), (Level.STALE, DiagnosticStatus.STALE)):
        msg = diag.status("n", level, "m")
        assert msg.level == byte and diag.level_of(msg) == level
    assert diag.level_of(diag.status("n", Severity.HARD.level, "m")) == Level.ERROR
    entries = policy_status(STATS, SwapStatus(), StreamStatus(), FULL, 0.0, RUNNING)
    msgs = diag.from_entries(entries)
    assert [m.name for m in msgs] == [e.name for e in entries] and all(m.hardware_id for m in msgs)
    assert {kv.key: kv.value for kv in msgs[0].values}["p99_us"] == "41.4"


def test_swap_rejection_reads_the_keys_not_the_message():
    def status(values: dict, message: str = "", name: str = POLICY_STATUS) -> DiagnosticStatus:
        return DiagnosticStatus(name=name, message=message, level=DiagnosticStatus.ERROR,
                                values=[KeyValue(key=k, value=str(v)) for k, v in values.items()])

    keys = {"swap_state": "rejected", "swap_path": "/w/v2.onnx", "swap_version": 2, "swap_code": "invalid_artifact"}
    assert diag.swap_rejection(status(keys, message="anything at all")) == ("/w/v2.onnx", 2)
    # The old text alone is no longer enough, and other names or states are not rejections.
    assert diag.swap_rejection(status({"version": 1}, message="rejected /w/v2.onnx: bad")) is None
    assert diag.swap_rejection(status({**keys, "swap_state": "swapped"})) is None
    assert diag.swap_rejection(status(keys, name="lowrl/policy/bundle")) is None
    assert diag.swap_rejection(status({**keys, "swap_version": "x"})) == ("/w/v2.onnx", 0)


def test_loop_timing_keys_in_the_spirit_of_ros2_control_on_the_latency_status():
    """Periodicity mean/std/error and execution time mean/max from the ticks, overruns = deadline misses; each a
    plain number on ``lowrl/policy/latency`` (so rqt_plot or a recorder can draw it)."""
    from lowrl_ros.core.runtime.control import LoopTiming
    from lowrl_ros.core.runtime.status import TIMING_KEYS

    timing = LoopTiming(10)
    assert all(v != v for v in timing.summary(0.01).values())  # nan before two ticks
    for start, run in ((0.0, 0.001), (0.011, 0.003), (0.020, None), (0.031, 0.002)):
        timing.add(start, run)
    t = timing.summary(0.01)
    assert t["periodicity_mean_us"] == pytest.approx(31000 / 3)
    assert t["periodicity_error_mean_us"] == pytest.approx(31000 / 3 - 10000)
    assert t["periodicity_std_us"] == pytest.approx(942.809, rel=1e-4)
    assert (t["execution_time_mean_us"], t["execution_time_max_us"]) == (pytest.approx(2000), pytest.approx(3000))
    entry = by_name(policy_status({**STATS, **t, "overruns": 2.0}, SwapStatus(), StreamStatus(), FULL, 0.0,
                                  RUNNING))["lowrl/policy/latency"]
    assert set(TIMING_KEYS) <= set(entry.values) and entry.values["overruns"] == 2.0
    assert {k: entry.values[k] for k in ("p50_us", "p99_us", "deadline_misses")} == {
        "p50_us": 20.0, "p99_us": 41.4, "deadline_misses": 0}  # the keys readers use stay
