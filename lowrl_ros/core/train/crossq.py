"""CrossQ (Bhatt et al., ICLR 2024) and RLPD-style (Ball et al., ICML 2023) agents for on-robot fine-tuning.

CrossQ: batch-renormalised critics and no target networks. The critic sees ``(s, a)`` and
``(s', a')`` in ONE forward pass (a batch of 2B), so both halves are normalised with the same batch
statistics; the TD target is the detached second half. Without that joint pass the target would
be computed under other statistics than the prediction, which is what made BatchNorm fail in
SAC/TD3 with target networks. One update per robot step is enough (UTD 1), which is what makes
it fit a robot CPU ("Gait in Eight", arXiv 2503.08375: a quadruped in 20k steps on a laptop CPU).

Train and eval mode: the critic normalises with the batch's statistics (and updates its running
statistics) only while it is fitted (``train()``); the actor's loss reads it in ``eval()`` mode,
with the running statistics, as the reference (sbx's CrossQ) does. The actor itself has no
normalisation layer: it is the kit's actor, a plain MLP, and what is exported for the robot (the
artifact format is a plain MLP), so the acting copy and the learning copy are the same function.

RLPD-style: the kit's own objective (SAC or TD3, with target networks) with LayerNorm critics
(what keeps values from diverging at UTD > 1 with prior data); the 50/50 prior/online batches are
the fine-tuner's (lowrl_ros.core.finetune.prior). Two critics, not RLPD's ten: ten cost ~5x the
critic compute per update, which a robot CPU spends better on a higher UTD.

Both learners start a FRESH critic: the kit's critics were trained without these normalisation
layers, so their weights do not carry over. The actor, and so the deployed behaviour, is the kit's.
Their objective follows the kit's actor: a Gaussian actor (SAC kit) learns with SAC's entropy
term and temperature, a deterministic one (TD3 kit) with TD3's smoothed target action.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from lowrl_ros.core.train.agent import OffPolicyAgent, to_tensors
from lowrl_ros.core.train.networks import TwinCritic
from lowrl_ros.core.train.replay import Batch
from lowrl_ros.core.train.sac import SACAgent
from lowrl_ros.core.train.td3 import TD3Agent

# Gait in Eight's CrossQ (experiments/jtp_on_robot_experiment.sh): 256 units in the critic.
CROSSQ_HIDDEN = 256
CROSSQ_DEPTH = 2
# sbx CrossQ: the actor is updated every 3 critic updates; BatchRenorm momentum 0.99 (here as the
# weight of the new batch, 0.01); r_max 3, d_max 5.
CROSSQ_POLICY_DELAY = 3
BRN_MOMENTUM = 0.01
BRN_R_MAX, BRN_D_MAX = 3.0, 5.0
# sbx warms BatchRenorm up for 100k steps (plain BatchNorm until then); a fine-tuning run is 10-20k
# robot steps, so renormalisation starts after 2k updates: enough for the running statistics to settle.
BRN_WARMUP = 2_000


class BatchRenorm(nn.Module):
    """Batch renormalisation (Ioffe 2017) over the features of ``[members, B, F]`` inputs, per member.

    In ``train()`` mode the batch is normalised with its own statistics, corrected towards the
    running ones by ``r = clip(sigma_B / sigma, 1/r_max, r_max)`` and ``d = clip((mu_B - mu) / sigma,
    -d_max, d_max)`` (both without gradient) once ``warmup`` batches were seen (plain BatchNorm
    before), and the running statistics move by ``momentum``. In ``eval()`` mode the running
    statistics alone normalise, so the output of one sample does not depend on the others.
    """

    def __init__(self, members: int, features: int, *, momentum: float = BRN_MOMENTUM, eps: float = 1e-3,
                 r_max: float = BRN_R_MAX, d_max: float = BRN_D_MAX, warmup: int = BRN_WARMUP) -> None:
        super().__init__()
        self.momentum, self.eps, self.r_max, self.d_max, self.warmup = momentum, eps, r_max, d_max, int(warmup)
        self.weight = nn.Parameter(torch.ones(members, 1, features))
        self.bias = nn.Parameter(torch.zeros(members, 1, features))
        self.register_buffer("running_mean", torch.zeros(members, 1, features))
        self.register_buffer("running_var", torch.ones(members, 1, features))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            x_hat = (x - self.running_mean) * torch.rsqrt(self.running_var + self.eps)
            return x_hat * self.weight + self.bias
        var, mean = torch.var_mean(x, 1, correction=0, keepdim=True)
        std = torch.sqrt(var + self.eps)
        x_hat = (x - mean) / std
        if int(self.steps) >= self.warmup:
            with torch.no_grad():
                running_std = torch.sqrt(self.running_var + self.eps)
                r = (std / running_std).clamp(1.0 / self.r_max, self.r_max)
                d = ((mean - self.running_mean) / running_std).clamp(-self.d_max, self.d_max)
            x_hat = x_hat * r + d
        with torch.no_grad():
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var, self.momentum)
            self.steps += 1
        return x_hat * self.weight + self.bias


class _BRNNet(nn.Module):
    """Fused ``members`` MLPs with BatchRenorm on the input and after every hidden layer (sbx's CrossQ critic).

    Keeps FusedMLP's ``weights``/``biases`` lists, so the sparse masker and export code see the same shapes.
    """

    def __init__(self, members: int, sizes: list[int]) -> None:
        super().__init__()
        self.members, self.sizes = members, list(sizes)
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        self.norms = nn.ModuleList([BatchRenorm(members, sizes[0])])
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            bound = 1.0 / math.sqrt(fan_in)
            self.weights.append(nn.Parameter(torch.empty(members, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(members, 1, fan_out).uniform_(-bound, bound)))
            if i < len(sizes) - 2:
                self.norms.append(BatchRenorm(members, fan_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norms[0](x.unsqueeze(0).expand(self.members, -1, -1))
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = torch.relu(self.norms[i + 1](x))
        return x


class BRNTwinCritic(nn.Module):
    """CrossQ's twin critic: Q(s, a) of two batch-renormalised MLPs; output ``[2, B]``."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int = CROSSQ_HIDDEN, depth: int = CROSSQ_DEPTH) -> None:
        super().__init__()
        self.net = _BRNNet(2, [obs_dim + act_dim] + [hidden] * depth + [1])

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, act], dim=-1)).squeeze(-1)

    def q1(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self(obs, act)[0]


class _CrossQ:
    """CrossQ's update over a SAC or TD3 agent (mixed in first: its ``update`` and critic win)."""

    uses_target_critic = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if hasattr(self, "actor_target"):  # TD3 built one with its actor: CrossQ has no target networks
            self.actor_target = None

    def build_target_pairs(self) -> list:
        return []

    def build_critic(self, hidden: int) -> BRNTwinCritic:
        return BRNTwinCritic(self.obs_dim, self.act_dim)

    def update(self, batch: Batch, train_actor: bool = True, bc_weight: float = 0.0) -> None:
        obs, act, rew, next_obs, disc = to_tensors(batch)
        n = obs.shape[0]
        sac = hasattr(self, "log_alpha")
        with torch.no_grad():
            if sac:
                alpha = self.log_alpha.detach().exp()
                next_a, next_logp = self.actor.sample(next_obs)
                bonus = alpha * next_logp
            else:  # TD3's target smoothing, on the online actor (there is no target actor)
                noise = (torch.randn_like(act) * self.cfg.policy_noise).clamp_(-self.cfg.noise_clip,
                                                                                 self.cfg.noise_clip)
                next_a = (self.actor(next_obs) + noise).clamp_(-1.0, 1.0)
                bonus = torch.zeros(())
        self.critic.train()
        # The joint pass: (s, a) and (s', a') normalised by the statistics of the same 2B batch.
        q_all = self.critic(torch.cat([obs, next_obs]), torch.cat([act, next_a]))
        q, q_next = q_all[:, :n], q_all[:, n:]
        y = rew + disc * (q_next.detach().min(0).values - bonus)
        critic_loss = 0.5 * (q - y).square().mean(1).sum()
        self.critic_step(critic_loss)
        self.gradient_steps += 1
        if not train_actor or self.gradient_steps % CROSSQ_POLICY_DELAY:
            return
        self.critic.eval()  # the actor climbs the critic under its running statistics (sbx: train=False)
        try:
            if sac:
                a, logp = self.actor.sample(obs)
                q_pi = self.critic(obs, a).min(0).values
                loss = alpha * logp - q_pi
                if bc_weight > 0.0:
                    loss = loss / q_pi.detach().abs().mean().clamp_min(1e-6)
                    loss = loss.mean() + bc_weight * (self.actor.deterministic(obs) - act).square().mean()
                else:
                    loss = loss.mean()
            else:
                pi = self.actor(obs)
                q_pi = self.critic(obs, pi)[0]
                loss = -q_pi.mean()
                if bc_weight > 0.0:
                    loss = loss / q_pi.detach().abs().mean().clamp_min(1e-6) + bc_weight * (pi - act).square().mean()
            self.actor_step(loss)  # the actor's optimizer only: the critic's mode does not matter to it
        finally:
            self.critic.train()
        if sac:
            self.temperature_step(logp)


class LayerNormCritic:
    """RLPD's critics (LayerNorm) over a SAC or TD3 agent; its losses and target networks are the agent's
    (also the residual learner's, lowrl_ros/core/finetune/residual.py)."""

    def build_critic(self, hidden: int) -> TwinCritic:
        return TwinCritic(self.obs_dim, self.act_dim, hidden, self.cfg.depth, layer_norm=True)


_MIXINS = {"crossq": _CrossQ, "rlpd": LayerNormCritic}


def learner_class(learner: str, base: type) -> type:
    """``base`` (an OffPolicyAgent class: SAC, TD3 or a kit's own) turned into the ``learner``'s agent class.

    The constructor is ``base``'s; the learner only swaps the critic and, for CrossQ, the update.
    """
    if learner not in _MIXINS:
        raise ValueError(f"algorithm={learner!r} is not one of kit, sac, td3, crossq, rlpd")
    mixin = _MIXINS[learner]
    return type(f"{learner.capitalize()}{base.__name__}", (mixin, base),
                {"__doc__": f"{mixin.__doc__} ({base.__name__})"})


CrossQSACAgent = learner_class("crossq", SACAgent)
CrossQTD3Agent = learner_class("crossq", TD3Agent)
LayerNormSACAgent = learner_class("rlpd", SACAgent)
LayerNormTD3Agent = learner_class("rlpd", TD3Agent)


def resolve_learner(algorithm: str, kit_algo: str) -> str:
    """FineTuneConfig.algorithm for a kit trained with ``kit_algo``: "kit" (its own), "crossq" or "rlpd".

    ValueError when it does not fit the kit (``sac`` asked of a TD3 kit and so on).
    """
    if algorithm in ("kit", kit_algo):
        return "kit"
    if algorithm in ("sac", "td3"):
        raise ValueError(f"algorithm={algorithm!r} needs a {algorithm.upper()} kit, but this kit was trained with "
                         f"{kit_algo}; use algorithm=kit (or {kit_algo}), crossq or rlpd")
    if algorithm not in _MIXINS:
        raise ValueError(f"algorithm={algorithm!r} is not one of kit, sac, td3, crossq, rlpd")
    return algorithm


def make_learner_agent(learner: str, cfg, obs_dim: int, act_dim: int) -> OffPolicyAgent:
    """The agent of fine-tuning ``learner`` (FineTuneConfig.algorithm) for a kit trained with ``cfg``."""
    from lowrl_ros.core.train.trainer import make_agent

    learner = resolve_learner(learner, cfg.algo)
    if learner == "kit":
        return make_agent(cfg, obs_dim, act_dim)
    return learner_class(learner, SACAgent if cfg.algo == "sac" else TD3Agent)(cfg, obs_dim, act_dim)
