"""The fine-tuner with real rclpy: recording, the tier gate, versions through the policy node's
hot-swap path with a rollback, and SIGKILL mid-session then restart (nothing recorded is lost).

A "robot" node in the test publishes joint states, rewards and episode ends the way the sim robot
node does (reward, [episode end], joint state each step); the step rows (what the policy saw and did)
come from the same scripted node or from a real policy node. The fine-tuner here is given the old
obs_fields parameters (it builds the robot file from them). The learner is a real (tiny) SAC kit from
a real `lowrl train` run.
"""
from __future__ import annotations

import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from std_msgs.msg import UInt8

from lowrl_ros.core.finetune.transition_log import read_log
from lowrl_ros.ros.finetune_node import LOG_PREFIX, FineTuneNode
from lowrl_ros.ros.sim_robot_node import SimRobotNode
from fakes import FakeRobot, theta
from rosutil import PENDULUM_FIELDS, active_policy_node, spin_for, spin_until, wait_for_match

# Every test here spins real nodes and learns from a real (tiny) training run.
pytestmark = pytest.mark.ros

REPO = Path(__file__).resolve().parents[1]
FIELDS = PENDULUM_FIELDS


def policy_robot(tmp_path: Path) -> dict:
    """The real policy node runs the pendulum robot file (the observation FIELDS describe), torque out, no soft
    start (the executed action is the command), acting on each observation (robot_timing: parameters, event
    mode, as the demo does): the lockstep sim robot then steps as fast as the nodes answer, not at the
    contract's 50 Hz."""
    data = yaml.safe_load((REPO / "config/robots/pendulum.yaml").read_text())
    data.update(interface="effort", safety={"soft_start_s": 0.0})
    path = tmp_path / "pendulum_effort.yaml"
    path.write_text(yaml.safe_dump(data))
    return {"robot_file": str(path), "robot_timing": "parameters"}


@pytest.fixture(scope="module")
def kit(tiny_kit):
    """(kit dir, base int8 artifact) from a real tiny `lowrl train` run (conftest.tiny_kit)."""
    return tiny_kit


def answered(ex, robot: FakeRobot, sent: float, period: float = 0.005) -> None:
    """Spin until the real policy node's command for the step sent at ``sent`` arrives, then out the
    rest of a 200 Hz control period: flat out, a test loop holds the GIL and starves the niced learner
    thread (8 updates in 60 s on a 2-vCPU machine; on CI no version in 60 s)."""
    before = len(robot.commands)  # commands arrive only while the executor spins
    assert spin_until(ex, lambda: len(robot.commands) > before, 2.0), f"no command for the step sent at {sent:.3f}"
    spin_for(ex, period - (time.monotonic() - sent))


def check_transitions(batch) -> list[int]:
    """Every recorded transition is step k: obs theta_k, action k/1000, reward -k, next obs k+1."""
    ks = []
    for i in range(len(batch)):
        k = int(round(batch.obs[i, 2]))
        assert batch.obs[i, :2] == pytest.approx([math.cos(theta(k)), math.sin(theta(k))])
        assert batch.action[i, 0] == pytest.approx(k / 1000.0), k
        assert batch.reward[i] == -k
        assert batch.next_obs[i, 2] == k + 1
        ks.append(k)
    return ks


def node_params(kit_dir, work_dir, **extra) -> dict:
    """The fine-tuner's parameters for these tests. The memory cap is off unless a test sets it: the node
    measures the resident memory of this whole pytest process, which after the tiers' training tests can pass
    the 1500 MB default, and the learner then pauses (seen in CI: no v2 in 20 s)."""
    return {"kit_path": str(kit_dir), "work_dir": str(work_dir), "obs_fields": FIELDS, "min_transitions": 20,
            "batch_size": 16, "diagnostics_period_s": 0.2, "memory_cap_mb": 1e6, **extra}


