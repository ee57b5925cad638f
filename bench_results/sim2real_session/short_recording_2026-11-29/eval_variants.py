"""A policy artifact in the legged example's simulator as the ROS 2 session runs it, in-process: the robot file's
reward and episode ends, the velocity command fixed at the sim robot node's [0.4, 0, 0] (the retraining draws it
from the robot file's ranges), optionally the policy node's soft start (safety.soft_start_s: the targets blended
from the measured pose at the reset to the policy's over the first second; the retraining's env has none).
Prints the mean return over EPISODES seeded episodes (the numpy engine, as on the robot).

    .venv/bin/python bench_results/sim2real_session/short_recording_2026-11-29/eval_variants.py \
        ARTIFACT GAP_YAML|nominal [--soft-start] [--ranges] [--episodes 8]
"""
import argparse
from pathlib import Path

import numpy as np

from lowrl_ros.core.finetune.sim_env import make_robot_env
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.sim.evaluate import episode_returns


def main() -> None:
    root = Path(__file__).resolve().parents[3]
    p = argparse.ArgumentParser()
    p.add_argument("artifact")
    p.add_argument("gap")
    p.add_argument("--soft-start", action="store_true")
    p.add_argument("--ranges", action="store_true", help="draw the command from the robot file's ranges")
    p.add_argument("--episodes", type=int, default=8)
    a = p.parse_args()
    robot = root / "config/robots/legged_ant.yaml"
    env = make_robot_env(robot, gap_file=None if a.gap == "nominal" else a.gap)
    policy = load_artifact(a.artifact, engine="numpy")
    soft_s = float(env.robot.raw.get("safety", {}).get("soft_start_s", 1.0))
    step, reset = env.sim.step, env.reset
    state = {}

    def blended_step(target):
        t = env.sim.time - state["t0"]
        alpha = min(1.0, (t + env.sim.config.period_s) / soft_s) if soft_s > 0 else 1.0
        return step(state["pose"] + alpha * (np.asarray(target) - state["pose"]))

    def reset_fixed(*, seed=None, options=None):
        out = reset(seed=seed, options=None if a.ranges else {"command": [0.4, 0.0, 0.0]})
        state["t0"], state["pose"] = env.sim.time, np.array(env.sim.joint_state()[1], dtype=np.float64)
        return out

    env.reset = reset_fixed
    if a.soft_start:
        env.sim.step = blended_step
    returns, _, fell = episode_returns(policy.act, env, a.episodes, seed=20_000)
    print(f"{a.artifact} {a.gap} soft_start={a.soft_start} ranges={a.ranges}: {np.mean(returns):.1f} "
          f"(+- {np.std(returns):.1f}, {fell} fell)", flush=True)


if __name__ == "__main__":
    main()
