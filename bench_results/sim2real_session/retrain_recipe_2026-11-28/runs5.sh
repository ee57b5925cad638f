cd /work/main
SP="mass_scale=1,friction=1,motor_strength=1,kp_scale=0.0745,kd_scale=0.178,latency_steps=1,encoder_offset=0.0484,gyro_bias=0.101,tilt_bias=0.194,joint_position_noise=1,joint_velocity_noise=0.231,gyro_noise=0.34,orientation_noise=1"
P=".venv/bin/python -m lowrl_ros.cli retrain --base models/legged_ant_int8.onnx --robot config/robots/legged_ant.yaml --envs 8 --n-steps 256 --eval-episodes 16 --warmup-iterations 2 --lr 3e-4 --steps 600000 --gap-file /tmp/rt/ident.yaml"
E=".venv/bin/python -m lowrl_ros.cli retrain --robot config/robots/legged_ant.yaml --envs 8 --n-steps 256 --eval-episodes 16 --warmup-iterations 0 --steps 1 --spread 0 --gap-file config/gaps/legged_example_sim.yaml --version 99 --eval-every 0"
$P --spread "$SP" --source-checkpoint models/legged_ant_ppo.zip --out /tmp/rt/b_src.onnx > /tmp/rt/b_src.log 2>&1
$E --base /tmp/rt/b_src.onnx --out /tmp/rt/e3.onnx > /tmp/rt/eval_b_src.log 2>&1
$P --spread "$SP" --out /tmp/rt/b_fresh.onnx > /tmp/rt/b_fresh.log 2>&1
$E --base /tmp/rt/b_fresh.onnx --out /tmp/rt/e4.onnx > /tmp/rt/eval_b_fresh.log 2>&1
