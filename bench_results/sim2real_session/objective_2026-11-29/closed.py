"""The objective with the policy in the loop and the recording's own resets and noise (README.md, section 2): an
in-process recording (inproc.py's, 10 episodes of 250 steps under GAP_FILE, seed SEED) against closed-loop runs of
the shipped policy under the true gap with one value changed, the same seed (resets, noise, commands) and command
delays of 0.6-3.1 ms instead of 0.5-3 ms. NEWOBJ=1: the two-sample objective (newobj.py).

    [NEWOBJ=1] python closed.py GAP_FILE SEED
"""
import dataclasses
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

import newobj  # beside this script
from lowrl_ros.core.sim import robot_sysid
from lowrl_ros.core.sim.robot_recording import SignalLayout, as_robot, record_in_sim, recording_from_transitions
from lowrl_ros.core.sim.robot_sim import load_gap_file

HERE = Path(__file__).resolve().parent
ROBOT = as_robot(str(HERE.parents[2] / "config/robots/legged_ant.yaml"))
LAYOUT = SignalLayout.from_robot(ROBOT)


def decoded(rec):
    return [LAYOUT.decode(e.obs) for e in recording_from_transitions(ROBOT, rec.transitions).episodes]


def main() -> None:
    newobj.asked()  # no identification here: no replay workers
    true, seed = load_gap_file(sys.argv[1]), int(sys.argv[2])
    session = ort.InferenceSession(str(HERE.parents[2] / "models/legged_ant_int8.onnx"))
    name = session.get_inputs()[0].name

    def drive(obs, _t):
        return session.run(None, {name: obs[None].astype(np.float32)})[0][0]

    recorded = decoded(record_in_sim(ROBOT, true, drive, episodes=10, steps=250, seed=seed))
    scale = {c: np.maximum(np.nanstd(np.vstack([r[c] for r in recorded]), axis=0), 1e-3) for c in recorded[0]}

    def objective_at(**change):
        runs = decoded(record_in_sim(ROBOT, dataclasses.replace(true, **change), drive, episodes=len(recorded),
                                     steps=250, seed=seed, dds_delay_s=(0.6e-3, 3.1e-3)))
        out = []
        for r, m in zip(recorded, runs):
            n = min(len(r["q"]), len(m["q"]))
            r, m = {c: x[:n] for c, x in r.items()}, {c: x[:n] for c, x in m.items()}
            out.append(robot_sysid.objective(r, m, scale, {c: np.zeros(r[c].shape[1]) for c in r}, 25, 0))
        return np.array(out)

    at_truth = objective_at()
    print(f"the truth: {at_truth.mean():.4f}")
    for change in ({"mass_scale": 1.0, "friction": 0.76}, {"friction": 0.5}, {"friction": 0.8}, {"friction": 1.0},
                   {"friction": 1.45}, {"mass_scale": 0.55}, {"mass_scale": 0.9}, {"mass_scale": 1.1},
                   {"kp_scale": 1.1}, {"kp_scale": 1.5}):
        j = objective_at(**change)
        print(f"{change}: {j.mean():.4f}, higher in {int(np.sum(j > at_truth))} of {len(j)} episodes")


if __name__ == "__main__":
    main()
