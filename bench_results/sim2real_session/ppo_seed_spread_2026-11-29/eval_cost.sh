# The retraining with and without its evaluations of the actor (every 51,200 steps: 4 in 204,800), interleaved.
# Usage (repo root): bash bench_results/sim2real_session/ppo_seed_spread_2026-11-29/eval_cost.sh
cd "$(dirname "$0")/../../.."
D=bench_results/sim2real_session/ppo_seed_spread_2026-11-29
mkdir -p /tmp/rx
for e in 0 51200 51200 0; do
  .venv/bin/python -m lowrl_ros.cli retrain --base models/legged_ant_int8.onnx --robot config/robots/legged_ant.yaml \
    --eval-episodes 16 --warmup-iterations 2 --lr 3e-4 --steps 204800 --envs 32 --n-steps 64 --seed 1 \
    --source-checkpoint models/legged_ant_ppo.zip --gap-file $D/ident_s1.yaml --spread "$(cat $D/spread_s1)" \
    --eval-every $e --out /tmp/rx/ev$e.onnx 2>&1 | grep "steps in" | sed "s/^/eval_every $e: /" >> $D/eval_cost.log
done
