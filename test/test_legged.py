"""The legged example (issue 18 §7): the MuJoCo legged robot, its gymnasium task, the sim robot node's
LeggedAnt kind, and the robot file + policy node walking it (real MuJoCo, real rclpy over DDS)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from stable_baselines3.common.env_util import make_vec_env  # imported here: the import alone takes seconds

from lowrl_ros.core.sim import legged

ROOT = Path(__file__).resolve().parents[1]
ROBOT_FILE = ROOT / "config" / "robots" / "legged_ant.yaml"
MODEL = ROOT / "models" / "legged_ant_int8.onnx"


def test_pd_holds_the_default_pose_standing():
    robot = legged.LeggedRobot()
    robot.reset()
    robot.step(400)  # 2 s at 200 Hz
    q = robot.joint_positions()
    assert np.abs(q - np.array(legged.DEFAULT_POSE)).max() < 0.05, q
    assert 0.45 < robot.base_height() < 0.6
    quat, gyro, acc = robot.imu()
    assert np.allclose(quat, [0, 0, quat[2], quat[3]], atol=1e-3) and abs(np.linalg.norm(quat) - 1) < 1e-9
    assert np.abs(gyro).max() < 1e-3
    assert acc[2] == pytest.approx(9.81, abs=0.05)  # an accelerometer reads +g up when standing still
    # the PD torques hold the weight and stay inside the motors' range
    assert np.abs(robot.joint_efforts()).max() <= legged.LeggedConfig().torque_limit + 1e-9


def test_legged_reset_drops_the_robot_with_no_torque():
    """A reset puts the torso 0.6 m up, joints at their targets: it falls freely, its motors reading exactly 0 N m,
    until the feet land (0.12 s), then the legs carry it. The fine-tuner's effort reward sees that at each episode's
    start (test_finetune_legged)."""
    sim = legged.LeggedSim(physics_dt=0.005, realtime=False)
    sim.reset()
    effort = []
    for _ in range(80):
        sim.step(sim.hold_command)
        effort.append(np.abs(sim.joints().effort).max())
    effort = np.array(effort)
    in_air = int(np.argmax(effort > 0))
    assert 10 <= in_air <= 40 and np.all(effort[:in_air] == 0)
    assert np.all(effort[in_air:] > 0.1)  # standing: every joint-state after the landing has the legs pushing


def test_pd_tracks_a_target_and_clips_torque():
    robot = legged.LeggedRobot()
    robot.reset()
    target = np.array(legged.DEFAULT_POSE)
    target[0] = 0.3  # swing hip_1 forward
    robot.set_targets(target)
    robot.step(1)
    assert robot.joint_efforts()[0] == pytest.approx(legged.LeggedConfig().kp * 0.3, rel=0.05)
    robot.step(200)
    assert robot.joint_positions()[0] == pytest.approx(0.3, abs=0.03)
    robot.set_targets(np.array(legged.DEFAULT_POSE) + np.array([5.0] + [0.0] * 7))  # far: 500 N m asked
    robot.step(1)
    assert robot.joint_efforts()[0] == pytest.approx(legged.LeggedConfig().torque_limit)
    with pytest.raises(ValueError, match="8 finite values"):
        robot.set_targets([0.0] * 7)


def test_env_is_registered_and_zero_action_stands_without_falling():
    import gymnasium as gym

    env = gym.make(legged.ENV_ID)
    obs, info = env.reset(seed=0)
    assert obs.shape == (legged.OBS_DIM,) == env.observation_space.shape and len(legged.OBS_NAMES) == legged.OBS_DIM
    assert 0.0 <= info["command"][0] <= 0.6
    for _ in range(100):
        obs, reward, terminated, truncated, info = env.step(np.zeros(8))
        assert not terminated
    assert obs[3:6] == pytest.approx([0, 0, -1], abs=0.02)  # projected gravity upright
    assert abs(info["velocity"][0]) < 0.05  # standing still, not walking


def test_fall_ends_the_episode():
    env = legged.LeggedAnt()
    env.reset(seed=0)
    env.robot.data.qpos[3:7] = (0.0, 1.0, 0.0, 0.0)  # upside down
    env.robot.data.qpos[2] = 0.3
    _, _, terminated, _, _ = env.step(np.zeros(8))
    assert terminated


def test_action_to_targets_is_the_robot_files_action_section():
    """Scale, offset, limits and rate limit of config/robots/legged_ant.yaml = the env's action mapping."""
    from lowrl_ros.core.runtime.actions import ActionProcessor
    from lowrl_ros.core.runtime.robot_file import load_robot_file

    rf = load_robot_file(ROBOT_FILE)
    assert tuple(rf.joints) == legged.JOINTS and tuple(rf.default_pose) == legged.DEFAULT_POSE
    robot = legged.LeggedRobot()
    proc = ActionProcessor.from_robot_dict(rf.raw, _contract())
    assert tuple(proc.controller_joints) == legged.CONTROLLER_JOINTS
    rng = np.random.default_rng(0)
    previous = np.array(legged.DEFAULT_POSE)
    for _ in range(20):
        a = rng.uniform(-1.2, 1.2, 8)
        ours = legged.action_to_targets(a, previous, 0.04, robot)
        theirs = proc.limit_rate(proc.transform(np.clip(a, -1, 1)), previous, 0.04)
        np.testing.assert_allclose(ours, theirs, atol=1e-4)  # the file states the limits to 0.1 mrad
        previous = ours