def test_records_transitions_and_learns_only_at_full_tier(ros_context, kit, tmp_path):
    kit_dir, base = kit
    node = FineTuneNode(context=ros_context, parameter_overrides=[
        Parameter(k, value=v) for k, v in node_params(kit_dir, tmp_path, base_policy_path=str(base)).items()])
    robot = FakeRobot(ros_context, step_rows=True)
    ex = SingleThreadedExecutor(context=ros_context)
    ex.add_node(node)
    ex.add_node(robot.node)
    try:
        for pub in (robot.step_pub, robot.reward, robot.episode_info, robot.tier):
            assert wait_for_match(ex, pub)
        robot.tier.publish(UInt8(data=3))  # safe tier: record, never learn
        steps = 60
        for k in range(steps):
            t0 = time.monotonic()
            robot.step(k, episode_return=-123.0 if k in (30, 45) else None, terminated=k == 45)
            assert spin_until(ex, lambda: node.received["step"] == k + 1 and node.received["reward"] == k, 5.0)
            spin_for(ex, 0.01 - (time.monotonic() - t0))  # a 100 Hz robot
        assert node.recorded == steps - 2  # the last step waits for a reward sent after its next observation
        assert node.recorder.incomplete == 0 and node.bad_inputs == 0 and node.callback_errors == 0
        batch, report = read_log(tmp_path / "transitions")
        assert len(batch) == node.recorded and report.from_wal == 1  # the open segment, read from its WAL
        assert check_transitions(batch) == list(range(steps - 2))
        assert batch.truncated.tolist() == [k == 29 for k in range(steps - 2)]  # episode end after step 29
        assert batch.terminated.tolist() == [k == 44 for k in range(steps - 2)]  # a terminal end after step 44
        # Enough data, but the tier is not FULL: no update, ever.
        spin_for(ex, 0.8)
        assert node.tuner.updates == 0 and node.state == "waiting_for_full_tier"
        assert robot.latest("lowrl/finetune/learner")["state"] == "waiting_for_full_tier"
        robot.tier.publish(UInt8(data=0))
        assert spin_until(ex, lambda: node.tuner.updates > 0, 20.0)
        assert node.tuner.updates <= node.tuner.transitions_seen  # update-to-data cap 1.0
        robot.tier.publish(UInt8(data=1))  # lite: learning stops again
        assert spin_until(ex, lambda: node.state == "waiting_for_full_tier", 5.0)
        frozen = node.tuner.updates
        spin_for(ex, 0.5)
        assert node.tuner.updates <= frozen + node.config.updates_per_slice  # at most the slice in flight
    finally:
        node.close()
        ex.shutdown()
        node.destroy_node()
        robot.node.destroy_node()
    batch, report = read_log(tmp_path / "transitions")
    assert report.complete_segments == report.segments == 1 and len(batch) == steps - 1  # close() sealed the last


def test_versions_reach_the_policy_node_and_a_bad_one_is_rolled_back(ros_context, kit, tmp_path):
    kit_dir, base = kit
    policy = active_policy_node(ros_context, base, **policy_robot(tmp_path))
    node = FineTuneNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in node_params(
        kit_dir, tmp_path, base_policy_path=str(base), version_every_updates=20, eval_episodes=1,
        rollback_margin=100.0).items()])
    robot = FakeRobot(ros_context, scripted_commands=True)
    ex = SingleThreadedExecutor(context=ros_context)
    for n in (policy, node, robot.node):
        ex.add_node(n)
    paths = [str(base)]
    try:
        for pub in (robot.js_pub, robot.reward, robot.episode_info, robot.tier):
            assert wait_for_match(ex, pub)
        robot.tier.publish(UInt8(data=0))
        # Scripted returns: the base scores -500, any fine-tuned version -1500 (a drop > margin 100).
        deadline = time.monotonic() + 60
        k = 0
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            end = -500.0 if node.running_version == 1 else -1500.0
            robot.step(k, episode_return=end if k and k % 25 == 0 else None)
            answered(ex, robot, t0)
            if policy.active_policy_path != paths[-1]:
                paths.append(policy.active_policy_path)
            if len(paths) >= 3:
                break
            k += 1
        assert len(paths) >= 3, f"no version/rollback within the time: {paths}, {node.last_decision}"
        assert paths[1].endswith("versions/v000002.onnx")  # v2 went through the policy node's swap path
        assert paths[2] == str(base)  # v2 returned -1500 < -500 - 100: the base is back
        assert node.tuner.tracker.versions[2].status == "rejected" and node.tuner.tracker.current == 1
        # Each judged episode carries the kit critic's value of its first observation: the one the
        # robot published right after the previous episode's end (a step k that is a multiple of 25).
        starts = {ks: node.tuner.start_value([math.cos(theta(ks)), math.sin(theta(ks)), float(ks)])
                  for ks in range(25, k + 1, 25)}
        judged = [b for v in (1, 2) for b in node.tuner.tracker.versions[v].baselines]
        assert judged and all(any(b == pytest.approx(v) for v in starts.values()) for b in judged), (judged, starts)
        assert "more than 100" in node.last_decision or "rolling" in node.last_decision or "v2" in node.last_decision
        assert spin_until(ex, lambda: robot.value("lowrl/finetune/versions", "running") == 1, 5.0)
    finally:
        node.close()
        ex.shutdown()
        for n in (policy, node, robot.node):
            n.destroy_node()
    records = read_log(tmp_path / "transitions")[0]
    assert {1, 2} <= set(records.policy_version.tolist())  # each transition says which version acted


