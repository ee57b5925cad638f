"""The bundle protocol end to end with real rclpy: the policy node receives bundles over DDS while it acts.

The policy node runs in event mode and answers every joint state the test's "robot" publishes; each
bundle case runs while observations keep flowing, and every observation must get its command
(counted), from the old policy until a good bundle is swapped in. Policies are constant-action
artifacts (v1 acts 0.5, v2 acts -1.0, v3 acts 1.0), so the command says which policy acted.
The trainer-restart test runs the real trainer node as processes and kills one with SIGKILL.
"""
from __future__ import annotations

import json
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from rclpy.executors import SingleThreadedExecutor
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from lowrl_ros.core.stream.receiver import ReceiverConfig
from lowrl_ros.core.stream.protocol import encode_bundle
from lowrl_ros.ros.policy_node import PolicyNode
from fakes import JOINT, KEY, FakeRobot, constant_policy
from rosutil import PENDULUM_FIELDS, active_policy_node, spin_until, wait_for_match

ROOT = Path(__file__).resolve().parent.parent
FIELDS = PENDULUM_FIELDS
HEADER_LEN = 4 + 2 + 8 + 8 + 8 + 4 + 4 + 32  # the signed header, then the 32-byte HMAC

pytestmark = pytest.mark.ros


def nan_policy(path: Path, version: int) -> Path:
    """A v``version`` artifact whose first hidden weight is NaN, edited with onnx (save_artifact refuses NaN)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(constant_policy(path, 0.0, version=version)))
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT and len(init.dims) == 2:
            arr = numpy_helper.to_array(init).copy()
            arr.flat[0] = np.nan
            init.CopyFrom(numpy_helper.from_array(arr, init.name))
            break
    else:
        raise AssertionError("no 2-D float initializer to poison")
    onnx.save(model, str(path))
    return path


def chunk_spans(message: bytes) -> list[tuple[int, int]]:
    """(offset, total length) of each chunk record, parsed here independently of the decoder."""
    spans, pos = [], HEADER_LEN + 32
    while pos < len(message):
        _, length, _ = struct.unpack_from("<III", message, pos)
        spans.append((pos, 12 + length))
        pos += 12 + length
    return spans


class Loop:
    """The control loop as the robot sees it: one joint state out, one command back, counted."""

    def __init__(self, robot: FakeRobot, executor) -> None:
        self.robot, self.executor = robot, executor

    def step(self) -> float:
        return self.robot.exchange(self.executor, JointState(name=[JOINT], position=[0.1], velocity=[0.0]), 5.0)

    def until(self, predicate, timeout: float = 30.0) -> list[float]:
        """Keep the loop running until ``predicate()`` (or ``timeout`` s); return the commands seen meanwhile."""
        start = len(self.robot.commands)
        assert _loop_until(self, predicate, timeout), "condition not reached while the loop ran"
        return self.robot.commands[start:]

    def assert_none_missed(self) -> None:
        assert len(self.robot.commands) == self.robot.observations, "a control output was missed"


def start_policy_node(ctx, executor, tmp_path, **overrides) -> PolicyNode:
    """A configured, active policy node running v1 (acts 0.5), the key and receive_dir from tmp_path."""
    v1 = constant_policy(tmp_path / "v1.onnx", 0.5, version=1)
    node = active_policy_node(ctx, v1, executor=executor, **{
        "diagnostics_period_s": 0.2, "key_file": str(tmp_path / "bundle.key"),
        "receive_dir": str(tmp_path / "received"), **overrides})
    assert node.controller is not None and node.controller.active
    return node


@pytest.fixture
def robot_side(ros_context, key_file):
    executor = SingleThreadedExecutor(context=ros_context)
    robot = FakeRobot(ros_context, "bundle_test_robot", bundles="send")
    executor.add_node(robot.node)
    yield robot, executor
    for node in executor.get_nodes():
        node.destroy_node()
    executor.shutdown()


def connected_loop(robot: FakeRobot, executor) -> Loop:
    for endpoint in (robot.js_pub, robot.cmd_sub, robot.bundle_pub, robot.status_sub):
        assert wait_for_match(executor, endpoint)
    return Loop(robot, executor)


@pytest.fixture
def rig(ros_context, robot_side, tmp_path):
    """A policy node running v1 (acts 0.5) with the key, the test robot, and the running loop."""
    robot, executor = robot_side
    node = start_policy_node(ros_context, executor, tmp_path)
    loop = connected_loop(robot, executor)
    for _ in range(5):
        assert loop.step() == pytest.approx(0.5, abs=0.02)
    return node, robot, loop


def test_good_bundle_is_accepted_and_swapped_while_the_loop_runs(rig, tmp_path):
    node, robot, loop = rig
    v2 = constant_policy(tmp_path / "v2.onnx", -1.0, version=2)
    robot.send(encode_bundle(v2.read_bytes(), 2, KEY, chunk_size=512))
    seen = loop.until(lambda: robot.commands[-1] < -0.99)
    assert all(c == pytest.approx(0.5, abs=0.02) for c in seen[:-1])  # the old policy until the swap
    loop.assert_none_missed()
    assert spin_until(loop.executor, lambda: robot.accepted(2))
    reply = robot.reply(2)
    assert reply["code"] == "ok" and reply["running_version"] == 2
    assert node.controller.bundle.version == 2
    received = Path(node.active_policy_path)
    assert received.parent == tmp_path / "received" and received.read_bytes() == v2.read_bytes()
    def policy_status() -> dict[str, str] | None:
        found = [s for s in robot.diags if s.name == "lowrl/policy/policy"]
        return {kv.key: kv.value for kv in found[-1].values} if found else None

    # A status published just before the swap may still be on its way: wait for one that says v2.
    loop.until(lambda: (policy_status() or {}).get("version") == "2", 10.0)
    assert policy_status()["path"] == str(received)
    loop.until(lambda: robot.has_diag("lowrl/policy/bundle", 0, "accepted v2"), 10.0)


def _case(case: str, tmp_path: Path) -> tuple[bytes, int, bytes | None]:
    """(message, announced version, the intact message a re-send would bring, or None)."""
    good = encode_bundle(constant_policy(tmp_path / "v2.onnx", -1.0, version=2).read_bytes(), 2, KEY,
                         chunk_size=400)
    spans = chunk_spans(good)
    if case == "corrupt_chunk":
        bad = bytearray(good)
        bad[spans[1][0] + 12 + 5] ^= 0x40
        return bytes(bad), 2, good
    if case == "missing_chunk":
        pos, length = spans[2]
        return good[:pos] + good[pos + length:], 2, good
    if case == "bad_signature":  # right key, altered signature
        bad = bytearray(good)
        bad[HEADER_LEN + 3] ^= 0x01
        return bytes(bad), 2, None
    if case == "wrong_key":
        return encode_bundle(constant_policy(tmp_path / "k.onnx", -1.0, version=2).read_bytes(), 2,
                             bytes(range(100, 132))), 2, None
    if case == "unsigned":
        return encode_bundle(constant_policy(tmp_path / "u.onnx", -1.0, version=2).read_bytes(), 2, None), 2, None
    if case == "old_version":  # v1 running; another v1
        return encode_bundle(constant_policy(tmp_path / "o.onnx", 1.5, version=1).read_bytes(), 1, KEY), 1, None
    if case == "contract_mismatch":  # wrong observation size
        return encode_bundle(constant_policy(tmp_path / "c.onnx", -1.0, version=2, obs_dim=4).read_bytes(), 2,
                             KEY), 2, None
    if case == "nonfinite_weights":
        return encode_bundle(nan_policy(tmp_path / "n.onnx", 2).read_bytes(), 2, KEY), 2, None
    raise AssertionError(case)


CASES = {"corrupt_chunk": "corrupt_chunk", "missing_chunk": "missing_chunk", "bad_signature": "bad_signature",
         "wrong_key": "bad_signature", "unsigned": "unsigned", "old_version": "old_version",
         "contract_mismatch": "contract_mismatch", "nonfinite_weights": "nonfinite_weights"}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_bundle_is_rejected_and_the_old_policy_keeps_acting(rig, tmp_path, case):
    node, robot, loop = rig
    code = CASES[case]
    message, version, intact = _case(case, tmp_path)
    robot.send(message)
    seen = loop.until(lambda: robot.reply(version) is not None)
    seen += [loop.step() for _ in range(10)]
    assert all(c == pytest.approx(0.5, abs=0.02) for c in seen), "the old policy stopped acting"
    loop.assert_none_missed()
    reply = robot.reply(version)
    assert not reply["accepted"] and reply["code"] == code, reply
    assert reply["resend"] is (code in ("corrupt_chunk", "missing_chunk"))
    if code == "corrupt_chunk":
        assert reply["corrupt"] == [1]
    if code == "missing_chunk":
        assert reply["missing"] == [2]
    assert node.controller.bundle.version == 1 and node.active_policy_path.endswith("v1.onnx")
    loop.until(lambda: robot.has_diag("lowrl/policy/bundle", 2, code), 10.0)
    loop.until(lambda: robot.has_diag("lowrl/policy/policy", 2, "rejected"), 10.0)
    received = tmp_path / "received"
    assert not received.exists() or not any(received.iterdir()), "a rejected bundle was kept"
    if intact is not None:  # the re-send the robot asked for repairs it
        robot.send(intact)
        loop.until(lambda: robot.commands[-1] < -0.99)
        loop.assert_none_missed()
        assert spin_until(loop.executor, lambda: robot.accepted(2))
        assert node.controller.bundle.version == 2


def test_a_restarted_policy_node_gets_the_latched_bundle_at_once(ros_context, robot_side, tmp_path):
    robot, executor = robot_side
    v2 = constant_policy(tmp_path / "v2.onnx", -1.0, version=2)
    robot.send(encode_bundle(v2.read_bytes(), 2, KEY))  # published before the robot's node exists
    node = start_policy_node(ros_context, executor, tmp_path)
    loop = connected_loop(robot, executor)
    loop.until(lambda: bool(robot.commands) and robot.commands[-1] < -0.99)
    loop.assert_none_missed()
    # (No check of the status reply here: it is volatile, and a node this new may answer before
    # DDS has matched its status publisher with our subscription.)
    assert node.controller.bundle.version == 2


def test_insecure_robot_accepts_unsigned_and_a_keyless_secure_one_refuses(ros_context, robot_side, tmp_path):
    robot, executor = robot_side
    v2 = constant_policy(tmp_path / "v2.onnx", -1.0, version=2)
    node = start_policy_node(ros_context, executor, tmp_path, key_file="")  # require_signature stays true
    loop = connected_loop(robot, executor)
    robot.send(encode_bundle(v2.read_bytes(), 2, KEY))
    seen = loop.until(lambda: robot.reply(2) is not None) + [loop.step() for _ in range(5)]
    assert robot.reply(2)["code"] == "no_key" and all(c == pytest.approx(0.5, abs=0.02) for c in seen)
    node.destroy_node()
    executor.remove_node(node)
    robot.replies.clear()
    robot.send(encode_bundle(v2.read_bytes(), 2, None))  # unsigned; replaces the latched signed one
    bench = tmp_path / "bench"
    bench.mkdir()
    insecure = start_policy_node(ros_context, executor, bench, key_file="", require_signature=False)
    loop.until(lambda: robot.commands[-1] < -0.99)
    assert insecure.controller.bundle.version == 2
    # A node this new may answer before DDS matched its status publisher with our subscription
    # (the reply is volatile), so the reply is checked only when it came.
    assert robot.reply(2) is None or (robot.reply(2)["accepted"] and robot.reply(2)["code"] == "ok")


def test_policy_yaml_builds_a_valid_receiver_config():
    import yaml

    p = yaml.safe_load((ROOT / "config" / "policy_node.yaml").read_text())["/**/policy_node"]["ros__parameters"]
    config = ReceiverConfig(receive_dir=p["receive_dir"], require_signature=p["require_signature"],
                            keep=p["keep_bundles"], engine=p["engine"])
    assert config.require_signature and p["bundle_topic"] == "lowrl/policy_bundle"  # relative: under the namespace


def _trainer(watch_dir: Path, key_file: Path) -> subprocess.Popen:
    """A trainer node process; its output goes to a file (``proc.log_path``), never to a pipe that
    nobody reads while the control loop runs (a full pipe would block the trainer)."""
    cmd = [sys.executable, "-m", "lowrl_ros.ros.trainer_node", "--ros-args", "-p", f"watch_dir:={watch_dir}",
           "-p", "pattern:='*.onnx'", "-p", f"key_file:={key_file}", "-p", "poll_period_s:=0.1", "-p",
           "chunk_size:=300"]
    log_path = watch_dir.parent / f"trainer-{time.monotonic_ns()}.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
    proc.log_path = log_path
    return proc


def _loop_until(loop: Loop, predicate, timeout: float) -> bool:
    """Keep the loop running until ``predicate()`` or ``timeout`` s; whether it came true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not predicate():
        loop.step()
    return bool(predicate())


