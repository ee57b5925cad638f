"""Time one identification of an in-sim legged recording (the legged example's true gap, 8 episodes of 500 steps,
phase and DDS delay as record_in_sim models them), identify.search_steps 4000, 2 workers.
PYTHONPATH picks the code; from the repo root, D=bench_results/sim2real_session/ppo_seed_spread_2026-11-29:
    git worktree add /tmp/old 175fbc4
    PYTHONPATH=/tmp/old .venv/bin/python $D/identification_time.py
    PYTHONPATH=. .venv/bin/python $D/identification_time.py"""
import json
import time

if __name__ == "__main__":
    import lowrl_ros
    from lowrl_ros.core.runtime.robot_file import load_robot_file
    from lowrl_ros.core.sim import robot_sysid
    from lowrl_ros.core.sim.robot_recording import record_in_sim, recording_from_transitions
    from lowrl_ros.core.sim.robot_sim import load_gap_file

    robot = load_robot_file("config/robots/legged_ant.yaml")
    rec = record_in_sim(robot, load_gap_file("config/gaps/legged_example_sim.yaml"), episodes=8, steps=500, seed=1)
    recording = recording_from_transitions(robot, rec.transitions)
    t = time.perf_counter()
    ident = robot_sysid.identify(robot, recording, robot_sysid.IdentifySettings(search_steps=4000, workers=2), seed=1)
    wall = time.perf_counter() - t
    d = ident.to_dict()
    g = {k: v for k, v in d["gap"].items() if not isinstance(v, (list, dict))}
    print(json.dumps({"code": lowrl_ros.__file__, "wall_s": round(wall, 1),
                      "evaluations": d.get("details", {}).get("evaluations"), "gap": g}, default=float))
