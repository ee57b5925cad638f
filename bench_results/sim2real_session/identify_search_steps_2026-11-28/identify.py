"""Identify the legged example's gap from a ROS 2 session's saved recording with other IdentifySettings; print the
errors against the true gap (config/gaps/legged_example_sim.yaml) and the seconds it took.

    .venv/bin/python bench_results/sim2real_session/identify_search_steps_2026-11-28/identify.py \
        SESSION/offboard/retrain/recording.npz '{"search_steps": 4000}'
"""
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from lowrl_ros.core.runtime.robot_file import load_robot_file
from lowrl_ros.core.sim import robot_sysid as rs
from lowrl_ros.core.sim.robot_recording import recording_from_transitions
from lowrl_ros.core.sim.robot_sim import load_gap_file

ROOT = Path(__file__).resolve().parents[3]
robot = load_robot_file(ROOT / "config/robots/legged_ant.yaml")
true = load_gap_file(ROOT / "config/gaps/legged_example_sim.yaml")
path, settings = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
with np.load(path) as rec:
    batch = SimpleNamespace(**{k: rec[k] for k in rec.files})
t0 = time.perf_counter()
res = rs.identify(robot, recording_from_transitions(robot, batch), rs.IdentifySettings(**settings), seed=0)
out = {k: round(100 * (getattr(res.gap, k) - getattr(true, k)) / getattr(true, k), 1)
       for k in ("mass_scale", "friction", "kp_scale", "kd_scale")}
out["latency"] = round(res.details["latency_physics_steps"], 2)
out["identified"] = "".join("1" if res.identifiable[k] else "0"
                            for k in ("mass_scale", "friction", "kp_scale", "kd_scale", "latency_steps"))
out["s"] = round(time.perf_counter() - t0)
print(path, settings, out, flush=True)
