"""`lowrl import-sb3 MODEL.zip -o OUT.onnx`: a Stable-Baselines3 SAC or TD3 actor as a lowrl artifact.

The conversion itself lives in lowrl_ros/core/compress/sb3.py; this module is its command line.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lowrl_ros.core.compress.sb3 import import_sb3
from lowrl_ros.core.runtime.artifact import ArtifactError
from lowrl_ros.core.runtime.engines import load_artifact


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", type=Path, help="SB3 model zip written by model.save() (SAC or TD3)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="artifact to write (.onnx)")
    parser.add_argument("--int8", action="store_true", help="store weights as per-channel int8")
    parser.add_argument("--sparsity", type=float, default=0.0, help="prune this fraction of each hidden layer (0..1)")
    parser.add_argument("--version", type=int, default=1, help="policy version (>= 1)")
    parser.add_argument("--tier", default="full", help="compute tier this artifact serves (full, lite, ...)")
    parser.add_argument("--env-id", default=None,
                        help="gymnasium id it was trained in (recorded; sets the control period)")
    parser.add_argument("--control-period", type=float, default=None, help="seconds; default: the env's dt, else 0.02")
    parser.add_argument("--algo", choices=["auto", "sac", "td3"], default="auto", help="default: read from the zip")


def run(args: argparse.Namespace) -> int:
    try:
        path = import_sb3(args.model, args.output, int8=args.int8, sparsity=args.sparsity, version=args.version,
                          tier=args.tier, env_id=args.env_id, control_period_s=args.control_period, algo=args.algo)
    except (ValueError, ImportError, ArtifactError) as exc:
        print(f"lowrl import-sb3: {exc}", file=sys.stderr)
        return 2
    policy = load_artifact(path)  # validates what was written, the way the robot will
    print(f"wrote {path} ({policy.nbytes} bytes, sha256 {policy.sha256[:16]}…, {policy.macs} MACs, "
          f"engine {policy.engine}: {policy.engine_choice_reason})")
    return 0
