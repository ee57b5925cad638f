"""TD3 (Fujimoto et al. 2018): twin fused critics, delayed actor and target updates, smoothing.

The actor, and with it the target networks, is updated every ``policy_delay`` critic updates, so
its RLx2 mask counter runs at half the critic's pace (the paper's "TD3's delayed actor evolves
every 20k environment steps").
"""
from __future__ import annotations

import copy

import numpy as np
import torch

from lowrl_ros.core.train.agent import OffPolicyAgent, to_tensors
from lowrl_ros.core.train.networks import DeterministicActor, TwinCritic
from lowrl_ros.core.train.replay import Batch


class TD3Agent(OffPolicyAgent):
    """TD3 learner; see ``OffPolicyAgent`` for the arguments."""

    def build_actor(self, hidden: int) -> DeterministicActor:
        actor = DeterministicActor(self.obs_dim, self.act_dim, hidden, self.cfg.depth)
        self.actor_target = copy.deepcopy(actor).requires_grad_(False)
        return actor

    def build_critic(self, hidden: int) -> TwinCritic:
        return TwinCritic(self.obs_dim, self.act_dim, hidden, self.cfg.depth)

    def actor_updates_total(self, critic_updates: int) -> int:
        return critic_updates // self.cfg.policy_delay

    def __init__(self, cfg, obs_dim: int, act_dim: int) -> None:
        super().__init__(cfg, obs_dim, act_dim)
        self.noise_rng = np.random.default_rng(cfg.seed + 2)

    @torch.no_grad()
    def explore(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = torch.from_numpy(np.asarray(obs, dtype=np.float32))[None]
        a = self.actor(x)[0].numpy()
        noisy = a + self.cfg.explore_noise * self.noise_rng.standard_normal(a.shape)
        return np.clip(noisy, -1.0, 1.0).astype(np.float32), a

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.actor_target is not None:  # CrossQ (crossq.py) has none
            state["actor_target"] = self.actor_target.state_dict()
        state["noise_rng"] = self.noise_rng.bit_generator.state
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if self.actor_target is not None:
            self.actor_target.load_state_dict(state["actor_target"])
        self.noise_rng.bit_generator.state = state["noise_rng"]

    def update(self, batch: Batch, train_actor: bool = True, bc_weight: float = 0.0) -> None:
        cfg = self.cfg
        obs, act, rew, next_obs, disc = to_tensors(batch)
        with torch.no_grad():
            noise = (torch.randn_like(act) * cfg.policy_noise).clamp_(-cfg.noise_clip, cfg.noise_clip)
            next_a = (self.actor_target(next_obs) + noise).clamp_(-1.0, 1.0)
            y = rew + disc * self.critic_target(next_obs, next_a).min(0).values
        q = self.critic(obs, act)
        critic_loss = (q - y).square().mean(1).sum()
        self.critic_step(critic_loss)
        self.gradient_steps += 1
        if not train_actor:
            self.polyak(slice(0, 1))  # the critic's target only; the actor and its target stay
            return
        if self.gradient_steps % cfg.policy_delay:
            return
        self.actor_step(self.actor_loss(obs, act, bc_weight))
        self.polyak()

    def actor_loss(self, obs: torch.Tensor, act: torch.Tensor, bc_weight: float) -> torch.Tensor:
        """-Q1(s, pi(s)); with ``bc_weight`` TD3+BC's: Q over its mean |Q| plus bc_weight x MSE to the recorded
        action. (The residual learner, core/finetune/residual.py, adds its anchor here.)"""
        pi = self.actor(obs)
        q_pi = self.critic.q1(obs, pi)
        if bc_weight > 0.0:
            return -(q_pi / q_pi.detach().abs().mean().clamp_min(1e-6)).mean() + bc_weight * (pi - act).square().mean()
        return -q_pi.mean()
