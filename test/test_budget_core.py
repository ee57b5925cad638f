"""Budget decision logic without ROS: limits, severities, escalation, dwell, with a fake clock."""
from __future__ import annotations

import pytest

from lowrl_ros.core.budget.monitor import (
    BudgetConfig,
    BudgetMonitor,
    MissRateWindow,
    Reading,
    Severity,
    TierDecider,
)
from lowrl_ros.core.runtime.tiers import ComputeTier as T


def stats(p99_us=100.0, misses=0.0, ticks=0.0, deadline_us=1000.0, tier=0.0, pid=0.0):
    return [50.0, p99_us, misses, ticks, 10_000.0, deadline_us, tier, pid]


def status(assessment, name):
    return next(s for s in assessment.statuses if s.name == name)


# --- config -----------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, words", [
    ({"headroom": 1.5}, "headroom"),
    ({"sample_rate_hz": 0.0}, "sample_rate_hz"),
    ({"escalate_after": 0}, "escalate_after"),
    ({"escalate_after": 2.5}, "integer"),
    ({"miss_rate_limit": 0.0}, "miss_rate_limit"),
    ({"process_names": ("a", "b"), "process_rss_limits_mb": (1.0,)}, "one limit (MB) per name"),
    ({"process_names": ("",), "process_rss_limits_mb": (1.0,)}, "process_names"),
    ({"temperature_source": "thermocouple"}, "auto, file, estimated, none"),
    ({"temperature_source": "file"}, "temperature_file"),
    ({"ambient_c": 90.0}, "below temperature_limit_c"),
    ({"policy_rss_limit_mb": float("nan")}, "finite number"),
    ({"cpu_load_limit_pct": 120.0}, "percent"),
    ({"cpu_load_window_s": -0.5}, "smooths out single ticks"),
])
def test_bad_config_says_how_to_fix(bad, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        BudgetConfig(**bad)


def test_unknown_key_is_named():
    with pytest.raises(ValueError, match="unknown budget config key.*headrom"):
        BudgetConfig.from_mapping({"headrom": 0.2})


def test_warn_levels_keep_the_headroom():
    c = BudgetConfig(headroom=0.25, temperature_limit_c=85.0, ambient_c=25.0)
    assert c.warn_level(400.0, "memory") == pytest.approx(300.0)
    assert c.warn_level(200.0, "memory", upper=False) == pytest.approx(250.0)
    # temperature: headroom of the rise above ambient, 25 + 60 * 0.75
    assert c.warn_level(85.0, "temperature") == pytest.approx(70.0)


# --- decider with a fake clock ----------------------------------------------------------------
def test_escalates_only_after_n_consecutive_bad_samples():
    d = TierDecider(escalate_after=3, recover_dwell_s=5.0)
    assert not d.update(0.0, T.DECIMATED)
    assert not d.update(0.1, T.DECIMATED)
    assert not d.update(0.2, T.FULL)  # a good sample resets the count
    assert not d.update(0.3, T.DECIMATED)
    assert not d.update(0.4, T.DECIMATED)
    assert d.update(0.5, T.DECIMATED)
    assert d.tier == T.DECIMATED


def test_escalation_goes_to_the_tier_all_bad_samples_agreed_on():
    d = TierDecider(escalate_after=3, recover_dwell_s=5.0)
    for t, wanted in [(0.0, T.SAFE), (0.1, T.LITE), (0.2, T.SAFE)]:
        d.update(t, wanted)
    assert d.tier == T.LITE


def test_steps_back_up_one_tier_per_dwell():
    d = TierDecider(escalate_after=1, recover_dwell_s=5.0, tier=T.SAFE)
    changes = []
    for i in range(300):
        t = i / 10  # exact tenths, so the dwell boundary is exact
        if d.update(t, T.FULL):
            changes.append((t, d.tier))
    assert changes == [(5.0, T.DECIMATED), (10.0, T.LITE), (15.0, T.FULL)]


def test_a_bad_sample_during_the_dwell_restarts_it():
    d = TierDecider(escalate_after=3, recover_dwell_s=2.0, tier=T.LITE)
    d.update(0.0, T.FULL)
    d.update(1.5, T.LITE)  # still needs lite: not good, not bad
    assert not d.update(3.0, T.FULL)
    assert not d.update(4.9, T.FULL)
    assert d.update(5.0, T.FULL) and d.tier == T.FULL


def test_flapping_doubles_the_dwell_and_a_held_step_up_resets_it():
    d = TierDecider(escalate_after=1, recover_dwell_s=1.0, tier=T.LITE)
    clock = iter(i / 10 for i in range(10_000))

    def run(wanted, samples):  # one sample every 0.1 s
        ups = []
        for _ in range(samples):
            t = next(clock)
            before = d.tier
            d.update(t, wanted)
            if d.tier < before:
                ups.append(t)
        return ups

    assert run(T.FULL, 11) == [1.0]  # first step up after one dwell
    run(T.LITE, 1)  # the full tier fails again at once (t=1.1): flapping
    assert d.tier == T.LITE and d.backoff == 2
    ups = run(T.FULL, 30)  # from t=1.2
    assert ups == [3.2]  # now two dwells
    run(T.FULL, 25)  # the step up held for a full dwell
    assert d.backoff == 1 and d.tier == T.FULL


# --- monitor: worst signal wins ---------------------------------------------------------------
def test_latency_against_the_policy_deadline_escalates_and_recovers():
    m = BudgetMonitor(BudgetConfig(escalate_after=2, recover_dwell_s=1.0, cpu_load_limit_pct=0.0))
    now, ticks, misses = 0.0, 0.0, 0.0
    tiers = []
    for i in range(80):
        slow = 10 <= i < 20
        ticks += 10
        misses += 5 if slow else 0
        m.on_policy_stats(now, stats(p99_us=1500.0 if slow else 200.0, misses=misses, ticks=ticks))
        a = m.step(now, {})
        tiers.append(a.tier)
        if i == 12:
            assert status(a, "latency_p99").severity == Severity.HARD
            assert status(a, "latency_p99").hard == 1000.0  # the deadline from the stats
        now += 0.1
    assert tiers[9] == T.FULL
    assert tiers[11] == T.DECIMATED  # two hard samples
    # latency back at 20, miss rate still high while the 2 s window holds slow ticks; then a
    # dwell of 1 s per step up.
    assert max(tiers[20:]) == T.DECIMATED and tiers[-1] == T.FULL
    ups = [i for i in range(21, 80) if tiers[i] < tiers[i - 1]]
    assert len(ups) == 2 and ups[1] - ups[0] >= 10


def test_deadline_still_missed_on_the_decimated_tier_goes_to_safe_then_probes_back():
    m = BudgetMonitor(BudgetConfig(escalate_after=2, recover_dwell_s=1.0, miss_window_s=1.0,
                                   miss_rate_limit=1.0, cpu_load_limit_pct=0.0))
    tiers = []
    for i in range(60):  # 6 s; the policy applies each tier one stats message later
        now = i / 10
        applied = tiers[-1] if tiers else T.FULL
        slow = applied != T.SAFE  # even decimated misses: a saturated core
        m.on_policy_stats(now, stats(p99_us=3000.0 if slow else 0.0, ticks=10 * i, tier=float(applied)))
        a = m.step(now, {})
        tiers.append(a.tier)
        if applied == T.SAFE:
            assert status(a, "latency_p99").severity == Severity.STALE
    assert tiers[1] == T.DECIMATED  # two hard samples
    first_safe = tiers.index(T.SAFE)
    assert 12 <= first_safe <= 16  # decimated applied at 0.2 s, one window (1 s) + 2 samples later
    assert T.DECIMATED in tiers[first_safe:]  # probes back up after a dwell...
    assert tiers[-1] == T.SAFE or tiers[-2] == T.SAFE  # ...and falls back while it still misses


def test_deadline_fixed_by_the_decimated_tier_stays_there():
    m = BudgetMonitor(BudgetConfig(escalate_after=2, recover_dwell_s=100.0, miss_window_s=1.0,
                                   miss_rate_limit=1.0, cpu_load_limit_pct=0.0))
    applied = T.FULL
    for i in range(60):
        m.on_policy_stats(i / 10, stats(p99_us=3000.0 if applied == T.FULL else 800.0, tier=float(applied)))
        applied = m.step(i / 10, {}).tier
    assert applied == T.DECIMATED  # 800 us is only past warn (750) there: never the safe action


def test_memory_hard_limit_asks_for_the_safe_action_temperature_warn_for_decimated():
    m = BudgetMonitor(BudgetConfig(escalate_after=1, policy_rss_limit_mb=100.0))
    a = m.step(0.0, {"policy_rss": Reading(80.0, "psutil")})
    assert status(a, "policy_rss").severity == Severity.WARN and a.tier == T.LITE
    a = m.step(0.1, {"policy_rss": Reading(100.0, "psutil"), "cpu_temperature": Reading(75.0, "file")})
    assert a.tier == T.SAFE and "policy_rss" in a.reason
    m2 = BudgetMonitor(BudgetConfig(escalate_after=1))
    assert m2.step(0.0, {"cpu_temperature": Reading(75.0, "file")}).tier == T.DECIMATED


def test_available_memory_is_a_lower_limit():
    m = BudgetMonitor(BudgetConfig(escalate_after=1, min_available_mb=200.0))
    s = status(m.step(0.0, {"memory_available": Reading(240.0, "psutil")}), "memory_available")
    assert s.severity == Severity.WARN and s.margin == pytest.approx(0.2)
    low = m.step(0.1, {"memory_available": Reading(150.0, "psutil")})
    assert status(low, "memory_available").severity == Severity.HARD


def test_stale_signals_are_reported_and_never_move_the_tier():
    m = BudgetMonitor(BudgetConfig(escalate_after=1))
    a = m.step(0.0, {"cpu_temperature": Reading(None, "auto", "no sensor")})
    s = status(a, "cpu_temperature")
    assert s.severity == Severity.STALE and "no sensor" in s.message and a.tier == T.FULL
    assert status(a, "latency_p99").severity == Severity.STALE  # no policy stats yet


def test_policy_stats_go_stale_and_the_pid_with_them():
    m = BudgetMonitor(BudgetConfig(), stats_timeout_s=2.0)
    m.on_policy_stats(0.0, stats(pid=1234))
    assert m.policy_pid(1.0) == 1234
    assert m.policy_pid(3.0) is None
    assert status(m.step(3.0, {}), "latency_p99").severity == Severity.STALE


def test_disabled_limit_is_measured_but_never_escalates():
    m = BudgetMonitor(BudgetConfig(escalate_after=1, cpu_load_limit_pct=0.0))
    a = m.step(0.0, {"cpu_load": Reading(100.0, "psutil")})
    assert a.tier == T.FULL and status(a, "cpu_load").value == 100.0


def test_estimated_values_are_labelled():
    m = BudgetMonitor(BudgetConfig())
    s = status(m.step(0.0, {"cpu_temperature": Reading(50.0, "estimated", "estimated from CPU load")}),
               "cpu_temperature")
    assert "estimated" in s.message and "estimated" in s.source


def test_miss_rate_window_and_counter_reset():
    w = MissRateWindow(window_s=1.0)
    assert w.rate() is None
    w.add(0.0, 0, 0)
    w.add(0.5, 5, 50)
    assert w.rate() == pytest.approx(0.1)
    for i in range(1, 30):  # 1 s later only the new, clean ticks count
        w.add(0.5 + 0.1 * i, 5, 50 + 10 * i)
    assert w.rate() == pytest.approx(0.0)
    w.add(4.0, 0, 10)  # the policy node restarted: counters went down
    assert w.rate() is None


def test_wrong_stats_length_is_a_clear_error():
    with pytest.raises(ValueError, match="policy stats need 8 values"):
        BudgetMonitor(BudgetConfig()).on_policy_stats(0.0, [1.0, 2.0])


def test_reconfigure_keeps_the_tier_and_uses_new_limits():
    m = BudgetMonitor(BudgetConfig(escalate_after=1, policy_rss_limit_mb=1000.0))
    assert m.step(0.0, {"policy_rss": Reading(500.0, "psutil")}).tier == T.FULL
    m.reconfigure(BudgetConfig(escalate_after=1, policy_rss_limit_mb=400.0))
    assert m.step(0.1, {"policy_rss": Reading(500.0, "psutil")}).tier == T.SAFE
