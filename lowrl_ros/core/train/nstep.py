"""Multi-step TD targets with truncation and terminals handled correctly (RLx2 part 2).

For a transition at t the n-step target is

    y_t = Σ_{j<k} γ^j r_{t+j}  +  γ^k (1 − terminal) Q'(s_{t+k}, ·)

where k ≤ n is cut short by the first step that ends the episode: at a true terminal the sum stops
and nothing is bootstrapped; at a time-limit truncation the sum stops and the value of the
truncated step's next observation *is* bootstrapped (the episode did not end, only our recording
of it; Pardo et al. 2018). k is also cut where the stored data ends (the newest transition has no
successor yet). RLx2 uses n = 3, switched on only after a delay of gradient steps (Tan et al. 2023
§4.2: early on the behaviour data is far from the policy and long returns are biased).
"""
from __future__ import annotations

import numpy as np


def nstep_returns(rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, valid: np.ndarray,
                  gamma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Discounted n-step sums, where to bootstrap from, and the bootstrap discount.

    Args:
        rewards: ``[B, n]`` rewards r_t … r_{t+n-1} of consecutive stored steps.
        terminated: ``[B, n]`` true-terminal flags of those steps.
        truncated: ``[B, n]`` time-limit flags of those steps.
        valid: ``[B, n]`` whether step t+j exists in the buffer (column 0 must be all True).
        gamma: discount factor.

    Returns:
        ``(returns [B], last [B] int, discount [B])``: the reward sum, the offset j of the step whose
        ``next_obs`` is bootstrapped, and γ^k·(1 − terminal) to multiply the bootstrap value with.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    term = np.asarray(terminated, dtype=bool)
    trunc = np.asarray(truncated, dtype=bool)
    valid = np.asarray(valid, dtype=bool)
    if rewards.ndim != 2 or not (rewards.shape == term.shape == trunc.shape == valid.shape):
        raise ValueError("nstep_returns: rewards, terminated, truncated and valid must all be [B, n]")
    if not valid[:, 0].all():
        raise ValueError("nstep_returns: the first step of every row must be valid")
    b, n = rewards.shape
    ended = term | trunc
    # Step j is used iff it is valid and no earlier step of the row ended the episode.
    ended_before = np.zeros_like(ended)
    ended_before[:, 1:] = np.cumsum(ended[:, :-1], axis=1) > 0
    used = valid & ~ended_before
    used &= np.cumprod(used, axis=1).astype(bool)  # a gap (invalid step) cuts the rest
    powers = gamma ** np.arange(n, dtype=np.float64)
    returns = (rewards * powers * used).sum(axis=1)
    k = used.sum(axis=1)  # number of rewards summed, >= 1
    last = k - 1
    rows = np.arange(b)
    discount = gamma ** k.astype(np.float64) * (~term[rows, last])
    return returns, last, discount
