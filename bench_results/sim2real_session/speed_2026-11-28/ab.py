"""The simulator and rollout speed-ups against the code before them, interleaved, on this machine.

usage: python ab.py OLD_TREE NEW_TREE JOB_DIR [ROUNDS]   (each tree a checkout of lowrl_ros)

Per round and tree, in a fresh process with that tree first on sys.path:
- ``identify``: robot_sysid.identify on a session's recording (JOB_DIR: a retraining job's directory, e.g.
  runs/bench_sim2real_session/seed1/gapped/offboard/retrain from `lowrl bench sim2real_session --robot legged
  ...`: its recording.npz and job.json) with its job's settings;
  the wall time and a hash of the identified gap (the same physics gives the same gap);
- ``retrain``: `lowrl retrain` of the legged base under the example gap, 102,400 PPO steps, no evaluations;
  the wall time of the run ("N steps in X s").
"""
import json
import os
import re
import subprocess
import sys

IDENTIFY = r'''
import json, sys, time, hashlib
from types import SimpleNamespace
import numpy as np
from lowrl_ros.core.sim import robot_sysid
from lowrl_ros.core.sim.robot_recording import recording_from_transitions
d = sys.argv[1]
job = json.load(open(f"{d}/job.json"))
with np.load(f"{d}/recording.npz") as rec:
    batch = SimpleNamespace(**{k: rec[k] for k in rec.files})
recording = recording_from_transitions(job["robot_file"], batch, first_is_start=True)
t = time.perf_counter()
ident = robot_sysid.identify(job["robot_file"], recording, robot_sysid.IdentifySettings(**job["identify"]), seed=0)
wall = time.perf_counter() - t
found = json.dumps(ident.to_dict(), sort_keys=True, default=str).encode()
print(json.dumps({"wall_s": wall, "gap": hashlib.sha1(found).hexdigest()[:12]}))
'''
RETRAIN = ["-m", "lowrl_ros.cli", "retrain", "--base", "models/legged_ant_int8.onnx", "--robot",
           "config/robots/legged_ant.yaml", "--gap-file", "config/gaps/legged_example_sim.yaml", "--steps", "102400",
           "--envs", "8", "--n-steps", "256", "--eval-every", "0", "--eval-episodes", "2", "--warmup-iterations", "2",
           "--source-checkpoint", "models/legged_ant_ppo.zip", "--seed", "0", "--out", "/tmp/ab_retrain.onnx"]


def run(tree: str, args: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": tree}
    return subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True,
                          check=True).stdout


def main() -> None:
    old, new = sys.argv[1], sys.argv[2]
    job_dir = os.path.abspath(sys.argv[3])
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    rows = []
    for r in range(rounds):
        for name, tree in (("old", old), ("new", new)) if r % 2 == 0 else (("new", new), ("old", old)):
            ident = json.loads(run(tree, ["-c", IDENTIFY, job_dir]).strip().splitlines()[-1])
            out = run(tree, RETRAIN)
            m = re.search(r"(\d+) steps in ([\d.]+) s", out)
            row = {"round": r, "tree": name, "identify_s": round(ident["wall_s"], 1), "gap": ident["gap"],
                   "retrain_steps": int(m.group(1)), "retrain_s": float(m.group(2))}
            rows.append(row)
            print(json.dumps(row), flush=True)
    for key in ("identify_s", "retrain_s"):
        o = sorted(x[key] for x in rows if x["tree"] == "old")
        n = sorted(x[key] for x in rows if x["tree"] == "new")
        print(f"{key}: old {o}, new {n}, median new/old {n[len(n) // 2] / o[len(o) // 2]:.2f}")
    print("same identified gap:", len({x['gap'] for x in rows}) == 1)


if __name__ == "__main__":
    main()
