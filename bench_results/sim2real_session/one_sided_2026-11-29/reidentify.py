"""Identify each session's recording again (the trainer node's job.json and recording.npz, as its child process does)
and print every physics value with the identifiability test's evidence (details.quarter_moves) and the true value.

    python reidentify.py GAP_FILE RETRAIN_DIR [RETRAIN_DIR ...]
"""
import json
import os
import sys
import time
from types import SimpleNamespace

import numpy as np
import yaml

from lowrl_ros.core.sim import robot_sysid
from lowrl_ros.core.sim.robot_recording import recording_from_transitions


WORKERS = int(os.environ.get("WORKERS", "2"))


def main():
    true = yaml.safe_load(open(sys.argv[1]))["gap"]
    for d in sys.argv[2:]:
        job = json.load(open(f"{d}/job.json"))
        with np.load(f"{d}/recording.npz") as rec:
            batch = SimpleNamespace(**{k: rec[k] for k in rec.files})
        recording = recording_from_transitions(job["robot_file"], batch, first_is_start=True)
        t = time.time()
        settings = robot_sysid.IdentifySettings(**{**job["identify"], "workers": WORKERS})
        ident = robot_sysid.identify(job["robot_file"], recording, settings, seed=int(job["seed"])).to_dict()
        print(f"== {d} ({time.time() - t:.0f} s)")
        for n, v in ident["details"]["search_best"].items():
            sides = ident["details"]["quarter_moves"].get(n, {})
            shown = "  ".join(f"{side} {r}/{m} {mean:+.4f}" for side, (r, m, mean) in sides.items())
            print(f"  {n:14s} fit {v:6.3f}  true {true.get(n, float('nan')):6.3f}  identified "
                  f"{ident['identifiable'].get(n)!s:5s} std {ident['std'].get(n, float('nan')):.3f}  {shown}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
