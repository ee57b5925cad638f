"""Per-tick Python cost of the robot-file control path, in-process (no DDS): A/B aid for the policy node.

Builds what the policy node builds for config/robots/legged_example.yaml (ObservationBuilder,
ActionProcessor, PolicyController) around the ``lowrl bench loop --legged`` policy (an Isaac Lab-sized
ELU MLP, random weights), then times N fixed-rate ticks with ``time.thread_time`` (this thread's CPU,
so other processes on a shared machine count less than in wall time). One tick does what
PolicyNode._on_control_tick does minus DDS: parse the newest serialized JointState / Imu / Twist /
height scan (ros/robot_inputs.py's parsers, as take() does), build the observation, the measured
pose, the controller step with inference, last_action, the controller-order output, and every
``--stats-every`` ticks the stats (the 10 Hz stats timer at 50 Hz ticks: every 5th).

    python scripts/tick_microbench.py --ticks 3000 --repeats 5
    python scripts/tick_microbench.py --ticks 250 --repeats 3 --period 0.02   # paced: each tick from cold

Prints the per-tick CPU in microseconds, split into inputs / observation / step / rest (medians of
the repeats). Interleave runs of two checkouts (PYTHONPATH) to A/B a change on a noisy machine.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def build(tmp: Path):
    from geometry_msgs.msg import Twist
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Imu, JointState
    from std_msgs.msg import Float32MultiArray

    from lowrl_ros.bench.loop import LEGGED_ROBOT, legged_policy
    from lowrl_ros.core.runtime.actions import ActionProcessor
    from lowrl_ros.core.runtime.bundle import load_bundle
    from lowrl_ros.core.runtime.control import ControlConfig, PolicyController
    from lowrl_ros.core.runtime.observation import ObservationBuilder, ObservationSpec
    from lowrl_ros.core.runtime.robot_file import load_robot_file

    root = Path(__file__).resolve().parents[1]
    robot = load_robot_file(str(root / LEGGED_ROBOT))
    spec = ObservationSpec.from_robot_file(robot, 0.02)
    bundle = load_bundle(legged_policy(tmp / "legged.onnx", spec.obs_dim))
    spec.check_against(bundle.contract)
    builder = ObservationBuilder(spec)
    actions = ActionProcessor.from_robot_dict(robot.raw, bundle.contract)
    config = ControlConfig(mode="fixed_rate", control_period_s=0.02, watchdog_timeout_s=0.1)
    controller = PolicyController(config, bundle, clock=time.perf_counter, actions=actions)
    # The robot's messages, serialized once as DDS would hand them over (driver order differs from the policy's).
    names = list(actions.controller_joints)
    js = JointState(name=names, position=[0.1] * 12, velocity=[0.0] * 12, effort=[0.0] * 12)
    imu = Imu()
    imu.orientation.w = 1.0
    raw = {"joint_states": serialize_message(js), "imu": serialize_message(imu),
           "cmd_vel": serialize_message(Twist()), "height_scan": serialize_message(Float32MultiArray(data=[0.0] * 10))}
    return spec, builder, actions, controller, raw


def run(ticks: int, repeats: int, stats_every: int, period_s: float = 0.0) -> dict:
    from lowrl_ros.core.runtime.actions import measured_positions
    from lowrl_ros.ros.robot_inputs import FAST_PARSERS

    with tempfile.TemporaryDirectory() as tmp:
        spec, builder, actions, controller, raw = build(Path(tmp))
    kinds = {t.topic: t.msg_type for t in spec.topics}
    inputs = [(topic, FAST_PARSERS[kinds[topic]], buf) for topic, buf in raw.items()]
    controller.activate()
    clock, cpu = time.perf_counter, time.thread_time
    parts = {"inputs": [], "observation": [], "step": [], "rest": [], "total": []}
    for rep in range(repeats + 1):  # the first repeat warms up
        acc = dict.fromkeys(parts, 0.0)
        for i in range(ticks):
            c0 = cpu()
            now = clock()
            for topic, parse, buf in inputs:  # take(): the newest sample of each topic
                builder.update(topic, parse(buf), now)
            c1 = cpu()
            controller.observe(builder.build(clock()))
            c2 = cpu()
            # PolicyNode._update_measured
            controller.set_measured(measured_positions(*builder.joint_state(), actions.joint_index))
            result = controller.step(now)
            c3 = cpu()
            builder.after_step(result)  # the last_action rule
            out = actions.to_controller(result.action)
            assert out.shape == (12,)
            if stats_every and i % stats_every == 0:
                controller.stats()
            c4 = cpu()
            if period_s:  # paced like the control thread: each tick starts after a sleep (cold caches)
                time.sleep(period_s)
            for key, dt in (("inputs", c1 - c0), ("observation", c2 - c1), ("step", c3 - c2), ("rest", c4 - c3),
                            ("total", c4 - c0)):
                acc[key] += dt
        if rep:
            for key in parts:
                parts[key].append(acc[key] / ticks * 1e6)
    return {key: round(statistics.median(v), 1) for key, v in parts.items()} | \
        {"total_min": round(min(parts["total"]), 1), "ticks": ticks, "repeats": repeats}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stats-every", type=int, default=5, help="controller.stats() every k ticks (0: never)")
    parser.add_argument("--period", type=float, default=0.0,
                        help="sleep this long after each tick, as the 50 Hz control thread does (0: back to back)")
    args = parser.parse_args()
    print(json.dumps(run(args.ticks, args.repeats, args.stats_every, args.period)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
