"""How far beyond the action clip the shipped quadruped policy's outputs lie at the session's command (0.4 m/s)
under config/gaps/quadruped_example.yaml: where |y| is well past 1, the retraining's exploration noise (std ~1.4,
the checkpoint's) never changes the clipped action, so PPO gets no signal for that entry.

    .venv/bin/python bench_results/sim2real_session/quadruped_2026-11-29/saturation.py
"""
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from lowrl_ros.core.finetune.sim_env import make_robot_env  # noqa: E402
from lowrl_ros.core.runtime.artifact import last_action_convention  # noqa: E402
from lowrl_ros.core.runtime.engines import load_artifact  # noqa: E402
from lowrl_ros.core.sim.robot_sim import load_gap_file  # noqa: E402

policy = load_artifact(ROOT / "models/quadruped.lowrl", "numpy")
gap = load_gap_file(ROOT / "config/gaps/quadruped_example.yaml")
convention = last_action_convention(policy.contract)
env = make_robot_env(ROOT / "config/robots/quadruped.yaml", gap=gap, last_action=convention)
obs, _ = env.reset(seed=0, options={"command": np.array([0.4, 0.0, 0.0])})
raw = []
for _ in range(1000):
    policy.act(obs)
    raw.append(policy.raw_output.copy())
    obs, _, term, trunc, _ = env.step(raw[-1])
    if term or trunc:
        break
raw = np.abs(np.array(raw))
print(f"{len(raw)} steps; " + ", ".join(f"|y| < {t}: {100 * (raw < t).mean():.1f} %" for t in (1, 2, 3, 5, 10)))
print(f"median |y| {np.median(raw):.1f}; per joint {np.round(np.median(raw, axis=0), 1).tolist()}")