def test_with_the_real_sim_robot_every_transition_is_a_true_pendulum_step(ros_context, kit, tmp_path):
    """Sim robot (lockstep) + policy node + fine-tuner: each recorded reward is the one Pendulum-v1's
    reward function gives for the recorded observation and action, and steps chain without a gap."""
    kit_dir, base = kit
    sim = SimRobotNode(context=ros_context, parameter_overrides=[
        Parameter("mode", value="lockstep"), Parameter("max_episode_steps", value=50), Parameter("seed", value=3)])
    policy = active_policy_node(ros_context, base, diagnostics_period_s=1.0, **policy_robot(tmp_path))
    node = FineTuneNode(context=ros_context, parameter_overrides=[
        Parameter(k, value=v) for k, v in node_params(kit_dir, tmp_path, min_transitions=10_000).items()])
    ex = SingleThreadedExecutor(context=ros_context)
    for n in (sim, policy, node):
        ex.add_node(n)
    try:
        assert spin_until(ex, lambda: node.recorded >= 160, 60.0), node.recorded
    finally:
        node.close()
        ex.shutdown()
        for n in (sim, policy, node):
            n.destroy_node()
    batch, _ = read_log(tmp_path / "transitions")
    assert len(batch) >= 160 and node.recorder.incomplete <= 1  # at most the step before we listened
    theta = np.arctan2(batch.obs[:, 1], batch.obs[:, 0])
    u = np.clip(batch.action[:, 0], -2.0, 2.0).astype(np.float32).astype(np.float64)
    expected = -(theta ** 2 + 0.1 * batch.obs[:, 2] ** 2 + 0.001 * u ** 2)  # Pendulum-v1's reward
    assert np.allclose(batch.reward, expected, rtol=1e-5, atol=1e-6)
    assert np.array_equal(batch.next_obs[:-1], batch.obs[1:])  # one chain of steps, nothing skipped
    assert 3 <= batch.truncated.sum() <= 4 and not batch.terminated.any()  # 50-step episodes end on time
    assert np.all(np.diff(np.flatnonzero(batch.truncated)) == 50)


def test_a_version_the_policy_node_rejects_trips_a_rollback(ros_context, kit, tmp_path):
    """The real policy node rejects a corrupt v2 (its ERROR diagnostic): the fine-tuner goes back."""
    kit_dir, base = kit
    policy = active_policy_node(ros_context, base, **policy_robot(tmp_path))
    node = FineTuneNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in node_params(
        kit_dir, tmp_path, base_policy_path=str(base), version_every_updates=40, eval_episodes=1).items()])
    robot = FakeRobot(ros_context, scripted_commands=True)
    ex = SingleThreadedExecutor(context=ros_context)
    for n in (policy, node, robot.node):
        ex.add_node(n)
    try:
        for pub in (robot.js_pub, robot.reward, robot.episode_info, robot.tier):
            assert wait_for_match(ex, pub)
        robot.tier.publish(UInt8(data=0))
        k, ends = 0, 0

        def step(end: bool = False) -> None:
            nonlocal k, ends
            sent = time.monotonic()
            robot.step(k, episode_return=-400.0 if end else None)
            ends += end
            answered(ex, robot, sent)
            k += 1

        deadline = time.monotonic() + 120  # an upper bound for a loaded machine; idle it takes seconds
        while (node.tuner.updates < 40 or node.running_version != 1) and time.monotonic() < deadline:
            step()
        assert node.tuner.updates >= 40 and node.running_version == 1
        step(end=True)  # an end while v1 is known to run starts an episode the fine-tuner can judge
        step()
        robot.step(k, episode_return=-400.0)  # judges v1; v2 is then due at once
        # Stop spinning as soon as the node has the episode end: the learner thread makes v2 on
        # its own, and the request to the policy node waits for the executor.
        assert spin_until(ex, lambda: node.received["episode"] == ends + 1, 5.0)
        deadline = time.monotonic() + 20
        while 2 not in node.tuner.tracker.versions and time.monotonic() < deadline:
            time.sleep(0.01)
        assert 2 in node.tuner.tracker.versions, (node.state, node.rss_mb, node.tuner.updates, node.last_decision)
        v2 = Path(node.tuner.tracker.versions[2].path)
        v2.write_bytes(v2.read_bytes()[:100])  # the file goes bad before the policy node reads it
        k += 1
        deadline = time.monotonic() + 20
        while "rejected v2" not in node.last_decision and time.monotonic() < deadline:
            step()
        assert node.tuner.tracker.versions[2].status == "rejected", node.last_decision
        assert "rejected v2" in node.last_decision and node.tuner.tracker.current == 1
        assert policy.active_policy_path == str(base)  # the control path never left the base policy
        assert spin_until(ex, lambda: policy.get_parameter("policy_path").value == str(base), 5.0)
    finally:
        node.close()
        ex.shutdown()
        for n in (policy, node, robot.node):
            n.destroy_node()


