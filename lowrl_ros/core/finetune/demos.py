"""The demonstration buffer of human interventions (HIL-SERL), for the on-robot learner.

HIL-SERL (rail-berkeley/hil-serl ``train_rlpd.py``) records every transition in which a person
took over into BOTH the online replay buffer and a demo buffer, and samples half of every batch
from the demo buffer. :class:`DemoBuffer` is that second buffer: the learner adds an intervention
transition here too (:meth:`add`, already normalised as its own buffer stores them), and
:meth:`mix` replaces half of the robot's rows of each sampled batch with demo transitions once any
exist (with RLPD's prior data in the batch too, the prior rows are left as they are). A
session can start from a few recorded demonstrations: :func:`load_demos` reads a transition log
(lowrl_ros/core/finetune/transition_log.py; every transition in it counts as a demo).

Kept apart from learner.py so that the learners (SAC/TD3, CrossQ, RLPD) call it in one line each.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from lowrl_ros.core.finetune.transition_log import TransitionBatch, read_log
from lowrl_ros.core.train.replay import Batch, ReplayBuffer


class DemoBuffer:
    """A bounded buffer of demonstration transitions, sampled into every batch.

    Args:
        obs_dim, act_dim: sizes (as the learner's replay buffer).
        capacity: the most demos kept (oldest dropped first).
        fraction: the share of each batch drawn from the demos (HIL-SERL: 0.5).
    """

    def __init__(self, obs_dim: int, act_dim: int, capacity: int = 20_000, fraction: float = 0.5) -> None:
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"demo fraction {fraction} must be in (0, 1), e.g. 0.5 (HIL-SERL's 50/50)")
        self.buffer = ReplayBuffer(obs_dim, act_dim, capacity)
        self.fraction = float(fraction)
        self.added = 0  # transitions ever added (interventions + loaded demos)
        self.sampled = 0  # demo rows put into batches

    def __len__(self) -> int:
        return len(self.buffer)

    def add(self, obs: np.ndarray, action: np.ndarray, reward: float, next_obs: np.ndarray,
            terminated: bool) -> None:
        """One demo transition, in the learner's normalised units (as its replay buffer stores them)."""
        self.buffer.add(obs, action, reward, next_obs, terminated, False, action)
        self.added += 1

    def mix(self, batch: Batch, rng: np.random.Generator, gamma: float = 0.99, online_rows: int | None = None) -> Batch:
        """``batch`` with ``fraction`` of its first ``online_rows`` rows (the robot's; default: all) replaced by
        demos; unchanged while there are none. Rows after ``online_rows`` (RLPD's prior data) are kept."""
        if len(self.buffer) == 0:
            return batch
        n = len(batch.reward) if online_rows is None else min(int(online_rows), len(batch.reward))
        k = int(round(n * self.fraction))
        if k == 0:
            return batch
        demo = self.buffer.sample(k, rng, 1, gamma)
        self.sampled += k
        return Batch(*(np.concatenate([getattr(demo, f.name), getattr(batch, f.name)[k:]])
                       for f in dataclasses.fields(Batch)))


def load_demos(directory: str | Path) -> TransitionBatch:
    """The transitions of a recorded log, to seed a session's demo buffer (robot units, as recorded).

    Raises TransitionLogError when the directory is not a transition log or holds none.
    """
    from lowrl_ros.core.finetune.transition_log import TransitionLogError

    batch, _report = read_log(directory)
    if len(batch) == 0:
        raise TransitionLogError(f"demos {directory}: the transition log holds no transitions; record a few "
                                 "episodes with the fine-tuner (e.g. while teleoperating) and point demos at its "
                                 "transitions/ directory")
    return batch
