# One retraining as the session benchmark's trainer node runs it (the policy's own critic, 32 x 64, lr 3e-4,
# 2 warm-up rollouts, 16 evaluation episodes), but a fixed 880k PPO steps (what 32 x 64 reaches in its 300 s
# budget, retrain_envs_2026-11-28/) instead of the wall clock, so a busy machine cannot change the result; then
# the released artifact under the TRUE gap (16 seeded episodes of 500 steps).
# Usage: [STEPS=N] bash run.sh NAME GAP_YAML SPREAD_FILE PPO_SEED (STEPS: PPO steps, default 880000)
cd "$(dirname "$0")/../../.."
D=bench_results/sim2real_session/ppo_seed_spread_2026-11-29
mkdir -p /tmp/rx
V=$1; G=$2; S=$3; SEED=$4
.venv/bin/python -m lowrl_ros.cli retrain --base models/legged_ant_int8.onnx --robot config/robots/legged_ant.yaml \
  --eval-episodes 16 --warmup-iterations 2 --lr 3e-4 --steps ${STEPS:-880000} --envs 32 --n-steps 64 --seed $SEED \
  --source-checkpoint models/legged_ant_ppo.zip --gap-file $G --spread "$(cat $S)" \
  --out /tmp/rx/$V.onnx > $D/$V.log 2>&1
.venv/bin/python -m lowrl_ros.cli retrain --robot config/robots/legged_ant.yaml --envs 8 --n-steps 256 \
  --eval-episodes 16 --warmup-iterations 0 --steps 1 --spread 0 --gap-file config/gaps/legged_example_sim.yaml \
  --version 99 --eval-every 0 --base /tmp/rx/$V.onnx --out /tmp/rx/e$V.onnx > $D/eval_$V.log 2>&1
