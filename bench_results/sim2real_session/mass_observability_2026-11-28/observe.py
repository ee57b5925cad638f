"""What a change of the legged example's mass does to what the robot measures, against a change of its PD gain.

The shipped int8 policy walks at 0.4 m/s in the robot file's simulator (config/robots/legged_ant.yaml) under the
example gap's physics (kp 0.6, kd 1.0, friction 0.6, latency 6; no sensor errors), the same seeded episodes per
row. Per row: the mean sum of squared joint torques (what a JointState effort reads) against the reference
(mass 1.4, the true gap), and per identification channel (joint position q, velocity v, gyro, gravity direction)
how far the channel's mean and standard deviation move, in units of the reference's standard deviation (mean over
the channel's entries). Run: .venv/bin/python bench_results/sim2real_session/mass_observability_2026-11-28/observe.py
"""
import numpy as np

from lowrl_ros.core.finetune.sim_env import make_robot_env
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.sim.robot_recording import sim_signals

ROBOT = "config/robots/legged_ant.yaml"
POLICY = load_artifact("models/legged_ant_int8.onnx", engine="numpy")
TRUE = dict(mass_scale=1.4, kp_scale=0.6, kd_scale=1.0, friction=0.6, latency_steps=6)


def run(gap: dict, episodes: int = 3, steps: int = 300):
    env = make_robot_env(ROBOT, gap=gap)
    signals = {c: [] for c in ("q", "v", "gyro", "gravity")}
    tau2 = []
    for e in range(episodes):
        obs, _ = env.reset(seed=100 + e, options={"command": np.array([0.4, 0.0, 0.0])})
        for _ in range(steps):
            obs, _r, terminated, truncated, _info = env.step(POLICY.act(obs.astype(np.float32)))
            s = sim_signals(env.sim)
            for c in signals:
                signals[c].append(s[c].copy())
            tau2.append(float(env.sim.torque @ env.sim.torque))
            if terminated or truncated:
                break
    return {c: np.array(v) for c, v in signals.items()}, np.array(tau2)


ref, tau_ref = run(TRUE)
for name, values in (("mass_scale", (1.0, 1.1, 1.2, 1.6)), ("kp_scale", (0.5, 0.7)), ("kd_scale", (0.8, 1.2))):
    for v in values:
        s, tau = run({**TRUE, name: v})
        moved = " | ".join(f"{c} mean {np.abs(s[c].mean(0) - ref[c].mean(0)).mean() / ref[c].std(0).mean():.3f} "
                           f"std {np.abs(s[c].std(0) / ref[c].std(0) - 1).mean():.3f}" for c in s)
        print(f"{name} {v} (true {TRUE[name]}): torque^2 x{tau.mean() / tau_ref.mean():.2f} | {moved}", flush=True)
