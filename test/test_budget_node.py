"""budget_monitor_node with real rclpy nodes, real processes and real load.

The temperature comes from the file source (this machine has no thermal sensor; the file has the
sysfs format, so the same path works with a real thermal zone). Memory and CPU load are real:
a subprocess that allocates resident memory, and busy-looping burner processes.
"""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from std_msgs.msg import Float64MultiArray, UInt8

from lowrl_ros.bench.budget import (
    CpuBurner,
    MemoryHog,
    PolicyNodeProcess,
    StandInPolicy,
    policy_node_available,
    start_monitor,
    stop_process,
)
from lowrl_ros.core.runtime.tiers import ComputeTier as T
from lowrl_ros.ros.budget_monitor_node import BudgetMonitorNode
from lowrl_ros.ros.diagnostics import level_of
from lowrl_ros.ros.qos import LATCHED, STATS
from rosutil import spin_for, spin_until

pytestmark = pytest.mark.ros

OK, WARN, ERROR, STALE = 0, 1, 2, 3


class Listener:
    """Records /lowrl/compute_tier (latched QoS), /diagnostics and /lowrl/policy/stats."""

    def __init__(self, context, name: str = "budget_test_listener") -> None:
        self.node = rclpy.create_node(name, context=context)
        # (the publisher's source timestamp in s, tier): when the monitor sent it, not when this
        # executor next spun (a test that stops a process meanwhile would skew gaps between changes)
        self.tiers: list[tuple[float, int]] = []
        self.diag: dict[str, object] = {}
        self.stats: list[float] | None = None
        self.node.create_subscription(UInt8, "/lowrl/compute_tier",
                                      lambda m, info: self.tiers.append((info["source_timestamp"] / 1e9, m.data)),
                                      LATCHED)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 10)
        self.node.create_subscription(Float64MultiArray, "/lowrl/policy/stats",
                                      lambda m: setattr(self, "stats", list(m.data)), STATS)

    def _on_diag(self, msg: DiagnosticArray) -> None:
        for s in msg.status:
            self.diag[s.name] = s

    @property
    def tier(self) -> int | None:
        return self.tiers[-1][1] if self.tiers else None

    def kv(self, name: str) -> dict[str, str]:
        return {k.key: k.value for k in self.diag[name].values}

    def level(self, name: str) -> int | None:
        return level_of(self.diag[name]) if name in self.diag else None


def monitor_node(context, **params) -> BudgetMonitorNode:
    base = {"cpu_load_limit_pct": 0.0,  # the machine is shared: other people's load is not our breach
            "publish_period_s": 0.2, "sample_rate_hz": 20.0, "escalate_after": 2, "recover_dwell_s": 0.6}
    base.update(params)
    overrides = [Parameter(k, value=v) for k, v in base.items()]
    return BudgetMonitorNode(context=context, parameter_overrides=overrides)


@pytest.fixture
def rig(ros_context, tmp_path):
    """An in-process monitor reading a file temperature, and a listener, on one executor."""
    temp = tmp_path / "temp"
    temp.write_text("40000\n")
    nodes = []
    executor = SingleThreadedExecutor(context=ros_context)

    def make(**params):
        node = monitor_node(ros_context, temperature_source="file", temperature_file=str(temp), **params)
        listener = Listener(ros_context)
        for n in (node, listener.node):
            executor.add_node(n)
            nodes.append(n)
        return node, listener

    yield executor, make, temp
    for n in nodes:
        executor.remove_node(n)
        n.destroy_node()
    executor.shutdown()


def test_temperature_ramp_escalates_to_safe_then_steps_back_up_after_dwells(rig):
    executor, make, temp = rig
    node, ear = make()
    name = "lowrl/budget/cpu_temperature"
    assert spin_until(executor, lambda: ear.level(name) == OK and ear.tier == T.FULL)
    temp.write_text("72000\n")  # past the warn level 25 + 60 * 0.75 = 70 C
    assert spin_until(executor, lambda: ear.tier == T.DECIMATED and ear.level(name) == WARN)
    temp.write_text("90000\n")  # past the hard limit 85 C
    assert spin_until(executor, lambda: ear.tier == T.SAFE and ear.level(name) == ERROR)
    kv = ear.kv(name)
    assert float(kv["value"]) == pytest.approx(90.0) and float(kv["limit"]) == 85.0
    assert float(kv["margin"]) < 0 and kv["source"].startswith("file")
    # The tier topic changes at once; the tier's diagnostic follows with the next diagnostics cycle.
    assert spin_until(executor, lambda: level_of(ear.diag["lowrl/budget/tier"]) == ERROR)
    assert ear.diag[name].hardware_id  # the host name
    cool_from = len(ear.tiers)
    temp.write_text("30000\n")
    assert spin_until(executor, lambda: ear.tier == T.FULL, timeout=15)
    changes = []  # (time, tier) at each distinct change after cooling
    for t, v in ear.tiers[cool_from:]:
        if not changes or v != changes[-1][1]:
            changes.append((t, v))
    assert [v for _, v in changes] == [T.SAFE, T.DECIMATED, T.LITE, T.FULL][-len(changes):]
    assert [v for _, v in changes][-3:] == [T.DECIMATED, T.LITE, T.FULL]  # one tier at a time
    gaps = [b[0] - a[0] for a, b in zip(changes[-3:], changes[-2:])]
    assert all(g >= 0.5 for g in gaps), gaps  # each step up waited a dwell (0.6 s, less one sample)


