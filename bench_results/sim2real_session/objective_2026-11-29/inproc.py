"""Record the legged robot in-process under a gap (the shipped int8 policy driving, record_in_sim's tick phase and
command delays, no ROS), identify it with the ROS 2 bench's settings, and score the objective at the fit and at the
truth (README.md, section 1). NEWOBJ=1: the two-sample objective (newobj.py).

    [NEWOBJ=1] [POLICY_LOOP=1] python inproc.py GAP_FILE SEED
"""
import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

import newobj  # beside this script
from lowrl_ros.core.sim import robot_sysid
from lowrl_ros.core.sim.robot_recording import record_in_sim, recording_from_transitions
from lowrl_ros.core.sim.robot_sim import Gap, load_gap_file

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
ROBOT = str(ROOT / "config/robots/legged_ant.yaml")
# the bench's identification (`lowrl bench sim2real_session ... identify.search_steps=4000`), two workers (one
# with NEWOBJ=1)
SETTINGS = robot_sysid.IdentifySettings(search_steps=4000, workers=2)


def main() -> None:
    settings = SETTINGS if not newobj.asked() else dataclasses.replace(SETTINGS, workers=1)  # see newobj.asked
    gap, seed = load_gap_file(sys.argv[1]), int(sys.argv[2])
    session = ort.InferenceSession(str(ROOT / "models/legged_ant_int8.onnx"))
    name = session.get_inputs()[0].name
    rec = record_in_sim(ROBOT, gap, lambda obs, _t: session.run(None, {name: obs[None].astype(np.float32)})[0][0],
                        episodes=10, steps=250, seed=seed)
    recording = recording_from_transitions(ROBOT, rec.transitions)
    grabbed = {}
    problem_of = robot_sysid._problem

    def grab(*args, **kwargs):
        grabbed["problem"], used = problem_of(*args, **kwargs)
        return grabbed["problem"], used

    robot_sysid._problem = grab
    t = time.time()
    # POLICY_LOOP=1: the shipped policy in the replay's loop (needs policy_loop.diff applied: README.md, section 2)
    loop = {"policy": str(ROOT / "models/legged_ant_int8.onnx")} if os.environ.get("POLICY_LOOP") else {}
    ident = robot_sysid.identify(ROBOT, recording, settings, seed=seed, **loop).to_dict()
    true = gap.as_dict()
    print(f"== seed {seed} ({time.time() - t:.0f} s), {len(rec.transitions)} steps")
    for n, v in ident["details"]["search_best"].items():
        sides = ident["details"]["quarter_moves"].get(n, {})
        shown = "  ".join(f"{side} {r}/{m} {mean:+.4f}" for side, (r, m, mean) in sides.items())
        print(f"  {n:14s} fit {v:6.3f}  true {true.get(n)!s:6s} identified {ident['identifiable'].get(n)!s:5s} {shown}")
    problem = grabbed["problem"]
    dt = problem.sim.config.physics_dt
    fit = dict(ident["details"]["search_best"])
    at_fit = problem.per_episode(Gap(**{k: v for k, v in fit.items() if k != "latency_steps"}),
                                 fit["latency_steps"] * dt)[0]
    physics = Gap(**{k: true[k] for k in ("mass_scale", "friction", "kp_scale", "kd_scale", "motor_strength")})
    for latency in (true["latency_steps"], true["latency_steps"] + 0.5, true["latency_steps"] + 1.0):
        at_truth = problem.per_episode(physics, latency * dt)[0]
        print(f"objective at the fit {at_fit.mean():.4f}, at the truth (latency {latency}) {at_truth.mean():.4f}: "
              f"worse in {int(np.sum(at_truth > at_fit))} of {len(at_fit)} episodes")


if __name__ == "__main__":
    main()
