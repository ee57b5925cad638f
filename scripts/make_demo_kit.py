#!/usr/bin/env python3
"""Make the shipped sim policy with its fine-tune kit: what `make demo` fine-tunes on the robot.

Trains `lowrl train` on config/train_pendulum_sac.yaml (RLx2 SAC, actor 90 % / critic 80 % sparse,
10k steps, the seed given) in simulation, and writes under --out (default models/pendulum_rlx2/):

- actor_int8.onnx: the deployed int8 sparse actor (the robot's version 1);
- kit/kit.json + kit/agent.pt: the fine-tune kit (fp32 actor, twin critics, targets, masks);
- made.json: how it was made, and the int8 actor's return over 10 seeded episodes in simulation
  and on the demo's gapped robot (config/sim_to_real/sim_robot_gap.yaml), both through lowrl's own
  runtime (the deployed artifact, not the fp32 parent).

    .venv/bin/python scripts/make_demo_kit.py                 # ~2-4 min on 2 cores
    .venv/bin/python scripts/make_demo_kit.py --seed 1 --out /tmp/kit1
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def gap_from_yaml(path: Path):
    from lowrl_ros.core.sim.reality_gap import RealityGapConfig

    params = next(iter(yaml.safe_load(path.read_text()).values()))["ros__parameters"]
    return RealityGapConfig(**{k.split(".", 1)[1]: v for k, v in params.items() if k.startswith("gap.")})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "models" / "pendulum_rlx2")
    parser.add_argument("--episodes", type=int, default=10)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    from lowrl_ros.bench.sim2real import gap_returns
    from lowrl_ros.core.finetune.kit import write_kit
    from lowrl_ros.core.sim.reality_gap import RealityGapConfig
    from lowrl_ros.core.train.config import TrainConfig
    from lowrl_ros.core.train.export import export_actor
    from lowrl_ros.core.train.trainer import Trainer

    cfg_path = ROOT / "config" / "train_pendulum_sac.yaml"
    cfg = TrainConfig.from_yaml(cfg_path, seed=args.seed, progress=False)
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        trainer = Trainer(cfg, run_dir)
        result = trainer.run()
        export_actor(trainer.agent, trainer.env, run_dir, result.env_steps)
        staging = Path(tmp) / "out"
        staging.mkdir()
        shutil.copy(run_dir / "actor_int8.onnx", staging / "actor_int8.onnx")
        write_kit(run_dir, staging / "kit", artifact=staging / "actor_int8.onnx")
        gap = gap_from_yaml(ROOT / "config" / "sim_to_real" / "sim_robot_gap.yaml")
        sim = gap_returns(staging / "actor_int8.onnx", cfg.env_id, RealityGapConfig(), args.episodes, 0)
        gapped = gap_returns(staging / "actor_int8.onnx", cfg.env_id, gap, args.episodes, 0)
        made = {"script": "scripts/make_demo_kit.py", "command": " ".join(sys.argv), "config": str(cfg_path.name),
                "train_config": cfg.to_dict(), "seed": args.seed, "env_steps": result.env_steps,
                "train_wall_s": round(time.time() - started, 1),
                "int8_return_sim_mean": float(np.mean(sim)), "int8_return_gapped_mean": float(np.mean(gapped)),
                "eval": f"{args.episodes} episodes, seeds 0..{args.episodes - 1}, lowrl numpy engine",
                "gap": gap.to_dict(), "machine": platform.platform(), "python": platform.python_version(),
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (staging / "made.json").write_text(json.dumps(made, indent=2) + "\n")
        if args.out.exists():
            shutil.rmtree(args.out)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging, args.out)
    print(json.dumps(made, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
