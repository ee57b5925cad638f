"""robot_sysid.identify on a session's recording (its offboard/retrain/ job directory: job.json, recording.npz),
with the job's identify settings and seed and optional overrides; prints one JSON line: seconds, the identified
physics, which were identified (mass, friction, kp, kd, latency), the search's best and the residual.

usage: PYTHONPATH=TREE .venv/bin/python identify_recording.py JOB_DIR '{"iterations": 6}'   (TREE: the code to run)
"""
import json
import sys
import time
from types import SimpleNamespace

import numpy as np

from lowrl_ros.core.sim import robot_sysid
from lowrl_ros.core.sim.robot_recording import recording_from_transitions

PHYSICS = ("mass_scale", "friction", "kp_scale", "kd_scale", "latency_steps")


def main():
    job_dir, overrides = sys.argv[1], json.loads(sys.argv[2])
    job = json.load(open(f"{job_dir}/job.json"))
    with np.load(f"{job_dir}/recording.npz") as rec:
        batch = SimpleNamespace(**{k: rec[k] for k in rec.files})
    recording = recording_from_transitions(job["robot_file"], batch, first_is_start=True)
    settings = robot_sysid.IdentifySettings(**{**job["identify"], **overrides})
    t0 = time.perf_counter()
    ident = robot_sysid.identify(job["robot_file"], recording, settings, seed=int(job["seed"]))
    dt = time.perf_counter() - t0
    g = ident.gap
    ok = "".join("1" if ident.identifiable.get(n) else "0" for n in PHYSICS)
    print(json.dumps({"overrides": overrides, "s": round(dt, 1), "mass": round(g.mass_scale, 3),
                      "friction": round(g.friction, 3), "kp": round(g.kp_scale, 3), "kd": round(g.kd_scale, 3),
                      "latency": round(ident.details["latency_physics_steps"], 2), "identified": ok,
                      "search_best": {k: round(v, 3) for k, v in ident.details["search_best"].items()},
                      "residual": round(ident.residual, 5)}))


if __name__ == "__main__":
    main()
