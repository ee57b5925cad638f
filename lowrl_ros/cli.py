"""The `lowrl` command.

Each sub-command lives in its own module with two functions:
``add_arguments(parser: argparse.ArgumentParser) -> None`` and ``run(args) -> int``.
Modules are imported only when their command runs, so `lowrl launch` on a robot never pays for
torch, and a command whose optional extra is missing fails alone with a clear message.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

# name -> (module, one-line help). Benchmarks are `lowrl bench NAME` (lowrl_ros/bench/NAME.py).
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("lowrl_ros.commands.demo", "90 s sim-to-real session: gapped Pendulum, policy node, on-robot fine-tuning"),
    "import": ("lowrl_ros.commands.import_policy",
               "bring your own policy: SB3, rsl_rl, Isaac Lab ONNX, TorchScript -> artifact"),
    "import-sb3": ("lowrl_ros.commands.import_sb3", "lowrl import for SB3 zips (PPO, A2C, SAC, TD3, DDPG)"),
    "kit": ("lowrl_ros.commands.kit", "a fine-tune kit from any artifact: critics learned from an env or a robot log"),
    "inspect": ("lowrl_ros.commands.inspect", "validate an artifact or bundle and print its contract"),
    "check": ("lowrl_ros.commands.check", "before the robot moves: the robot file against the policy, term by term"),
    "sim2sim": ("lowrl_ros.commands.sim2sim", "before the robot: the policy node and robot file against the robot's "
                "MuJoCo model; observation parity, tracking, falls"),
    "launch": ("lowrl_ros.commands.launch", "run a ROS 2 YAML launch file without ROS 2's launch"),
    "monitor": ("lowrl_ros.commands.monitor", "watch a running robot: --foxglove (Foxglove), --record FILE.mcap"),
    "train": ("lowrl_ros.commands.train", "train SAC/TD3 (dense or RLx2 sparse) in simulation"),
    "report": ("lowrl_ros.commands.report", "draw a run's learning curves and sparsity to PNG"),
    "distill": ("lowrl_ros.commands.distill", "distil a teacher actor into small sparse students"),
    "retrain": ("lowrl_ros.commands.retrain", "continue the deployed policy with PPO in the identified simulator "
                "(local processes or Ray) and release its next int8 version"),
    "compress": ("lowrl_ros.commands.compress", "quantize, gate and release a policy bundle"),
    "profile": ("lowrl_ros.commands.profile", "profile an artifact against a budget"),
    "eval": ("lowrl_ros.commands.eval", "evaluate a deployed artifact in its environment"),
    "export-c": ("lowrl_ros.commands.export_c", "export an int8 artifact as dependency-free C99"),
    "top": ("lowrl_ros.commands.top", "watch a running robot in the terminal: tier, latency, budget, versions"),
    "bench": ("lowrl_ros.bench", "benchmarks: lowrl bench NAME (results written with the machine)"),
}


def _available() -> dict[str, tuple[str, str]]:
    return {name: spec for name, spec in COMMANDS.items() if importlib.util.find_spec(spec[0]) is not None}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, str]]:
    parser = argparse.ArgumentParser(prog="lowrl", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules: dict[str, str] = {}
    for name, (module_name, help_text) in _available().items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        modules[name] = module_name
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Fast path: import only the module of the command asked for.
    if argv and argv[0] in COMMANDS and importlib.util.find_spec(COMMANDS[argv[0]][0]) is not None:
        module_name, help_text = COMMANDS[argv[0]]
        module = importlib.import_module(module_name)
        parser = argparse.ArgumentParser(prog=f"lowrl {argv[0]}", description=help_text)
        module.add_arguments(parser)
        args = parser.parse_args(argv[1:])
        return int(module.run(args) or 0)
    parser, _ = build_parser()
    parser.parse_args(argv)  # prints usage / error for unknown commands
    return 2


if __name__ == "__main__":
    sys.exit(main())
