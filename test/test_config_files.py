"""The shipped YAML (config/, launch/) against the core dataclasses and the nodes' declared parameters."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from lowrl_ros.core.runtime.control import ControlConfig
from lowrl_ros.core.runtime.obs_adapter import ObsAdapterConfig
from lowrl_ros.core.sim.sim_robot import SimRobotConfig
from lowrl_ros.launcher import parse_launch

ROOT = Path(__file__).resolve().parent.parent


def params(name: str, node: str) -> dict:
    doc = yaml.safe_load((ROOT / "config" / name).read_text())
    # '/**/NAME' so the file applies when a launch file puts the node in a namespace.
    key = f"/**/{node}"
    assert list(doc) == [key] and list(doc[key]) == ["ros__parameters"], f"{name}: use '{key}: ros__parameters:'"
    return doc[key]["ros__parameters"]


def fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_policy_node_yaml_builds_valid_core_configs():
    p = params("policy_node.yaml", "policy_node")
    control = ControlConfig(**{k: p[k] for k in fields(ControlConfig)})
    adapter = ObsAdapterConfig(**{k: p[k] for k in fields(ObsAdapterConfig)})
    assert control.mode == "event" and adapter.obs_dim == 3  # Pendulum-v1: cos θ, sin θ, θdot
    assert adapter.joint_names == ("pendulum_joint",)


def test_sim_robot_yaml_builds_a_valid_core_config():
    p = params("sim_robot.yaml", "sim_robot")
    config = SimRobotConfig(**{k: p[k] for k in fields(SimRobotConfig)})
    assert config.env_id == "Pendulum-v1"


def test_yaml_keys_are_parameters_the_nodes_declare(ros_context):
    """A typo in a YAML key would be silently ignored by ROS; here it fails."""
    from lowrl_ros.ros.policy_node import PolicyNode
    from lowrl_ros.ros.sim_robot_node import SimRobotNode

    cases = ((PolicyNode, "policy_node.yaml", "policy_node"), (SimRobotNode, "sim_robot.yaml", "sim_robot"))
    for cls, file, name in cases:
        node = cls(context=ros_context)
        try:
            declared = {p for p in node._parameters if p not in ("use_sim_time", "start_type_description_service")}
            assert set(params(file, name)) == declared, f"{file} vs {cls.__name__}"
        finally:
            node.destroy_node()


@pytest.mark.parametrize("launch_file", sorted(p.name for p in (ROOT / "launch").glob("*.launch.yaml")))
def test_launch_files_parse_and_point_at_shipped_files(launch_file):
    for node in parse_launch(ROOT / "launch" / launch_file):
        for f in node.params_files:
            assert Path(f).is_file(), f"{launch_file}: {f} missing"
        path = dict(node.params).get("policy_path")
        if path:
            assert Path(path).is_file(), f"{launch_file}: shipped model {path} missing"
