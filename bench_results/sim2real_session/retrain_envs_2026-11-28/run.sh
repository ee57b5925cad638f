# The session's retraining in-process (seed 1's identified gap from the seventh session's ROS run, the policy's own
# critic, a 300 s wall-clock budget as retrain.release_within_s=400 leaves it), then the released artifact
# evaluated under the TRUE gap. Usage: bash run.sh NAME [lowrl retrain flags], e.g. bash run.sh e32 --envs 32 --n-steps 64 --seed 1
cd "$(dirname "$0")/../../.."
D=bench_results/sim2real_session/retrain_envs_2026-11-28
S=bench_results/sim2real_session/retrain_spread_2026-11-28
mkdir -p /tmp/rx
V=$1; shift
.venv/bin/python -m lowrl_ros.cli retrain --base models/legged_ant_int8.onnx --robot config/robots/legged_ant.yaml \
  --eval-episodes 16 --warmup-iterations 2 --lr 3e-4 --steps 2000000 --budget-s 300 \
  --source-checkpoint models/legged_ant_ppo.zip --gap-file $S/ident_s1.yaml --spread "$(cat $S/spread_A)" \
  "$@" --out /tmp/rx/$V.onnx > $D/$V.log 2>&1
.venv/bin/python -m lowrl_ros.cli retrain --robot config/robots/legged_ant.yaml --envs 8 --n-steps 256 \
  --eval-episodes 16 --warmup-iterations 0 --steps 1 --spread 0 --gap-file config/gaps/legged_example_sim.yaml \
  --version 99 --eval-every 0 --base /tmp/rx/$V.onnx --out /tmp/rx/e$V.onnx > $D/eval_$V.log 2>&1
