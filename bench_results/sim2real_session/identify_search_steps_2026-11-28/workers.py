"""Identify seed 1's recording with each number of replay workers given on the command line; print each one's
wall clock and whether every run gave the same gap (workers.md)."""
import json
import sys
import time
from types import SimpleNamespace

import numpy as np

from lowrl_ros.core.sim import robot_sysid
from lowrl_ros.core.sim.robot_recording import recording_from_transitions


def main():
    d = "runs/bench_sim2real_session/seed1/gapped/offboard/retrain"
    job = json.load(open(f"{d}/job.json"))
    with np.load(f"{d}/recording.npz") as rec:
        batch = SimpleNamespace(**{k: rec[k] for k in rec.files})
    recording = recording_from_transitions(job["robot_file"], batch, first_is_start=True)
    out = {}
    for w in map(int, sys.argv[1:]):
        s = robot_sysid.IdentifySettings(**{**job["identify"], "workers": w})
        t = time.time()
        ident = robot_sysid.identify(job["robot_file"], recording, s, seed=int(job["seed"]))
        out[w] = ident.to_dict()
        best = {k: round(v, 3) for k, v in ident.details["search_best"].items()}
        print(w, "workers:", round(time.time() - t, 1), "s", ident.details["evaluations"], "evaluations", best,
              flush=True)
    ws = list(out)
    print("identical:", all(out[w] == out[ws[0]] for w in ws))


if __name__ == "__main__":
    main()
