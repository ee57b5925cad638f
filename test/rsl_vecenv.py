"""A thin rsl_rl VecEnv over gymnasium environments, and a few-second rsl_rl PPO run (tests only).

rsl-rl-lib 5.x wants a ``VecEnv`` whose observations are a TensorDict of groups (here one group,
``policy``), with ``dones`` and ``extras["time_outs"]``; gymnasium gives single environments. This
wrapper steps ``num_envs`` of them in lockstep and resets each one when its episode ends. It is
only what the tests need to train a real rsl_rl policy on Pendulum-v1, not a general adapter.
"""
from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict


class GymVecEnv(VecEnv):
    """``num_envs`` copies of a gymnasium Box-action environment, as an rsl_rl VecEnv."""

    def __init__(self, env_id: str, num_envs: int = 8, seed: int = 0) -> None:
        self.envs = [gym.make(env_id) for _ in range(num_envs)]
        self.num_envs = num_envs
        self.num_actions = int(np.prod(self.envs[0].action_space.shape))
        self.max_episode_length = int(self.envs[0].spec.max_episode_steps or 1000)
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        self.device = "cpu"
        self.cfg = {"env_id": env_id}
        self._obs = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(self.envs)]).astype(np.float32)

    def _td(self) -> TensorDict:
        return TensorDict({"policy": torch.from_numpy(self._obs.copy())}, batch_size=[self.num_envs])

    def get_observations(self) -> TensorDict:
        return self._td()

    def step(self, actions: torch.Tensor):
        acts = actions.detach().cpu().numpy()
        rewards = np.zeros(self.num_envs, np.float32)
        dones = np.zeros(self.num_envs, bool)
        time_outs = np.zeros(self.num_envs, bool)
        for i, env in enumerate(self.envs):
            obs, r, term, trunc, _ = env.step(acts[i])
            rewards[i], dones[i], time_outs[i] = r, term or trunc, trunc and not term
            if dones[i]:
                obs, _ = env.reset()
            self._obs[i] = obs
        self.episode_length_buf += 1
        self.episode_length_buf[torch.from_numpy(dones)] = 0
        return (self._td(), torch.from_numpy(rewards), torch.from_numpy(dones.astype(np.float32)),
                {"time_outs": torch.from_numpy(time_outs.astype(np.float32))})


def train_cfg(activation: str = "elu", hidden=(32, 32), obs_normalization: bool = True,
              steps_per_env: int = 64) -> dict:
    """An rsl-rl-lib 5.x OnPolicyRunner config (the layout its train scripts write to agent.yaml)."""
    model = {"class_name": "MLPModel", "hidden_dims": list(hidden), "activation": activation,
             "obs_normalization": obs_normalization}
    return {
        "num_steps_per_env": steps_per_env,
        "save_interval": 1000,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "actor": {**model, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": dict(model),
        "algorithm": {"class_name": "PPO", "learning_rate": 3e-3, "num_learning_epochs": 4, "num_mini_batches": 4,
                      "gamma": 0.95, "entropy_coef": 0.0},
        "logger": "tensorboard",
    }


def train_pendulum(run_dir: Path, iterations: int = 12, activation: str = "elu", seed: int = 0,
                   obs_normalization: bool = True):
    """Train rsl_rl PPO on Pendulum-v1 for a few seconds; save ``run_dir/model_<it>.pt`` and ``params/agent.yaml``.

    Returns (runner, checkpoint path). The policy need not be good: the tests compare the imported
    artifact with rsl_rl's own inference, not with a target return. One torch thread: on a shared
    2-core machine torch's default thread pool makes these tiny batches ~20x slower.
    """
    import contextlib
    import io

    import yaml
    from rsl_rl.runners import OnPolicyRunner

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        cfg = train_cfg(activation, obs_normalization=obs_normalization, steps_per_env=32)
        env = GymVecEnv("Pendulum-v1", num_envs=8, seed=seed)
        with contextlib.redirect_stdout(io.StringIO()):  # rsl_rl prints the models and a log per iteration
            runner = OnPolicyRunner(env, cfg, log_dir=None, device="cpu")
            runner.learn(iterations)
    finally:
        torch.set_num_threads(threads)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"model_{iterations - 1}.pt"
    runner.save(str(path))
    (run_dir / "params").mkdir(exist_ok=True)
    (run_dir / "params" / "agent.yaml").write_text(yaml.safe_dump(cfg))
    return runner, path
