cd /work/main
P=".venv/bin/python -m lowrl_ros.cli retrain --base models/legged_ant_int8.onnx --robot config/robots/legged_ant.yaml --envs 8 --n-steps 256 --lr 3e-4 --eval-episodes 16 --spread 0"
$P --gap-file /tmp/rt/nominal.yaml --steps 1 --warmup-iterations 0 --out /tmp/rt/nom.onnx > /tmp/rt/nom.log 2>&1
$P --gap-file config/gaps/legged_example_sim.yaml --steps 200000 --warmup-iterations 2 --out /tmp/rt/fresh.onnx > /tmp/rt/fresh.log 2>&1
$P --gap-file config/gaps/legged_example_sim.yaml --steps 600000 --warmup-iterations 2 --source-checkpoint models/legged_ant_ppo.zip --out /tmp/rt/src600.onnx > /tmp/rt/src600.log 2>&1
