#!/bin/bash
# The quadruped's return against actuation latency, in-process (no ROS timing): the base and the sessions' releases,
# 3 episodes at 0.4 m/s each (scripts/eval_quadruped.py: int8 as deployed, seeds 10000-10002). Writes latency.log.
# Releases: the sessions' bundles in /tmp/bNN/runs/seedS/gapped/releases (the runs of HISTORY.md, 2026-11-29/30).
cd "$(dirname "$0")/../../.." || exit 1
T=bench_results/sim2real_session/timing_2026-11-29
run() { printf '%s %s: ' "$1" "$(basename "$2" .yaml)"; python3 scripts/eval_quadruped.py "$1" --episodes 3 --command 0.4,0,0 --gap-file "$2" | tail -1; }
for L in 0 1 2 3; do run models/quadruped.lowrl $T/nominal_latency$L.yaml; done
for p in models/quadruped.lowrl /tmp/b21/runs/seed{1,2}/gapped/releases/v000002.lowrl \
         /tmp/b23/runs/seed{1,2}/gapped/releases/v000002.lowrl /tmp/b24/runs/seed{0,1,2}/gapped/releases/v000002.lowrl; do
  for L in 1 2 3; do run "$p" $T/user_latency$L.yaml; done
done
