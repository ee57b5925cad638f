# The in-process figures of README.md, section 2: the base and the released artifacts of the two ROS 2 runs
# (their session directories: R0 = the run with ppo.recorded_command_share 0, R5 = 0.5) under the true gap,
# (a) at the sessions' command 0.4 m/s with and without the policy node's soft start, (b) over the robot file's
# command ranges. Usage: bash eval.sh R0_RUNS_DIR R5_RUNS_DIR > eval.log
cd "$(dirname "$0")/../../.."
D=bench_results/sim2real_session/short_recording_2026-11-29
G=config/gaps/legged_example_sim.yaml
B=models/legged_ant_int8.onnx
A="offboard/retrain/v000002_retrained.onnx"
e() { nice -n 19 .venv/bin/python $D/eval_variants.py "$@" 2>&1 | tail -1; }
for soft in "" --soft-start; do
  e $B nominal $soft; e $B $G $soft; e "$1/seed0/gapped/$A" $G $soft
done
e $B nominal --ranges --episodes 16; e $B $G --ranges --episodes 16
for R in "$1" "$2"; do for s in 0 1 2; do e "$R/seed$s/gapped/$A" $G --ranges --episodes 16; done; done
for s in 0 1 2; do e "$2/seed$s/gapped/$A" $G --soft-start; done
