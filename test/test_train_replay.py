"""Multi-step TD targets and RLx2's dynamic-capacity buffer (nstep.py, replay.py)."""
from __future__ import annotations

import numpy as np
import pytest

from lowrl_ros.core.train.nstep import nstep_returns
from lowrl_ros.core.train.replay import ReplayBuffer, policy_distance

G = 0.9


def test_nstep_hand_computed_with_truncation_and_terminal():
    # Stored episode stream:  t0 r=1 | t1 r=2 TRUNCATED | t2 r=3 | t3 r=4 TERMINAL | t4 r=5 | t5 r=6 | t6 r=7
    r = np.array([1, 2, 3, 4, 5, 6, 7], dtype=float)
    term = np.array([0, 0, 0, 1, 0, 0, 0], dtype=bool)
    trunc = np.array([0, 1, 0, 0, 0, 0, 0], dtype=bool)
    starts = [0, 1, 2, 4, 5]
    n = 3
    idx = np.array([[s + j for j in range(n)] for s in starts])
    valid = idx < len(r)
    idx = np.minimum(idx, len(r) - 1)
    ret, last, disc = nstep_returns(r[idx], term[idx], trunc[idx], valid, G)
    # t0: cut at the truncation of t1, bootstrap from next_obs of t1 with γ².
    # t1: its own truncation: r1, bootstrap γ.  t2: terminal at t3: r2 + γ r3, no bootstrap.
    # t4: full 3 steps: r4 + γ r5 + γ² r6, bootstrap γ³.  t5: data ends after t6: r5 + γ r6, γ².
    np.testing.assert_allclose(ret, [1 + G * 2, 2, 3 + G * 4, 5 + G * 6 + G**2 * 7, 6 + G * 7])
    np.testing.assert_array_equal(last, [1, 0, 1, 2, 1])
    np.testing.assert_allclose(disc, [G**2, G, 0.0, G**3, G**2])


def test_nstep_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"\[B, n\]"):
        nstep_returns(np.zeros((2, 3)), np.zeros((2, 2)), np.zeros((2, 3)), np.ones((2, 3)), G)


class _FixedRng:
    def __init__(self, idx):
        self.idx = np.asarray(idx)

    def integers(self, low, high, size):
        return self.idx


def test_buffer_nstep_sampling_matches_hand_values():
    buf = ReplayBuffer(1, 1, 16)
    rewards = [1, 2, 3, 4, 5]
    term = [0, 0, 1, 0, 0]
    trunc = [0, 0, 0, 0, 0]
    for t, (rw, te, tr) in enumerate(zip(rewards, term, trunc)):
        buf.add(np.array([t]), np.zeros(1), rw, np.array([t + 1]), bool(te), bool(tr), np.zeros(1))
    b = buf.sample(3, _FixedRng([0, 3, 4]), nstep=3, gamma=G)
    np.testing.assert_allclose(b.reward, [1 + G * 2 + G**2 * 3, 4 + G * 5, 5], rtol=1e-6)
    np.testing.assert_allclose(b.discount, [0.0, G**2, G], rtol=1e-6)
    np.testing.assert_array_equal(b.next_obs[:, 0], [3, 5, 5])
    b1 = buf.sample(2, _FixedRng([2, 1]), nstep=1, gamma=G)
    np.testing.assert_allclose(b1.discount, [0.0, G], rtol=1e-6)


def test_buffer_ring_overwrites_oldest():
    buf = ReplayBuffer(1, 1, 4)
    for t in range(6):
        buf.add(np.array([t]), np.zeros(1), t, np.array([t + 1]), False, False, np.zeros(1))
    assert len(buf) == 4
    obs, _ = buf.oldest(4)
    np.testing.assert_array_equal(obs[:, 0], [2, 3, 4, 5])


def test_buffer_shrink_rule():
    buf = ReplayBuffer(1, 1, 100)
    for t in range(100):
        buf.add(np.array([t]), np.zeros(1), 0.0, np.array([t + 1]), False, False, np.zeros(1))
    # Drop the oldest 10% of what is stored.
    assert buf.shrink(0.1, min_size=50) == 10
    assert len(buf) == 90 and buf.dropped == 10
    obs, _ = buf.oldest(1)
    assert obs[0, 0] == 10
    # Never below the minimum.
    for _ in range(20):
        buf.shrink(0.1, min_size=50)
    assert len(buf) == 50 and buf.oldest(1)[0][0, 0] == 50
    assert buf.shrink(0.1, min_size=50) == 0
    # The capacity stays: new data refills the buffer (as the reference code's left pointer does) and
    # evicts the oldest only once all max_size slots are full again.
    for t in range(100, 150):
        buf.add(np.array([t]), np.zeros(1), 0.0, np.array([t + 1]), False, False, np.zeros(1))
    assert len(buf) == 100 and buf.oldest(1)[0][0, 0] == 50
    buf.add(np.array([150]), np.zeros(1), 0.0, np.array([151]), False, False, np.zeros(1))
    assert len(buf) == 100 and buf.oldest(1)[0][0, 0] == 51
    # A checkpoint round trip keeps the order and the drop count.
    other = ReplayBuffer(1, 1, 100)
    other.load_state_dict(buf.state_dict())
    np.testing.assert_array_equal(other.oldest(100)[0], buf.oldest(100)[0])
    assert other.dropped == buf.dropped


def test_policy_distance_definition():
    # The reference code's mean squared difference / 2 over samples and action dimensions.
    pi = np.array([[0.0, 0.0], [1.0, 1.0]])
    beh = np.array([[0.0, 0.0], [0.0, 0.0]])
    assert policy_distance(pi, beh) == pytest.approx(0.25)
    # The same per-dimension gap gives the same distance in 1-D and 6-D, so one threshold serves both.
    assert policy_distance(np.full((4, 1), 0.5), np.zeros((4, 1))) == \
        pytest.approx(policy_distance(np.full((4, 6), 0.5), np.zeros((4, 6)))) == pytest.approx(0.125)
    with pytest.raises(ValueError):
        policy_distance(np.zeros((0, 2)), np.zeros((0, 2)))
