"""Identify a ROS 2 session's recording again with the sensor noise levels the closed-form step found replaced by the
gap file's true ones (TRUE_NOISE=1) or as found (unset): does the over-identified joint-velocity noise pull mass and
friction? Prints the noise levels used and the physics fits against the truth.

    [TRUE_NOISE=1] [WORKERS=2] python truenoise.py GAP_FILE RETRAIN_DIR [RETRAIN_DIR ...]
"""
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import yaml

from lowrl_ros.core.sim import robot_sysid
from lowrl_ros.core.sim.robot_recording import recording_from_transitions

ROOT = Path(__file__).resolve().parents[3]
NOISE = ("joint_position_noise", "joint_velocity_noise", "gyro_noise", "orientation_noise")


def main():
    true = yaml.safe_load(open(sys.argv[1]))["gap"]
    if os.environ.get("TRUE_NOISE"):
        sensors = robot_sysid._sensors

        def with_true_noise(*args, **kwargs):
            out = sensors(*args, **kwargs)
            out.values.update({k: float(true.get(k, 0.0)) for k in NOISE if k in out.values})
            return out

        robot_sysid._sensors = with_true_noise  # runs in this process; the workers get the noise with the problem
    for d in sys.argv[2:]:
        job = json.load(open(f"{d}/job.json"))
        robot = job["robot_file"] if Path(job["robot_file"]).is_file() else str(ROOT / "config/robots" /
                                                                                 Path(job["robot_file"]).name)
        with np.load(f"{d}/recording.npz") as rec:
            batch = SimpleNamespace(**{k: rec[k] for k in rec.files})
        recording = recording_from_transitions(robot, batch, first_is_start=True)
        t = time.time()
        settings = robot_sysid.IdentifySettings(**{**job["identify"], "workers": int(os.environ.get("WORKERS", "2"))})
        ident = robot_sysid.identify(robot, recording, settings, seed=int(job["seed"])).to_dict()
        print(f"== {d} ({time.time() - t:.0f} s)  noise used: " +
              ", ".join(f"{k} {ident['gap'][k]:.3f} (true {true.get(k, 0.0):.3f})" for k in NOISE))
        for n, v in ident["details"]["search_best"].items():
            ok = ident["identifiable"].get(n)
            fit = ident["details"]["latency_physics_steps"] if n == "latency_steps" else ident["gap"].get(n, v)
            print(f"  {n:14s} fit {fit:6.3f} (search {v:6.3f})  true {true.get(n, float('nan')):6.3f}  "
                  f"identified {ok!s:5s}  objective at the fit {ident['residual']:.4f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
