"""Soft Actor-Critic (Haarnoja et al. 2018) with twin fused critics and a learned temperature.

The update is written for a small CPU: both critics in one batched matmul per layer, the actor's
gradient taken with ``torch.autograd.grad`` over the actor's parameters only (the critic's weight
gradients are never computed there), the temperature's gradient written in closed form.
"""
from __future__ import annotations

import numpy as np
import torch

from lowrl_ros.core.train.agent import OffPolicyAgent, to_tensors
from lowrl_ros.core.train.networks import GaussianActor, TwinCritic
from lowrl_ros.core.train.optim import LeanAdam
from lowrl_ros.core.train.replay import Batch


class SACAgent(OffPolicyAgent):
    """SAC learner; see ``OffPolicyAgent`` for the arguments."""

    actor_out_mult = 2

    def __init__(self, cfg, obs_dim: int, act_dim: int) -> None:
        super().__init__(cfg, obs_dim, act_dim)
        self.learn_alpha = cfg.alpha == 0.0
        self.target_entropy = -float(act_dim)  # SAC's heuristic: -|A|
        init = 1.0 if self.learn_alpha else cfg.alpha
        self.log_alpha = torch.tensor([np.log(init)], dtype=torch.float32, requires_grad=self.learn_alpha)
        self.alpha_opt = LeanAdam([self.log_alpha], lr=cfg.lr) if self.learn_alpha else None

    def build_actor(self, hidden: int) -> GaussianActor:
        return GaussianActor(self.obs_dim, self.act_dim, hidden, self.cfg.depth)

    def build_critic(self, hidden: int) -> TwinCritic:
        return TwinCritic(self.obs_dim, self.act_dim, hidden, self.cfg.depth)

    @torch.no_grad()
    def explore(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = torch.from_numpy(np.asarray(obs, dtype=np.float32))[None]
        mu, log_std = self.actor(x)
        a = torch.tanh(mu + torch.randn_like(mu) * log_std.exp())
        return a[0].numpy(), torch.tanh(mu)[0].numpy()

    def update(self, batch: Batch, train_actor: bool = True, bc_weight: float = 0.0) -> None:
        obs, act, rew, next_obs, disc = to_tensors(batch)
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_a, next_logp = self.actor.sample(next_obs)
            target_q = self.critic_target(next_obs, next_a).min(0).values - alpha * next_logp
            y = rew + disc * target_q
        q = self.critic(obs, act)
        critic_loss = 0.5 * (q - y).square().mean(1).sum()
        self.critic_step(critic_loss)
        if not train_actor:
            self.polyak()
            self.gradient_steps += 1
            return

        if bc_weight > 0.0:
            # TD3+BC (Fujimoto & Gu 2021) for SAC: the soft-Q term normalised by its mean |Q|, plus
            # bc_weight x the squared distance of the mean action to the recorded one.
            mu, log_std = self.actor(obs)
            eps = torch.randn_like(mu)
            u = mu + eps * log_std.exp()
            a = torch.tanh(u)
            logp = (-0.5 * eps.square() - log_std - 0.5 * np.log(2.0 * np.pi)).sum(-1) \
                - (2.0 * (np.log(2.0) - u - torch.nn.functional.softplus(-2.0 * u))).sum(-1)
            q_pi = self.critic(obs, a).min(0).values
            lam = 1.0 / q_pi.detach().abs().mean().clamp_min(1e-6)
            actor_loss = lam * (alpha * logp - q_pi).mean() + bc_weight * (torch.tanh(mu) - act).square().mean()
        else:
            a, logp = self.actor.sample(obs)
            actor_loss = (alpha * logp - self.critic(obs, a).min(0).values).mean()
        self.actor_step(actor_loss)

        self.temperature_step(logp)
        self.polyak()
        self.gradient_steps += 1

    def temperature_step(self, logp: torch.Tensor) -> None:
        """The learned temperature's step (none when ``alpha`` is fixed); SAC, CrossQ-SAC and the kit's
        imported-actor SAC share it."""
        if self.learn_alpha:
            # d/d log α of −log α·(log π + H̄) is −mean(log π + H̄): no graph needed.
            self.log_alpha.grad = -(logp.detach() + self.target_entropy).mean().reshape(1)
            self.alpha_opt.step()

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["log_alpha"] = self.log_alpha.detach().clone()
        if self.alpha_opt is not None:
            state["alpha_opt"] = self.alpha_opt.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        if self.alpha_opt is not None:
            self.alpha_opt.load_state_dict(state["alpha_opt"])
