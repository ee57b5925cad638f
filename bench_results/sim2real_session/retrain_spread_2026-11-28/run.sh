cd /work/main
mkdir -p /tmp/rt2  # the released artifacts (not kept)
P=".venv/bin/python -m lowrl_ros.cli retrain --base models/legged_ant_int8.onnx --robot config/robots/legged_ant.yaml --envs 8 --n-steps 256 --eval-episodes 16 --warmup-iterations 2 --lr 3e-4 --steps 600000 --seed 1 --source-checkpoint models/legged_ant_ppo.zip --gap-file bench_results/sim2real_session/retrain_spread_2026-11-28/ident_s1.yaml"
E=".venv/bin/python -m lowrl_ros.cli retrain --robot config/robots/legged_ant.yaml --envs 8 --n-steps 256 --eval-episodes 16 --warmup-iterations 0 --steps 1 --spread 0 --gap-file config/gaps/legged_example_sim.yaml --version 99 --eval-every 0"
for V in "$@"; do
  $P --spread "$(cat bench_results/sim2real_session/retrain_spread_2026-11-28/spread_$V)" --out /tmp/rt2/$V.onnx > bench_results/sim2real_session/retrain_spread_2026-11-28/$V.log 2>&1
  $E --base /tmp/rt2/$V.onnx --out /tmp/rt2/e$V.onnx > bench_results/sim2real_session/retrain_spread_2026-11-28/eval_$V.log 2>&1
done