def test_a_monitor_started_hot_never_publishes_full_first(rig):
    executor, make, temp = rig
    temp.write_text("90000")  # e.g. the monitor restarted while the robot is hot
    node, ear = make()
    assert spin_until(executor, lambda: ear.tier == T.SAFE)
    assert ear.tiers[0][1] == T.SAFE, ear.tiers[:3]


def test_a_failing_probe_is_stale_and_the_monitor_keeps_running(rig):
    executor, make, temp = rig
    node, ear = make()
    name = "lowrl/budget/cpu_temperature"
    assert spin_until(executor, lambda: ear.level(name) == OK)
    temp.write_text("garbage")
    assert spin_until(executor, lambda: ear.level(name) == STALE)
    assert "probe failed" in ear.diag[name].message and "millidegrees" in ear.diag[name].message
    n = len(ear.tiers)
    assert spin_until(executor, lambda: len(ear.tiers) >= n + 3)  # still publishing, every 0.2 s
    assert ear.tier == T.FULL  # STALE never moves the tier
    temp.unlink()
    assert spin_until(executor, lambda: "No such file" in ear.diag[name].message)
    temp.write_text("41000")
    assert spin_until(executor, lambda: ear.level(name) == OK)


def settle_start_up(executor) -> None:
    """Let the monitor's start-up publications arrive: on the first change, then the first judged
    tier (escalate_after samples in). Counted before they were all in, a second one 26 ms later
    failed CI's count once."""
    spin_for(executor, 1.0)


def test_a_late_subscriber_gets_the_current_tier_at_once(rig, ros_context):
    executor, make, temp = rig
    node, ear = make(publish_period_s=60.0)  # only the latched copy can deliver it quickly
    temp.write_text("90000")
    assert spin_until(executor, lambda: ear.tier == T.SAFE)
    settle_start_up(executor)
    late = Listener(ros_context, "late_listener")
    executor.add_node(late.node)
    try:
        assert spin_until(executor, lambda: late.tier == T.SAFE, timeout=10)
        assert len(late.tiers) == 1  # the latched sample, not a periodic re-publish
    finally:
        executor.remove_node(late.node)
        late.node.destroy_node()


def test_the_policy_node_started_and_restarted_applies_the_current_tier_at_once(rig):
    """The project's policy_node (a real process) learns the tier from the latched topic alone."""
    # Both are committed: a missing one is a broken checkout, not a reason to skip.
    assert policy_node_available(), "lowrl_ros/ros/policy_node.py or models/pendulum_sac_int8.onnx is missing"
    executor, make, temp = rig
    temp.write_text("90000")
    node, ear = make(publish_period_s=60.0)  # no periodic re-publish: only the latched sample
    assert spin_until(executor, lambda: ear.tier == T.SAFE)
    settle_start_up(executor)
    published = len(ear.tiers)
    for _ in range(2):  # start, then restart
        with PolicyNodeProcess() as policy:
            assert spin_until(executor, lambda: ear.stats is not None and int(ear.stats[7]) == policy.pid
                              and ear.stats[6] == T.SAFE, timeout=30), ear.stats
    assert len(ear.tiers) == published  # the monitor sent nothing new: the policy got the latched tier


