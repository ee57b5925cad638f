#!/usr/bin/env python3
"""Evaluate a deployed quadruped policy (a ``.lowrl``/``.onnx`` artifact, int8 as shipped) in its simulator.

The artifact runs on the robot runtime's own engine (core/runtime/engines.py ``load_artifact``, no torch)
in RobotSimEnv with the robot file's reward and episode ends (core/finetune/sim_env.py), optionally on a
gap (``--gap-file``, e.g. config/gaps/quadruped_example.yaml). The network's raw output goes back to the
environment, which clips it and feeds it back as ``last_action``, as the policy node does for a
``raw``-convention policy. Per seeded episode: return, length, fell, mean forward speed vs the command.

    python3 scripts/eval_quadruped.py models/quadruped.lowrl --episodes 10
    python3 scripts/eval_quadruped.py models/quadruped.lowrl --command 0.5,0,0 \
        --gap-file config/gaps/quadruped_example.yaml
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

# A clone without `pip install -e .` (the training machine): the repository root holds lowrl_ros, and spawned
# workers inherit this path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lowrl_ros.core.finetune.sim_env import artifact_episodes  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def summary(rows: list[dict]) -> dict:
    """Means over the episodes; ``vx_error`` is |mean vx - commanded vx| averaged over episodes."""
    return {"episodes": len(rows), "mean_return": float(np.mean([r["return"] for r in rows])),
            "mean_steps": float(np.mean([r["steps"] for r in rows])), "falls": int(sum(r["fell"] for r in rows)),
            "mean_vx": float(np.mean([r["vx"] for r in rows])),
            "mean_command_vx": float(np.mean([r["command"][0] for r in rows])),
            "vx_error": float(np.mean([abs(r["vx"] - r["command"][0]) for r in rows]))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("policy", help="the artifact (.lowrl or .onnx) as deployed")
    p.add_argument("--robot", default=str(ROOT / "config" / "robots" / "quadruped.yaml"))
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=10_000, help="first episode's seed (episodes training never saw)")
    p.add_argument("--gap-file", default=None, help="YAML gap: {...} (the 'real' robot); default: the nominal model")
    p.add_argument("--command", default=None, metavar="VX,VY,WZ",
                   help="a fixed velocity command (default: drawn per episode from the robot file's ranges)")
    p.add_argument("--engine", default="auto", choices=("auto", "numpy", "ort"), help="runtime engine")
    p.add_argument("--json", default=None, help="write the rows and the summary here")
    args = p.parse_args(argv)
    command = None
    if args.command:
        parts = [float(x) for x in args.command.split(",")]
        if len(parts) != 3:
            p.error(f"--command {args.command!r}: give VX,VY,WZ")
        command = tuple(parts)
    rows = artifact_episodes(args.policy, args.robot, args.episodes, args.seed, args.gap_file, command,
                             args.engine)
    print(f"{'seed':>6} {'cmd vx,vy,wz':>17} {'vx':>6} {'vy':>6} {'wz':>6} {'return':>8} {'steps':>6} {'fell':>5}")
    for r in rows:
        cmd = ",".join(f"{c:.2f}" for c in r["command"])
        print(f"{r['seed']:6d} {cmd:>17} {r['vx']:6.2f} {r['vy']:6.2f} {r['yaw_rate']:6.2f} {r['return']:8.1f} "
              f"{r['steps']:6d} {str(r['fell']):>5}")
    s = summary(rows)
    print(f"mean return {s['mean_return']:.1f}, mean length {s['mean_steps']:.0f} steps, falls {s['falls']}/"
          f"{s['episodes']}, mean vx {s['mean_vx']:.2f} m/s for a mean commanded {s['mean_command_vx']:.2f} "
          f"(|vx - cmd| {s['vx_error']:.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": s}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
