"""The five nodes started the way a launch file starts them: real rclpy nodes, in-process, with the
shipped YAML (``--params-file``) plus the few overrides a start needs (a kit, a key, temporary
directories). Shared by test_param_snapshot.py and test_shipped_config.py."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rclpy.parameter import Parameter

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config"
NODES = ("policy_node", "budget_monitor", "finetune_node", "trainer_node", "sim_robot")
BUILTIN = ("use_sim_time", "start_type_description_service")  # rclpy's own parameters
KEY = bytes(range(32))


def start(name: str, context, tmp_path: Path, kit: Path, files: tuple[Path, ...] = ()) -> tuple[Any, dict]:
    """(node, the overrides the start needed) for node ``name`` with ``config/<name>.yaml`` and then ``files``.

    The trainer gets a kit, so it also declares its ``finetune.<field>`` parameters.
    """
    cli = ["--ros-args"]
    for f in (CONFIG / f"{name}.yaml", *files):
        cli += ["--params-file", str(f)]
    over: dict[str, Any] = {}
    if name == "policy_node":
        from lowrl_ros.ros.policy_node import PolicyNode as cls
    elif name == "budget_monitor":
        from lowrl_ros.ros.budget_monitor_node import BudgetMonitorNode as cls
    elif name == "sim_robot":
        from lowrl_ros.ros.sim_robot_node import SimRobotNode as cls
    elif name == "finetune_node":
        from lowrl_ros.ros.finetune_node import FineTuneNode as cls
        over = {"kit_path": str(kit), "work_dir": str(tmp_path / "ft")}
    elif name == "trainer_node":
        from lowrl_ros.ros.trainer_node import TrainerNode as cls
        key = tmp_path / "bundle.key"
        key.write_text(KEY.hex())
        key.chmod(0o600)
        (tmp_path / "releases").mkdir()
        over = {"key_file": str(key), "watch_dir": str(tmp_path / "releases"), "finetune_kit": str(kit),
                "finetune_work_dir": str(tmp_path / "offboard")}
    else:
        raise ValueError(f"unknown node {name}; one of {NODES}")
    node = cls(context=context, cli_args=cli, parameter_overrides=[Parameter(k, value=v) for k, v in over.items()])
    return node, over


def stop(node) -> None:
    if hasattr(node, "close"):  # the fine-tuner seals its log and saves its learner
        node.close()
    node.destroy_node()


def declared(node) -> list[str]:
    """The node's own parameters, sorted."""
    return sorted(n for n in node._parameters if n not in BUILTIN)
