"""Robot inputs over real DDS: the newest sample taken at the tick, QoS, a robot-file policy node, staleness,
and the real-time settings' refusal path."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Imu, JointState
from geometry_msgs.msg import Twist
from std_msgs.msg import Float32MultiArray, Float64MultiArray, MultiArrayDimension

from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, save_artifact
from lowrl_ros.core.runtime.observation import ObservationBuilder, ObservationSpec
from lowrl_ros.core.runtime.robot_file import parse_robot_file
from lowrl_ros.ros.diagnostics import DiagnosticArray, level_of
from lowrl_ros.ros.qos import CONTROL
from lowrl_ros.ros.robot_inputs import RobotInputs, can_take
from rosutil import spin_for, spin_until

pytestmark = pytest.mark.ros
ROOT = Path(__file__).resolve().parents[1]
JOINTS = [f"j{i}" for i in range(12)]


def linear_policy(path: Path, obs_dim: int, period: float = 0.02) -> Path:
    """One action = 2 tanh(sum(relu(obs)) / 4) over limits [-2, 2]: a recognisable function of the observation."""
    hidden = np.eye(obs_dim, dtype=np.float32)
    weights = MlpWeights([(hidden, np.zeros(obs_dim, np.float32)),
                          (np.full((1, obs_dim), 0.25, np.float32), np.zeros(1, np.float32))])
    contract = PolicyContract(obs_names=tuple(f"obs_{i}" for i in range(obs_dim)), action_names=("a",),
                              action_low=(-2.0,), action_high=(2.0,), control_period_s=period)
    return save_artifact(path, weights, contract)


def joint_state(values: float) -> JointState:
    return JointState(name=list(reversed(JOINTS)), position=[float(values)] * 12, velocity=[0.0] * 12,
                      effort=[0.0] * 12)


@pytest.fixture
def ex(ros_context):
    executor = SingleThreadedExecutor(context=ros_context)
    made = []

    def node(name, **kw):
        n = Node(name, context=ros_context, **kw)
        executor.add_node(n)
        made.append(n)
        return n
    yield executor, node
    for n in made:
        n.destroy_node()
    executor.shutdown()


def test_newest_sample_of_a_1khz_best_effort_stream_is_taken_without_callbacks(ros_context, ex):
    executor, node = ex
    spec = ObservationSpec.from_robot_file(parse_robot_file(
        {"joints": JOINTS, "observation": [{"term": "joint_position", "topic": "joint_states"}]}), 0.02)
    builder = ObservationBuilder(spec)
    owner = Node("owner", context=ros_context)  # never spun: nothing runs per message
    inputs = RobotInputs(owner, spec, builder)
    try:
        assert inputs.mode == "take" and can_take(inputs.subscriptions()[0])
        pub = node("robot").create_publisher(JointState, "joint_states", qos_profile_sensor_data)  # BEST_EFFORT
        assert spin_until(executor, lambda: inputs.subscriptions()[0].get_publisher_count() > 0, 10)
        assert spin_until(executor, lambda: pub.get_subscription_count() > 0, 10)
        t0 = time.perf_counter()
        for k in range(1, 501):  # ~1 kHz for 0.5 s
            pub.publish(joint_state(k))
            while time.perf_counter() < t0 + k * 1e-3:
                pass
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            inputs.take()
            if builder.age("joint_states", time.perf_counter()) is not None and builder.build(
                    time.perf_counter())[0] == 500.0:
                break
            time.sleep(0.01)
        obs = builder.build(time.perf_counter())
        assert obs.tolist() == [500.0] * 12  # the newest, by name (the driver sends them reversed)
        assert inputs.take() == 0  # nothing older left behind
        assert builder.age("joint_states", time.perf_counter()) < 1.0
    finally:
        inputs.destroy()
        owner.destroy_node()


def test_reliable_qos_does_not_match_a_best_effort_publisher(ros_context, ex):
    """Why best_effort is the default: a reliable subscription never hears a SensorDataQoS driver."""
    executor, node = ex
    spec = ObservationSpec.from_robot_file(parse_robot_file({"joints": JOINTS, "observation": [
        {"term": "joint_position", "topic": "js_r", "qos": "reliable"},
        {"term": "joint_velocity", "topic": "js_b", "qos": "best_effort"}]}), 0.02)
    owner = Node("owner2", context=ros_context)
    inputs = RobotInputs(owner, spec, ObservationBuilder(spec))
    try:
        robot = node("robot2")
        pub_r = robot.create_publisher(JointState, "js_r", qos_profile_sensor_data)
        pub_b = robot.create_publisher(JointState, "js_b", qos_profile_sensor_data)
        sub_r, sub_b = inputs.subscriptions()
        assert spin_until(executor, lambda: sub_b.get_publisher_count() > 0, 10)
        assert spin_until(executor, lambda: pub_b.get_subscription_count() > 0, 10)
        spin_for(executor, 0.3)
        assert sub_r.get_publisher_count() == 0 and pub_r.get_subscription_count() == 0  # discovered, never matched
    finally:
        inputs.destroy()
        owner.destroy_node()


def write_robot(tmp_path: Path, terms: list[dict]) -> Path:
    """A robot whose policy drives one effort joint (j0) and reads all twelve (the terms' own joints)."""
    path = tmp_path / "robot.yaml"
    terms = [{**t, "joints": JOINTS} if t["term"].startswith("joint_") else t for t in terms]
    path.write_text(yaml.safe_dump({"joints": JOINTS[:1], "default_pose": [0.0], "interface": "effort",
                                    "safety": {"soft_start_s": 0.0}, "observation": terms}))
    return path


def policy_node(ros_context, executor, policy, robot_file, **params):
    from lowrl_ros.ros.policy_node import PolicyNode

    values = {"policy_path": str(policy), "robot_file": str(robot_file), "engine": "numpy",
              "diagnostics_period_s": 0.1, "soft_start_steps": 0, **params}
    node = PolicyNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
    executor.add_node(node)
    node.trigger_configure()
    assert node.controller is not None, "configure failed"
    node.trigger_activate()
    return node


def test_policy_node_runs_at_the_contract_period_on_the_newest_samples_and_a_stale_imu_is_safe(
        ros_context, ex, tmp_path):
    executor, node = ex
    robot_file = write_robot(tmp_path, [
        {"term": "joint_position", "topic": "joint_states"},
        {"term": "imu_angular_velocity", "topic": "imu", "timeout_s": 0.1}])
    pn = policy_node(ros_context, executor, linear_policy(tmp_path / "p.onnx", 15, period=0.02), robot_file)
    try:
        assert pn.controller.config.mode == "fixed_rate" and pn.controller.config.control_period_s == 0.02
        robot = node("robot3")
        js = robot.create_publisher(JointState, "joint_states", qos_profile_sensor_data)
        imu = robot.create_publisher(Imu, "imu", CONTROL)  # RELIABLE: the best_effort default hears it too
        got: list[tuple[float, float]] = []
        robot.create_subscription(Float64MultiArray, "/forward_command_controller/commands",
                                  lambda m: got.append((time.perf_counter(), m.data[0])), CONTROL)
        diags: list = []
        robot.create_subscription(DiagnosticArray, "/diagnostics", lambda m: diags.extend(m.status), 50)
        for sub in pn.robot_inputs.subscriptions():
            assert spin_until(executor, lambda s=sub: s.get_publisher_count() > 0, 10)
        msg = Imu()
        msg.orientation.w = 1.0
        msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = 0.2, 0.2, 0.2
        k = 0

        def feed(seconds: float, with_imu: bool) -> None:
            nonlocal k
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                k += 1
                js.publish(joint_state(0.1))
                if with_imu and k % 5 == 0:
                    imu.publish(msg)
                executor.spin_once(timeout_sec=0.001)

        feed(1.0, True)
        got.clear()
        feed(1.0, True)
        expected = 2.0 * np.tanh(0.25 * (12 * 0.1 + 3 * 0.2))
        assert got and all(abs(a - expected) < 1e-4 for _, a in got), got[:5]
        assert 35 <= len(got) <= 60  # 50 Hz, the contract's period, not the 1 kHz of the joint states
        diags.clear()
        feed(0.5, False)  # the IMU stops
        assert got[-1][1] == 0.0  # the safe action (zero)
        errors = [d for d in diags if d.name == "lowrl/policy/input" and level_of(d) == 2]
        assert errors and "'imu_angular_velocity' (topic imu): stale" in errors[-1].message
        assert pn.controller.deadline_misses < len(got)
    finally:
        pn.destroy_node()


def test_robot_file_that_disagrees_with_the_policy_fails_configure(ros_context, ex, tmp_path):
    from lowrl_ros.ros.policy_node import PolicyNode

    executor, _ = ex
    robot_file = write_robot(tmp_path, [{"term": "joint_position", "topic": "joint_states"}])
    node = PolicyNode(context=ros_context, parameter_overrides=[
        Parameter("policy_path", value=str(linear_policy(tmp_path / "p.onnx", 15))),
        Parameter("robot_file", value=str(robot_file))])
    try:
        node.trigger_configure()
        assert node.controller is None
    finally:
        node.destroy_node()


def test_refused_cpu_affinity_is_a_warn_diagnostic_and_the_node_runs_on(ros_context, ex, tmp_path):
    executor, node = ex
    robot_file = write_robot(tmp_path, [{"term": "joint_position", "topic": "joint_states"}])
    pn = policy_node(ros_context, executor, linear_policy(tmp_path / "p.onnx", 12), robot_file,
                     rt_cpus=str(os.cpu_count() + 64))  # a CPU this machine lacks: the OS refuses (EINVAL)
    try:
        diags: list = []
        node("watch").create_subscription(DiagnosticArray, "/diagnostics", lambda m: diags.extend(m.status), 50)
        assert spin_until(executor, lambda: any(d.name == "lowrl/policy/realtime" for d in diags), 5)
        rt = [d for d in diags if d.name == "lowrl/policy/realtime"][-1]
        assert level_of(rt) == 1 and "refused" in rt.message
        assert pn.controller.active
    finally:
        pn.destroy_node()


REFUSE = """
import os, sys
from lowrl_ros.core.runtime.realtime import apply_realtime  # first: the interpreter's files may be root's only
os.setgroups([]); os.setgid(65534); os.setuid(65534)  # an unprivileged user: no CAP_SYS_NICE, no CAP_IPC_LOCK
# The stock limits then refuse: rtprio 0 (ulimit -r), memlock 8 MiB (ulimit -l) < this process.
r = apply_realtime(80, (), True)
print(int(r.level)); print(r.text())
print(os.sched_getscheduler(0) == os.SCHED_OTHER)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become an unprivileged user")
def test_realtime_refusal_for_real_says_how_to_grant_it():
    """The OS refuses SCHED_FIFO and mlockall to an unprivileged process: WARN lines, not an exception."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", REFUSE], capture_output=True, text=True, env=env, timeout=60,
                         cwd="/")
    assert out.returncode == 0, out.stderr
    level, text, normal = out.stdout.strip().splitlines()
    assert level == "1"
    assert "SCHED_FIFO priority 80 refused" in text and "rtprio" in text and "SYS_NICE" in text
    assert "mlockall refused" in text and "memlock" in text
    assert normal == "True"


