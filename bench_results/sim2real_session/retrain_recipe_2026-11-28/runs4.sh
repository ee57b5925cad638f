cd /work/main
while pgrep -f runs3.sh >/dev/null; do sleep 5; done
P=".venv/bin/python -m lowrl_ros.cli retrain --base models/legged_ant_int8.onnx --robot config/robots/legged_ant.yaml --envs 8 --n-steps 256 --eval-episodes 16 --warmup-iterations 2 --lr 3e-4"
$P --steps 600000 --gap-file /tmp/rt/ident.yaml --spread "mass_scale=1,friction=1,motor_strength=1,kp_scale=0.0745,kd_scale=0.178,latency_steps=1,encoder_offset=0.0484,gyro_bias=0.101,tilt_bias=0.194,joint_position_noise=1,joint_velocity_noise=0.231,gyro_noise=0.34,orientation_noise=1" --out /tmp/rt/identfresh600.onnx > /tmp/rt/identfresh600.log 2>&1
E=".venv/bin/python -m lowrl_ros.cli retrain --robot config/robots/legged_ant.yaml --envs 8 --n-steps 256 --eval-episodes 16 --warmup-iterations 0 --steps 1 --spread 0 --gap-file config/gaps/legged_example_sim.yaml --version 99"
$E --base /tmp/rt/identfresh600.onnx --out /tmp/rt/e2.onnx > /tmp/rt/eval_identfresh600.log 2>&1
