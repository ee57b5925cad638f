"""The monitor model (core/monitor/model.py) on an injected clock: what the rqt plugin and `lowrl top` show."""
from __future__ import annotations

import numpy as np

from lowrl_ros.core.monitor.model import NOT_RUNNING, OK, STALE, MonitorModel, split_name
from lowrl_ros.core.runtime.policy_stats import PolicyStats
from lowrl_ros.core.runtime.step_row import encode_step, row_size
from lowrl_ros.core.types import Level


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def stats(misses: float, p99: float = 800.0, tier: float = 0) -> list[float]:
    return PolicyStats(300.0, p99, misses, 10.0, 20000.0, 20000.0, tier, 1.0).to_list()


def row(version: int, estop: bool = False) -> np.ndarray:
    buf = np.zeros(row_size(3, 1))
    encode_step(buf, stamp=1.0, safe=False, intervention=False, estop=estop, policy_version=version,
                obs=np.zeros(3), policy_action=np.zeros(1), action=np.zeros(1), command=np.zeros(1))
    return buf


def test_split_name_takes_the_namespace_off_a_published_status_name():
    assert split_name("lowrl/policy/tier") == ("/", "lowrl/policy/tier")
    assert split_name("r1/lowrl/policy/tier") == ("/r1", "lowrl/policy/tier")
    assert split_name("fleet/r2/lowrl/budget/tier") == ("/fleet/r2", "lowrl/budget/tier")


def test_an_empty_namespace_shows_every_source_not_running():
    snap = MonitorModel(Clock()).snapshot("/")
    assert set(snap.sources.values()) == {NOT_RUNNING}
    assert snap.p99_us is None and snap.tier_applied == "-" and snap.running_version is None


def test_tier_latency_and_misses_per_second_from_the_stats_stream():
    clock = Clock()
    m = MonitorModel(clock)
    m.on_tier("/", 1)
    m.on_status("/", "lowrl/budget/tier", Level.WARN, "compute tier lite",
                {"tier": "lite", "last_change": "full -> lite: cpu_load 95 %"})
    for i in range(5):
        m.on_stats("/", stats(misses=10 * i, tier=1))
        clock.t += 1.0
    snap = m.snapshot("/")
    assert (snap.tier_published, snap.tier_applied) == ("lite", "lite")
    assert snap.tier_reason == "full -> lite: cpu_load 95 %"
    assert snap.p99_us == 800.0 and snap.deadline_us == 20000.0 and snap.misses == 40
    assert snap.misses_per_s == 10.0
    assert snap.sources["policy"] == OK and snap.sources["finetune"] == NOT_RUNNING


def test_a_source_goes_stale_when_not_heard():
    clock = Clock()
    m = MonitorModel(clock, stale_s=3.0)
    m.on_stats("/", stats(0))
    clock.t += 3.0
    assert m.source_state("/", "policy") == OK
    clock.t += 0.5
    assert m.snapshot("/").sources["policy"] == STALE
    m.on_stats("/", stats(0))
    assert m.snapshot("/").sources["policy"] == OK


def test_versions_swaps_returns_rejections_and_rollbacks():
    m = MonitorModel(Clock())
    m.on_step("/", row(1))
    m.on_episode("/", [0, -300.0, 200, 0])
    m.on_episode("/", [1, -100.0, 200, 0])
    m.on_step("/", row(2))
    m.on_step("/", row(2))
    m.on_episode("/", [2, -150.0, 200, 0])
    for _ in range(2):  # the same rejection, repeated at 1 Hz, counts once
        m.on_status("/", "lowrl/policy/policy", Level.ERROR, "swap rejected",
                    {"version": "2", "swap_state": "rejected", "swap_path": "/tmp/v3.onnx", "swap_version": "3"})
    m.on_step("/", row(1))
    snap = m.snapshot("/")  # no fine-tuner: what this view saw itself, and no rollbacks
    assert (snap.swaps, snap.rejections, snap.rollbacks) == (2, 1, 0)
    for _ in range(2):  # the fine-tuner's counter keys (since it started) win; its text is for people only
        m.on_status("/", "lowrl/finetune/versions", Level.OK, "v2 returned -150.0, below the best",
                    {"running": "2", "current": "2", "best": "1", "next": "4", "swaps": "5", "rejections": "2",
                     "rollbacks": "3"})
    m.on_status("/", "lowrl/finetune/learner", Level.OK, "learning", {"state": "learning", "updates": "40"})
    m.on_status("/", "lowrl/trainer/stream", Level.OK, "published v1", {"version": "1"})
    snap = m.snapshot("/")
    assert snap.running_version == 1 and snap.best_version == 1
    assert snap.returns == {1: (-200.0, 2), 2: (-150.0, 1)}
    assert (snap.swaps, snap.rejections, snap.rollbacks) == (5, 2, 3)
    assert snap.last_decision.startswith("v2 returned") and snap.episodes == 3 and snap.last_return == -150.0
    assert (snap.learner_state, snap.learner_updates, snap.trainer_stage) == ("learning", "40", "published v1")