def test_shipped_robot_files_configure_a_policy_node(ros_context, ex, tmp_path):
    """pendulum.yaml with the shipped Pendulum model; legged_example.yaml with a 55-observation, 12-action policy."""
    from lowrl_ros.ros.policy_node import PolicyNode

    weights = MlpWeights([(np.zeros((8, 55), np.float32), np.zeros(8, np.float32)),
                          (np.zeros((12, 8), np.float32), np.zeros(12, np.float32))])
    legged = save_artifact(tmp_path / "legged.onnx", weights, PolicyContract(
        obs_names=tuple(f"obs_{i}" for i in range(55)), action_names=tuple(f"a{i}" for i in range(12)),
        action_low=(-1.0,) * 12, action_high=(1.0,) * 12, control_period_s=0.02))
    pendulum = ROOT / "models" / "pendulum_sac_int8.onnx"
    for policy, robot in ((pendulum, "pendulum.yaml"), (legged, "legged_example.yaml")):
        node = PolicyNode(context=ros_context, parameter_overrides=[
            Parameter("policy_path", value=str(policy)), Parameter("engine", value="numpy"),
            Parameter("robot_file", value=str(ROOT / "config" / "robots" / robot))])
        try:
            node.trigger_configure()
            assert node.controller is not None, robot
            assert len(node.robot_inputs.topics) == (1 if robot == "pendulum.yaml" else 4)
        finally:
            node.destroy_node()


