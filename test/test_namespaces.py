"""Two robots on one DDS domain: each robot's policy node and budget monitor in its own namespace (what
`robot.launch.yaml namespace:=r1` does), and nothing crosses between them.

Robot r1's budget monitor reads a CPU whose frequency is capped (a sysfs tree in the kernel's format: this
VM has no cpufreq), so it asks r1 for a cheaper tier; robot r2's monitor has every limit off. Joint states
go to r1 only. Then: only r1 answers with its policy, only r1's policy runs a cheaper tier, r2 stays on
the full policy, no topic of the nodes is left in the root namespace, and the diagnostics name the robot
(``r1/lowrl/...``, hardware_id ``host/r1``).
"""
from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.ros

from builtin_interfaces.msg import Time  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray, UInt8  # noqa: E402

from lowrl_ros.core.runtime.policy_stats import STATS_FIELDS  # noqa: E402
from lowrl_ros.core.runtime.tiers import ComputeTier  # noqa: E402
from lowrl_ros.ros import diagnostics as diag  # noqa: E402
from lowrl_ros.ros.budget_monitor_node import BudgetMonitorNode  # noqa: E402
from lowrl_ros.ros.policy_node import PolicyNode  # noqa: E402
from lowrl_ros.ros.qos import CONTROL, LATCHED, STATS  # noqa: E402
from rosutil import PENDULUM_FIELDS, spin_for, spin_until, wait_for_match  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "pendulum_sac.lowrl"
# Every budget limit off (a shared, loaded machine must not move r2); r1 then gets one it cannot meet.
OFF = {"cpu_load_limit_pct": 0.0, "policy_rss_limit_mb": 0.0, "min_available_mb": 0.0, "throttle_limit": 0.0,
       "temperature_source": "none", "process_rss_limits_mb": [0.0], "latency_p99_limit_us": 1e8,
       "miss_rate_limit": 1.0, "publish_period_s": 0.2, "sample_rate_hz": 20.0, "escalate_after": 2}


def capped_cpu(root: Path) -> Path:
    """A sysfs tree with one CPU capped at 40 % of its maximum (thermal/power throttling)."""
    d = root / "devices/system/cpu/cpu0/cpufreq"
    d.mkdir(parents=True)
    for name, value in (("scaling_cur_freq", "700000"), ("scaling_max_freq", "720000"),
                        ("cpuinfo_max_freq", "1800000")):
        (d / name).write_text(value)
    return root


def robot(context, ns: str, sysfs_root: Path = Path("/sys"), **budget) -> list[Node]:
    """A policy node and a budget monitor in namespace ``ns``, as robot.launch.yaml starts them."""
    policy = PolicyNode(context=context, namespace=ns, parameter_overrides=[
        Parameter(k, value=v) for k, v in {"policy_path": str(MODEL), "obs_fields": PENDULUM_FIELDS,
                                           "engine": "numpy", "soft_start_steps": 0, "watchdog_timeout_s": 1.0,
                                           "diagnostics_period_s": 0.1, "stats_rate_hz": 20.0}.items()])
    monitor = BudgetMonitorNode(sysfs_root=sysfs_root, context=context, namespace=ns,
                                parameter_overrides=[Parameter(k, value=v) for k, v in {**OFF, **budget}.items()])
    return [policy, monitor]


