"""Preallocated replay buffer with multi-step sampling and RLx2's dynamic capacity (part 3).

Transitions are stored in time order in numpy arrays allocated once (no per-step allocation).
Each transition keeps its own ``next_obs``, so episode boundaries need no special slots, and the
noise-free behaviour action (the policy's deterministic action when the step was taken), which the
policy-distance check compares against.

Dynamic capacity (Tan et al. 2023 §4.3). Every check the policy distance on the oldest K
transitions is

    D = mean_i ‖π(s_i) − a_i^behaviour‖₂ / √d     (actions normalised to [-1, 1], d = action dim)

We use the paper's norm-based definition rather than the reference code's MSE/2 because a norm
is in action units (easier to reason about a threshold of 0.2 = "20% of the half-range"), and we
divide by √d (RMS over dimensions) so one threshold means the same thing for a 1-D Pendulum and a
6-D HalfCheetah. If D exceeds the threshold, the oldest ``drop_fraction`` of the stored transitions
are discarded and the capacity shrinks by as many, never below ``min_size``: data that its own
policy would no longer produce leaves the buffer sooner from then on.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowrl_ros.core.train.nstep import nstep_returns


@dataclass
class Batch:
    """One minibatch as numpy arrays (float32); ``discount`` already folds in γ^k and terminals."""

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_obs: np.ndarray
    discount: np.ndarray


class ReplayBuffer:
    """Ring buffer of transitions with a capacity that may shrink.

    Args:
        obs_dim: observation size.
        act_dim: action size (actions stored normalised to [-1, 1]).
        max_size: storage allocated once; also the initial capacity.
    """

    def __init__(self, obs_dim: int, act_dim: int, max_size: int) -> None:
        if max_size < 1:
            raise ValueError(f"ReplayBuffer: max_size={max_size} must be >= 1")
        self.max_size = int(max_size)
        self.capacity = int(max_size)
        self.start = 0  # physical index of the oldest transition
        self.size = 0
        self.obs = np.zeros((max_size, obs_dim), dtype=np.float32)
        self.next_obs = np.zeros((max_size, obs_dim), dtype=np.float32)
        self.action = np.zeros((max_size, act_dim), dtype=np.float32)
        self.behaviour = np.zeros((max_size, act_dim), dtype=np.float32)
        self.reward = np.zeros(max_size, dtype=np.float32)
        self.terminated = np.zeros(max_size, dtype=bool)
        self.truncated = np.zeros(max_size, dtype=bool)
        self.dropped = 0  # transitions discarded by shrinks (for the log)

    def __len__(self) -> int:
        return self.size

    def add(self, obs: np.ndarray, action: np.ndarray, reward: float, next_obs: np.ndarray,
            terminated: bool, truncated: bool, behaviour: np.ndarray) -> None:
        """Append one transition, overwriting the oldest when full."""
        if self.size == self.capacity:
            self.start = (self.start + 1) % self.max_size
            self.size -= 1
        i = (self.start + self.size) % self.max_size
        self.obs[i] = obs
        self.next_obs[i] = next_obs
        self.action[i] = action
        self.behaviour[i] = behaviour
        self.reward[i] = reward
        self.terminated[i] = terminated
        self.truncated[i] = truncated
        self.size += 1

    def _phys(self, logical: np.ndarray) -> np.ndarray:
        return (self.start + logical) % self.max_size

    def sample(self, batch_size: int, rng: np.random.Generator, nstep: int = 1, gamma: float = 0.99) -> Batch:
        """Uniform minibatch; with ``nstep > 1`` the reward is the cut n-step sum (see nstep.py)."""
        if self.size == 0:
            raise ValueError("ReplayBuffer.sample: the buffer is empty; add transitions first")
        logical = rng.integers(0, self.size, size=batch_size)
        i = self._phys(logical)
        if nstep == 1:
            disc = (gamma * (~self.terminated[i])).astype(np.float32)
            return Batch(self.obs[i], self.action[i], self.reward[i], self.next_obs[i], disc)
        offs = logical[:, None] + np.arange(nstep)[None, :]
        valid = offs < self.size
        j = self._phys(np.minimum(offs, self.size - 1))
        ret, last, disc = nstep_returns(self.reward[j], self.terminated[j], self.truncated[j], valid, gamma)
        boot = j[np.arange(batch_size), last]
        return Batch(self.obs[i], self.action[i], ret.astype(np.float32), self.next_obs[boot],
                     disc.astype(np.float32))

    def oldest(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Observations and behaviour actions of the oldest ``k`` transitions."""
        i = self._phys(np.arange(min(k, self.size)))
        return self.obs[i], self.behaviour[i]

    def shrink(self, fraction: float, min_size: int) -> int:
        """Drop the oldest ``fraction`` of stored transitions (not below ``min_size``); return how many."""
        drop = min(int(fraction * self.size), self.size - min_size)
        if drop <= 0:
            return 0
        self.start = (self.start + drop) % self.max_size
        self.size -= drop
        self.capacity = max(min_size, self.capacity - drop)
        self.dropped += drop
        return drop

    def state_dict(self) -> dict:
        i = self._phys(np.arange(self.size))
        return {"obs": self.obs[i], "next_obs": self.next_obs[i], "action": self.action[i],
                "behaviour": self.behaviour[i], "reward": self.reward[i], "terminated": self.terminated[i],
                "truncated": self.truncated[i], "capacity": self.capacity, "dropped": self.dropped}

    def load_state_dict(self, state: dict) -> None:
        n = len(state["reward"])
        if n > self.max_size:
            raise ValueError(f"ReplayBuffer: checkpoint holds {n} transitions, more than max_size={self.max_size}")
        self.start, self.size = 0, n
        for key in ("obs", "next_obs", "action", "behaviour", "reward", "terminated", "truncated"):
            getattr(self, key)[:n] = state[key]
        self.capacity = int(state["capacity"])
        self.dropped = int(state["dropped"])


def policy_distance(policy_actions: np.ndarray, behaviour_actions: np.ndarray) -> float:
    """RLx2's policy distance: mean ‖π(s) − a_b‖₂ / √d on normalised actions (see module docstring)."""
    diff = np.asarray(policy_actions, dtype=np.float64) - np.asarray(behaviour_actions, dtype=np.float64)
    if diff.ndim != 2 or diff.shape[0] == 0:
        raise ValueError("policy_distance: expects non-empty [K, action_dim] arrays")
    return float(np.mean(np.linalg.norm(diff, axis=1) / np.sqrt(diff.shape[1])))
