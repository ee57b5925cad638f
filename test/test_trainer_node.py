"""The trainer node with real rclpy: key rules (a real process), monotonic versions, re-sends on request.

A listener node in the test process plays the robot: it receives the latched bundle messages and
answers on the status topic the way the policy node does.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter

from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, save_artifact
from lowrl_ros.core.stream.protocol import BundleStatus, decode_bundle, is_signed, read_header
from lowrl_ros.ros.trainer_node import TrainerNode
from fakes import KEY, FakeRobot
from rosutil import spin_until, wait_for_match

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.ros


def artifact(path: Path, version: int) -> Path:
    rng = np.random.default_rng(version)
    weights = MlpWeights([(rng.normal(size=(4, 3)).astype(np.float32), np.zeros(4, np.float32)),
                          (rng.normal(size=(1, 4)).astype(np.float32), np.zeros(1, np.float32))])
    contract = PolicyContract(obs_names=("a", "b", "c"), action_names=("u",), action_low=(-2.0,),
                              action_high=(2.0,), version=version)
    return save_artifact(path, weights, contract)


@pytest.fixture
def rig(ros_context):
    executor = SingleThreadedExecutor(context=ros_context)
    robot = FakeRobot(ros_context, bundles="receive")
    executor.add_node(robot.node)
    made = []

    def build(**params) -> TrainerNode:
        values = {"poll_period_s": 0.1, "diagnostics_period_s": 0.2, **params}
        node = TrainerNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
        made.append(node)
        executor.add_node(node)
        return node

    yield build, robot, executor
    for node in made:
        node.destroy_node()
    robot.node.destroy_node()
    executor.shutdown()


def _run_node(*params: str, timeout: float = 60.0) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "lowrl_ros.ros.trainer_node", "--ros-args"]
    for p in params:
        cmd += ["-p", p]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_refuses_to_start_without_a_key(tmp_path):
    path = artifact(tmp_path / "v1.onnx", 1)
    proc = _run_node(f"bundle_path:={path}")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    assert "no key_file" in out and "chmod 600" in out and "insecure:=true" in out
    bad_key = tmp_path / "open.key"
    bad_key.write_text(KEY.hex())
    bad_key.chmod(0o644)
    proc = _run_node(f"bundle_path:={path}", f"key_file:={bad_key}")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "chmod 600" in out, out


def test_insecure_process_streams_unsigned_and_says_so_loudly(ros_context, tmp_path):
    path = artifact(tmp_path / "v1.onnx", 1)
    executor = SingleThreadedExecutor(context=ros_context)
    robot = FakeRobot(ros_context, bundles="receive")
    executor.add_node(robot.node)
    proc = _run_node(f"bundle_path:={path}", "insecure:=true", "poll_period_s:=0.1", "diagnostics_period_s:=0.2")
    try:
        assert spin_until(executor, lambda: robot.bundles, timeout=60), "no bundle from the insecure trainer"
        assert not is_signed(robot.bundles[0])
        assert decode_bundle(robot.bundles[0], None, require_signature=False)[1] == path.read_bytes()
        assert spin_until(executor, lambda: robot.has_diag("lowrl/trainer/security", 2, "INSECURE"), timeout=20)
    finally:
        proc.send_signal(2)
        out, _ = proc.communicate(timeout=30)
        robot.node.destroy_node()
        executor.shutdown()
    assert proc.returncode == 0, out
    assert "INSECURE" in out and "UNSIGNED" in out


def test_publishes_signed_and_refuses_an_older_version(rig, key_file, tmp_path):
    build, robot, executor = rig
    v3, v2 = artifact(tmp_path / "v3.onnx", 3), artifact(tmp_path / "v2.onnx", 2)
    node = build(bundle_path=str(v3), key_file=str(key_file), chunk_size=500)
    assert spin_until(executor, lambda: robot.bundles, timeout=20)
    header, data = decode_bundle(robot.bundles[-1], KEY)
    assert header.version == 3 and data == v3.read_bytes() and header.n_chunks == -(-len(data) // 500)
    assert node.set_parameters([Parameter("bundle_path", value=str(v2))])[0].successful
    assert spin_until(executor, lambda: robot.has_diag("lowrl/trainer/stream", 2, "not newer than v3"))
    v3.write_bytes(v2.read_bytes())  # the published file itself replaced by an older version
    node.set_parameters([Parameter("bundle_path", value=str(v3))])
    robot.diags.clear()
    assert spin_until(executor, lambda: robot.has_diag("lowrl/trainer/stream", 2, "v2 is not newer"))
    assert not spin_until(executor, lambda: len(robot.bundles) > 1, timeout=0.5)
    assert node.publications == 1 and node.sender.published_version == 3
    v4 = artifact(tmp_path / "v4.onnx", 4)
    node.set_parameters([Parameter("bundle_path", value=str(v4))])
    assert spin_until(executor, lambda: len(robot.bundles) == 2)
    assert read_header(robot.bundles[-1]).version == 4


def test_resends_on_request_a_bounded_number_of_times(rig, key_file, tmp_path):
    build, robot, executor = rig
    d = tmp_path / "releases"
    d.mkdir()
    artifact(d / "v5.onnx", 5)
    node = build(watch_dir=str(d), pattern="*.onnx", key_file=str(key_file), max_resends=2)
    assert spin_until(executor, lambda: robot.bundles, timeout=20)
    assert wait_for_match(executor, robot.status_pub)
    first = robot.bundles[0]
    resend = BundleStatus(version=5, accepted=False, code="corrupt_chunk", reason="chunk 0 CRC", corrupt=(0,),
                          resend=True, running_version=1)
    for n in (2, 3):
        robot.answer(resend)
        assert spin_until(executor, lambda: len(robot.bundles) == n), f"re-send {n - 1} did not come"
        assert robot.bundles[-1] == first  # the same signed bytes
    robot.answer(resend)
    assert spin_until(executor, lambda: robot.has_diag("lowrl/trainer/stream", 2, "max_resends=2"))
    assert len(robot.bundles) == 3
    # A rejection that a re-send cannot repair is reported, not re-sent.
    robot.answer(BundleStatus(version=5, accepted=False, code="bad_signature", reason="key", running_version=1))
    assert spin_until(executor, lambda: robot.has_diag("lowrl/trainer/robot", 2, "bad_signature"))
    robot.answer(BundleStatus(version=5, accepted=True, running_version=5))
    assert spin_until(executor, lambda: robot.has_diag("lowrl/trainer/robot", 0, "accepted v5"))
    assert len(robot.bundles) == 3 and node.sender.robot_version == 5


def test_sysid_mode_identifies_from_streamed_transitions_and_streams_the_corrected_version(rig, key_file, tmp_path):
    """offboard_method sysid: transitions of the gapped legged robot (real MuJoCo) arrive on the transitions
    topic as finetune_node learner:=offboard streams them; the trainer node identifies the gap and streams
    v2 (the base with the sensor biases folded) as a signed bundle; a bad setting is refused at start."""
    from std_msgs.msg import Float64MultiArray

    from lowrl_ros.core.finetune.wire import encode_transitions
    from test_offboard_sysid import ARTIFACT, _transitions

    build, robot, executor = rig
    with pytest.raises(ValueError, match="offboard_method 'nope'"):
        build(watch_dir=str(tmp_path / "r0"), key_file=str(key_file), offboard_method="nope")
    indices, ts = _transitions(1, 4, 12)
    params = dict(watch_dir=str(tmp_path / "releases"), key_file=str(key_file), offboard_method="sysid",
                  base_policy_path=str(ARTIFACT), finetune_work_dir=str(tmp_path / "offboard"),
                  **{"sysid.episodes": 3, "sysid.window": 10, "sysid.iterations": 1})
    node = build(**params)
    pub = robot.node.create_publisher(Float64MultiArray, "lowrl/transitions", 200)
    assert wait_for_match(executor, pub)
    for start in range(0, len(ts), 12):  # one message per episode, as the robot's batches
        pub.publish(Float64MultiArray(data=encode_transitions(ts[start:start + 12], indices[start]).ravel().tolist()))
    assert spin_until(executor, lambda: robot.bundles, timeout=60), node.learner.last_decision
    header, _ = decode_bundle(robot.bundles[-1], KEY)
    assert header.version == 2 and node.learner.state == "judging"
    assert node.learner.received == len(ts) and node.bad_transitions == 0
    assert spin_until(executor, lambda: robot.has_diag("lowrl/trainer/finetune", 0, "released v2"))
    # The trainer node restarts with the same work dir: it is still judging v2, every transition read back.
    executor.remove_node(node)
    node.destroy_node()
    robot.diags.clear()
    again = build(**params)
    assert again.learner.state == "judging" and again.learner.released == [2]
    assert again.learner.resumed == len(ts) and again.learner._returns(1) == [12.0] * 4
    assert spin_until(executor, lambda: robot.has_diag("lowrl/trainer/finetune", 0, "released v2"))
