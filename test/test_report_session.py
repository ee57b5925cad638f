"""The session report rendered from a real short session's files (issue 19 §6): reward terms per episode,
interventions, versions, tiers and latency. Real nodes over DDS: the sim robot (Pendulum-v1, lockstep,
writing session.json), the policy node with a robot file (teleop on), the fine-tuner computing the robot
file's reward terms into SESSION_DIR/finetune, and lowrl demo's recorder writing latency, stats, tiers and
versions. A person's teleop action is held for a second."""
from __future__ import annotations

import numpy as np
import pytest
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from std_msgs.msg import UInt8

from lowrl_ros.core.session import files, report
from lowrl_ros.ros.finetune_node import FineTuneNode
from lowrl_ros.ros.recorder_node import Recorder
from lowrl_ros.ros.sim_robot_node import SimRobotNode
from rosutil import spin_until
from test_interventions import Operator, policy_node, robot_file

pytestmark = pytest.mark.ros
EPISODE_STEPS = 20


def test_report_from_a_real_session_shows_terms_interventions_versions_tiers_latency(ros_context, tiny_kit,
                                                                                       tmp_path):
    kit_dir, base = tiny_kit
    session = tmp_path / "session"
    robot = robot_file(tmp_path, reward={"terms": [{"term": "pendulum", "weight": 1.0},
                                                   {"term": "joint_effort", "weight": 0.5}]},
                       episode={"time_limit_steps": EPISODE_STEPS})
    recorder = Recorder(session)
    sim = SimRobotNode(context=ros_context, parameter_overrides=[
        Parameter("mode", value="lockstep"), Parameter("seed", value=3), Parameter("max_episode_steps", value=1000),
        Parameter("session_dir", value=str(session))])
    policy = policy_node(ros_context, base, robot, ready_topic="/lowrl/ready")
    tuner = FineTuneNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in {
        "kit_path": str(kit_dir), "work_dir": str(session / "finetune"), "robot_file": str(robot),
        "base_policy_path": str(base), "min_transitions": 40, "batch_size": 16, "version_every_updates": 30,
        "memory_cap_mb": 1e6, "record_episodes": 2, "record_time_limit_steps": 5,
        "eval_episodes": 1, "rollback_margin": 1e6, "diagnostics_period_s": 0.2}.items()])
    op = Operator(ros_context)
    nodes = (sim, policy, tuner, op.node)
    ex = SingleThreadedExecutor(context=ros_context)
    for n in nodes:
        ex.add_node(n)
    try:
        op.tier.publish(UInt8(data=0))
        assert spin_until(ex, lambda: tuner.recorded >= 5, 15.0), tuner.recorded
        op.hold(ex, 1.0)

        def v2_judged() -> bool:
            rec = tuner.tuner.tracker.versions.get(2)
            return rec is not None and len(rec.returns) >= 1 and tuner.episode_log.rows >= 4

        assert spin_until(ex, v2_judged, 60.0), (tuner.recorded, tuner.tuner.updates, tuner.last_decision)
        assert spin_until(ex, lambda: len(recorder.latencies_us) > 20 and recorder.tiers, 5.0)
    finally:
        tuner.close()
        ex.shutdown()
        for n in nodes:
            n.destroy_node()
        recorder.close()
    data = files.read_session(session)
    assert data.term_names == ["pendulum", "joint_effort"]
    et = data.episode_terms
    assert np.all(et["steps"] <= EPISODE_STEPS) and et["interventions"].sum() >= 5
    assert np.allclose(et["return"], et["term.pendulum"] + et["term.joint_effort"], rtol=1e-4, atol=1e-3)
    # the first two episodes were cut for a recording (record_episodes), then the robot file's limit again
    assert list(et["end"][:2]) == ["cut", "cut"] and list(et["steps"][:2]) == [5, 5]
    assert set(et["version"].astype(int)) >= {1, 2} and set(et["end"][2:]) == {"truncated"}
    md = report.write_session_report(session)
    text = md.read_text()
    section = text.split("## Reward terms and interventions")[1].split("##")[0]
    assert "2 cut for the identification's recording (not in the means)" in section
    assert "| episodes | n | return | pendulum | joint_effort | interventions |" in section
    assert "| v1 |" in section and "| v2 |" in section and "| last " in section
    assert f"interventions (teleoperated steps): {int(et['interventions'].sum())} " in section
    assert "v2 (parent v1" in text  # the versions from finetune/versions.json
    assert "Compute tiers seen: full" in text and "Inference latency over" in text
    assert (session / files.REPORT_PNG).stat().st_size > 10_000
