cd /work/main
P=".venv/bin/python -m lowrl_ros.cli retrain --base models/legged_ant_int8.onnx --robot config/robots/legged_ant.yaml --envs 8 --n-steps 256 --eval-episodes 16 --spread 0 --gap-file config/gaps/legged_example_sim.yaml --warmup-iterations 2"
$P --steps 600000 --lr 3e-4 --out /tmp/rt/fresh600.onnx > /tmp/rt/fresh600.log 2>&1
$P --steps 1000000 --lr 3e-4 --source-checkpoint models/legged_ant_ppo.zip --out /tmp/rt/src1m.onnx > /tmp/rt/src1m.log 2>&1
