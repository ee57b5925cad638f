"""`lowrl import-sb3 MODEL.zip -o OUT.onnx`: the older name of `lowrl import MODEL.zip` for SB3 models.

Kept so existing scripts work; it runs `lowrl import` with the source kind fixed to ``sb3``
(PPO, A2C, SAC, TD3, DDPG; ``--vecnormalize``). docs/import.md describes both.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lowrl_ros.commands import import_policy
from lowrl_ros.core.importers.registry import ImportRefused


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", type=Path, help="SB3 model zip written by model.save() (PPO, A2C, SAC, TD3, DDPG)")
    import_policy.add_output_arguments(parser)
    parser.add_argument("--algo", choices=["auto", "ppo", "a2c", "sac", "td3", "ddpg"], default="auto",
                        help="default: read from the zip; anything else must match it")


def run(args: argparse.Namespace) -> int:
    prog = "lowrl import-sb3"
    if args.algo != "auto":
        from lowrl_ros.core.importers.sb3 import detect_algo

        try:
            found = detect_algo(args.model)
        except ImportRefused as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return 2
        if args.algo != found and {args.algo, found} != {"td3", "ddpg"}:
            print(f"{prog}: {args.model} is a {found.upper()} model, not {args.algo.upper()}; drop --algo "
                  "(it is read from the zip)", file=sys.stderr)
            return 2
    args.source, args.kind = args.model, "sb3"
    return import_policy.run(args, prog=prog)
