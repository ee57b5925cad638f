"""`lowrl launch FILE [name:=value ...]`: run a ROS 2 YAML launch file without ROS 2's launch.

See lowrl_ros/launcher.py for the supported subset. FILE is a path, or the name of a launch file
shipped with the package (e.g. ``robot.launch.yaml``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lowrl_ros.launcher import PACKAGE, LaunchError, package_share, run as run_launch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="launch file path, or a name under the package's launch/ (robot.launch.yaml)")
    parser.add_argument("launch_args", nargs="*", metavar="name:=value", help="launch argument overrides")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="per-node logs go here (default: $ROS_LOG_DIR or ~/.ros/log/lowrl_launch_<time>)")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this many seconds (default: Ctrl-C)")


def resolve_file(name: str) -> Path:
    path = Path(name)
    if path.is_file():
        return path
    shipped = package_share(PACKAGE) / "launch" / name
    if shipped.is_file():
        return shipped
    raise LaunchError(f"launch file {name!r} not found (nor {shipped}); give a path or a shipped name "
                      "like robot.launch.yaml")


def run(args: argparse.Namespace) -> int:
    overrides = {}
    try:
        for item in args.launch_args:
            name, sep, value = item.partition(":=")
            if not sep or not name:
                raise LaunchError(f"launch argument {item!r} is not name:=value")
            overrides[name] = value
        return run_launch(resolve_file(args.file), overrides, args.log_dir, args.seconds)
    except LaunchError as exc:
        print(f"lowrl launch: {exc}", file=sys.stderr)
        return 2
