"""Return of a policy in its gymnasium environment (no torch, no ROS).

One function used by `lowrl eval`, by distillation (students are scored in their deployed form)
and by the release gate of `lowrl compress`, so every reported return is measured the same way:
deterministic actions, seeded episodes (``seed``, ``seed + 1``, ...), undiscounted return.
Comparing two policies on the same seeds pairs their episodes, which removes most of the
variance that comes from the initial states.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from lowrl_ros.core.config import gym_env_id

EVAL_SEED = 10_000  # episodes a policy has (very likely) never trained on


@dataclass(frozen=True)
class EvalResult:
    """Returns of seeded episodes.

    Attributes:
        returns: one undiscounted return per episode, in seed order.
        env_id: the environment.
        seed: seed of the first episode.
        steps: environment steps taken in total.
    """

    returns: tuple[float, ...]
    env_id: str
    seed: int
    steps: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))

    def __str__(self) -> str:
        return f"{self.mean:.1f} ± {self.std:.1f} over {len(self.returns)} episodes of {self.env_id}"


def make_env(env_id: str):
    """gymnasium.make with a message that says how to fix an unknown id or missing MuJoCo."""
    try:
        import gymnasium as gym
    except ImportError:
        raise ImportError("evaluation needs gymnasium: pip install 'gymnasium[mujoco]'") from None
    try:
        return gym.make(gym_env_id(env_id))
    except gym.error.Error as exc:
        raise ValueError(f"cannot make environment {env_id!r} ({exc}); use a gymnasium id such as "
                         "'Pendulum-v1' or 'InvertedPendulum-v5' (MuJoCo ones need gymnasium[mujoco])") from None


def evaluate(act: Callable[[np.ndarray], np.ndarray], env_id: str, episodes: int = 10,
             seed: int = EVAL_SEED, progress: Callable[[int], None] | None = None) -> EvalResult:
    """Undiscounted return of ``act(obs) -> action`` over ``episodes`` seeded episodes.

    Args:
        act: the policy, e.g. ``load_artifact(path).act``.
        env_id: gymnasium id.
        episodes: number of episodes (>= 1).
        seed: episode k is reset with ``seed + k``.
        progress: called with the number of finished episodes (for a progress bar).
    """
    env = make_env(env_id)
    try:
        returns, steps, _ = episode_returns(act, env, episodes, seed, progress)
    finally:
        env.close()
    return EvalResult(tuple(returns), env_id, int(seed), steps)


def episode_returns(act: Callable[[np.ndarray], np.ndarray], env, episodes: int, seed: int,
                    progress: Callable[[int], None] | None = None) -> tuple[list[float], int, int]:
    """(returns, steps, terminated episodes) of ``act`` in ``env`` (already made) over seeded episodes.

    Episode k is reset with ``seed + k``; "terminated" counts episodes the env ended itself (a fall),
    not time limits. The caller owns ``env`` (a gapped robot, a wrapped env) and closes it.
    """
    if int(episodes) < 1:
        raise ValueError(f"episodes={episodes} must be >= 1")
    returns, steps, ended = [], 0, 0
    for k in range(int(episodes)):
        obs, _ = env.reset(seed=int(seed) + k)
        total, terminated, truncated = 0.0, False, False
        while not (terminated or truncated):
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            steps += 1
        returns.append(total)
        ended += int(terminated)
        if progress is not None:
            progress(k + 1)
    return returns, steps, ended


def rollout_states(env_id: str, act: Callable[[np.ndarray], np.ndarray], episodes: int, seed: int) -> np.ndarray:
    """Observations [n, obs_dim] that ``act`` visits in ``episodes`` episodes seeded ``seed``, ``seed + 1``, ..."""
    env = make_env(env_id)
    states = []
    try:
        for k in range(int(episodes)):
            obs, _ = env.reset(seed=int(seed) + k)
            done = False
            while not done:
                states.append(np.asarray(obs, np.float64))
                obs, _, terminated, truncated, _ = env.step(act(obs))
                done = terminated or truncated
    finally:
        env.close()
    return np.array(states)


def kept_fraction(student: float, teacher: float) -> float:
    """How much of the teacher's return the student keeps: 1 - (teacher - student) / |teacher|.

    Equals student / teacher for a positive teacher return, and works for negative returns
    (Pendulum-v1) too: a student that loses 3% of |teacher| keeps 0.97, one that does better
    keeps more than 1.
    """
    if teacher == 0:
        return 1.0 if student >= 0 else float("-inf")
    return 1.0 - (teacher - student) / abs(teacher)