def _contract():
    from lowrl_ros.core.runtime.artifact import PolicyContract

    return PolicyContract(obs_names=legged.OBS_NAMES, action_names=legged.JOINTS, action_low=(-1.0,) * 8,
                          action_high=(1.0,) * 8, control_period_s=0.04)


def test_env_observation_equals_the_policy_nodes_for_the_same_state():
    """The robot file's observation terms, fed what the sim robot node publishes, give the env's obs."""
    from lowrl_ros.core.runtime.observation import ObservationBuilder, ObservationSpec
    from lowrl_ros.core.runtime.robot_file import load_robot_file

    spec = ObservationSpec.from_robot_file(load_robot_file(ROBOT_FILE), 0.04)
    spec.check_against(_contract())
    builder = ObservationBuilder(spec)
    env = legged.LeggedAnt()
    obs, _ = env.reset(seed=3, options={"command": np.array([0.4, -0.05, 0.1])})
    rng = np.random.default_rng(1)
    last = np.zeros(8)
    for step in range(30):
        r = env.robot
        quat, gyro, acc = r.imu()
        now = float(step)
        builder.update("joint_states", (legged.JOINTS, r.joint_positions(), r.joint_velocities(),
                                        r.joint_efforts()), now)
        builder.update("imu", (quat, gyro, acc), now)
        builder.update("cmd_vel", np.array([*env.command[:2], 0.0, 0.0, 0.0, env.command[2]]), now)
        builder.set_last_action(last)
        np.testing.assert_allclose(builder.build(now), obs, atol=1e-6)
        last = rng.uniform(-1, 1, 8)
        obs, _, terminated, _, _ = env.step(last)
        if terminated:
            break


def _min_rate() -> float:
    """The JointState rate a test requires: 200 Hz (190 with jitter) on a machine with CPU to spare. A busy
    machine (the shared 2-core test machine) delays the 5 ms timer, and the node catches the physics up inside
    a late tick (real time is kept, asserted separately): 60 Hz there. Busy means a 1-minute load above half
    the cores: the average lags a load that just began (175 Hz was seen at 1.9 on 2 cores)."""
    import os

    return 60.0 if os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1) else 190.0


def _sim_node(ros_context, **params):
    from rclpy.parameter import Parameter

    from lowrl_ros.ros.sim_robot_node import SimRobotNode

    overrides = [Parameter("env_id", value="LeggedAnt"), Parameter("control_period_s", value=0.005),
                 Parameter("joint_states_topic", value="joint_states"),
                 Parameter("command_topic", value="joint_group_position_controller/commands")]
    overrides += [Parameter(k, value=v) for k, v in params.items()]
    return SimRobotNode(context=ros_context, parameter_overrides=overrides)


