"""The figures docs/quadruped.md gives for the shipped quadruped policy beyond scripts/eval_quadruped.py: how much
of its output lies beyond the action clip, how far each engine's int8 actions are from the checkpoint's clipped
ones on a 1,000-step rollout, and its forward speed per 2 s at a 0.4 m/s command per seed and engine.

    .venv/bin/python bench_results/train/quadruped_2026-11-29_check.py    # quadruped_2026-11-29_check.log
"""
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "test")]
import test_quadruped_policy as tq  # noqa: E402  (its rsl_rl actor builder, the shipped paths)
from lowrl_ros.core.finetune.sim_env import make_robot_env  # noqa: E402
from lowrl_ros.core.runtime.artifact import last_action_convention  # noqa: E402
from lowrl_ros.core.runtime.engines import load_artifact  # noqa: E402

policy = load_artifact(tq.ARTIFACT, "numpy")
env = make_robot_env(tq.ROBOT, last_action=last_action_convention(policy.contract))
seen = tq.rollout_observations(policy, env, 1000)
raw = tq.checkpoint_outputs(seen)
want = np.clip(raw, -1, 1)
print(f"checkpoint: |pre-clip| up to {np.abs(raw).max():.1f}, {100 * (np.abs(raw) > 1).mean():.2f} % beyond the clip")
for engine in ("numpy", "ort"):
    rel = np.abs(load_artifact(tq.ARTIFACT, engine).act_batch(seen.astype(np.float64)) - want) / 2.0
    print(f"{engine}: int8 vs checkpoint, worst {100 * rel.max():.1f} %, mean {100 * rel.mean():.4f} %, "
          f"{int((rel > 0.05).sum())} of {rel.size} over 5 %")
for engine in ("numpy", "ort"):
    policy = load_artifact(tq.ARTIFACT, engine)
    for seed in (10_000, 10_001, 10_002, 0):
        obs, _ = env.reset(seed=seed, options={"command": [0.4, 0.0, 0.0]})
        vx = []
        for _ in range(1000):
            policy.act(obs)
            obs, _, term, _, _ = env.step(policy.raw_output.copy())
            if term:
                break
            vx.append(env.sim.base_velocity()[0][0])
        print(f"{engine} seed {seed}: vx per 2 s at 0.4 m/s:", [round(float(np.mean(vx[i:i + 100])), 2)
                                                              for i in range(0, len(vx), 100)])