def test_the_off_board_trainer_counts_where_no_fine_tuner_runs_on_the_robot():
    m = MonitorModel(Clock())
    m.on_step("/", row(1))
    m.on_step("/", row(2))
    m.on_status("/", "lowrl/trainer/finetune", Level.OK, "rollback: v4 carries v1's weights",
                {"updates": "90", "current": "4", "best": "1", "rejections": "1", "rollbacks": "1"})
    snap = m.snapshot("/")
    assert (snap.swaps, snap.rejections, snap.rollbacks) == (1, 1, 1)


def test_budget_signals_against_their_limits_and_two_robots_kept_apart():
    m = MonitorModel(Clock())
    m.on_status("/r1", "lowrl/budget/cpu_temperature", Level.WARN, "72 C",
                {"value": "72", "unit": "C", "warn": "70", "limit": "85", "margin": "13"})
    m.on_status("/r2", "lowrl/budget/memory", Level.OK, "ok", {"value": "", "unit": "MB", "warn": "", "limit": ""})
    assert m.namespaces() == ["/r1", "/r2"]
    (sig,) = m.snapshot("/r1").signals
    assert (sig.name, sig.value, sig.unit, sig.warn, sig.limit, sig.level) == ("cpu_temperature", 72, "C", 70, 85,
                                                                                 Level.WARN)
    (mem,) = m.snapshot("r2").signals
    assert mem.value is None and mem.limit is None
    assert m.snapshot("/r1").sources["budget"] == OK and m.snapshot("/r2").sources["policy"] == NOT_RUNNING


def test_estop_topics_and_state_come_from_the_policy_status_else_the_robot_file_defaults():
    m = MonitorModel(Clock())
    m.on_step("/", row(1, estop=True))
    snap = m.snapshot("/")
    assert (snap.estop_latched, snap.estop_topic, snap.estop_reset_topic) == (True, "estop", "estop_reset")
    m.on_status("/", "lowrl/policy/estop", Level.OK, "e-stop clear (safety/stop)",
                {"topic": "safety/stop", "reset_topic": "safety/reset", "latched": "False"})
    snap = m.snapshot("/")
    assert (snap.estop_latched, snap.estop_topic, snap.estop_reset_topic) == (False, "safety/stop", "safety/reset")


def test_malformed_samples_are_ignored():
    m = MonitorModel(Clock())
    m.on_stats("/", [1.0, 2.0])
    m.on_step("/", [1.0, 2.0, 3.0])
    m.on_episode("/", [0, float("nan")])
    m.on_status("/", "other/thing", Level.OK, "", {})
    assert m.namespaces() == [] or set(m.snapshot("/").sources.values()) == {NOT_RUNNING}


def test_time_series_keep_the_last_window_on_the_models_clock():
    clock = Clock()
    m = MonitorModel(clock, window_s=10.0)
    for i in range(20):  # 20 s of stats at 1 Hz: p99 = 100 * i, one miss at i = 15, the tier lite from i = 12
        m.on_stats("/", stats(misses=int(i >= 15), p99=100.0 * i, tier=int(i >= 12)))
        m.on_status("/", "lowrl/budget/cpu_load", Level.OK, "", {"value": str(5 * i), "unit": "%"})
        clock.t += 1.0
    s = m.snapshot("/").series  # now = 120: samples at 110..119 are inside the last 10 s
    assert (s.now, s.window_s) == (120.0, 10.0)
    assert [t for t, _, _ in s.latency] == [110.0 + i for i in range(10)]
    assert [p99 for _, _, p99 in s.latency] == [100.0 * i for i in range(10, 20)]
    assert [tier for _, tier in s.tier] == [0, 0] + [1] * 8
    assert s.misses == ((115.0, 1),)
    assert s.signals["cpu_load"] == tuple((110.0 + i, 5.0 * (10 + i)) for i in range(10))
    clock.t += 100.0  # the feed stops: nothing old is handed out as if recent
    s = m.snapshot("/").series
    assert s.latency == () and s.tier == () and s.signals == {"cpu_load": ()}


def test_returns_swaps_and_rollbacks_are_timed_events():
    clock = Clock()
    m = MonitorModel(clock)
    m.on_step("/", row(1))
    m.on_episode("/", [0, -300.0, 200, 0])
    versions = {"current": "2", "best": "1", "swaps": "1", "rejections": "0", "rollbacks": "0"}
    m.on_status("/", "lowrl/finetune/versions", Level.OK, "", versions)  # the base: no event
    clock.t = 105.0
    m.on_step("/", row(2))
    m.on_episode("/", [1, -200.0, 200, 0])
    clock.t = 110.0
    m.on_status("/", "lowrl/finetune/versions", Level.WARN, "rollback", {**versions, "current": "3", "rollbacks": "1"})
    m.on_status("/", "lowrl/finetune/versions", Level.WARN, "rollback", {**versions, "current": "3", "rollbacks": "1"})
    m.on_step("/", row(3))
    s = m.snapshot("/").series
    assert s.returns == ((100.0, 1, -300.0), (105.0, 2, -200.0))
    assert s.events == ((105.0, "swap", 2), (110.0, "rollback", 3), (110.0, "swap", 3))