def test_enabled_clears_a_safety_pause_only_once_the_change_is_accepted(ros_context, kit, tmp_path):
    """On-set callbacks only validate (any of them may still refuse); the pause is cleared post-set."""
    from rcl_interfaces.msg import SetParametersResult

    kit_dir, base = kit
    node = FineTuneNode(context=ros_context, parameter_overrides=[
        Parameter(k, value=v) for k, v in node_params(kit_dir, tmp_path, base_policy_path=str(base)).items()])
    try:
        node.session.pause("safety: a test trip")
        # A validator that runs after the node's own on-set callbacks (rclpy runs the newest first) refuses.
        node._on_set_parameters_callbacks.append(lambda params: SetParametersResult(successful=False, reason="no"))
        assert not node.set_parameters([Parameter("enabled", value=True)])[0].successful
        assert node.paused_reason == "safety: a test trip"  # refused: nothing changed
        node._on_set_parameters_callbacks.pop()
        assert node.set_parameters([Parameter("enabled", value=True)])[0].successful
        assert node.paused_reason == ""
    finally:
        node.close()
        node.destroy_node()


def test_memory_cap_pauses_learning_with_a_diagnostic(ros_context, kit, tmp_path):
    kit_dir, base = kit
    # 64 MB is below what any torch process holds: learning must pause, recording must go on.
    node = FineTuneNode(context=ros_context, parameter_overrides=[
        Parameter(k, value=v) for k, v in node_params(kit_dir, tmp_path, memory_cap_mb=64.0).items()])
    robot = FakeRobot(ros_context, step_rows=True)
    ex = SingleThreadedExecutor(context=ros_context)
    ex.add_node(node)
    ex.add_node(robot.node)
    try:
        for pub in (robot.step_pub, robot.reward, robot.tier):
            assert wait_for_match(ex, pub)
        robot.tier.publish(UInt8(data=0))
        for k in range(40):
            robot.step(k)
            assert spin_until(ex, lambda: node.received["step"] == k + 1 and node.received["reward"] == k, 5.0)
        assert spin_until(ex, lambda: robot.latest("lowrl/finetune/learner").get("state") == "paused_memory",
                          5.0)
        assert node.tuner.updates == 0 and node.recorded >= 35
        assert float(robot.latest("lowrl/finetune/learner")["rss_mb"]) > 64.0
    finally:
        node.close()
        ex.shutdown()
        node.destroy_node()
        robot.node.destroy_node()


def start_node(kit_dir, work_dir) -> subprocess.Popen:
    args = [sys.executable, "-m", "lowrl_ros.ros.finetune_node", "--ros-args",
            "--params-file", str(REPO / "config/finetune_node.yaml"),
            "-p", f"kit_path:={kit_dir}", "-p", f"work_dir:={work_dir}", "-p", "diagnostics_period_s:=0.1",
            "-p", "min_transitions:=20", "-p", "batch_size:=16", "-p", f"{LOG_PREFIX}segment_transitions:=64"]
    # Output to a file, not a pipe nobody reads while the test runs (a full pipe would block the node).
    log_path = Path(work_dir) / f"node-{time.monotonic_ns()}.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(args, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True)
    proc.log_path = log_path
    return proc


