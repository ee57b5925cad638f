"""Wire format version 3 of /lowrl/transitions (core/finetune/wire.py): interventions, per-term rewards and the
commands sent reach the off-board trainer, and other versions are refused with a message naming both (no ROS)."""
from __future__ import annotations

import numpy as np
import pytest

from lowrl_ros.core.finetune.transition_log import Transition
from lowrl_ros.core.finetune.wire import WIRE_VERSION, column_names, decode_transitions, encode_transitions, row_width


def tr(k: int, intervention: bool = False, terms: tuple = (), command=None) -> Transition:
    return Transition(np.full(3, k, float), np.array([k / 10]), -float(k), np.full(3, k + 1.0), False, k == 2, 5,
                      100.0 + k, intervention, terms, None if command is None else np.asarray(command, float))


def test_interventions_and_reward_terms_round_trip():
    ts = [tr(1, True, (-0.5, 0.25)), tr(2, False, (-1.0, 0.0))]
    rows = encode_transitions(ts, first_index=7)
    assert rows.shape == (2, row_width(3, 1, 2)) == (2, 19)
    assert column_names(3, 1, 2).endswith("intervention:1;reward_terms:2;command:0;n_terms:1;n_command:1;wire:1;"
                                          "index:1")
    idx, back = decode_transitions(rows.ravel().tolist(), 3, 1)
    assert idx == [7, 8] and [t.intervention for t in back] == [True, False]
    assert [t.reward_terms for t in back] == [(-0.5, 0.25), (-1.0, 0.0)] and back[1].truncated
    assert back[0].policy_version == 5 and back[0].stamp == 101.0
    np.testing.assert_array_equal(back[1].next_obs, ts[1].next_obs)
    # With a reward topic there are no terms: the row still says so, and the flag still travels.
    idx, back = decode_transitions(encode_transitions([tr(1, True)], 0).ravel(), 3, 1)
    assert back[0].intervention and back[0].reward_terms == ()
    assert back[0].command is None
    with pytest.raises(ValueError, match="transition 1 carries 0 reward terms and 0 command values, the first 2"):
        encode_transitions([tr(1, terms=(1.0, 2.0)), tr(2)], 0)


def test_the_commands_sent_round_trip_beside_the_reward_terms():
    """A robot file's transitions carry what went out to the joints (the identification replays it)."""
    ts = [tr(1, False, (-0.5,), [0.1, -0.2]), tr(2, True, (0.25,), [0.3, 0.4])]
    rows = encode_transitions(ts, first_index=3)
    assert rows.shape == (2, row_width(3, 1, 1, 2)) == (2, 20)
    idx, back = decode_transitions(rows.ravel(), 3, 1)
    assert idx == [3, 4] and [t.reward_terms for t in back] == [(-0.5,), (0.25,)] and back[1].intervention
    np.testing.assert_array_equal(back[0].command, [0.1, -0.2])
    np.testing.assert_array_equal(back[1].command, [0.3, 0.4])
    with pytest.raises(ValueError, match="transition 1 carries 1 reward terms and 0 command values, the first 1 and 2"):
        encode_transitions([ts[0], tr(2, terms=(1.0,))], 0)


def _v2_rows(ts: list[Transition], first_index: int) -> np.ndarray:
    """Version 2 as it was sent before (no command, no n_command)."""
    return np.array([np.concatenate([t.obs, t.action, [t.reward], t.next_obs,
                                     [float(t.terminated), float(t.truncated), t.policy_version, t.stamp,
                                      float(t.intervention)], t.reward_terms,
                                     [len(t.reward_terms), 2, first_index + i]])
                     for i, t in enumerate(ts)])


def _v1_rows(ts: list[Transition], first_index: int) -> np.ndarray:
    """Version 1 as it was sent before (the log's record without its HIL-SERL columns, then index)."""
    return np.array([np.concatenate([t.obs, t.action, [t.reward], t.next_obs,
                                     [float(t.terminated), float(t.truncated), t.policy_version, t.stamp,
                                      first_index + i]]) for i, t in enumerate(ts)])


def test_other_wire_versions_are_refused_naming_both():
    v1 = _v1_rows([tr(1), tr(2)], 0)
    with pytest.raises(ValueError, match=rf"wire format version 102 .*takes version {WIRE_VERSION}") as err:
        decode_transitions(v1.ravel(), 3, 1)  # version 1 ends in a stamp where later versions have their version
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=rf"wire format version 2 .*takes version {WIRE_VERSION}"):
        decode_transitions(_v2_rows([tr(1, terms=(1.0,))], 0).ravel(), 3, 1)
    future = encode_transitions([tr(1)], 0)
    future[0, -2] = 4
    with pytest.raises(ValueError, match="wire format version 4 "):
        decode_transitions(future.ravel(), 3, 1)
    rows = encode_transitions([tr(1, terms=(1.0,)), tr(2, terms=(2.0,))], 0)
    rows[0, -4] = 2  # the rows of one message disagree on their terms
    with pytest.raises(ValueError, match="does not end in n_terms 1, n_command 0"):
        decode_transitions(rows.ravel(), 3, 1)


def test_the_offboard_learner_puts_streamed_interventions_into_its_demo_buffer_and_log(tiny_kit, tmp_path):
    """What the trainer node does with a stream of version 2: the teleoperated rows go to the demo buffer (as on
    the robot) and the off-board log keeps the flag and the reward terms."""
    from lowrl_ros.core.finetune.config import FineTuneConfig
    from lowrl_ros.core.finetune.kit import load_kit
    from lowrl_ros.core.finetune.offboard import OffboardLearner
    from lowrl_ros.core.finetune.transition_log import read_log

    rng = np.random.default_rng(0)
    sent = [Transition(rng.standard_normal(3), rng.uniform(-1, 1, 1), -1.0, rng.standard_normal(3), False, False, 1,
                       float(i), i % 4 == 0, (-0.75, -0.25)) for i in range(40)]
    learner = OffboardLearner(load_kit(tiny_kit[0]), FineTuneConfig(min_transitions=64, batch_size=32),
                              tmp_path / "work", tmp_path / "releases")
    learner.receive(*decode_transitions(encode_transitions(sent, 0).ravel(), 3, 1))
    assert len(learner.tuner.demos) == 10  # every 4th row was teleoperated
    learner.close()
    batch, _ = read_log(tmp_path / "work" / "transitions")
    assert batch.intervention.sum() == 10 and np.allclose(batch.reward_terms, [-0.75, -0.25])