def test_live_parameters_validated_by_the_config_and_applied(rig):
    executor, make, temp = rig
    node, ear = make()
    bad = node.set_parameters([Parameter("ambient_c", value=90.0)])[0]
    assert not bad.successful and "below temperature_limit_c" in bad.reason
    bad = node.set_parameters([Parameter("temperature_source", value="thermocouple")])[0]
    assert not bad.successful and "auto, file, estimated, none" in bad.reason
    bad = node.set_parameters([Parameter("headroom", value=3.0)])[0]
    assert not bad.successful  # outside the descriptor's range
    assert node.config.ambient_c == 25.0 and node.config.headroom == 0.25
    # a valid live change takes effect: 40 C is past a 35 C hard limit -> safe action
    assert spin_until(executor, lambda: ear.tier == T.FULL)
    ok = node.set_parameters([Parameter("temperature_limit_c", value=35.0), Parameter("ambient_c", value=20.0)])
    assert all(r.successful for r in ok)
    assert spin_until(executor, lambda: ear.tier == T.SAFE)
    node.set_parameters([Parameter("sample_rate_hz", value=50.0)])  # timers rebuilt, still sampling
    assert node.config.sample_rate_hz == 50.0
    n = len(ear.tiers)
    assert spin_until(executor, lambda: len(ear.tiers) > n)


