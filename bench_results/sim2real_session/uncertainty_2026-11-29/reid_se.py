"""Identify each ROS 2 session's recording again (the trainer node's job.json and recording.npz, as its child process
does) and print, per physics value: the fit, the truth, the reported one-sigma uncertainty, its two candidates (the
search's elite spread, the sandwich standard error) and whether the truth lies within two of it. A job.json whose
robot_file no longer exists (a removed worktree) reads config/robots/<its name>.

    [WORKERS=2] [NEWOBJ=1] python reid_se.py GAP_FILE RETRAIN_DIR [RETRAIN_DIR ...]

NEWOBJ=1: the two-sample objective of ../objective_2026-11-29/newobj.py (one worker: spawned replay workers would
use the package's).
"""
import importlib.util
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
NEWOBJ_PATH = "bench_results/sim2real_session/objective_2026-11-29/newobj.py"


def main():
    if os.environ.get("NEWOBJ"):
        spec = importlib.util.spec_from_file_location("newobj", ROOT / NEWOBJ_PATH)
        newobj = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(newobj)
        newobj.asked()
        os.environ["WORKERS"] = "1"
    true = yaml.safe_load(open(sys.argv[1]))["gap"]
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
        print(f"== {d} ({time.time() - t:.0f} s)")
        for n, v in ident["details"]["search_best"].items():
            ok = ident["identifiable"].get(n)
            fit = ident["gap"].get(n, v) if n != "latency_steps" else ident["details"]["latency_physics_steps"]
            sd = ident["std"].get(n, float("nan"))
            spread, se = ident["details"]["quarter_moves"].get(n, {}).get("se", [float("nan")] * 2)
            t_ = true.get(n, float("nan"))
            print(f"  {n:14s} fit {fit:6.3f}  true {t_:6.3f}  identified {ok!s:5s} std {sd:6.3f} "
                  f"(elite {spread:6.3f}, sandwich {se:6.3f})  within 2 std: {abs(fit - t_) <= 2 * sd}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
