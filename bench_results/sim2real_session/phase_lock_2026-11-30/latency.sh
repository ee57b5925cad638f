#!/bin/bash
# The phase-locked runs' releases against actuation latency, in-process (no ROS timing): 3 episodes at 0.4 m/s each
# (scripts/eval_quadruped.py: int8 as deployed, seeds 10000-10002), under the user gap at 1-3 physics steps of latency
# (the gap files of ../timing_2026-11-29). Releases: the sessions' bundles in /tmp/bNN/runs/seedS/gapped/releases
# (b30: c993fb6 without ppo.latency_extra, b32: with ppo.latency_extra=1; HISTORY.md, 2026-11-30). latency.log: its
# output for the base and both runs' releases (the command is its first line).
cd "$(dirname "$0")/../../.." || exit 1
T=bench_results/sim2real_session/timing_2026-11-29
run() { printf '%s %s: ' "$1" "$(basename "$2" .yaml)"; python3 scripts/eval_quadruped.py "$1" --episodes 3 --command 0.4,0,0 --gap-file "$2" | tail -1; }
for p in "$@"; do
  for L in 1 2 3; do run "$p" $T/user_latency$L.yaml; done
done
