"""The one fine-tune loop (FineTuneSession) and its pure parts: the episode rule (EpisodeJudge),
the learn gate and the diagnostics (status.py), and the learner's n-step option. No ROS."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lowrl_ros.core.finetune.kit import load_kit
from lowrl_ros.core.finetune.learner import FineTuner
from lowrl_ros.core.finetune.config import FineTuneConfig
from lowrl_ros.core.finetune.session import FineTuneSession, Judged, Paused, Rollback, VersionMade
from lowrl_ros.core.finetune.status import (
    ERROR, OK, WARN, FineTuneFacts, LearnGate, finetune_status, learn_gate,
)
from lowrl_ros.core.finetune.transition_log import Transition, TransitionLogWriter
from lowrl_ros.core.finetune.versions import EpisodeJudge
from lowrl_ros.core.runtime.tiers import ComputeTier

from test_finetune_core import pendulum_transitions

SMALL = dict(min_transitions=64, batch_size=32, version_every_updates=25, eval_episodes=1, rollback_margin=10.0)


def episode(version: int, n: int = 200, reward: float | None = None) -> list[Transition]:
    """One Pendulum-v1 episode run by ``version`` (truncated at ``n``), optionally at a fixed reward."""
    return [Transition(np.asarray(o, float), np.asarray(a, float), r if reward is None else reward,
                       np.asarray(nx, float), te, tu, version, 0.0)
            for o, a, r, nx, te, tu in pendulum_transitions(n)]


def feed(session: FineTuneSession, ts: list[Transition], writer: TransitionLogWriter | None = None) -> None:
    for t in ts:
        if writer is not None:
            writer.append(t)
        session.add(t)


# ---- resume -----------------------------------------------------------------------------------
def test_resume_counts_the_larger_of_the_saved_count_and_the_log_never_their_sum(tiny_kit, tmp_path):
    kit, cfg = load_kit(tiny_kit[0]), FineTuneConfig(**SMALL)
    writer = TransitionLogWriter(tmp_path / "transitions")
    first = FineTuneSession(kit, cfg, tmp_path, base_path="base.onnx")
    assert first.resume().transitions == 0
    feed(first, episode(1, 50), writer)
    first.close()  # learner.pt: 50 transitions seen
    writer.close()
    again = FineTuneSession(kit, cfg, tmp_path, base_path="base.onnx")
    report = again.resume()
    assert report.transitions == 50 and again.tuner.transitions_seen == 50  # not 50 saved + 50 read
    # The log runs ahead of the last save (a crash): the log's count wins.
    writer = TransitionLogWriter(tmp_path / "transitions")
    for t in episode(1, 30):
        writer.append(t)
    writer.close()
    crashed = FineTuneSession(kit, cfg, tmp_path, base_path="base.onnx")
    assert crashed.resume().transitions == 80 and crashed.tuner.transitions_seen == 80


# ---- the loop's events ------------------------------------------------------------------------
def test_versions_rollbacks_rejections_and_pauses_come_back_as_events(tiny_kit, tmp_path):
    session = FineTuneSession(load_kit(tiny_kit[0]), FineTuneConfig(**SMALL), tmp_path, base_path="base.onnx")
    assert session.step(8) == [] and session.state == "waiting_for_data"
    feed(session, episode(1))
    events = session.episode_ended(1, -300.0)
    assert [type(e) for e in events] == [Judged] and session.tuner.tracker.best == 1
    made: list = []
    while not made:
        made = session.step(8)
    assert [type(e) for e in made] == [VersionMade] and made[0].record.version == 2
    assert made[0].record.parent_version == 1 and session.last_decision == made[0].reason
    # v2 returns far less than v1: back to v1 (its artifact is the caller's to deploy again).
    events = session.episode_ended(2, -3000.0)
    assert [type(e) for e in events] == [Rollback] and events[0].target.version == 1 and events[0].release is None
    assert (session.rollbacks, session.rejections) == (1, 0)
    assert session.on_rejected(2, "too late") == []  # v2 no longer runs: a stale answer trips nothing
    assert session.rejections == 0
    # A rejection of the running version, which is the best: nothing to go back to, so learning pauses.
    events = session.on_rejected(1, "corrupt", by="the policy node")
    assert [type(e) for e in events] == [Paused] and "the policy node rejected v1: corrupt" in events[0].reason
    assert (session.rollbacks, session.rejections) == (1, 1)
    updates = session.tuner.updates
    assert session.step(8) == [] and session.state == "paused_safety" and session.tuner.updates == updates
    assert not session.can_learn()
    session.clear_pause()
    session.step(8)
    assert session.state == "learning" and session.tuner.updates > updates
    # A closed gate (here: the compute tier) stops learning without pausing.
    assert session.step(8, LearnGate(tier=ComputeTier.parse(1))) == [] and session.state == "waiting_for_full_tier"


def test_newer_only_delivers_a_rollback_as_a_newer_version_carrying_the_best(tiny_kit, tmp_path):
    session = FineTuneSession(load_kit(tiny_kit[0]), FineTuneConfig(**SMALL), tmp_path, base_path="base.onnx",
                              newer_only=True)
    feed(session, episode(1))
    session.episode_ended(1, -300.0)
    while not session.step(8):
        pass
    events = session.episode_ended(2, -3000.0)
    assert [type(e) for e in events] == [Rollback]
    assert events[0].target.version == 1 and events[0].release.version == 3
    assert events[0].release.parent_version == 1 and "carries v1's weights" in session.last_decision


def test_versions_between_episodes_are_made_only_when_an_episode_ends(tiny_kit, tmp_path):
    session = FineTuneSession(load_kit(tiny_kit[0]), FineTuneConfig(**SMALL), tmp_path, base_path="base.onnx",
                              versions_between_episodes=True)
    feed(session, episode(1))
    session.episode_ended(1, -300.0)
    for _ in range(10):  # 80 updates: a version is due after 25
        assert session.step(8) == []
    assert session.tuner.version_due()
    events = session.episode_ended(1, -310.0)
    assert [type(e) for e in events] == [VersionMade] and events[0].record.version == 2


# ---- the learner's n-step option --------------------------------------------------------------
def test_truncations_are_trained_on_only_as_n_step_cuts_when_asked(tiny_kit, tmp_path):
    kit, cfg = load_kit(tiny_kit[0]), FineTuneConfig(**SMALL)
    last = episode(1, 3)[-1]
    cut = Transition(last.obs, last.action, last.reward, last.next_obs, False, True, 1, 0.0)  # a time limit
    robot = FineTuner(kit, cfg, tmp_path / "robot")
    assert robot.nstep == 1 and not robot.add(cut.obs, cut.action, cut.reward, cut.next_obs, False, True)
    assert len(robot.buffer) == 0 and robot.transitions_seen == 1
    lockstep = FineTuner(kit, cfg, tmp_path / "lockstep", nstep=3, train_on_truncated=True)
    assert lockstep.add(cut.obs, cut.action, cut.reward, cut.next_obs, False, True) and len(lockstep.buffer) == 1
    for t in episode(1, 100):
        lockstep.add(t.obs, t.action, t.reward, t.next_obs, t.terminated, t.truncated)
    assert lockstep.update(4) == 4  # n-step batches train
    with pytest.raises(ValueError, match="nstep"):
        FineTuner(kit, cfg, tmp_path / "bad", nstep=0)


# ---- the episode rule -------------------------------------------------------------------------
def test_an_episode_counts_only_when_its_version_ran_all_of_it():
    judge = EpisodeJudge()
    assert judge.end(-5.0, 3) is None  # the first end: when that episode began is unknown
    judge.begin(3, start_obs=[1.0])
    ep = judge.end(-5.0, 3)
    assert (ep.version, ep.ret, ep.start_obs) == (3, -5.0, [1.0])
    judge.begin(3)
    assert judge.end(-5.0, 4) is None  # another version runs at the end
    judge.begin(3)
    judge.spoil()  # a swap was asked for mid-episode
    assert judge.end(-5.0, 3) is None
    judge.begin(0)  # the running version is not known yet
    assert judge.end(-5.0, 0) is None
    judge.begin(3)
    assert judge.end(math.nan, 3) is None
    judge.begin(3)
    assert judge.end(-1.0, 3, start_obs=[2.0]).start_obs == [2.0]  # a start observation learned late
    assert judge.finished == [(3, -5.0), (3, -1.0)]


def test_numbered_transitions_count_whole_episodes_from_the_robots_first_or_after_a_rejoin():
    def steps(version, n, reward=1.0):
        return [Transition(np.zeros(2), np.zeros(1), reward, np.zeros(2), False, i == n - 1, version, 0.0)
                for i in range(n)]

    def feed(judge, first_index, transitions):
        return [judge.add(first_index + i, t) for i, t in enumerate(transitions)]

    judge = EpisodeJudge()
    assert feed(judge, 0, steps(3, 4))[-1] == (3, 4.0)  # index 0: the robot's first transition, an episode start
    late = EpisodeJudge()
    assert feed(late, 7, steps(3, 2) + steps(3, 4)) == [None] * 5 + [(3, 4.0)]  # joined mid-episode: not counted
    assert late.lost == 0
    ended = feed(judge, 5, steps(3, 4))  # indices 4 lost: the episode with the gap does not count
    assert ended[-1] is None and judge.lost == 1
    feed(judge, 9, steps(3, 2)[:1])  # an episode under way ...
    judge.rejoin()  # ... when the stream breaks off (a restart): it, and the one heard next, do not count
    assert feed(judge, 40, steps(3, 1) + steps(3, 3)) == [None, None, None, (3, 3.0)] and judge.lost == 1  # as before
    assert judge.finished == [(3, 4.0), (3, 3.0)]


# ---- gate and diagnostics (pure) --------------------------------------------------------------
def test_the_learn_gate_checks_switch_pause_tier_memory_then_data_in_that_order():
    full, lite = ComputeTier.FULL, ComputeTier.parse(1)
    everything_wrong = LearnGate(enabled=False, tier=lite, rss_mb=900.0, memory_cap_mb=500.0)
    assert learn_gate(everything_wrong, "safety: x", False) == "disabled"
    assert learn_gate(LearnGate(tier=lite, rss_mb=900.0, memory_cap_mb=500.0), "safety: x", False) == "paused_safety"
    assert learn_gate(LearnGate(tier=lite, rss_mb=900.0, memory_cap_mb=500.0), "", False) == "waiting_for_full_tier"
    assert learn_gate(LearnGate(tier=None), "", True) == "waiting_for_full_tier"  # the monitor not heard yet
    assert learn_gate(LearnGate(tier=full, rss_mb=900.0, memory_cap_mb=500.0), "", False) == "paused_memory"
    assert learn_gate(LearnGate(tier=full, rss_mb=400.0, memory_cap_mb=500.0), "", False) == "waiting_for_data"
    assert learn_gate(LearnGate(tier=full, rss_mb=400.0, memory_cap_mb=500.0), "", True) == "learning"


def test_finetune_status_levels_and_names():
    def levels(**kw) -> dict[str, int]:
        return {e.name: e.level for e in finetune_status(FineTuneFacts(**kw))}

    assert levels(state="learning") == {"lowrl/finetune/log": OK, "lowrl/finetune/learner": OK,
                                        "lowrl/finetune/versions": OK, "lowrl/finetune/reward": OK,
                                        "lowrl/finetune/input": OK}
    assert levels(state="paused_safety")["lowrl/finetune/learner"] == ERROR
    assert levels(state="paused_memory")["lowrl/finetune/learner"] == WARN
    assert levels(state="waiting_for_full_tier")["lowrl/finetune/learner"] == OK
    assert levels(incomplete_steps=1)["lowrl/finetune/log"] == WARN
    assert levels(dropped_segments=2)["lowrl/finetune/log"] == WARN
    paused = finetune_status(FineTuneFacts(state="paused_safety", paused_reason="safety: rejected v2", rss_mb=12.34,
                                           received={"reward": 3}), prefix="x")
    assert [e.name for e in paused] == ["x/log", "x/learner", "x/versions", "x/reward", "x/input"]
    assert paused[1].message == "safety: rejected v2" and paused[1].values["rss_mb"] == 12.3
    assert paused[0].values["received_reward"] == 3
    off = finetune_status(FineTuneFacts(offboard=True, streamed=7, state="offboard"))
    assert [e.name for e in off] == ["lowrl/finetune/log", "lowrl/finetune/learner", "lowrl/finetune/reward",
                                     "lowrl/finetune/input"]
    assert off[1].level == OK and off[1].message == "off-board: 7 transitions streamed"
    assert off[2].message == "reward from topic" and off[2].values["demo_buffer"] == "offboard"
    terms = finetune_status(FineTuneFacts(reward_terms=("alive", "upright"), interventions=4, demo_buffer=9,
                                          last_terms={"alive": 12.0, "upright": -0.123456}))[3]
    assert terms.message == "reward from terms alive, upright"
    assert terms.values == {"interventions": 4, "resets_requested": 0, "rows_before_ready": 0, "demo_buffer": 9,
                            "demo_rows_sampled": 0,
                            "last_episode.alive": "12", "last_episode.upright": "-0.1235"}


def test_finetune_status_reads_the_counters_and_marks_missing_step_rows_stale(tiny_kit, tmp_path):
    """The counter keys and the step rows' staleness come from the session and the recorder (an injected clock)."""
    from lowrl_ros.core.finetune.recorder import EpisodeRecorder
    from lowrl_ros.core.finetune.status import ROWS_TIMEOUT_S
    from lowrl_ros.core.types import Level

    session = FineTuneSession(load_kit(tiny_kit[0]), FineTuneConfig(**SMALL), tmp_path, base_path="base.onnx")
    session.rejections, session.rollbacks = 2, 1
    recorder, wall = EpisodeRecorder(), 1_800_000_000.0
    recorder.swaps = 4

    def status(now: float) -> dict:
        facts = FineTuneFacts()
        facts.read(session, recorder, now, wall + now)
        return {e.name: e for e in finetune_status(facts)}

    first = status(0.0)  # rows are awaited from the first report on
    assert first["lowrl/finetune/input"].level == Level.OK
    assert {k: first["lowrl/finetune/input"].values[k] for k in ("stale_since", "silent_s")} == {"stale_since": "",
                                                                                               "silent_s": ""}
    versions = first["lowrl/finetune/versions"].values
    assert (versions["swaps"], versions["rejections"], versions["rollbacks"]) == (4, 2, 1)
    never = status(ROWS_TIMEOUT_S + 1.0)["lowrl/finetune/input"]
    assert never.level == Level.STALE and never.values["stale_since"] == "2027-01-15T08:00:02Z"
    assert never.message == "step rows stale since 08:00:02 UTC: nothing heard in 3.0 s (timeout 2 s)"
    recorder.last_row_at = 10.0
    heard = status(10.5)["lowrl/finetune/input"]
    assert heard.level == Level.OK and heard.values["silent_s"] == 0.5 and heard.values["stale_since"] == ""
    quiet = status(15.0)["lowrl/finetune/input"]
    assert quiet.level == Level.STALE and "no message for 5.0 s" in quiet.message and quiet.values["silent_s"] == 5.0


def test_a_version_waiting_only_for_a_judgement_is_made_when_the_episode_is_judged(tiny_kit, tmp_path):
    """The updates for v2 are done while v1 is not yet judged; the episode that judges v1 makes v2 at once,
    with no further update (the robot may send no data meanwhile: a reset, a stopped test loop)."""
    session = FineTuneSession(load_kit(tiny_kit[0]), FineTuneConfig(**SMALL), tmp_path, base_path="base.onnx")
    feed(session, episode(1))
    while session.tuner.updates < SMALL["version_every_updates"]:
        assert session.step(8) == []  # v1 unjudged: no version is due yet
    updates = session.tuner.updates
    events = session.episode_ended(1, -300.0)
    assert [type(e) for e in events] == [Judged, VersionMade] and events[1].record.version == 2
    assert session.tuner.updates == updates
