"""Every shipped parameter file (config/*.yaml of the nodes, config/sim_to_real/*.yaml) against the config
dataclasses and the parameters the real nodes declare.

A typo in a YAML key is silently ignored by ROS, and a default copied into a file drifts from the
dataclass it came from; here either fails. For each node: the file's keys are exactly the declared
parameters, each value equals the dataclass default (the exceptions are listed, with why), the node
starts with the file (so every value has the parameter's type and passes the dataclass checks) and
each parameter's description is its field's help, never a placeholder such as "FineTuneConfig.lr".
The sim-to-real files are overlays (loaded after the base file): their keys are declared parameters.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
import math
from typing import Any

import pytest
import yaml

# Every case starts a real node with its shipped YAML.
pytestmark = pytest.mark.ros

from shipped_nodes import CONFIG, ROOT, declared, start, stop  # noqa: E402

from lowrl_ros.core.budget.monitor import BudgetConfig  # noqa: E402
from lowrl_ros.core.config import help_of  # noqa: E402
from lowrl_ros.core.finetune.transition_log import TransitionLogConfig  # noqa: E402
from lowrl_ros.core.runtime.control import ControlConfig  # noqa: E402
from lowrl_ros.core.runtime.obs_adapter import ObsAdapterConfig  # noqa: E402
from lowrl_ros.core.sim.reality_gap import RealityGapConfig  # noqa: E402
from lowrl_ros.core.sim.sim_robot import SimRobotConfig  # noqa: E402
from lowrl_ros.core.stream.receiver import ReceiverConfig  # noqa: E402
from lowrl_ros.core.stream.sender import StreamConfig  # noqa: E402


def _classes(name: str) -> list[tuple[type, dict[str, Any]]]:
    """(config class, how the node maps it: prefix, skip, names) for every parameter of node ``name``.

    Imported lazily: the fine-tuner's classes import torch.
    """
    from lowrl_ros.core.finetune.config import FineTuneConfig
    from lowrl_ros.core.finetune.config import FineTuneNodeSettings
    from lowrl_ros.ros.policy_node import PolicyNodeSettings
    from lowrl_ros.core.sim.sim_robot import SimRobotTopics
    from lowrl_ros.core.finetune.config import TrainerNodeSettings

    return {
        "policy_node": [(PolicyNodeSettings, {}), (ObsAdapterConfig, {}), (ControlConfig, {}),
                        (ReceiverConfig, dict(skip=("probe_count", "engine"), names={"keep": "keep_bundles"}))],
        "budget_monitor": [(BudgetConfig, {})],
        "finetune_node": [(FineTuneNodeSettings, {}), (ObsAdapterConfig, dict(skip=("extra_obs_dim",))),
                          (FineTuneConfig, {}), (TransitionLogConfig, dict(prefix="log_"))],
        "trainer_node": [(StreamConfig, {}), (TrainerNodeSettings, {}), (FineTuneConfig, dict(prefix="finetune."))],
        "sim_robot": [(SimRobotConfig, {}), (SimRobotTopics, {}), (RealityGapConfig, dict(prefix="gap."))],
    }[name]


def fields_by_parameter(name: str) -> dict[str, tuple[type, dataclasses.Field]]:
    out = {}
    for cls, how in _classes(name):
        for f in dataclasses.fields(cls):
            if f.name not in how.get("skip", ()):
                out[how.get("prefix", "") + how.get("names", {}).get(f.name, f.name)] = (cls, f)
    return out


# Where a shipped file deliberately differs from the dataclasses, and why.
NOT_IN_FILE = {
    # Off unless set (-p min_return:=-1500.0): a NaN does not survive every YAML parser.
    "finetune_node": {"min_return"},
}
NOT_IN_FILE_PREFIX = {
    "trainer_node": "finetune.",  # declared only with a kit; the file says how to set them (finetune.<field>)
}
NOT_DEFAULT = {
    # The shipped robot is Pendulum-v1: its three observation entries, and one action for default_pose.
    "policy_node": {"obs_fields", "obs_offset", "obs_scale", "default_pose"},
    "finetune_node": {"obs_fields", "obs_offset", "obs_scale"},
    # A real robot streams signed bundles from a directory `lowrl compress` writes into.
    "trainer_node": {"watch_dir", "key_file"},
}
FILES = {"policy_node": "policy_node.yaml", "budget_monitor": "budget_monitor.yaml",
         "finetune_node": "finetune_node.yaml", "trainer_node": "trainer_node.yaml", "sim_robot": "sim_robot.yaml"}
OVERLAYS = [("budget_monitor", "sim_to_real/budget_monitor.yaml"), ("finetune_node", "sim_to_real/finetune_node.yaml"),
            ("sim_robot", "sim_to_real/sim_robot_gap.yaml"), ("sim_robot", "gaps/legged_example.yaml")]


def load(file: str, node: str, *, strict: bool = True) -> dict[str, Any]:
    doc = yaml.safe_load((CONFIG / file).read_text())
    # '/**/NAME' so the file applies when a launch file puts the node in a namespace.
    keys = [f"/**/{node}"] if strict else [f"/**/{node}", node]
    assert len(doc) == 1 and next(iter(doc)) in keys, f"{file}: use '/**/{node}: ros__parameters:'"
    section = next(iter(doc.values()))
    assert list(section) == ["ros__parameters"], f"{file}: use '/**/{node}: ros__parameters:'"
    return section["ros__parameters"]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and list(a) == list(b)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b  # 10 for 10.0 would be refused by a typed ROS parameter


def test_every_overlay_and_base_file_is_covered():
    shipped = {str(p.relative_to(CONFIG)) for p in CONFIG.rglob("*.yaml")}
    tested = set(FILES.values()) | {f for _, f in OVERLAYS}
    # robots/*.yaml are robot files, not parameter files: test_observation.py and test_robot_inputs.py load them.
    not_nodes = {p for p in shipped if p.startswith(("train_", "compress_", "diagnostic_aggregator", "robots/"))}
    # gap: files are a robot simulator's gaps (core/sim/robot_sim.py load_gap_file), loaded by test_robot_sim.py.
    not_nodes |= {p for p in shipped if p.startswith("gaps/") and "gap" in yaml.safe_load((CONFIG / p).read_text())}
    assert shipped - not_nodes == tested, "a new parameter file needs a case here"


@pytest.mark.parametrize("node_name", sorted(FILES))
def test_file_matches_dataclasses_and_declared_parameters(node_name, ros_context, tiny_kit, tmp_path):
    data = load(FILES[node_name], node_name)
    by_param = fields_by_parameter(node_name)
    node, _ = start(node_name, ros_context, tmp_path, tiny_kit[0])  # the node accepts every value of the file
    try:
        names = declared(node)
        descriptions = {n: node.describe_parameter(n) for n in names}
    finally:
        stop(node)
    # Every parameter is a documented config field (no hand-declared one without help).
    assert set(names) == set(by_param), f"{node_name}: parameters that are no config field, or fields not declared"
    for param, (cls, f) in by_param.items():
        d = descriptions[param]
        assert d.description == help_of(f) and help_of(f), f"{node_name}.{param}: not {cls.__name__}'s help"
        assert d.read_only == (not f.metadata["live"]), param
    # The file names exactly the declared parameters (a typo would be silently ignored by ROS).
    prefix = NOT_IN_FILE_PREFIX.get(node_name)
    expected = {n for n in names if not (prefix and n.startswith(prefix))} - NOT_IN_FILE.get(node_name, set())
    assert set(data) == expected, f"{FILES[node_name]}: keys differ from the declared parameters"
    # ... and the values are the dataclass defaults, except where said why above.
    for key, value in data.items():
        cls, f = by_param[key]
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if key in NOT_DEFAULT.get(node_name, set()):
            assert not same(value, default), f"{key}: now the default; remove it from NOT_DEFAULT"
        else:
            assert same(value, default), f"{FILES[node_name]}: {key}={value!r} but {cls.__name__} says {default!r}"


def test_shipped_values_build_valid_core_configs():
    """The values the nodes turn into core configs, checked by the dataclasses themselves (no ROS)."""
    p = load("policy_node.yaml", "policy_node")
    adapter = ObsAdapterConfig(**{k: p[k] for k in ("obs_fields", "obs_offset", "obs_scale", "extra_obs_dim")})
    assert adapter.obs_dim == 3 and adapter.joint_names == ("pendulum_joint",)  # Pendulum-v1: cos θ, sin θ, θdot
    assert ControlConfig(**{f.name: p[f.name] for f in dataclasses.fields(ControlConfig)}).mode == "event"
    s = load("sim_robot.yaml", "sim_robot")
    assert SimRobotConfig(**{f.name: s[f.name] for f in dataclasses.fields(SimRobotConfig)}).env_id == "Pendulum-v1"
    t = load("trainer_node.yaml", "trainer_node")
    stream = StreamConfig(**{f.name: t[f.name] for f in dataclasses.fields(StreamConfig)})
    assert stream.watch_dir and not stream.insecure and stream.key_file  # signed by default
    assert BudgetConfig.from_mapping(load("budget_monitor.yaml", "budget_monitor")).headroom == 0.25


@pytest.mark.parametrize("node_name,file", OVERLAYS, ids=[f for _, f in OVERLAYS])
def test_sim_to_real_overlay_names_declared_parameters(node_name, file, ros_context, tiny_kit, tmp_path):
    data = load(file, node_name, strict=False)
    assert data, f"{file} is empty"
    node, _ = start(node_name, ros_context, tmp_path, tiny_kit[0], files=(CONFIG / file,))
    try:
        names = set(declared(node))
        for key, value in data.items():
            got = node.get_parameter(key).value if key in names else None
            assert key in names, f"{file}: {key} is no parameter of {node_name}"
            assert same(list(got) if hasattr(got, "tolist") or isinstance(got, list) else got, value), key
    finally:
        stop(node)


def test_launch_files_load_the_overlays_after_the_base_files():
    """An overlay only changes a few keys: a launch file that loads one must load the base file first."""
    from lowrl_ros.launcher import parse_launch

    checked = 0
    for launch in sorted((ROOT / "launch").glob("*.launch.yaml")):
        for node in parse_launch(launch):
            args = node.ros_args()
            files = [str(Path(args[i + 1]).relative_to(CONFIG)) for i, a in enumerate(args)
                     if a == "--params-file" and Path(args[i + 1]).is_relative_to(CONFIG)]
            for node_name, file in OVERLAYS:
                if node.name == node_name and file in files:
                    assert FILES[node_name] in files[:files.index(file)], (launch.name, file, files)
                    checked += 1
    assert checked >= 6  # sim_to_real's and legged_sim_to_real's overlays