@pytest.mark.parametrize("names,position,velocity,effort,frame", [
    ([f"FL_hip_joint{i}" for i in range(12)], [0.1 * i for i in range(12)], [0.2] * 12, [-0.3] * 12, "base"),
    (["a", "bb", "ccc"], [1.0, 2.0, 3.0], [], [], ""),
    (["abcd"], [], [5.0], [], "odd_len"),
    ([], [1.0], [], [2.0, 3.0], "x"),
])
def test_fast_cdr_parsers_agree_with_rclpy(names, position, velocity, effort, frame):
    """The raw-CDR readers at the tick give what rclpy's own deserialization gives (empty arrays, odd padding)."""
    from rclpy.serialization import deserialize_message, serialize_message

    from lowrl_ros.ros.robot_inputs import (parse_float32_array, parse_imu, parse_joint_state, parse_twist,
                                            to_sample)

    js = JointState(name=names, position=position, velocity=velocity, effort=effort)
    js.header.frame_id = frame
    got = parse_joint_state(serialize_message(js))
    ref = deserialize_message(serialize_message(js), JointState)
    assert got[0] == tuple(ref.name)
    for arr, field in zip(got[1:], ("position", "velocity", "effort")):
        assert arr.tolist() == list(getattr(ref, field))
    imu = Imu()
    imu.header.frame_id = frame
    imu.orientation.x, imu.orientation.w = 0.1, 0.9
    imu.orientation_covariance[0] = 7.0
    imu.angular_velocity.z, imu.linear_acceleration.x = 3.0, 9.81
    imu.linear_acceleration_covariance[8] = 4.0
    q, w, a = parse_imu(serialize_message(imu))
    assert q.tolist() == [0.1, 0.0, 0.0, 0.9] and w.tolist() == [0.0, 0.0, 3.0] and a.tolist() == [9.81, 0.0, 0.0]
    assert parse_joint_state(b"\x00\x00\x00\x00" + bytes(64)) is None  # big-endian CDR: rclpy's conversion instead
    twist = Twist()
    twist.linear.x, twist.linear.y, twist.angular.z = 0.5, -0.25, 1.5
    assert parse_twist(serialize_message(twist)) == to_sample("twist", twist)
    arr = Float32MultiArray(data=[0.5 * i for i in range(len(names) + 1)])
    arr.layout.dim = [MultiArrayDimension(label=frame, size=len(names) + 1, stride=1)] * len(names)
    arr.layout.data_offset = 3
    assert parse_float32_array(serialize_message(arr)).tolist() == list(deserialize_message(
        serialize_message(arr), Float32MultiArray).data)