@pytest.mark.ros
def test_sim_robot_node_legged_joint_states_imu_commands_and_cmd_vel(ros_context):
    import time

    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from sensor_msgs.msg import Imu, JointState
    from std_msgs.msg import Float64MultiArray

    from lowrl_ros.ros.qos import CONTROL
    from rosutil import spin_until, wait_for_match

    sim = _sim_node(ros_context, command_velocity=[0.25, 0.0, 0.1])
    probe = Node("probe", context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    for n in (sim, probe):
        executor.add_node(n)
    states, imus = [], []
    probe.create_subscription(JointState, "joint_states", lambda m: states.append(time.perf_counter()), CONTROL)
    cmd = probe.create_publisher(Float64MultiArray, "joint_group_position_controller/commands", CONTROL)
    try:
        assert wait_for_match(executor, cmd)
        assert spin_until(executor, lambda: len(states) > 50)
        states.clear()
        t0 = time.perf_counter()
        assert spin_until(executor, lambda: time.perf_counter() - t0 > 1.0, timeout=3)
        rate = len(states) / (states[-1] - t0)
        print(f"JointState rate {rate:.0f} Hz")
        assert rate >= _min_rate(), f"JointState at {rate:.0f} Hz"
        assert sim.robot.robot.time > 1.0  # the physics keeps real time even where a tick comes late
        probe.create_subscription(Imu, "imu", imus.append, CONTROL)
        assert spin_until(executor, lambda: len(imus) > 5)
        m = imus[-1]
        assert m.orientation.w == pytest.approx(1.0, abs=0.01)
        assert m.linear_acceleration.z == pytest.approx(9.81, abs=0.3)
        assert sim.robot.command.tolist() == [0.25, 0.0, 0.1]  # its own cmd_vel stand-in came back
        # hip_1 is the controller's 3rd joint (ant.xml's actuator order): the target reaches hip_1 by name
        target = list(sim.robot.hold_command)
        target[2] = 0.3
        cmd.publish(Float64MultiArray(data=target))
        hip_1 = legged.JOINTS.index("hip_1")
        assert spin_until(executor, lambda: abs(sim.robot.robot.joint_positions()[hip_1] - 0.3) < 0.05, timeout=5)
        cmd.publish(Float64MultiArray(data=[0.0] * 7))  # malformed: the default pose, not zero
        assert spin_until(executor, lambda: abs(sim.robot.robot.joint_positions()[hip_1]) < 0.05, timeout=5)
        assert not sim.robot.falls
    finally:
        executor.shutdown()
        sim.destroy_node()
        probe.destroy_node()


def test_legged_config_errors():
    from lowrl_ros.core.sim.reality_gap import RealityGapConfig
    from lowrl_ros.core.sim.sim_robot import SimRobotConfig

    with pytest.raises(ValueError, match="real time only"):
        SimRobotConfig(env_id="LeggedAnt", mode="lockstep")
    with pytest.raises(ValueError, match="at most 0.02"):
        SimRobotConfig(env_id="LeggedAnt", control_period_s=0.05)
    # the gap applies (test_legged_gap.py); a field that does not apply to the legged robot is refused
    with pytest.raises(ValueError, match="use latency_physics_steps"):
        legged.LeggedSim.from_config(SimRobotConfig(env_id="LeggedAnt", control_period_s=0.005),
                                     RealityGapConfig(action_delay_steps=1))


def test_launch_file_declares_the_nodes():
    from lowrl_ros.launcher import parse_launch

    nodes = {n.name: n for n in parse_launch(ROOT / "launch" / "legged.launch.yaml", {"vx": "0.4"})}
    assert set(nodes) == {"sim_robot", "policy_node", "budget_monitor"}
    assert ("command_velocity", "[0.4, 0.0, 0.0]") in nodes["sim_robot"].params
    turning = {n.name: n for n in parse_launch(ROOT / "launch" / "legged.launch.yaml", {"yaw_rate": "-0.3"})}
    assert ("command_velocity", "[0.3, 0.0, -0.3]") in turning["sim_robot"].params
    params = dict(nodes["policy_node"].params)
    # the bundle (the gait MODEL as full, its distilled student as lite): under load the ladder steps to lite
    assert Path(params["policy_path"]) == ROOT / "models" / "legged_ant.lowrl"
    assert Path(params["robot_file"]) == ROBOT_FILE
    assert Path(dict(nodes["budget_monitor"].params)["robot_file"]) == ROBOT_FILE


def test_shipped_policy_fits_the_robot_file():
    from lowrl_ros.core.runtime.engines import load_artifact
    from lowrl_ros.core.runtime.observation import ObservationSpec
    from lowrl_ros.core.runtime.robot_file import load_robot_file

    assert MODEL.stat().st_size < 1_000_000
    policy = load_artifact(MODEL)
    c = policy.contract
    assert c.action_names == legged.JOINTS and c.control_period_s == pytest.approx(0.04)
    ObservationSpec.from_robot_file(load_robot_file(ROBOT_FILE), c.control_period_s).check_against(c)


@pytest.mark.ros
def test_legged_launch_in_process_walks_upright(ros_context):
    """sim robot (LeggedAnt) + policy node with the robot file and the shipped policy, over DDS: JointState
    and Imu flow, the policy's commands reach the joints, and the robot walks forward and turns (cmd_vel
    0.3 m/s, 0.4 rad/s) upright for 4 s."""
    import time

    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from std_msgs.msg import Float64MultiArray

    from lowrl_ros.ros.qos import CONTROL
    from rosutil import active_policy_node, spin_until

    sim = _sim_node(ros_context, command_velocity=[0.3, 0.0, 0.4])
    probe = Node("probe", context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(sim)
    executor.add_node(probe)
    commands = []
    probe.create_subscription(Float64MultiArray, "joint_group_position_controller/commands",
                              lambda m: commands.append(list(m.data)), CONTROL)
    node = None
    try:
        assert spin_until(executor, lambda: sim.robot.robot.time > 0.2)
        node = active_policy_node(ros_context, MODEL, executor=executor, robot_file=str(ROBOT_FILE),
                                  engine="auto")
        assert spin_until(executor, lambda: len(commands) >= 5, timeout=15), "no command from the policy node"
        start_x, start_yaw, t0 = float(sim.robot.robot.data.qpos[0]), sim.robot.heading(), time.monotonic()
        assert spin_until(executor, lambda: time.monotonic() - t0 > 4.0, timeout=6)
        assert sim.robot.falls == 0 and not legged.fallen(sim.robot.robot)
        assert len(commands) > 4.0 * 25 * 0.3  # 25 Hz policy; a loaded machine drops some ticks
        assert np.ptp(np.array(commands)[:, 2]) > 0.01  # hip_1's targets change: the policy acts
        moved = float(sim.robot.robot.data.qpos[0]) - start_x
        turned = (sim.robot.heading() - start_yaw + np.pi) % (2 * np.pi) - np.pi
        print(f"moved {moved:.2f} m and turned {turned:.2f} rad in 4 s, {len(commands)} commands")
        # Commanded 0.3 m/s (1.2 m in 4 s, less the soft start): a policy that only stands moves ~0.
        assert moved > 0.1, f"the torso moved {moved:.2f} m forward in 4 s at a 0.3 m/s command: not walking"
        # and 0.4 rad/s (1.6 rad in 4 s; the policy gives ~0.3 rad/s): one that ignores yaw turns ~0.1 rad.
        assert turned > 0.4, f"the torso turned {turned:.2f} rad in 4 s at a 0.4 rad/s command: not turning"
    finally:
        executor.shutdown()
        for n in (node, sim, probe):
            if n is not None:
                n.destroy_node()


@pytest.mark.parametrize("yaw_rate", [0.4, -0.4])
def test_shipped_policy_turns_at_the_commanded_yaw_rate_while_walking(yaw_rate):
    """The int8 artifact as deployed (numpy engine), in the training task: at vx 0.3 m/s it follows a yaw-rate
    command of either sign (models/legged_ant_eval.json: 0.305 and -0.403 rad/s for +-0.4), and still walks."""
    from lowrl_ros.core.runtime.engines import load_artifact

    policy = load_artifact(MODEL, engine="numpy")
    env = legged.LeggedAnt(max_episode_steps=150)
    obs, _ = env.reset(seed=3, options={"command": [0.3, 0.0, yaw_rate]})
    velocity = []
    for step in range(150):  # 6 s; the first 2 s are the start
        obs, _, fell, _, info = env.step(policy.act(np.asarray(obs, dtype=np.float32)))
        assert not fell
        if step >= 50:
            velocity.append(info["velocity"])
    vx, _, wz = np.mean(velocity, axis=0)
    assert vx > 0.15 and wz * np.sign(yaw_rate) > 0.2, f"vx {vx:.3f} m/s, yaw rate {wz:.3f} rad/s"


def test_lowrl_ids_are_found_without_importing_the_module_first():
    """`lowrl kit --env lowrl/LeggedAnt-v0` / `lowrl train --env-id ...` in a fresh process: gym.make finds the id."""
    import subprocess
    import sys

    code = ("from lowrl_ros.core.train.trainer import make_env\n"
            "from lowrl_ros.core.sim.evaluate import make_env as ev\n"
            "e = 'lowrl/LeggedAnt-v0'\n"
            "print(make_env(e).observation_space.shape, ev(e).action_space.shape)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["(33,)", "(8,)"]


def _render_warnings(make_venv) -> list[str]:
    """The render_mode warnings gymnasium emits while ``make_venv()`` builds a VecEnv that is reset and stepped."""
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        venv = make_venv()
        venv.reset()
        venv.step(np.zeros((venv.num_envs, len(legged.JOINTS)), np.float32))
        venv.close()
    return [str(w.message) for w in seen if "render_mode" in str(w.message)]


def test_sb3_vec_envs_of_the_legged_env_emit_no_render_mode_warning():
    """SB3's make_vec_env, given the id string, asks gym.make for render_mode="rgb_array", which LeggedAnt does
    not render: gymnasium warns at every env. The training script and the benchmarks hand it legged.make."""
    import importlib.util

    from lowrl_ros.core.sim.reality_gap import RealityGapConfig

    assert _render_warnings(lambda: make_vec_env(legged.ENV_ID, n_envs=1))  # the cause, as a user saw it
    assert not _render_warnings(lambda: make_vec_env(legged.make, n_envs=1, seed=0, env_kwargs={
        "policy_period_s": 0.04, "gap": RealityGapConfig(mass_scale=1.2)}))  # as bench/sim2real*.py make them
    spec = importlib.util.spec_from_file_location("train_legged", ROOT / "scripts" / "train_legged.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert not _render_warnings(lambda: script.make_vec_env(1, 0))  # scripts/train_legged.py train
