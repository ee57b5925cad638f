"""A compact PPO whose actor *is* a deployed artifact's policy (off-board; torch).

Why not Stable-Baselines3's or rsl_rl's PPO: their actor is their own network. Continuing a deployed
policy needs the artifact's exact computation as the Gaussian's mean (the contract's observation
normalisation and clip, the MLP with its activation, the output activation, the contract's action
transform), so that iteration 0 acts as the robot does, and it needs value-only updates of a fresh
critic under the frozen actor before the actor may move (a fresh critic's advantages are noise and
walk a good actor away). Both would mean overriding most of either library's policy and update, so
the algorithm is written out here, top to bottom (Schulman et al. 2017, "Proximal Policy Optimization
Algorithms"; GAE: Schulman et al. 2016), in the style of CleanRL's ``ppo_continuous_action.py``.

- :class:`ArtifactActor`: the artifact's network in torch with a state-independent log-std; ``mean``
  is the deployed action before the contract's clip; :meth:`ArtifactActor.weights` exports it back.
- :class:`Critic`: V(obs), a fresh MLP with LayerNorm on the actor's normalisation, or the policy's own trained
  critic from its training checkpoint (core/retrain/source.py).
- :func:`next_values`: V after each step from the rollout's own values (one critic call per step, not two).
- :func:`gae`: advantages and returns, bootstrapping truncated episodes from their final observation.
- :func:`ppo_update`: clipped surrogate + entropy for the actor (skipped while warming up), MSE for the
  critic, minibatches drawn from a seeded generator, gradients clipped.
- :class:`ReturnScaler`: rewards divided by the running std of the discounted return (as SB3's
  VecNormalize ``norm_reward``), so the critic's targets have a sane scale whatever the robot's reward.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract
from lowrl_ros.core.train.networks import TORCH_ACTIVATIONS

MAX_LOG_RATIO = 20.0  # |log pi_new/pi_old| beyond this is clamped in the surrogate (see ppo_update)


def _linear(w: np.ndarray, b: np.ndarray) -> nn.Linear:
    """An nn.Linear holding an artifact layer (W [out, in], b [out])."""
    layer = nn.Linear(w.shape[1], w.shape[0])
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(np.asarray(w, np.float32)))
        layer.bias.copy_(torch.from_numpy(np.asarray(b, np.float32)))
    return layer


class ArtifactActor(nn.Module):
    """The deployed policy as a Gaussian actor: mean = offset + scale * out_act(MLP(normalise(obs))).

    Args:
        weights: the artifact's network (ParsedArtifact.base_weights(): fp32 or dequantised int8).
        contract: its contract (normalisation, action transform, limits).
        init_std: per action entry, the initial std of the exploration noise (action units).
    """

    def __init__(self, weights: MlpWeights, contract: PolicyContract, init_std: np.ndarray) -> None:
        super().__init__()
        self.hidden_activation, self.output_activation = weights.hidden_activation, weights.output_activation
        self.layers = nn.ModuleList(_linear(w, b) for w, b in weights.layers)
        scale, offset = contract.action_transform(weights.output_activation)
        f32 = lambda v: torch.tensor(np.asarray(v, np.float32))  # noqa: E731
        self.register_buffer("obs_offset", f32(contract.obs_offset))
        self.register_buffer("obs_scale", f32(contract.obs_scale))
        self.register_buffer("act_scale", f32(scale))
        self.register_buffer("act_offset", f32(offset))
        self.obs_clip = contract.obs_clip
        self.log_std = nn.Parameter(torch.log(f32(init_std)))

    def normalise(self, obs: torch.Tensor) -> torch.Tensor:
        x = (obs - self.obs_offset) * self.obs_scale
        return x if self.obs_clip is None else x.clamp(-self.obs_clip, self.obs_clip)

    def mean(self, obs: torch.Tensor) -> torch.Tensor:
        """The deployed action before the contract's clip to its limits."""
        x = self.normalise(obs)
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = TORCH_ACTIVATIONS[self.output_activation if i == last else self.hidden_activation](layer(x))
        return self.act_offset + self.act_scale * x

    def dist(self, obs: torch.Tensor) -> torch.distributions.Normal:
        mean = self.mean(obs)
        return torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean))

    def weights(self) -> MlpWeights:
        """The network as the artifact stores it (float32 W [out, in], b [out]), same activations."""
        layers = [(layer.weight.detach().numpy().copy(), layer.bias.detach().numpy().copy()) for layer in self.layers]
        return MlpWeights(layers, self.hidden_activation, self.output_activation)

    def finite(self) -> bool:
        return all(bool(torch.isfinite(p).all()) for p in self.parameters())


class Critic(nn.Module):
    """V(obs): an MLP on the observation normalised as ``clip(a * obs + b)``.

    :meth:`fresh`: a new MLP with LayerNorm after each hidden layer (stable targets from step 1) on the actor's own
    normalisation; :meth:`from_weights`: a trained critic (core/retrain/source.py) with its training's normalisation.
    """

    def __init__(self, net: nn.Module, a: np.ndarray, b: np.ndarray, clip: float | None) -> None:
        super().__init__()
        self.net = net
        self.register_buffer("norm_a", torch.tensor(np.asarray(a, np.float32)))
        self.register_buffer("norm_b", torch.tensor(np.asarray(b, np.float32)))
        self.clip = clip

    @classmethod
    def fresh(cls, actor: ArtifactActor, hidden: int = 256, depth: int = 2) -> "Critic":
        mods: list[nn.Module] = []
        n = actor.obs_scale.numel()
        for _ in range(depth):
            mods += [nn.Linear(n, hidden), nn.LayerNorm(hidden), nn.ELU()]
            n = hidden
        mods.append(nn.Linear(n, 1))
        a = actor.obs_scale.numpy()
        return cls(nn.Sequential(*mods), a, -actor.obs_offset.numpy() * a,
                   10.0 if actor.obs_clip is None else actor.obs_clip)

    @classmethod
    def from_weights(cls, weights: MlpWeights, a: np.ndarray, b: np.ndarray, clip: float | None) -> "Critic":
        mods: list[nn.Module] = []
        for w, bias in weights.layers:
            mods += [_linear(w, bias), _Activation(weights.hidden_activation)]
        return cls(nn.Sequential(*mods[:-1]), a, b, clip)  # no activation after the value layer

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.norm_a * obs + self.norm_b
        if self.clip is not None:
            x = x.clamp(-self.clip, self.clip)
        return self.net(x).squeeze(-1)


