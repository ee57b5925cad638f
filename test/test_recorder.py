"""EpisodeRecorder (core/finetune/recorder.py): step rows in, transitions and episode ends out (no ROS).

The rows are made with the policy node's own encoder (core/runtime/step_row.py), so what is tested here
is what the fine-tuner reads from the step topic.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from lowrl_ros.core.finetune.recorder import EpisodeEnded, EpisodeRecorder
from lowrl_ros.core.finetune.rewards import EpisodeSpec, RewardSpec
from lowrl_ros.core.finetune.transition_log import Transition
from lowrl_ros.core.runtime.observation import ObservationSpec
from lowrl_ros.core.runtime.robot_file import parse_robot_file
from lowrl_ros.core.runtime.step_row import decode_step, encode_step, row_size

OBS = [{"term": "projected_gravity", "topic": "imu", "quaternion_order": "xyzw"},
       {"term": "array", "name": "x", "topic": "x", "size": 1}]
UPRIGHT, TILTED = (0.0, 0.0, -1.0), (0.9, 0.0, -0.1)


def specs(reward: dict, episode: dict | None = None) -> tuple[RewardSpec, EpisodeSpec | None]:
    data = {"joints": ["a"], "observation": OBS, "reward": reward}
    if episode is not None:
        data["episode"] = episode
    robot = parse_robot_file(data, "r.yaml")
    spec = ObservationSpec.from_robot_file(robot, 0.02)
    return RewardSpec.from_robot_file(robot, spec), EpisodeSpec.from_robot_file(robot, spec)


def row(k: float, *, grav=UPRIGHT, safe: bool = False, interv: bool = False, version: int = 1):
    """Step row k: observation (gravity, k), executed action k/10 (NaN on a safe tick), command k."""
    buf = np.empty(row_size(4, 1))
    action = None if safe else np.array([k / 10])
    encode_step(buf, stamp=k, safe=safe, intervention=interv, estop=False, policy_version=version,
                obs=np.array([*grav, k]), policy_action=action, action=action, command=np.array([float(k)]))
    return decode_step(buf, 4, 1)


def feed(rec: EpisodeRecorder, rows) -> list:
    out = []
    for r in rows:
        out += rec.step(r, r.stamp, 0.0)
    return out


def split(out) -> tuple[list[Transition], list[EpisodeEnded]]:
    return [x for x in out if isinstance(x, Transition)], [x for x in out if isinstance(x, EpisodeEnded)]


def test_computed_rewards_chain_rows_into_transitions_with_term_sums():
    rec = EpisodeRecorder(*specs({"terms": [{"term": "alive", "weight": 2.0}, {"term": "action_rate"}]}))
    ts, ends = split(feed(rec, [row(k) for k in range(4)]))
    assert not ends and len(ts) == 3  # the last row waits for the next observation
    assert [t.obs[3] for t in ts] == [0, 1, 2] and [t.next_obs[3] for t in ts] == [1, 2, 3]
    assert [t.action[0] for t in ts] == [0.0, 0.1, 0.2] and all(t.policy_version == 1 for t in ts)
    assert ts[1].reward_terms == pytest.approx((2.0, -0.01)) and ts[1].reward == pytest.approx(1.99)
    assert rec.incomplete == 0 and rec.running_version == 1
    # what went out at tick t (the row's command, robot units) travels with it: identification replays it
    assert [t.command.tolist() for t in ts] == [[0.0], [1.0], [2.0]]


def test_a_safe_tick_breaks_the_chain_and_an_intervention_is_flagged():
    rec = EpisodeRecorder(*specs({"terms": [{"term": "alive"}]}))
    ts, _ = split(feed(rec, [row(0), row(1, interv=True), row(2), row(3, safe=True), row(4), row(5)]))
    # 0->1, 1->2 (teleoperated), 2->3 (the safe tick's observation ends it), none from 3, then 4->5
    assert [(t.obs[3], t.next_obs[3]) for t in ts] == [(0, 1), (1, 2), (2, 3), (4, 5)]
    assert [t.intervention for t in ts] == [False, True, False, False]
    assert rec.interventions == 1


def test_terminated_and_truncated_ends_reset_and_are_judged():
    rec = EpisodeRecorder(*specs({"terms": [{"term": "alive"}]}, {"fall_tilt_deg": 45, "time_limit_steps": 3}))
    out = feed(rec, [row(0), row(1), row(2), row(3)])  # 3 steps: truncated
    ts, ends = split(out)
    assert len(ts) == 3 and ts[-1].truncated and not ts[-1].terminated and out[-1] is ends[0]
    first = ends[0]
    assert first.kind == "truncated" and first.reset and "3 steps" in first.reason
    assert first.ret == 3.0 and first.steps == 3 and first.term_sums == {"alive": 3.0}
    assert first.judged is None  # the first episode was joined mid-way: not judged
    out = feed(rec, [row(4), row(5, interv=True), row(6, grav=TILTED)])  # a fall ends the next one
    ts, ends = split(out)
    assert [t.terminated for t in ts] == [False, True] and ts[-1].reward == 0.0  # no alive bonus on a fall
    end = ends[0]
    assert end.kind == "terminated" and "fall" in end.reason and end.ret == 1.0 and end.interventions == 1
    assert end.judged is not None and end.judged.version == 1 and end.judged.ret == 1.0
    assert end.judged.start_obs[3] == 4  # the episode's first observation
    assert rec.last_terms == {"alive": 1.0}


def test_with_await_ready_the_next_episode_starts_where_the_robot_stands_again():
    """A row the policy node sent before the reset request reached it shows the old episode's robot: with the robot's
    ready awaited it is not recorded, and the next episode starts at the first row after the ready."""
    reward, episode = specs({"terms": [{"term": "alive"}]}, {"time_limit_steps": 2})
    rec = EpisodeRecorder(reward, episode, await_ready=True)
    _, ends = split(feed(rec, [row(0), row(1), row(2)]))  # the end at row 2 asks for a reset
    assert ends and ends[0].reset
    # rows 3 and 4 left the policy node before the reset request reached it, then it held (5) until the ready
    assert feed(rec, [row(3), row(4), row(5, safe=True)]) == [] and rec.before_ready == 2
    rec.ready()
    ts, ends = split(feed(rec, [row(6), row(7), row(8)]))
    assert [(t.obs[3], t.next_obs[3]) for t in ts] == [(6, 7), (7, 8)] and ends[0].judged.start_obs[3] == 6
    assert rec.incomplete == 0
    # without await_ready the stale row 3 would have started that episode
    plain = EpisodeRecorder(reward, episode)
    feed(plain, [row(0), row(1), row(2)])
    ts, _ = split(feed(plain, [row(3), row(4)]))
    assert ts[0].obs[3] == 3 and plain.before_ready == 0
    # a robot file without episode: never waits (nothing asks the robot to reset)
    assert not EpisodeRecorder(reward, None, await_ready=True).await_ready


def test_a_ready_that_arrives_late_loses_no_row_the_policy_nodes_hold_marks_the_reset():
    """The policy node sends a safe row at the reset request and holds until the robot's ready: its next policy row
    shows the reset robot even when the ready reaches the fine-tuner after it (a busy executor; seen in a quadruped
    session: every episode started one row late, mid-way through the reset's first motion)."""
    reward, episode = specs({"terms": [{"term": "alive"}]}, {"time_limit_steps": 2})
    rec = EpisodeRecorder(reward, episode, await_ready=True)
    feed(rec, [row(0), row(1), row(2)])
    ts, ends = split(feed(rec, [row(3), row(4, safe=True), row(5), row(6), row(7)]))  # no ready (yet)
    assert [(t.obs[3], t.next_obs[3]) for t in ts] == [(5, 6), (6, 7)] and ends[0].judged.start_obs[3] == 5
    assert rec.before_ready == 1
    # the end at row 7 asks for another reset; the first one's ready, arriving only now, does not answer it
    rec.ready()
    assert feed(rec, [row(8), row(9)]) == [] and rec.before_ready == 3
    rec.ready()  # this reset's
    ts, _ = split(feed(rec, [row(10), row(11)]))
    assert [(t.obs[3], t.next_obs[3]) for t in ts] == [(10, 11)]


def test_an_episode_cut_for_the_recording_is_truncated_and_never_judged():
    reward, episode = specs({"terms": [{"term": "alive"}]}, {"time_limit_steps": 3})
    rec = EpisodeRecorder(reward, episode)
    episode.cut_first(1, 2)
    feed(rec, [row(0), row(1), row(2)])  # steps 1, 2: cut (the first episode is never judged: it began unseen)
    ts, ends = split(feed(rec, [row(3), row(4), row(5), row(6)]))  # a whole one, judged
    assert [e.kind for e in ends] == ["truncated"] and ends[0].judged is not None and ts[-1].truncated
    episode.cut_first(1, 2)
    ts, ends = split(feed(rec, [row(7), row(8), row(9)]))
    assert [e.kind for e in ends] == ["cut"] and ends[0].judged is None and ends[0].steps == 2
    assert ts[-1].truncated and not ts[-1].terminated  # the learner and the identification see a truncation


def test_record_episodes_needs_an_episode_section():
    from lowrl_ros.core.finetune.recorder import RobotSpecs

    robot = parse_robot_file({"joints": ["a"], "observation": OBS, "reward": {"terms": [{"term": "alive"}]}}, "r.yaml")
    robot_specs = RobotSpecs.from_robot_file(robot, 0.02)
    robot_specs.cut_recording(0, 250)  # off: fine
    with pytest.raises(ValueError, match="record_episodes 8: r.yaml has no episode: section"):
        robot_specs.cut_recording(8, 250)


def test_a_swap_mid_episode_is_not_judged():
    rec = EpisodeRecorder(*specs({"terms": [{"term": "alive"}]}, {"time_limit_steps": 2}))
    feed(rec, [row(0), row(1), row(2)])  # the first end: judging starts
    rec.swap_requested()
    _, ends = split(feed(rec, [row(3), row(4), row(5)]))
    assert ends and ends[0].judged is None


def test_swaps_are_counted_when_the_rows_version_changes_and_rows_are_timed():
    rec = EpisodeRecorder(*specs({"terms": [{"term": "alive"}]}))
    for k, version in enumerate([1, 1, 2, 2, 1]):
        rec.step(row(k, version=version), float(k), 50.0 + k)
    assert rec.swaps == 2 and rec.running_version == 1 and rec.last_row_at == 54.0  # the first version is no swap


def test_a_missing_reward_input_is_counted_as_incomplete():
    rec = EpisodeRecorder(*specs({"terms": [{"term": "joint_effort"}]}))  # effort is not observed: JointState
    assert split(feed(rec, [row(0), row(1)]))[0] == [] and rec.incomplete == 1
    rec.effort = np.array([2.0])
    ts, _ = split(feed(rec, [row(2)]))
    assert len(ts) == 1 and ts[0].reward == -4.0 and rec.incomplete == 1


def test_with_a_reward_topic_rows_pair_with_reward_messages():
    rec = EpisodeRecorder(*specs({"topic": "/r"}))
    assert not rec.computed
    out = []
    for k in range(6):
        if k:
            out += rec.reward(-float(k - 1), k - 0.5, 0.0)  # the robot's reward of step k-1, before row k
            if k == 3:
                out += rec.episode_end(-3.0, "terminated", k - 0.4)
        out += rec.step(row(k, safe=k == 4, interv=k == 1), float(k), 0.0)
    ts, ends = split(out)
    assert [t.obs[3] for t in ts] == [0, 1, 2, 3] and [t.reward for t in ts] == [0, -1, -2, -3]
    assert [t.intervention for t in ts] == [False, True, False, False]
    assert [t.terminated for t in ts] == [False, False, True, False]
    assert len(ends) == 1 and ends[0].kind == "terminated" and not ends[0].reset and ends[0].judged is None
    assert rec.incomplete == 0  # step 4 waits for a reward sent after row 5
    assert rec.flush() == [] and rec.incomplete == 1  # step 4 was a safe tick: no policy action, dropped


def test_paired_episode_start_is_the_first_observation_after_the_end():
    rec = EpisodeRecorder()
    for k in range(3):
        rec.step(row(k), float(k), 0.0)
    rec.episode_end(-1.0, "truncated", 1.5)  # arrives after row 2, sent before it: row 2 starts the episode
    for k in range(3, 5):
        rec.step(row(k), float(k), 0.0)
    (end,) = rec.episode_end(-2.0, "truncated", 4.5)
    assert end.judged is not None and end.judged.start_obs[3] == 2 and end.judged.ret == -2.0
    assert math.isfinite(end.ret)


def test_robot_specs_check_against_the_kit_says_the_fix():
    from types import SimpleNamespace

    from lowrl_ros.core.finetune.recorder import RobotSpecs

    def robot_specs(**sections) -> RobotSpecs:
        return RobotSpecs.from_robot_file(parse_robot_file({"joints": ["a"], "observation": OBS, **sections},
                                                           "r.yaml"), 0.02)

    ok = robot_specs(reward={"terms": [{"term": "alive"}]}, episode={"time_limit_steps": 5})
    assert ok.obs_dim == 4 and ok.computed and ok.joints == ("a",)
    ok.check_against(SimpleNamespace(obs_dim=4))
    with pytest.raises(ValueError, match="builds 4 observations but the kit's policy reads 3; give the robot file"):
        ok.check_against(SimpleNamespace(obs_dim=3))
    with pytest.raises(ValueError, match="an episode: section needs reward: terms"):
        robot_specs(reward={"topic": "/r"}, episode={"time_limit_steps": 5}).check_against(SimpleNamespace(obs_dim=4))
    with pytest.raises(ValueError, match="an episode: section needs reward: terms"):
        robot_specs(episode={"time_limit_steps": 5}).check_against(SimpleNamespace(obs_dim=4))
    robot_specs().check_against(SimpleNamespace(obs_dim=4))  # no reward: the reward topic