def test_event_mode_acts_on_each_joint_state_and_the_fallback_without_take_message(ros_context, ex, tmp_path,
                                                                                   monkeypatch):
    """robot_timing: parameters + mode: event answers every joint state; where an rclpy has no take_message
    (checked by can_take; forced here, since every rclpy installed here has it) the IMU comes by callback."""
    from lowrl_ros.ros import robot_inputs

    monkeypatch.setattr(robot_inputs, "can_take", lambda _sub: False)
    executor, node = ex
    robot_file = write_robot(tmp_path, [{"term": "joint_position", "topic": "joint_states"},
                                        {"term": "imu_angular_velocity", "topic": "imu", "timeout_s": 1.0}])
    pn = policy_node(ros_context, executor, linear_policy(tmp_path / "p.onnx", 15), robot_file,
                     robot_timing="parameters", mode="event", watchdog_timeout_s=1.0)
    try:
        assert pn.controller.config.mode == "event" and pn.robot_inputs.mode == "callback"
        robot = node("robot5")
        js = robot.create_publisher(JointState, "joint_states", CONTROL)
        imu = robot.create_publisher(Imu, "imu", CONTROL)
        got: list[float] = []
        robot.create_subscription(Float64MultiArray, "/forward_command_controller/commands",
                                  lambda m: got.append(m.data[0]), CONTROL)
        for sub in pn.robot_inputs.subscriptions():
            assert spin_until(executor, lambda s=sub: s.get_publisher_count() > 0, 10)
        msg = Imu()
        msg.orientation.w, msg.angular_velocity.x = 1.0, 0.4
        imu.publish(msg)
        spin_for(executor, 0.2)
        for k in range(5):
            n = len(got)
            js.publish(joint_state(0.1 * k))
            assert spin_until(executor, lambda n=n: len(got) > n, 5)
            assert got[-1] == pytest.approx(2.0 * np.tanh(0.25 * (12 * 0.1 * k + 0.4)), abs=1e-4)
    finally:
        pn.destroy_node()


