"""The diagnostic aggregator file (config/) against the names the budget monitor reports. The node's
parameter file is checked in test/test_shipped_config.py."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml



CONFIG = Path(__file__).resolve().parents[1] / "config"


def test_diagnostic_aggregator_groups_everything_under_lowrl():
    doc = yaml.safe_load((CONFIG / "diagnostic_aggregator.yaml").read_text())
    params = doc["analyzers"]["ros__parameters"]
    assert params["path"] == "lowrl"
    groups = {k: v for k, v in params.items() if isinstance(v, dict)}
    prefixes = {p for g in groups.values() for p in g["startswith"]}
    assert {"lowrl/policy", "lowrl/budget"} <= prefixes
    for name, g in groups.items():
        assert g["type"] == "diagnostic_aggregator/GenericAnalyzer", name
        assert all(p.startswith("lowrl/") for p in g["startswith"]), name


def aggregator_groups(name: str) -> list[str]:
    """The analyzer groups of config/diagnostic_aggregator.yaml whose ``startswith`` takes status ``name``."""
    params = yaml.safe_load((CONFIG / "diagnostic_aggregator.yaml").read_text())["analyzers"]["ros__parameters"]
    return [group for group, g in params.items() if isinstance(g, dict) and any(name.startswith(p)
                                                                                 for p in g["startswith"])]


@pytest.mark.ros
def test_diagnostic_names_the_monitor_publishes_fall_into_the_budget_group(ros_context, tmp_path):
    """The names as a real monitor composes and publishes them on /diagnostics, not as the test spells them."""
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    from lowrl_ros.ros.budget_monitor_node import BudgetMonitorNode
    from rosutil import spin_until

    temp = tmp_path / "temp"
    temp.write_text("40000\n")
    node = BudgetMonitorNode(context=ros_context, parameter_overrides=[
        Parameter(k, value=v) for k, v in {"temperature_source": "file", "temperature_file": str(temp),
                                           "publish_period_s": 0.2, "sample_rate_hz": 20.0}.items()])
    ear = Node("budget_diag_listener", context=ros_context)
    names: set[str] = set()
    ear.create_subscription(DiagnosticArray, "/diagnostics", lambda m: names.update(s.name for s in m.status), 10)
    executor = SingleThreadedExecutor(context=ros_context)
    for n in (node, ear):
        executor.add_node(n)
    try:
        # the tier's status and the temperature's: every sample judges every signal, so both come in one array
        assert spin_until(executor, lambda: {"lowrl/budget/tier", "lowrl/budget/cpu_temperature"} <= names), names
    finally:
        executor.shutdown()
        for n in (node, ear):
            n.destroy_node()
    assert {n: aggregator_groups(n) for n in names} == {n: ["budget"] for n in names}