def test_killed_mid_session_keeps_every_transition_and_resumes(ros_context, kit, tmp_path):
    kit_dir, _ = kit
    robot = FakeRobot(ros_context, step_rows=True)
    ex = SingleThreadedExecutor(context=ros_context)
    ex.add_node(robot.node)
    log = "finetune_node log"
    LOG_NAME = "lowrl/finetune/log"
    proc = start_node(kit_dir, tmp_path)
    try:
        assert wait_for_match(ex, robot.step_pub, 60.0) and wait_for_match(ex, robot.reward, 10.0)
        robot.tier.publish(UInt8(data=0))
        k = 0

        def run_steps(n: int) -> None:
            nonlocal k
            for _ in range(n):
                robot.step(k)
                spin_for(ex, 0.008)
                k += 1

        run_steps(200)
        assert spin_until(ex, lambda: robot.value(LOG_NAME, "recorded") >= 150, 10.0), robot.diags
        reported = robot.value(LOG_NAME, "recorded")
        run_steps(10)  # still feeding when it dies: mid-session
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        log = proc.log_path.read_text()
        assert proc.returncode == -signal.SIGKILL

        batch, report = read_log(tmp_path / "transitions")
        assert len(batch) >= reported, log
        assert report.from_wal == 1 and not report.problems and report.segments >= 3
        first = check_transitions(batch)
        assert first == list(range(first[0], first[0] + len(first)))  # consecutive, nothing missing

        proc = start_node(kit_dir, tmp_path)
        robot.diags.clear()
        # Only the new process can say resumed > 0: the killed one's last diagnostics (resumed 0) may still sit in
        # this subscription's queue, unspun since the kill, and come in after the clear.
        assert spin_until(ex, lambda: robot.value(LOG_NAME, "resumed") > 0, 60.0), robot.diags
        assert robot.value(LOG_NAME, "resumed") == len(batch)  # the whole log came back into the buffer
        assert robot.value(LOG_NAME, "rebuilt_from_wal") >= 1
        assert wait_for_match(ex, robot.step_pub, 10.0)
        start = k
        # The killed process's DDS participant can still count as a match for a while, so feed
        # steps until the new process records them (a step it was not yet subscribed for is lost
        # to it, which is not what this test is about).
        deadline = time.monotonic() + 60
        while robot.value(LOG_NAME, "recorded") < 50 and time.monotonic() < deadline:
            run_steps(20)
            spin_until(ex, lambda: robot.value(LOG_NAME, "recorded") >= 50, 0.5)
        assert robot.value(LOG_NAME, "recorded") >= 50
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        log = proc.log_path.read_text()
        assert proc.returncode == 0, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        ex.shutdown()
        robot.node.destroy_node()
    after, report = read_log(tmp_path / "transitions")
    assert report.complete_segments == report.segments and report.from_wal == 0, log  # every file a whole MCAP
    ks = check_transitions(after)
    assert ks[:len(first)] == first  # what was there before the kill is unchanged
    new = ks[len(first):]
    assert len(new) >= 50 and new == list(range(new[0], new[0] + len(new))) and new[0] >= start


def test_missing_kit_or_mismatched_obs_fields_is_refused_before_the_disk(ros_context, kit, tmp_path):
    # The shipped file itself is checked in test/test_shipped_config.py.
    with pytest.raises(ValueError, match="kit_path is empty"):
        FineTuneNode(context=ros_context)
    with pytest.raises(ValueError, match="builds 2 observations but the kit's policy reads 3"):
        FineTuneNode(context=ros_context, parameter_overrides=[
            Parameter("kit_path", value=str(kit[0])), Parameter("work_dir", value=str(tmp_path / "bad")),
            Parameter("obs_fields", value=FIELDS[:2])])
    assert not (tmp_path / "bad").exists()  # refused before touching the disk


def test_bad_parameters_exit_with_the_fix(kit, tmp_path):
    kit_dir, _ = kit
    r = subprocess.run([sys.executable, "-m", "lowrl_ros.ros.finetune_node", "--ros-args",
                        "-p", f"kit_path:={tmp_path}", "-p", f"work_dir:={tmp_path / 'w'}",
                        "-p", f"obs_fields:={FIELDS}".replace("'", "")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "not a fine-tune kit" in r.stderr


def test_without_a_robot_file_the_old_parameters_build_the_policy_nodes_robot_file(ros_context, kit, tmp_path):
    """One input path: obs_fields/obs_offset/obs_scale/input become the robot file legacy_robot_file makes
    (the one the policy node builds from the same parameters), read through the step rows."""
    from lowrl_ros.core.runtime.robot_file import legacy_robot_file

    offset, scale = [0.0, 0.1, 0.0], [1.0, 1.0, 0.5]
    node = FineTuneNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in node_params(
        kit[0], tmp_path, obs_offset=offset, obs_scale=scale, joint_states_topic="/robot/joint_states").items()])
    try:
        assert node.robot.raw == legacy_robot_file(tuple(FIELDS), tuple(offset), tuple(scale),
                                                   joint_states_topic="/robot/joint_states")
        assert node.robot.raw["observation"][1] == {"term": "joint_position", "function": "sin",
                                                    "joints": ["pendulum_joint"], "topic": "/robot/joint_states",
                                                    "offset": 0.1}
        assert node.robot.joints == ("pendulum_joint",)
        topics = {sub.topic_name for sub in node.subscriptions}
        assert "/lowrl/policy/step" in topics and "/joint_states" not in topics  # the step rows only
    finally:
        node.close()
        node.destroy_node()
