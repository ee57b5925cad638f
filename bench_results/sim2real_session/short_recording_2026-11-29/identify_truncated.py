"""Identify the legged example's gap from a ROS 2 session's saved recording, each episode cut to its first STEPS
policy steps (as if the robot had been reset every STEPS steps); print the errors against the true gap
(config/gaps/legged_example_sim.yaml), the noise and the seconds it took.

    .venv/bin/python bench_results/sim2real_session/short_recording_2026-11-29/identify_truncated.py \
        SESSION/offboard/retrain/recording.npz STEPS [EPISODES]
"""
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from lowrl_ros.core.runtime.robot_file import load_robot_file
from lowrl_ros.core.sim import robot_sysid as rs
from lowrl_ros.core.sim.robot_recording import recording_from_transitions
from lowrl_ros.core.sim.robot_sim import load_gap_file


def main() -> None:
    root = Path(__file__).resolve().parents[3]
    robot = load_robot_file(root / "config/robots/legged_ant.yaml")
    true = load_gap_file(root / "config/gaps/legged_example_sim.yaml")
    path, steps = sys.argv[1], int(sys.argv[2])
    episodes = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    with np.load(path) as rec:
        cols = {k: rec[k] for k in rec.files}
    keep = np.zeros(len(cols["episode"]), bool)
    for e in np.unique(cols["episode"])[:episodes]:
        idx = np.flatnonzero(cols["episode"] == e)[:steps]
        keep[idx] = True
    cols = {k: v[keep] for k, v in cols.items()}
    last = np.r_[cols["episode"][1:] != cols["episode"][:-1], True]  # each cut episode ends truncated there
    cols["truncated"] = np.where(last & ~cols["terminated"].astype(bool), True, cols["truncated"])
    batch = SimpleNamespace(**cols)
    t0 = time.perf_counter()
    res = rs.identify(robot, recording_from_transitions(robot, batch),
                      rs.IdentifySettings(search_steps=steps * episodes), seed=0)
    out = {k: round(100 * (getattr(res.gap, k) - getattr(true, k)) / getattr(true, k), 1)
           for k in ("mass_scale", "friction", "kp_scale", "kd_scale")}
    out["latency"] = round(res.details["latency_physics_steps"], 2)
    out["identified"] = "".join("1" if res.identifiable[k] else "0"
                                for k in ("mass_scale", "friction", "kp_scale", "kd_scale", "latency_steps"))
    out["jv_noise"] = round(res.gap.joint_velocity_noise, 4)
    out["s"] = round(time.perf_counter() - t0)
    print(path, steps, episodes, out, flush=True)


if __name__ == "__main__":
    main()
