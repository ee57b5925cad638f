"""`lowrl train`: SAC/TD3, dense or RLx2 sparse, on a gymnasium task; ends with a robot artifact.

Every field of TrainConfig is a flag (``--total-steps``, ``--actor-sparsity``, ...). A preset
(``--config config/train_pendulum_sac.yaml``) sets fields first; flags override it.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from lowrl_ros.commands._config_flags import add_config_flags, config_from, read_preset


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lowrl_ros.core.train.config import TrainConfig

    parser.add_argument("--config", metavar="YAML", help="preset file (config/train_*.yaml); flags override it")
    parser.add_argument("--run-dir", metavar="DIR",
                        help="output directory (default runs/<env>-<algo>-<variant>-s<seed>)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from RUN_DIR/checkpoint.pt (config from RUN_DIR/config.yaml)")
    parser.add_argument("--no-export", action="store_true", help="skip writing actor.onnx/actor_int8.onnx")
    add_config_flags(parser, TrainConfig, title="training configuration (TrainConfig fields)")


def build_config(args: argparse.Namespace):
    """TrainConfig from (run_dir/config.yaml when resuming | --config preset | defaults) + flags."""
    from lowrl_ros.core.train.config import TrainConfig

    if args.resume and not args.config:
        if not args.run_dir:
            raise ValueError("--resume needs --run-dir DIR (the run to continue)")
        return config_from(TrainConfig, args, read_preset(Path(args.run_dir) / "config.yaml", flag="--resume"))
    return config_from(TrainConfig, args, read_preset(args.config))


def run(args: argparse.Namespace) -> int:
    try:
        cfg = build_config(args)
        from lowrl_ros.core.train.trainer import Trainer

        run_dir = Path(args.run_dir or f"runs/{cfg.env_id}-{cfg.algo}-{cfg.variant}-s{cfg.seed}")
        trainer = Trainer(cfg, run_dir, resume=args.resume)
    except ValueError as exc:
        print(f"lowrl train: error: {exc}", file=sys.stderr)
        return 2
    print(f"training {cfg.algo} ({cfg.variant}) on {cfg.env_id} for {cfg.total_steps} steps into {run_dir}")
    result = trainer.run()
    print(f"done: {result.env_steps} env steps in {result.wall_s:.1f} s; last eval return "
          f"{result.last_eval_return:.1f}, best {result.best_eval_return:.1f}")
    if result.steps_to_target is not None:
        print(f"reached stop_return {cfg.stop_return} at {result.steps_to_target} env steps "
              f"({result.wall_to_target:.1f} s)")
    elif not math.isnan(cfg.stop_return):
        print(f"did not reach stop_return {cfg.stop_return}")
    print(f"logs: {run_dir / 'progress.csv'}, {run_dir / 'run.json'}; plot with: lowrl report {run_dir}")
    if not args.no_export:
        from lowrl_ros.core.train.export import export_actor

        fp32, int8 = export_actor(trainer.agent, trainer.env, run_dir, result.env_steps)
        print(f"artifact (fp32): {fp32}")
        print(f"artifact (int8): {int8}")
    return 0
