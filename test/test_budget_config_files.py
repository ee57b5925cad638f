"""The diagnostic aggregator file (config/) against the names the budget monitor reports. The node's
parameter file is checked in test/test_shipped_config.py."""
from __future__ import annotations

from pathlib import Path

import yaml

from lowrl_ros.core.budget.monitor import BudgetConfig

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


def test_diagnostic_names_of_the_monitor_fall_into_the_budget_group():
    from lowrl_ros.core.budget.monitor import BudgetMonitor
    from lowrl_ros.ros.budget_monitor_node import DIAG_PREFIX

    names = [f"{DIAG_PREFIX}/{s.name}" for s in BudgetMonitor(BudgetConfig()).judge_all(0.0, {})]
    assert all(n.startswith("lowrl/budget/") for n in names)
