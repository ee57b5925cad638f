"""The fixed-rate schedule and control loop (core/runtime/realtime.py) on a fake clock: no ROS, no wall clock.

The loop runs on the test's own thread (:meth:`ControlLoop.run`), with a clock that only the fake
sleep and the ticks advance, so every deadline is exact and the test cannot be disturbed by load.
"""
from __future__ import annotations

import numpy as np
import pytest

from lowrl_ros.core.runtime.realtime import ControlLoop, PhaseLock, TickSchedule


class FakeClock:
    """A monotonic clock that moves only when slept on (or when a tick spends time)."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


def run_loop(period, ticks, work=lambda n, clock: 0.0, on_tick=None):
    """Run a ControlLoop for ``ticks`` ticks; ``work(n, clock)`` is the time tick n spends. Returns the
    (due, skipped, woke at) of every tick and the loop."""
    clock, seen = FakeClock(), []

    def tick(due, skipped):
        seen.append((due, skipped, clock()))
        clock.t += work(len(seen), clock)
        if on_tick is not None:
            on_tick(len(seen), loop)
        return len(seen) < ticks

    loop = ControlLoop(period, tick, clock=clock, sleep=clock.sleep)
    loop.run()
    return seen, loop, clock


def test_tick_schedule_does_not_drift_and_counts_skipped_periods():
    schedule = TickSchedule(0.01)
    # Callbacks run late by varying amounts; the due times stay on the 10 ms grid.
    dues = [schedule.tick(t)[0] for t in (1.0, 1.0104, 1.0209, 1.0301, 1.0408)]
    np.testing.assert_allclose(dues, [1.0, 1.01, 1.02, 1.03, 1.04])
    due, skipped = schedule.tick(1.0755)  # a stall: ticks due at 1.05 and 1.06 never ran
    assert skipped == 2 and due == pytest.approx(1.07)
    assert schedule.tick(1.0801) == (pytest.approx(1.08), 0)


def test_loop_ticks_on_absolute_deadlines_whatever_each_tick_costs():
    seen, _, _ = run_loop(0.02, 6, work=lambda n, clock: 0.003 * n)  # ticks of growing cost, all under a period
    dues = [due for due, _, _ in seen]
    np.testing.assert_allclose(np.diff(dues), 0.02)  # no sleep-after-compute: the grid holds
    assert all(skipped == 0 for _, skipped, _ in seen)
    np.testing.assert_allclose([woke for _, _, woke in seen], dues)  # woke exactly when due


def test_a_stall_passes_the_skipped_periods_and_keeps_the_grid():
    seen, _, _ = run_loop(0.01, 4, work=lambda n, clock: 0.035 if n == 2 else 0.0)
    (d1, s1, _), (d2, s2, _), (d3, s3, _), (d4, s4, _) = seen
    assert (s1, s2, s3, s4) == (0, 0, 2, 0)  # tick 2 overran by 3.5 periods: the ones due at +0.02, +0.03 never ran
    assert d3 == pytest.approx(d1 + 0.04) and d4 == pytest.approx(d1 + 0.05)


def test_sleeps_are_cut_so_stop_and_retime_act_within_max_sleep():
    _, _, clock = run_loop(1.0, 2)  # a slow tier: one tick a second
    assert clock.sleeps and max(clock.sleeps) <= ControlLoop.MAX_SLEEP_S


def test_retime_starts_a_fresh_schedule_at_once():
    def on_tick(n, loop):
        if n == 3:
            loop.retime(0.04)  # a tier change in the middle of a 10 ms period

    seen, loop, _ = run_loop(0.01, 6, on_tick=on_tick)
    dues = [due for due, _, _ in seen]
    np.testing.assert_allclose(np.diff(dues[:3]), 0.01)
    assert dues[3] == pytest.approx(dues[2])  # the new period's first tick came at once, not 10 ms later
    np.testing.assert_allclose(np.diff(dues[3:]), 0.04)
    assert loop.period_s == 0.04
    schedule = loop.schedule
    assert not loop.retime(0.04) and loop.schedule is schedule  # the same period: the grid is kept


def test_an_exception_in_a_tick_is_reported_and_the_loop_goes_on():
    clock, errors, ticks = FakeClock(), [], []

    def tick(due, skipped):
        ticks.append(due)
        if len(ticks) == 2:
            raise RuntimeError("policy exploded")
        return len(ticks) < 4

    ControlLoop(0.01, tick, on_error=errors.append, clock=clock, sleep=clock.sleep).run()
    assert [str(e) for e in errors] == ["policy exploded"]
    np.testing.assert_allclose(np.diff(ticks), 0.01)  # the failed tick kept its place on the grid


def test_stop_ends_the_loop_and_on_start_runs_first():
    clock, calls = FakeClock(), []
    loop = ControlLoop(0.01, lambda due, skipped: calls.append("tick") or True,
                       on_start=lambda: calls.append("start"), clock=clock,
                       sleep=lambda s: (clock.sleep(s), loop.stop() if len(calls) >= 3 else None))
    loop.run()
    assert calls == ["start", "tick", "tick"]


class Sensor:
    """A robot publishing every ``period`` s from ``first`` on, each sample arriving ``delay(k)`` late: the age
    of the newest sample that has arrived by a time (what the policy node's builder reports)."""

    def __init__(self, period, first, delay=lambda k: 0.0):
        self.period, self.first, self.delay = period, first, delay

    def age(self, t):
        k = int((t - self.first) // self.period)
        while k >= 0 and self.first + k * self.period + self.delay(k) > t:
            k -= 1  # sent but still in flight: the one before is the newest
        return None if k < 0 else t - (self.first + k * self.period + self.delay(k))


def run_locked(period, sensor, ticks, **lock):
    """Run a phase-locked ControlLoop (fake clock at 100 s) for ``ticks`` ticks: (due times, lags, the lock)."""
    clock, dues = FakeClock(), []
    phase = PhaseLock(sensor.age, **lock)

    def tick(due, skipped):
        assert skipped == 0
        dues.append(due)
        return len(dues) < ticks

    ControlLoop(period, tick, clock=clock, sleep=clock.sleep, phase=phase).run()
    return np.array(dues), np.array([sensor.age(d) for d in dues]), phase


@pytest.mark.parametrize("phase_ms", [0.2, 2.5, 4.6, 4.95])
def test_the_phase_lock_brings_the_ticks_just_after_the_sensor_from_any_phase_at_launch(phase_ms):
    # A 200 Hz robot (the sim robot's 5 ms loop) and 50 Hz ticks whose launch put them phase_ms after a sample.
    sensor = Sensor(0.005, 100.0 - phase_ms * 1e-3)
    dues, lags, lock = run_locked(0.02, sensor, 100)
    np.testing.assert_allclose(lags[:50], phase_ms * 1e-3, atol=1e-9)  # a second of new samples before it acts
    np.testing.assert_allclose(lags[80:], min(phase_ms * 1e-3, 0.001), atol=2e-5)  # <= 1 ms after each arrival
    assert np.diff(dues).min() >= 0.02 * 0.95 - 1e-12 and np.diff(dues).max() <= 0.02 + 1e-12  # <= 5 % a tick
    assert lock.values()["sensor_lag_ms"] == f"{min(phase_ms, 1.0):.2f}"
    free_dues, free_lags, _ = run_locked(0.02, sensor, 100, offset_s=1.0)  # an offset no lag reaches: free-running
    np.testing.assert_allclose(np.diff(free_dues), 0.02)
    np.testing.assert_allclose(free_lags, phase_ms * 1e-3, atol=1e-9)  # without it: the launch's phase for good


def test_the_lock_holds_under_arrival_jitter_and_never_loses_the_sample():
    rng = np.random.default_rng(0)
    jitter = rng.uniform(0.0, 3e-4, 2000)  # up to 0.3 ms of DDS and wake-up delay on each sample
    sensor = Sensor(0.005, 100.0 - 0.0049, delay=lambda k: jitter[k % 2000])
    _, lags, _ = run_locked(0.02, sensor, 300)
    # always a fresh sample (never the one before: 5 ms older), within the offset and the jitter of it
    assert 0.0 <= lags[80:].min() and lags[80:].max() <= 0.0013
    assert lags[80:].mean() > 0.0006  # and not pulled ever earlier by the jitter


def test_one_late_sample_does_not_move_a_locked_loop():
    # Locked 1 ms after each arrival (phase 4.95 ms at launch), then sample 440 (due near tick 109) arrives 3 ms late.
    base = Sensor(0.005, 100.0 - 0.00495)
    _, _, lock = run_locked(0.02, base, 100)
    late = Sensor(0.005, 100.0 - 0.00495, delay=lambda k: 0.003 if k == 440 else 0.0)
    _, lags, late_lock = run_locked(0.02, late, 150)
    assert (lags[100:] > 0.004).sum() == 1  # that one tick acted on the sample before ...
    np.testing.assert_allclose(lags[111:], 0.001, atol=2e-5)  # ... and the lock held
    assert late_lock.shifted_s == pytest.approx(lock.shifted_s, abs=2e-5)


@pytest.mark.parametrize("sensor", [Sensor(0.001, 99.9993),  # a 1 kHz robot loop: every lag is under the offset
                                    Sensor(0.05, 99.99),  # a sensor slower than the loop
                                    Sensor(0.005, 1e9)])  # a silent one
def test_the_lock_leaves_the_schedule_alone_where_there_is_nothing_to_lock_to(sensor):
    dues, _, lock = run_locked(0.02, sensor, 150)
    np.testing.assert_allclose(np.diff(dues), 0.02)
    assert lock.shifted_s == 0.0


def test_a_phase_lock_needs_a_positive_offset():
    with pytest.raises(ValueError, match="offset must be > 0"):
        PhaseLock(lambda t: None, offset_s=0.0)