def test_two_namespaced_robots_share_a_domain_without_cross_talk(ros_context, tmp_path):
    # r1: 60 % of the CPU's frequency capped, past its hard limit: the decimated tier (lite policy, held).
    nodes = robot(ros_context, "r1", capped_cpu(tmp_path), throttle_limit=0.3) + robot(ros_context, "r2")
    probe = Node("ns_probe", context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    for n in (*nodes, probe):
        executor.add_node(n)
    for policy in (nodes[0], nodes[2]):
        policy.trigger_configure()
        policy.trigger_activate()
    commands = {"r1": [], "r2": []}
    tiers = {"r1": [], "r2": []}
    stats_tier = {"r1": [], "r2": []}
    statuses: dict[str, object] = {}
    tier_index = STATS_FIELDS.index("tier")

    for ns in ("r1", "r2"):
        probe.create_subscription(Float64MultiArray, f"/{ns}/forward_command_controller/commands",
                                  lambda m, ns=ns: commands[ns].append(list(m.data)), CONTROL)
        probe.create_subscription(UInt8, f"/{ns}/lowrl/compute_tier", lambda m, ns=ns: tiers[ns].append(m.data),
                                  LATCHED)
        probe.create_subscription(Float64MultiArray, f"/{ns}/lowrl/policy/stats",
                                  lambda m, ns=ns: stats_tier[ns].append(int(m.data[tier_index])), STATS)
    probe.create_subscription(DiagnosticArray, "/diagnostics",
                              lambda m: statuses.update({s.name: s for s in m.status}), 50)
    js = probe.create_publisher(JointState, "/r1/joint_states", CONTROL)
    try:
        assert wait_for_match(executor, js, timeout=30)

        def r1_answers() -> bool:
            js.publish(JointState(name=["pendulum_joint"], position=[0.3], velocity=[0.0]))
            return bool(commands["r1"])

        assert spin_until(executor, r1_answers, timeout=30, step=0.02), "r1 never answered its joint states"
        probe.create_timer(0.02, lambda: js.publish(
            JointState(name=["pendulum_joint"], position=[0.3], velocity=[0.0])))  # r1 keeps running its policy
        # r1's monitor steps r1 down (throttled past its limit); r2's keeps r2 on the full policy.
        assert spin_until(executor, lambda: tiers["r1"] and tiers["r1"][-1] == ComputeTier.DECIMATED
                          and stats_tier["r1"] and stats_tier["r1"][-1] == tiers["r1"][-1], timeout=30), \
            (tiers, stats_tier["r1"][-5:])
        spin_for(executor, 0.5)  # r2's monitor and policy keep publishing meanwhile
        assert tiers["r2"] and set(tiers["r2"]) == {ComputeTier.FULL}, tiers["r2"]
        assert stats_tier["r2"] and set(stats_tier["r2"]) == {ComputeTier.FULL}, stats_tier["r2"][-5:]
        # r2 got no joint states (r1's never reached it): it sends only its safe action (zero), r1 its policy's.
        assert any(c != [0.0] for c in commands["r1"]), commands["r1"][-3:]
        assert all(c == [0.0] for c in commands["r2"]), commands["r2"][-3:]
        # No topic of the robots' own nodes is in the root namespace (only /diagnostics, /rosout, ...). Asked
        # per node: the domain's whole graph may still list endpoints of nodes an earlier test destroyed.
        own = set()
        for n in nodes:
            ns = n.get_namespace()
            # The policy node's robot inputs subscribe on its internal <name>_inputs node (ros/robot_inputs.py).
            names = [n.get_name()] + ([f"{n.get_name()}_inputs"] if isinstance(n, PolicyNode) else [])
            for name in names:
                own |= {t for t, _ in n.get_publisher_names_and_types_by_node(name, ns)}
                own |= {t for t, _ in n.get_subscriber_names_and_types_by_node(name, ns)}
        global_ok = ("/diagnostics", "/rosout", "/parameter_events")
        assert not [t for t in own if not t.startswith(("/r1/", "/r2/")) and t not in global_ok], sorted(own)
        assert {"/r1/lowrl/policy_bundle", "/r2/lowrl/policy_bundle/status", "/r1/joint_states"} <= own
        # Diagnostics: one global topic, the robot named in status name and hardware_id.
        assert spin_until(executor, lambda: {"r1/lowrl/policy/policy", "r2/lowrl/policy/policy",
                                             "r1/lowrl/budget/cpu_throttle", "r2/lowrl/budget/cpu_throttle"}
                          <= set(statuses), timeout=10), sorted(statuses)
        assert statuses["r1/lowrl/policy/policy"].hardware_id.endswith("/r1")
        assert statuses["r2/lowrl/budget/cpu_throttle"].hardware_id.endswith("/r2")
        assert diag.level_of(statuses["r1/lowrl/budget/cpu_throttle"]) == diag.Level.ERROR
        assert diag.level_of(statuses["r2/lowrl/budget/cpu_throttle"]) != diag.Level.ERROR
        assert not [n for n in statuses if n.startswith("lowrl/")]  # nothing from a node outside r1/r2
    finally:
        for n in (*nodes, probe):
            executor.remove_node(n)
            n.destroy_node()
        executor.shutdown()


def test_status_names_and_swap_rejection_are_per_namespace():
    """A fine-tuner in r1 reads r1's policy status only (it subscribes to the global /diagnostics)."""
    s = diag.status(diag.POLICY_STATUS, diag.Level.WARN, "rejected",
                    {"swap_state": "rejected", "swap_path": "/v2.lowrl", "swap_version": "2"})
    msg = diag.array(Time(), [s], "/r1")
    assert msg.status[0].name == "r1/lowrl/policy/policy" and msg.status[0].hardware_id == f"{diag.HARDWARE_ID}/r1"
    assert diag.swap_rejection(msg.status[0], "/r1") == ("/v2.lowrl", 2)
    assert diag.swap_rejection(msg.status[0], "/r2") is None and diag.swap_rejection(msg.status[0]) is None
    root = diag.array(Time(), [diag.status(diag.POLICY_STATUS, diag.Level.OK, "ok")], "/")
    assert root.status[0].name == diag.POLICY_STATUS and root.status[0].hardware_id == diag.HARDWARE_ID
    assert diag.robot_name("lowrl/budget/tier", "/fleet/r1") == "fleet/r1/lowrl/budget/tier"
