"""How much of the gapped pendulum's gap a bounded residual on the imported SB3 PPO can recover at best.

The bench's gap (lowrl_ros/bench/sim2real.py: BENCH_GAP + a 0.3 rad encoder offset) is part offset, part physics.
The offset is invertible: the base fed the true angle acts as on the example gap alone. The "oracle residual"
here is exactly that correction, d*(x) = y_base(x rotated back by 0.3 rad) - y_base(x), clipped to the bound
(residual_scale x the half action range), added to the base's output as the residual learner adds its head's
(core/finetune/residual.py), or to its clipped action (`post`). Deterministic, 20 seeded episodes per figure.

Run from the repository root after `lowrl bench sim2real --envs Pendulum-v1 --start sb3-ppo ...` has made the
imported artifacts (runs/bench_sim2real/sb3-ppo-Pendulum-v1-s{seed}-60000/.../actor_int8.onnx):

    .venv/bin/python bench_results/sim2real/residual_ceiling_2026-11-28/ceiling.py 0 1 2
"""
import math
import sys

import numpy as np

from lowrl_ros.bench.sim2real import BENCH_GAP
from lowrl_ros.core.runtime.artifact import load_weights
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.sim.reality_gap import RealityGapConfig, make_gapped_env

OFFSET = 0.3
SCALES = (0.1, 0.3, 0.5, 1.0, 2.0)


def main() -> None:
    for seed in map(int, sys.argv[1:]):
        path = f"runs/bench_sim2real/sb3-ppo-Pendulum-v1-s{seed}-60000/kit-w5000-u5000-n0.1/actor_int8.onnx"
        deployed = load_artifact(path, engine="numpy")
        weights, _ = load_weights(path)

        def y(obs):  # the base network's output (identity output activation: SB3 PPO's Gaussian mean), N m
            x = np.asarray(obs, np.float64)
            for i, (w, b) in enumerate(weights.layers):
                x = x @ np.asarray(w, np.float64).T + b
                if i < len(weights.layers) - 1:
                    x = np.tanh(x)
            return x

        probe = np.array([1.0, 0.0, 0.5], np.float32)
        assert abs(float(deployed.act(probe)[0]) - float(np.clip(y(probe), -2, 2)[0])) < 1e-4, "y() is not the artifact"

        def back(obs):
            th = math.atan2(obs[1], obs[0]) - OFFSET
            return np.array([math.cos(th), math.sin(th), obs[2]], np.float32)

        def ret(gap, bound, post=False, episodes=20):
            env = make_gapped_env("Pendulum-v1", gap)
            out = []
            for e in range(episodes):
                obs, _ = env.reset(seed=1000 + e)
                total, done = 0.0, False
                while not done:
                    yb, yt = y(obs), y(back(obs))
                    if post:
                        yb, yt = np.clip(yb, -2, 2), np.clip(yt, -2, 2)
                    d = np.clip(yt - yb, -bound, bound) if bound is not None else 0.0
                    obs, r, term, trunc, _ = env.step(np.clip(yb + d, -2, 2).astype(np.float32))
                    total += float(r)
                    done = term or trunc
                out.append(total)
            env.close()
            return float(np.mean(out))

        gap = RealityGapConfig(**BENCH_GAP, joint_offset=OFFSET)
        sim, before = ret(RealityGapConfig(), None), ret(gap, None)
        for post in (False, True):
            cells = []
            for scale in SCALES:
                r = ret(gap, scale * 2.0, post)
                cells.append(f"{r:.0f} ({100 * (r - before) / (sim - before):.0f} %)")
            print(f"| {seed} | {'clipped action' if post else 'network output'} | {sim:.0f} | {before:.0f} | "
                  + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
