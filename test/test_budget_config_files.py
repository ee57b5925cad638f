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


def test_diagnostic_names_of_the_monitor_fall_into_the_budget_group():
    from lowrl_ros.core.budget.monitor import BudgetMonitor
    from lowrl_ros.ros.budget_monitor_node import DIAG_PREFIX

    names = [f"{DIAG_PREFIX}/{s.name}" for s in BudgetMonitor(BudgetConfig()).judge_all(0.0, {})]
    assert all(n.startswith("lowrl/budget/") for n in names)
