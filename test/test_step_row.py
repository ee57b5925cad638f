"""The step row codec (core/runtime/step_row.py): the one layout the policy node writes and the fine-tuner reads."""
from __future__ import annotations

import numpy as np
import pytest

from lowrl_ros.core.runtime.step_row import (HEADER, STEP_ROW_VERSION, StepRowError, decode_step, encode_step,
                                             row_label, row_size)


def test_a_row_round_trips_with_its_policy_version():
    buf = np.zeros(row_size(3, 2))
    encode_step(buf, stamp=12.5, safe=False, intervention=True, estop=False, policy_version=7,
                obs=np.array([1.0, 2.0, 3.0]), policy_action=np.array([0.1, 0.2]), action=np.array([0.3, 0.4]),
                command=np.array([5.0, 6.0]))
    row = decode_step(buf.tolist(), 3, 2)
    assert (row.stamp, row.safe, row.intervention, row.estop, row.policy_version) == (12.5, False, True, False, 7)
    assert row.obs.tolist() == [1, 2, 3] and row.policy_action.tolist() == [0.1, 0.2]
    assert row.action.tolist() == [0.3, 0.4] and row.command.tolist() == [5, 6]
    assert row.usable
    assert row_label(3, 2) == ("format:1;stamp:1;safe:1;intervention:1;estop:1;policy_version:1;obs:3;"
                               "policy_action:2;action:2;command:2")
    assert buf.size == len(HEADER) + 3 + 3 * 2 and buf[0] == STEP_ROW_VERSION


def test_a_safe_tick_has_nan_actions_and_is_not_usable():
    buf = np.zeros(row_size(2, 1))
    encode_step(buf, stamp=1.0, safe=True, intervention=False, estop=True, policy_version=1, obs=None,
                policy_action=None, action=None, command=np.array([0.5]))
    row = decode_step(buf, 2, 1)
    assert row.safe and row.estop and not row.usable
    assert np.isnan(row.obs).all() and np.isnan(row.policy_action).all() and np.isnan(row.action).all()
    assert row.command.tolist() == [0.5]


def test_an_observation_of_another_size_is_written_as_nan():
    buf = np.zeros(row_size(2, 1))
    encode_step(buf, stamp=1.0, safe=False, intervention=False, estop=False, policy_version=1, obs=np.ones(5),
                policy_action=np.zeros(1), action=np.zeros(1), command=np.zeros(1))
    assert np.isnan(decode_step(buf, 2, 1).obs).all()


def test_a_version_1_row_and_a_wrong_size_are_refused_with_the_reason():
    v1 = [1.7e9, 0, 0, 0, 1, 2, 3, 0.1, 0.1, 0.1]  # stamp first, no format, no version
    with pytest.raises(StepRowError, match="format .* is not 2"):
        decode_step(v1, 3, 1)
    buf = np.zeros(row_size(3, 1))
    buf[0] = STEP_ROW_VERSION
    with pytest.raises(StepRowError, match="has 12 values; this policy needs 13"):
        decode_step(buf, 4, 1)
    with pytest.raises(StepRowError, match="empty"):
        decode_step([], 3, 1)
    buf[1] = np.nan  # the fine-tuner takes a computed step's time from the stamp: it must be one
    with pytest.raises(StepRowError, match="stamp is nan, not a time"):
        decode_step(buf, 3, 1)


def test_peek_version_reads_only_format_2_rows():
    from lowrl_ros.core.runtime.step_row import peek_version

    buf = np.zeros(row_size(1, 1))
    encode_step(buf, stamp=1.0, safe=False, intervention=False, estop=False, policy_version=4, obs=np.zeros(1),
                policy_action=np.zeros(1), action=np.zeros(1), command=np.zeros(1))
    assert peek_version(buf) == 4
    assert peek_version([1.7e9, 0, 0, 0, 3, 1, 1]) is None and peek_version([2.0]) is None
