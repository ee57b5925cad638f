"""Per 90 s of a recorded session: the phase of the sim robot's control loop against the policy node's ticks, and
the base's episode returns, to tell a timing mode from a policy's effect.

    python bench_results/sim2real_session/timing_2026-11-29/phase.py RUNS/seed0/gapped [OBS_DIM ACTION_DIM]

The policy node's ticks: the step rows' stamps (when each tick was due). The sim robot's loop: the recorder's
receipt times of /lowrl/reward, which the loop publishes once per physics tick (5 ms for the quadruped). The phase is
the circular mean of (reward receipt - tick) modulo the sim's period; R near 1 means a steady phase, lower means
jitter (load). Episode returns come from the fine-tuner's log.
"""
import re
import sys
from pathlib import Path

import numpy as np
from mcap_ros2.reader import read_ros2_messages

from lowrl_ros.core.runtime.step_row import decode_step

session = Path(sys.argv[1])
obs_dim, action_dim = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (45, 12)
mcap = str(session / "session.mcap")
ticks = np.array([decode_step(m.ros_msg.data, obs_dim, action_dim).stamp
                  for m in read_ros2_messages(mcap, topics=["/lowrl/policy/step"])])
sim = np.array([m.log_time_ns * 1e-9 for m in read_ros2_messages(mcap, topics=["/lowrl/reward"])])
period = round(float(np.median(np.diff(sim))), 4)  # the loop's nominal period (drift-free)
t0 = ticks[0]
events = []
for path in ("finetune_node.log", "policy_node.log"):
    for line in (session / "logs" / path).read_text().splitlines():
        m = re.match(r"\[INFO\] \[([0-9.]+)\].*?(?:episode end.*: return ([-0-9.]+)|hot-swapped.* (v[0-9]+))", line)
        if m:
            events.append((float(m.group(1)) - t0, m.group(2) or m.group(3)))
events.sort()
print(f"{session}: sim period {period * 1000:.2f} ms")
print("| from s | sim loop minus policy tick (ms) | R ticks / sim | returns of the episodes that ended (swaps) |")
print("|---|---|---|---|")
for a in range(0, int(ticks[-1] - t0), 90):
    s1, s2 = ticks[(ticks - t0 >= a) & (ticks - t0 < a + 90)], sim[(sim - t0 >= a) & (sim - t0 < a + 90)]
    z1, z2 = np.exp(2j * np.pi * s1 / period).mean(), np.exp(2j * np.pi * s2 / period).mean()
    phase = (np.angle(z2 / z1) / (2 * np.pi) * period * 1000) % (period * 1000)
    ev = " ".join(e if e.startswith("v") else f"{float(e):.0f}" for t, e in events if a <= t < a + 90)
    print(f"| {a} | {phase:.2f} | {abs(z1):.2f} / {abs(z2):.2f} | {ev} |")