class _Activation(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.fn = TORCH_ACTIVATIONS[name]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


class ReturnScaler:
    """Rewards / running std of the discounted return, per env (SB3 VecNormalize's norm_reward; no mean shift)."""

    def __init__(self, n_envs: int, gamma: float) -> None:
        self.gamma = gamma
        self.ret = np.zeros(n_envs)
        self.count, self.mean, self.var = 1e-4, 0.0, 1.0

    def __call__(self, reward: np.ndarray, done: np.ndarray) -> np.ndarray:
        self.ret = self.ret * self.gamma + reward
        b_mean, b_var, b_n = float(self.ret.mean()), float(self.ret.var()), len(self.ret)
        delta, total = b_mean - self.mean, self.count + b_n
        self.mean += delta * b_n / total
        self.var = (self.var * self.count + b_var * b_n + delta ** 2 * self.count * b_n / total) / total
        self.count = total
        self.ret[done] = 0.0
        return reward / math.sqrt(self.var + 1e-8)


def next_values(values: np.ndarray, last: np.ndarray, final_values: np.ndarray, done: np.ndarray,
                truncated: np.ndarray) -> np.ndarray:
    """V of the observation after each step of a rollout [T, n_envs], for :func:`gae`, from the values already
    computed: ``values[t + 1]`` where the episode goes on (the same observation; ``last`` after the final step),
    ``final_values[t]`` (V of the episode's final observation) where it was truncated, 0 where it terminated
    (``done`` and not ``truncated``)."""
    after = np.concatenate([values[1:], np.asarray(last, values.dtype)[None]])
    return np.where(truncated, final_values, np.where(done, 0.0, after)).astype(values.dtype)


def gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray, dones: np.ndarray, gamma: float,
        lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, returns), each [T, n_envs].

    ``values[t]`` is V(obs_t); ``next_values[t]`` V of the observation after step t (for a truncated step the
    episode's final observation, so a time limit is not mistaken for a terminal state; 0 for a terminated
    one); ``dones[t]`` ends the episode after step t (terminated or truncated) and stops the trace there.
    """
    adv = np.zeros_like(rewards)
    last = np.zeros(rewards.shape[1])
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_values[t] - values[t]
        last = delta + gamma * lam * (1.0 - dones[t]) * last
        adv[t] = last
    return adv, adv + values


@dataclass
class UpdateStats:
    policy_loss: float
    value_loss: float
    entropy: float
    approx_kl: float
    finite: bool


def ppo_update(actor: ArtifactActor, critic: Critic, actor_opt: torch.optim.Optimizer | None,
               critic_opt: torch.optim.Optimizer, batch: dict[str, torch.Tensor], *, epochs: int, minibatches: int,
               clip: float, ent_coef: float, generator: torch.Generator, max_grad_norm: float = 1.0) -> UpdateStats:
    """PPO epochs over ``batch`` (obs, act, logp, adv, ret); ``actor_opt`` None: value-only (critic warm-up).

    Returns the last minibatch's losses; ``finite`` False as soon as a loss or a parameter is NaN/Inf (the
    caller stops the run: a diverged actor is never exported).
    """
    n = len(batch["obs"])
    size = max(1, n // minibatches)
    stats = UpdateStats(0.0, 0.0, 0.0, 0.0, True)
    for _ in range(epochs):
        perm = torch.randperm(n, generator=generator)
        for start in range(0, n - size + 1, size):
            idx = perm[start:start + size]
            obs = batch["obs"][idx]
            v = critic(obs)
            value_loss = 0.5 * ((v - batch["ret"][idx]) ** 2).mean()
            critic_opt.zero_grad()
            value_loss.backward()
            nn.utils.clip_grad_norm_(critic.parameters(), max_grad_norm)
            critic_opt.step()
            stats.value_loss = value_loss.item()
            if actor_opt is not None:
                dist = actor.dist(obs)
                logp = dist.log_prob(batch["act"][idx]).sum(-1)
                # clamped before exp: a draw whose density rose e^88-fold would overflow the ratio to inf and its
                # advantage times it to NaN; PPO's clip ignores such a ratio anyway
                log_ratio = (logp - batch["logp"][idx]).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
                ratio = log_ratio.exp()
                adv = batch["adv"][idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                surrogate = torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv).mean()
                entropy = dist.entropy().sum(-1).mean()
                loss = -surrogate - ent_coef * entropy
                actor_opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(actor.parameters(), max_grad_norm)
                actor_opt.step()
                with torch.no_grad():
                    stats.approx_kl = float(((ratio - 1.0) - log_ratio).mean())
                stats.policy_loss, stats.entropy = -surrogate.item(), entropy.item()
            if not (math.isfinite(stats.value_loss) and math.isfinite(stats.policy_loss) and actor.finite()):
                stats.finite = False
                return stats
    return stats
