"""Off-board fine-tuning core: the transitions wire format, episode judging from the stream, and
the learner releasing bundles (new versions, and a rollback as a newer version)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from lowrl_ros.core.runtime.bundle import load_bundle
from lowrl_ros.core.finetune.kit import load_kit
from lowrl_ros.core.finetune.config import FineTuneConfig
from lowrl_ros.core.finetune.offboard import OffboardLearner
from lowrl_ros.core.finetune.versions import EpisodeJudge
from lowrl_ros.core.finetune.wire import decode_transitions, encode_transitions, row_width
from lowrl_ros.core.finetune.transition_log import Transition, decode_float64_multiarray, encode_transition, read_log

from test_finetune_core import pendulum_transitions


def tr(version: int, reward: float = -1.0, end: bool = False, obs_dim: int = 3) -> Transition:
    return Transition(np.arange(obs_dim, dtype=float), np.array([0.5]), reward, np.arange(obs_dim) + 1.0,
                      False, end, version, 0.0)


def test_wire_round_trip_and_bad_messages():
    ts = [tr(2, -1.5), tr(2, -2.0, end=True)]
    rows = encode_transitions(ts, first_index=40)
    assert rows.shape == (2, row_width(3, 1))
    # A row is the transition log's record (same field order as in the MCAP files, with its intervention column)
    # plus n_terms, n_command, the wire version and its index (test_wire.py has the rest of format version 3).
    logged = encode_transition(dataclasses.replace(ts[0], intervention=True))
    np.testing.assert_array_equal(decode_float64_multiarray(logged)[1][:-1], rows[0, :-5])
    idx, back = decode_transitions(rows.ravel().tolist(), 3, 1)
    assert idx == [40, 41] and [t.reward for t in back] == [-1.5, -2.0] and back[1].truncated
    np.testing.assert_array_equal(back[0].next_obs, ts[0].next_obs)
    with pytest.raises(ValueError, match="wire format version 0 .*torn"):
        decode_transitions(rows.ravel()[:-1], 3, 1)  # a torn message
    with pytest.raises(ValueError, match="row width 19"):
        decode_transitions(rows.ravel(), 4, 1)  # another policy's transitions
    with pytest.raises(ValueError, match="row width 15"):
        decode_transitions(rows.ravel(), 2, 1)
    rows[0, 4] = np.nan  # the reward
    assert decode_transitions(rows.ravel(), 3, 1)[0] == [41]  # a non-finite row is dropped


def test_episodes_are_judged_only_whole_and_by_one_version():
    j = EpisodeJudge()
    assert [j.add(i, tr(1, end=(i == 2))) for i in range(3)][-1] == (1, -3.0)
    assert j.add(3, tr(1)) is None and j.add(4, tr(2, end=True)) is None  # a swap inside the episode
    assert j.add(5, tr(2)) is None and j.add(7, tr(2, end=True)) is None  # index 6 lost: not judged
    assert j.lost == 1 and j.add(8, tr(2, -5.0, end=True)) == (2, -5.0)


def test_an_episode_truncated_before_the_time_limit_was_cut_and_is_not_judged():
    j = EpisodeJudge(whole_steps=3)
    assert [j.add(i, tr(1, end=(i == 1))) for i in range(2)][-1] is None  # truncated after 2 of 3: cut
    assert [j.add(i, tr(1, end=(i == 4))) for i in range(2, 5)][-1] == (1, -3.0)  # the time limit: whole
    fell = dataclasses.replace(tr(1), terminated=True)
    assert j.add(5, fell) == (1, -1.0)  # a fall after one step is a whole episode
    assert j.finished == [(1, -3.0), (1, -1.0)]


def test_learner_releases_versions_as_bundles_and_a_rollback_as_a_newer_one(tiny_kit, tmp_path):
    cfg = FineTuneConfig(min_transitions=64, batch_size=32, version_every_updates=25, eval_episodes=1,
                         rollback_margin=10.0)
    base = load_kit(tiny_kit[0])
    learner = OffboardLearner(base, cfg, tmp_path / "work", tmp_path / "releases", base_path="base.onnx")
    data = [Transition(np.asarray(o, float), np.asarray(a, float), r, np.asarray(n, float), te, tu, 1, 0.0)
            for o, a, r, n, te, tu in pendulum_transitions(200)]  # one episode (truncated at 200) by v1
    assert learner.receive(list(range(200)), data) == []
    assert learner.tuner.tracker.best == 1  # v1 judged on its episode
    released = []
    while not released:
        released = learner.step(8)
    bundle = load_bundle(released[0], engine="numpy")
    assert bundle.version == 2 and bundle.contract.parent_version == 1
    # v2 runs an episode far worse than v1 (-150 per step): the learner rolls back by releasing v3
    # with v1's weights (the robot takes only newer versions).
    bad = [Transition(t.obs, t.action, -150.0, t.next_obs, False, t.truncated, 2, 0.0) for t in data]
    rolled = learner.receive(list(range(200, 400)), bad)
    assert len(rolled) == 1 and load_bundle(rolled[0], engine="numpy").version == 3
    assert "rollback" in learner.last_decision
    v1_actor = base.agent_state["actor"]
    now = learner.tuner.agent.actor.state_dict()
    assert all(np.allclose(now[k].numpy(), v1_actor[k].numpy()) for k in v1_actor)
    learner.close()
    assert len(read_log(tmp_path / "work" / "transitions")[0]) == 400  # every transition received is on disk
    again = OffboardLearner(base, cfg, tmp_path / "work", tmp_path / "releases", base_path="base.onnx")
    assert again.resumed == 400 and again.tuner.tracker.current == 3  # a restart resumes