def test_trainer_restarted_mid_stream(rig, tmp_path, key_file):
    node, robot, loop = rig
    releases = tmp_path / "releases"
    releases.mkdir()
    constant_policy(releases / "v2.onnx", -1.0, version=2)
    first = _trainer(releases, key_file)
    try:
        loop.until(lambda: robot.commands[-1] < -0.99, 180.0)  # trainer A's v2 arrived and acts
        assert spin_until(loop.executor, lambda: robot.accepted(2))
        # Ask A to re-send and kill it at once, mid re-send: the robot must keep v2 acting.
        robot.status_pub.publish(String(data=json.dumps({"version": 2, "accepted": False, "code": "corrupt_chunk",
                                                          "resend": True, "corrupt": [0]})))
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        seen = [loop.step() for _ in range(30)]
        assert all(c == pytest.approx(-1.0, abs=0.02) for c in seen)
        assert node.controller.bundle.version == 2
        constant_policy(releases / "v3.onnx", 1.0, version=3)  # the next version, while no trainer runs
        seen = [loop.step() for _ in range(10)]
        assert all(c == pytest.approx(-1.0, abs=0.02) for c in seen)
        # Trainer B: a new process on this host. Its v3 must reach the robot and act. Rarely (twice in
        # many CI runs, Kilted and Jazzy, never reproduced here), a trainer started right after a
        # SIGKILLed one on the same host got nothing through in 180 s: the robot never answered v3,
        # i.e. DDS between the two processes, not the bundle protocol, which this test is about.
        # An operator restarts the trainer then, and so does the test, once, saying so; the
        # protocol's failures (a reply that rejects v3, the old policy stopping) still fail it.
        second = _trainer(releases, key_file)
        try:
            if not _loop_until(loop, lambda: robot.commands[-1] > 0.99, 90.0):
                assert robot.reply(3) is None, f"the robot answered v3 but does not run it: {robot.reply(3)}"
                second.send_signal(signal.SIGINT)
                second.wait(timeout=30)
                log = second.log_path.read_text()
                print(f"trainer B's v3 never reached the robot in 90 s; restarting it. Its log:\n{log}")
                second = _trainer(releases, key_file)
                assert _loop_until(loop, lambda: robot.commands[-1] > 0.99, 90.0), (
                    f"no v3 from a restarted trainer either; its log:\n{second.log_path.read_text()}\n"
                    f"the first trainer's log:\n{first.log_path.read_text()}\n"
                    # Which side lost it: discovery (the robot sees no publisher) or data (it sees one, got nothing).
                    f"the robot sees {node.count_publishers('/lowrl/policy_bundle')} publisher(s) on the bundle "
                    f"topic; its stream status: {node.swapper.stream_status()}")
            assert spin_until(loop.executor, lambda: robot.accepted(3))
            assert node.controller.bundle.version == 3
            loop.assert_none_missed()
        finally:
            second.send_signal(signal.SIGINT)
            second.wait(timeout=30)
            out = second.log_path.read_text()
        assert second.returncode == 0, out
        assert "published v3" in out
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=30)
