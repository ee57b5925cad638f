"""`lowrl check POLICY ROBOT_FILE [--run-dir DIR]`: before the robot moves, does the robot file feed the
policy what it was trained on?

Prints a term-by-term table (what the policy expects | what the robot file gives | ok/MISMATCH/WARN)
from core/runtime/deploy_check.py. Exit 0 when nothing is a hard mismatch, 1 naming each mismatch,
2 when an input cannot be read. The policy node runs the same check at configure (docs/deploy_check.md).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("policy", help="the deployed artifact (.onnx) or bundle (.lowrl)")
    parser.add_argument("robot_file", help="the robot file the policy node will read (docs/robot_file.md)")
    parser.add_argument("--run-dir", default=None,
                        help="the training source (an Isaac Lab run directory, an rsl_rl checkpoint, an SB3 zip: "
                             "anything `lowrl import` reads): compare with its own config too")
    parser.add_argument("--control-period", type=float, default=None,
                        help="the period the node's loop will run at, s (default: the contract's, "
                             "robot_timing: contract)")
    parser.add_argument("--strict", action="store_true", help="exit 1 on soft mismatches (WARN) too")


def deploy_check(policy: str, robot_file: str, run_dir: str | None = None, control_period: float | None = None):
    """(contract, robot file, training source or None, DeployReport) of ``policy`` against ``robot_file``; raises
    ArtifactError, ValueError or OSError when an input cannot be read. `lowrl sim2sim` runs it first too."""
    from lowrl_ros.core.runtime.bundle import load_bundle
    from lowrl_ros.core.runtime.deploy_check import check_deployment, recorded_training
    from lowrl_ros.core.runtime.robot_file import load_robot_file

    contract = load_bundle(policy, engine="numpy").contract
    robot = load_robot_file(robot_file)
    if run_dir:
        from lowrl_ros.core.importers.training import training_config

        training = training_config(run_dir)
    else:
        training = recorded_training(contract, Path.cwd())
    return contract, robot, training, check_deployment(contract, robot, training=training,
                                                       loop_period_s=control_period)


def print_deploy_check(report, policy: str, robot_file: str, training) -> None:
    """The table and one line per mismatch, as `lowrl check` prints them."""
    print(f"policy {policy} against robot file {robot_file}"
          + (f" and the training source {training.source}" if training is not None else ""))
    print(report.table())
    for line in report.mismatches():
        print(line)


def run(args: argparse.Namespace) -> int:
    from lowrl_ros.core.runtime.artifact import ArtifactError

    try:
        _, _, training, report = deploy_check(args.policy, args.robot_file, args.run_dir, args.control_period)
    except (ArtifactError, ValueError, OSError) as exc:
        print(f"lowrl check: {exc}", file=sys.stderr)
        return 2
    print_deploy_check(report, args.policy, args.robot_file, training)
    bad = report.hard + (report.soft if args.strict else ())
    if bad:
        print(f"{len(report.hard)} mismatch(es), {len(report.soft)} warning(s): fix the robot file before the "
              "robot moves")
        return 1
    print(f"ok: {len(report.rows)} checks agree" + (f" ({len(report.soft)} warning(s))" if report.soft else ""))
    return 0