def test_fast_joint_state_parser_reuses_the_names_only_when_the_bytes_match():
    """parse_joint_state skips the name walk when count and names repeat at the same offset; any other
    message (other names, a longer frame_id moving them, fewer joints) is walked again."""
    from rclpy.serialization import serialize_message

    from lowrl_ros.ros.robot_inputs import parse_joint_state

    def msg(names, frame="base", scale=1.0):
        js = JointState(name=names, position=[scale * i for i in range(len(names))],
                        velocity=[-scale * i for i in range(len(names))], effort=[0.5] * len(names))
        js.header.frame_id = frame
        return serialize_message(js)

    legs = ["FL_hip", "FR_hip", "RL_hip"]
    cases = [(legs, "base", 1.0), (legs, "base", 2.0), (["FL_hip", "FR_hipX", "RL_hip"], "base", 1.0),
             (legs, "base_link_longer", 3.0), (legs[:2], "base", 1.0), ([], "base", 1.0), (legs, "base", 4.0)]
    before = None
    for names, frame, scale in cases * 2:
        got = parse_joint_state(msg(names, frame, scale))
        if before is not None and before[1:] == (names, frame):
            assert got[0] is before[0]  # steady names: the same tuple (the builder's index cache keys on it)
        before = (got[0], names, frame)
        assert got[0] == tuple(names)
        assert got[1].tolist() == [scale * i for i in range(len(names))]
        assert got[2].tolist() == [-scale * i for i in range(len(names))] and got[3].tolist() == [0.5] * len(names)


def test_helper_nodes_keep_their_own_names_under_a_launchers_node_remap_and_follow_its_topic_remaps():
    """`lowrl launch` / ros2 launch start a node with process-wide `-r __node:=NAME` (and topic remaps): the
    helper nodes that take the robot's samples (RobotInputs) and tap the session's topics (TopicTap) must not
    take the node's name too (two nodes of one name: a duplicate in `ros2 node list`, its services shadowed),
    and must subscribe where the node's remaps point."""
    import rclpy

    from lowrl_ros.core.session.recording import TopicSpec
    from lowrl_ros.ros.topic_tap import TopicTap

    ctx = rclpy.Context()
    rclpy.init(context=ctx, args=["--ros-args", "-r", "__node:=policy_node", "-r", "joint_states:=/robot/js",
                                  "-r", "lowrl/policy/stats:=/robot/stats"])
    owner = Node("owner", context=ctx)
    spec = ObservationSpec.from_robot_file(parse_robot_file(
        {"joints": JOINTS, "observation": [{"term": "joint_position", "topic": "joint_states"}]}), 0.02)
    inputs = RobotInputs(owner, spec, ObservationBuilder(spec))
    tap = TopicTap(owner, [TopicSpec("lowrl/policy/stats", "std_msgs/msg/Float64MultiArray", "STATS")], [])
    try:
        assert owner.get_name() == "policy_node"
        assert inputs._inner.get_name() == "policy_node_inputs" and tap.reader.get_name() == "policy_node_tap"
        assert [s.topic_name for s in inputs.subscriptions()] == ["/robot/js"]
        assert [s.topic_name for _, s, _ in tap._subs] == ["/robot/stats"]
    finally:
        tap.destroy()
        inputs.destroy()
        owner.destroy_node()
        rclpy.try_shutdown(context=ctx)