def test_bad_config_at_start_is_a_clear_error(ros_context):
    with pytest.raises(ValueError, match="temperature_file"):
        monitor_node(ros_context, temperature_source="file")
    r = subprocess.run([sys.executable, "-m", "lowrl_ros.ros.budget_monitor_node", "--ros-args",
                        "-p", "process_names:=[a,b]"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "one limit (MB) per name" in r.stderr and "Traceback" not in r.stderr


def test_memory_hog_escalates_and_recovers(rig, tmp_path):
    executor, make, temp = rig
    with MemoryHog(name="lowrl_budget_hog.py", directory=tmp_path) as hog:
        limit = hog.rss_mb() + 60.0  # relative to the measured baseline: works on any machine
        node, ear = make(process_names=["lowrl_budget_hog.py"], process_rss_limits_mb=[limit])
        name = "lowrl/budget/process_rss/lowrl_budget_hog.py"
        assert spin_until(executor, lambda: ear.level(name) == OK and ear.tier == T.FULL)
        hog.alloc(100)
        assert spin_until(executor, lambda: ear.tier == T.SAFE and ear.level(name) == ERROR)
        assert float(ear.kv(name)["value"]) > limit
        hog.free()
        assert spin_until(executor, lambda: ear.level(name) == OK, timeout=5)
        assert spin_until(executor, lambda: ear.tier == T.FULL, timeout=15)


def _misses_during(executor, ear, seconds: float) -> float:
    m0 = ear.stats[2]
    spin_for(executor, seconds)
    return ear.stats[2] - m0


def test_cpu_burners_escalate_the_policy_misses_stop_and_it_recovers_after_the_dwell(ros_context):
    """Real processes: a policy-shaped process, the monitor, and two burners on the policy's core.

    The policy runs at nice 10 so the burners (nice 0) dominate its core, as a higher-priority
    neighbour would, whatever else runs on this shared machine.
    """
    executor = SingleThreadedExecutor(context=ros_context)
    ear = Listener(ros_context)
    executor.add_node(ear.node)
    shape = dict(period_ms=10.0, deadline_ms=5.0, work=100, core=0, nice=10)
    policy = StandInPolicy(**shape)
    monitor = None
    try:
        assert spin_until(executor, lambda: ear.stats is not None and ear.stats[3] > 50, timeout=30)
        spin_for(executor, 1.0)  # fill the latency window
        base_p99 = ear.stats[1]
        # without a monitor: the policy stays on the full tier and misses its deadline
        with CpuBurner(0), CpuBurner(0):
            # Up to 12 s, 3 s at a time: how fast the burners bite depends on the host's scheduler.
            spent, misses_alone = 0.0, 0.0
            while misses_alone < 6 and spent < 12.0:
                misses_alone += _misses_during(executor, ear, 3.0)
                spent += 3.0
        if misses_alone < 6:
            # Seen on an otherwise idle VM: the host scheduler kept the policy nearly on time
            # despite the burners (a few misses in 12 s). Then the tier escalates and recovers
            # while the burners still run, and there is too little to judge reliably; `lowrl bench
            # budget` measures the same behaviour over longer phases.
            # Not a skip: an xfail (never strict) that carries the numbers keeps the untested claim visible.
            pytest.xfail(f"two CPU burners made the policy miss only {misses_alone:.0f} deadlines in {spent:.0f} s "
                         f"(needs 6; baseline p99 {base_p99:.0f} us): too little to judge the monitor on this host")
        # (one miss of slack: the switch itself may cost one when the burners barely bite)
        slack = max(1.0, misses_alone * 3.0 / spent / 2)
        limit = max(3.0 * base_p99, 2000.0)
        monitor = start_monitor({"latency_p99_limit_us": limit, "miss_rate_limit": 0.2, "cpu_load_limit_pct": 0.0,
                                 "sample_rate_hz": 20.0, "escalate_after": 3, "recover_dwell_s": 1.0,
                                 "temperature_source": "none", "publish_period_s": 0.1})
        assert spin_until(executor, lambda: ear.tier == T.FULL, timeout=30)
        start = len(ear.tiers) - 1  # (a loaded host may have moved the tier before this: not judged)
        with CpuBurner(0), CpuBurner(0):
            assert spin_until(executor, lambda: ear.tier is not None and ear.tier >= T.LITE, timeout=20), (
                f"p99 {ear.stats[1]:.0f} us vs limit {limit:.0f} us (baseline {base_p99:.0f})")
            # the policy applies it (its stats report the tier it runs) ...
            assert spin_until(executor, lambda: ear.stats[6] == ear.tier, timeout=5)
            # ... and, under the same burners, its deadline misses (nearly) stop growing: judged on
            # the best of up to three 3 s windows, since the monitor may still be escalating in the
            # first one (seen on a host saturated by other work: 5 misses there against 6 alone).
            misses_monitored = []
            while len(misses_monitored) < 3 and (not misses_monitored or min(misses_monitored) > slack):
                misses_monitored.append(_misses_during(executor, ear, 3.0))
            # a policy process restarted while escalated gets the current tier at once (latched)
            current = ear.tier
            # Keep spinning while it shuts down (seconds, starved by the burners): the tier topic
            # keeps only its newest sample, so a blocking wait here would lose tier changes.
            policy.proc.send_signal(signal.SIGINT)
            spin_until(executor, lambda: policy.proc.poll() is not None, timeout=10)
            policy.stop()  # SIGKILL if it has not ended
            ear.stats = None
            policy = StandInPolicy(**shape)
            # (its first stats may go out before DDS has handed it the latched tier: wait for it)
            assert spin_until(executor, lambda: ear.stats is not None and ear.stats[6] in (current, ear.tier),
                              timeout=30), (current, ear.tiers)
        assert min(misses_monitored) <= slack, (misses_monitored, misses_alone, spent)
        # Back to FULL once the burners stop, one tier per dwell: each step up comes at least one
        # dwell (1 s) after the tier's previous change. (Not "one dwell after the burners stop": on a
        # loaded host the monitor may escalate past LITE, and a step down to LITE while the burners
        # still run is right.) Times are the monitor's send times; a change is seen at worst in the
        # next periodic re-publish (0.1 s), plus one 20 Hz sample of the monitor's own timing.
        assert spin_until(executor, lambda: ear.tier == T.FULL, timeout=30), ear.tiers
        seen = ear.tiers[start:]
        changes = [seen[0]] + [cur for prev, cur in zip(seen, seen[1:]) if cur[1] != prev[1]]
        gaps_before_step_up = [t1 - t0 for (t0, tier0), (t1, tier1) in zip(changes, changes[1:]) if tier1 < tier0]
        assert gaps_before_step_up and min(gaps_before_step_up) >= 1.0 - 0.1 - 0.05, changes
    finally:
        if monitor is not None:
            stop_process(monitor)
        policy.stop()
        executor.remove_node(ear.node)
        ear.node.destroy_node()
        executor.shutdown()


def test_a_launcher_rename_gives_one_monitor_node_and_stats_remaps_apply(ros_context):
    """`ros2 launch` passes `-r __node:=NAME`; the stats reader helper must not take that name."""
    executor = SingleThreadedExecutor(context=ros_context)
    ear = Listener(ros_context)
    executor.add_node(ear.node)
    proc = subprocess.Popen([sys.executable, "-m", "lowrl_ros.ros.budget_monitor_node", "--ros-args",
                             "-r", "__node:=bm_renamed", "-r", "/lowrl/policy/stats:=/elsewhere/stats",
                             "-p", "cpu_load_limit_pct:=0.0"])
    try:
        def graph():
            return ear.node.get_node_names()

        def readers():
            return [i.node_name for i in ear.node.get_subscriptions_info_by_topic("/elsewhere/stats")]

        # Discovery reports the two nodes and the helper's subscription in any order: wait for all.
        assert spin_until(executor, lambda: readers() and "bm_renamed" in graph(), timeout=30), graph()
        assert graph().count("bm_renamed") == 1
        assert readers() == ["bm_renamed_stats_reader"]
    finally:
        stop_process(proc)
        executor.remove_node(ear.node)
        ear.node.destroy_node()
        executor.shutdown()
