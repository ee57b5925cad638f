"""The shipped YAML (config/) against the dataclasses and the node's declared parameters."""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from lowrl_ros.core.budget.monitor import BudgetConfig

CONFIG = Path(__file__).resolve().parents[1] / "config"


def budget_params() -> dict:
    doc = yaml.safe_load((CONFIG / "budget_monitor.yaml").read_text())
    assert set(doc) == {"/**/budget_monitor"}, "the node is named budget_monitor, in any namespace"
    return doc["/**/budget_monitor"]["ros__parameters"]


def test_budget_yaml_builds_a_valid_config():
    params = budget_params()
    cfg = BudgetConfig.from_mapping(params)
    # every field is spelled out in the shipped file: no hidden defaults on a robot
    assert set(params) == {f.name for f in fields(BudgetConfig)}
    assert cfg.sample_rate_hz == 10.0 and cfg.headroom == 0.25


def test_budget_yaml_values_match_the_dataclass_types():
    defaults = BudgetConfig()
    for name, value in budget_params().items():
        default = getattr(defaults, name)
        if isinstance(default, tuple):
            assert isinstance(value, list), name
        else:
            # ROS parameters are typed: a float parameter given as 10 (int) in YAML is rejected.
            assert type(value) is type(default), f"{name}: {value!r} should be {type(default).__name__}"


def test_node_declares_exactly_the_config_fields(ros_context):
    from lowrl_ros.ros.budget_monitor_node import BudgetMonitorNode

    node = BudgetMonitorNode(context=ros_context)
    try:
        declared = {n for n in node._parameters if n not in ("use_sim_time", "start_type_description_service")}
        assert declared == {f.name for f in fields(BudgetConfig)}
        d = node.describe_parameter("headroom")
        assert d.floating_point_range and d.floating_point_range[0].to_value == pytest.approx(0.9)
    finally:
        node.destroy_node()


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

