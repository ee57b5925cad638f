"""One legged episode (500 steps from record_in_sim) replayed by robot_sysid.replay, best of 5, with and without
the peak torque. usage: python bench_results/sim2real_session/speed_2026-11-28/replay_time.py (from the repo root;
PYTHONPATH=TREE to time another checkout)"""
import time

from lowrl_ros.core.runtime.robot_file import load_robot_file
from lowrl_ros.core.sim import robot_sysid
from lowrl_ros.core.sim.robot_recording import SignalLayout, record_in_sim, recording_from_transitions
from lowrl_ros.core.sim.robot_sim import Gap, RobotSim

robot = load_robot_file("config/robots/legged_ant.yaml")
rec = record_in_sim(robot, Gap(), episodes=1, steps=500, seed=2)
episode = recording_from_transitions(robot, rec.transitions).episodes[0]
layout, sim = SignalLayout.from_robot(robot), RobotSim(robot)
for peak in (False, True):
    robot_sysid.replay(sim, episode, layout, Gap(), 0.013, peak=peak)  # warm-up
    times = []
    for _ in range(5):
        t = time.perf_counter()
        robot_sysid.replay(sim, episode, layout, Gap(), 0.013, peak=peak)
        times.append(time.perf_counter() - t)
    print("peak", peak, f"{min(times) * 1e3:.1f} ms")
