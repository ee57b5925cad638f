"""Prior data for RLPD-style fine-tuning: the simulation's replay, kept in the kit, half of every batch.

A kit may hold ``prior.npz`` beside ``agent.pt``: the newest transitions of the training run's
replay buffer (at most :data:`PRIOR_MAX` of them, float32), in the learner's own units (observations
as the agent saw them, actions normalised to [-1, 1]). `write_kit` writes it from a `lowrl train`
checkpoint (which holds the buffer); kits without it still load and fine-tune (the ``rlpd`` learner
then learns from robot data alone and says so in its notes).

RLPD ("Efficient Online RL with Offline Data", ikostrikov/rlpd ``offline_ratio=0.5``): every batch
is half prior data, half robot data ("symmetric sampling"), which guards the fresh critics against
early divergence while the robot's buffer is small.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lowrl_ros.core.train.replay import Batch, ReplayBuffer

PRIOR_FILE = "prior.npz"
# 50k transitions of a 48-dim observation, 12-dim action robot: ~21 MB as float32, a bounded share of
# the fine-tuner's default 1500 MB cap; a Pendulum's is ~1.8 MB.
PRIOR_MAX = 50_000
PRIOR_RATIO = 0.5  # RLPD's offline_ratio
# The prior data may take at most this share of the fine-tuner's memory_cap_mb (the newest transitions are kept).
PRIOR_MEMORY_SHARE = 0.25
_KEYS = ("obs", "action", "reward", "next_obs", "terminated")


def write_prior(kit_dir: str | Path, buffer_state: dict, max_transitions: int = PRIOR_MAX) -> Path | None:
    """Write the newest ``max_transitions`` of a replay buffer's state (ReplayBuffer.state_dict) as ``prior.npz``.

    Returns the path, or None when the buffer is empty. Written atomically (temp file + rename).
    """
    n = len(buffer_state["reward"])
    if n == 0 or max_transitions <= 0:
        return None
    keep = slice(max(0, n - int(max_transitions)), n)  # the state is oldest first: keep the newest
    arrays = {"obs": np.asarray(buffer_state["obs"][keep], np.float32),
              "action": np.asarray(buffer_state["action"][keep], np.float32),
              "reward": np.asarray(buffer_state["reward"][keep], np.float32),
              "next_obs": np.asarray(buffer_state["next_obs"][keep], np.float32),
              "terminated": np.asarray(buffer_state["terminated"][keep], bool)}
    path = Path(kit_dir) / PRIOR_FILE
    tmp = path.with_name(PRIOR_FILE + ".tmp")
    with open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
    tmp.replace(path)
    return path


def load_prior(kit_dir: str | Path | None, obs_dim: int, act_dim: int, max_transitions: int) -> ReplayBuffer | None:
    """The kit's prior data as a ReplayBuffer of its newest ``max_transitions``; None when the kit has none.

    ValueError when the file does not fit the kit (other dimensions): re-write the kit.
    """
    if kit_dir is None or max_transitions <= 0:
        return None
    path = Path(kit_dir) / PRIOR_FILE
    if not path.is_file():
        return None
    with np.load(path) as data:
        missing = [k for k in _KEYS if k not in data]
        if missing:
            raise ValueError(f"{path} lacks {missing}; re-write the kit (lowrl_ros.core.finetune.kit.write_kit)")
        arrays = {k: data[k] for k in _KEYS}
    n = len(arrays["reward"])
    if arrays["obs"].shape != (n, obs_dim) or arrays["next_obs"].shape != (n, obs_dim) \
            or arrays["action"].shape != (n, act_dim):
        raise ValueError(f"{path}: prior data is {arrays['obs'].shape[1:]} -> {arrays['action'].shape[1:]}, the kit "
                         f"is {obs_dim} -> {act_dim}; re-write the kit (or delete {path.name})")
    keep = slice(max(0, n - int(max_transitions)), n)
    m = len(arrays["reward"][keep])
    if m == 0:
        return None
    buffer = ReplayBuffer(obs_dim, act_dim, m)
    buffer.load_state_dict({"obs": arrays["obs"][keep], "next_obs": arrays["next_obs"][keep],
                            "action": arrays["action"][keep], "behaviour": arrays["action"][keep],
                            "reward": arrays["reward"][keep], "terminated": arrays["terminated"][keep],
                            "truncated": np.zeros(m, bool), "dropped": 0})
    return buffer


def buffer_bytes(buffer: ReplayBuffer) -> int:
    """Memory a replay buffer's arrays take."""
    return sum(getattr(buffer, k).nbytes for k in ("obs", "next_obs", "action", "behaviour", "reward",
                                                     "terminated", "truncated"))


def mixed_batch(online: ReplayBuffer, prior: ReplayBuffer | None, batch_size: int, rng: np.random.Generator,
                nstep: int = 1, gamma: float = 0.99, ratio: float = PRIOR_RATIO) -> Batch:
    """A minibatch of ``round(ratio * batch_size)`` prior transitions and the rest from the robot (RLPD).

    Without prior data the whole batch is the robot's.
    """
    if prior is None or len(prior) == 0:
        return online.sample(batch_size, rng, nstep, gamma)
    n_prior = int(round(ratio * batch_size))
    a = online.sample(batch_size - n_prior, rng, nstep, gamma)
    b = prior.sample(n_prior, rng, nstep, gamma)
    return Batch(*(np.concatenate([getattr(a, k), getattr(b, k)])
                   for k in ("obs", "action", "reward", "next_obs", "discount")))


def load_learner_prior(learner: str, kit, config, buffer: ReplayBuffer, notes: list[str]) -> ReplayBuffer | None:
    """The prior data fine-tuning ``learner`` mixes into its batches: the kit's (rlpd; residual with
    ``config.residual_prior``), bounded by ``config.prior_size`` and a share of its memory cap beside ``buffer``;
    None for the other learners. Appends to ``notes`` what the replay was seeded with, when it matters."""
    if not (learner == "rlpd" or (learner == "residual" and config.residual_prior)):
        if learner == "residual":
            notes.append("residual: replay seeded with none: robot data only (residual_prior false)")
        return None
    per = buffer_bytes(ReplayBuffer(kit.obs_dim, kit.action_dim, 1))
    fit = int(max(0.0, PRIOR_MEMORY_SHARE * config.memory_cap_mb * 2**20 - buffer_bytes(buffer)) // per)
    prior = load_prior(kit.path, kit.obs_dim, kit.action_dim, min(config.prior_size, fit))
    if prior is None:
        notes.append(f"{learner}: replay seeded with none: robot data only (the kit has no prior data, {PRIOR_FILE}; "
                     "or prior_size 0, or no room under memory_cap_mb)")
    elif learner == "residual" or len(prior) < config.prior_size:
        cut = "" if len(prior) == config.prior_size else \
            f"; all the kit has, or what fits in {PRIOR_MEMORY_SHARE:.0%} of memory_cap_mb"
        source = kit.prior_source or "training-simulator transitions"
        notes.append(f"{learner}: replay seeded with {len(prior)} prior transitions, half of every batch (the kit's "
                     f"{source}, {PRIOR_FILE}{cut})")
    return prior
