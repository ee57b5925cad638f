"""The residual learner (FineTuneConfig.algorithm ``residual``): a frozen base policy plus a small, bounded correction.

Why: an off-policy learner started from an imported PPO actor with a fresh critic walks the actor away
from what works before its critic knows anything (0 % of the gap recovered on the legged example and
the imported pendulum, issue 28; ../shared/reference/onrobot-finetuning.md). Here the base policy
(the artifact the robot runs, int8 weights dequantised, as deployed) never changes; a small network
learns a correction that starts at exactly zero and can never exceed a fraction of the action range::

    x      = the contract's normalised observation                 (kit.norm_obs, the replay's units)
    y_base = base MLP(x), its output activation included            frozen
    d      = bound * tanh(head(x))                                  head: 2 x residual_hidden, ReLU;
                                                                    its last layer starts at zero: d = 0
    action = clip(offset + scale * (y_base + d), low, high)         contract.to_action
    bound_i = residual_scale * (high_i - low_i) / 2 / |scale_i|     a share of the half range, in y units

The learner is TD3 (deterministic: the robot explores with the deployed version itself, so no
stochastic actor is needed) with LayerNorm twin critics (crossq.LayerNormCritic, RLPD's), a
critic-only phase first (FineTuneConfig.residual_critic_updates) and an anchor to the base in the
actor loss: ``-Q / mean|Q| + residual_anchor * mean((d / bound)^2)`` (Q normalised as TD3+BC does,
so the anchor's weight means the same whatever the reward's scale). Only the head is a parameter:
the base weights are buffers, outside every optimizer, target update and snapshot (a learner state
holds the head and the critics only). Each version is the base artifact plus the head
(``save_residual_artifact``, core/runtime/artifact.py).
"""
from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import numpy as np
import torch
from torch import nn

from lowrl_ros.core.runtime.artifact import (MlpWeights, ParsedArtifact, PolicyContract, ResidualHead,
                                             parse_artifact, read_artifact_bytes, save_residual_artifact)
from lowrl_ros.core.train.config import TrainConfig
from lowrl_ros.core.train.crossq import LayerNormCritic
from lowrl_ros.core.train.networks import TORCH_ACTIVATIONS, FusedMLP, inward_clamp
from lowrl_ros.core.train.td3 import TD3Agent

RESIDUAL_DEPTH = 2  # hidden layers of the head


def residual_bound(contract: PolicyContract, output_activation: str, scale: float) -> np.ndarray:
    """The correction's bound per action in network-output (y) units: ``scale`` of the half action range."""
    a_scale, _ = contract.action_transform(output_activation)
    half = (np.asarray(contract.action_high, np.float64) - np.asarray(contract.action_low, np.float64)) / 2.0
    return float(scale) * half / np.abs(a_scale)


def load_base(path: str | Path, contract: PolicyContract) -> tuple[ParsedArtifact, MlpWeights]:
    """The base artifact at ``path`` and its base network (a residual artifact: its base part), checked against
    the kit's ``contract``; ValueError saying what to give."""
    if not str(path):
        raise ValueError("algorithm=residual needs the base artifact the robot runs (finetune_node's "
                         "base_policy_path): the correction is learned on top of it")
    parsed = parse_artifact(read_artifact_bytes(path), str(path))
    if not parsed.contract.same_io(contract):
        raise ValueError(f"{path} reads or writes other observations, actions or limits than the kit's contract; "
                         "give the artifact the kit was made from")
    # A resumed session may run a residual version already: its base part is the base (core/runtime/artifact.py).
    return parsed, parsed.base_weights()


class ResidualActor(nn.Module):
    """Frozen base network + bounded head (see the module docstring); ``forward`` maps normalised observations
    to the action on [-1, 1] over [low, high] (the replay's and the critics' units).

    ``net`` is the head (the agent's ``actor_net``: its parameters are the actor's only ones).
    """

    def __init__(self, base: MlpWeights, contract: PolicyContract, hidden: int, scale: float) -> None:
        super().__init__()
        if base.input_dim != contract.obs_dim or base.output_dim != contract.action_dim:
            raise ValueError(f"the base network is {base.input_dim}->{base.output_dim}, the contract "
                             f"{contract.obs_dim}->{contract.action_dim}")
        self.hidden_activation, self.output_activation = base.hidden_activation, base.output_activation
        self.base_layers = len(base.layers)
        # Non-persistent buffers: the base comes from its artifact at every start, never from a learner state.
        for i, (w, b) in enumerate(base.layers):
            self.register_buffer(f"base_w{i}", torch.as_tensor(np.asarray(w, np.float32).T.copy()), persistent=False)
            self.register_buffer(f"base_b{i}", torch.as_tensor(np.asarray(b, np.float32).copy()), persistent=False)
        a_scale, a_offset = contract.action_transform(base.output_activation)
        low, high = np.asarray(contract.action_low, np.float64), np.asarray(contract.action_high, np.float64)
        half, mid = (high - low) / 2.0, (high + low) / 2.0

        def buf(name: str, values) -> None:
            self.register_buffer(name, torch.as_tensor(np.asarray(values, np.float64), dtype=torch.float32),
                                 persistent=False)

        buf("bound", residual_bound(contract, base.output_activation, scale))
        buf("norm_gain", a_scale / half)  # y -> the action on [-1, 1], as ArtifactActor folds it
        buf("norm_bias", (a_offset - mid) / half)
        self.net = FusedMLP(1, [contract.obs_dim] + [int(hidden)] * RESIDUAL_DEPTH + [contract.action_dim])
        with torch.no_grad():  # d = 0 at the start: the first version acts exactly as the base
            self.net.weights[-1].zero_()
            self.net.biases[-1].zero_()

    @torch.no_grad()
    def base_output(self, x: torch.Tensor) -> torch.Tensor:
        """y_base: the frozen base network's output (its output activation included)."""
        act = TORCH_ACTIVATIONS[self.hidden_activation]
        for i in range(self.base_layers):
            x = torch.addmm(getattr(self, f"base_b{i}"), x, getattr(self, f"base_w{i}"))
            if i < self.base_layers - 1:
                x = act(x)
        return torch.tanh(x) if self.output_activation == "tanh" else x

    def residual(self, x: torch.Tensor) -> torch.Tensor:
        """d = bound * tanh(head(x)), in y units; |d| <= bound always."""
        return self.bound * torch.tanh(self.net(x)[0])

    def act_and_residual(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the action on [-1, 1], d): one head pass for the actor loss and its anchor."""
        d = self.residual(x)
        return inward_clamp(self.norm_bias + self.norm_gain * (self.base_output(x) + d)), d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act_and_residual(x)[0]

    def deterministic(self, x: torch.Tensor) -> torch.Tensor:
        """The action the robot runs, on [-1, 1]."""
        return self(x)

    def head_layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The head as artifact layers (W float32 [out, in], b [out]), input to output."""
        return [(w.detach()[0].numpy().T.copy(), b.detach()[0, 0].numpy().copy())
                for w, b in zip(self.net.weights, self.net.biases)]


class ResidualAgent(TD3Agent):
    """TD3 over a :class:`ResidualActor` with LayerNorm twin critics; the actor loss carries the anchor.

    Args:
        cfg: the kit's training config as the fine-tuner runs it (dense: the head and critics carry no masks).
        contract: the kit's contract.
        base: the base network (the base artifact's dequantised weights).
        hidden: the head's width; scale: FineTuneConfig.residual_scale; anchor: FineTuneConfig.residual_anchor.
    """

    def __init__(self, cfg: TrainConfig, contract: PolicyContract, base: MlpWeights, *, hidden: int, scale: float,
                 anchor: float, layer_norm: bool = True) -> None:
        self.contract, self.base, self.residual_hidden, self.scale = contract, base, int(hidden), float(scale)
        self.anchor, self.layer_norm = float(anchor), bool(layer_norm)
        super().__init__(cfg.replace(variant="dense"), contract.obs_dim, contract.action_dim)

    def build_critic(self, hidden: int):
        """LayerNorm twin critics (fresh), or the plain ones the kit's critics load into (``layer_norm`` False)."""
        return LayerNormCritic.build_critic(self, hidden) if self.layer_norm else super().build_critic(hidden)

    def build_actor(self, hidden: int) -> ResidualActor:
        actor = ResidualActor(self.base, self.contract, self.residual_hidden, self.scale)
        self.actor_target = copy.deepcopy(actor).requires_grad_(False)
        return actor

    def actor_loss(self, obs: torch.Tensor, act: torch.Tensor, bc_weight: float) -> torch.Tensor:
        """-Q1 over its mean |Q| + residual_anchor x mean((d / bound)^2) (+ bc_weight x MSE to the recorded action)."""
        pi, d = self.actor.act_and_residual(obs)
        q_pi = self.critic.q1(obs, pi)
        loss = -(q_pi / q_pi.detach().abs().mean().clamp_min(1e-6)).mean()
        loss = loss + self.anchor * (d / self.actor.bound).square().mean()
        if bc_weight > 0.0:
            loss = loss + bc_weight * (pi - act).square().mean()
        return loss


def base_id(base: MlpWeights) -> str:
    """A short digest of the base network's weights: a learner state resumes only on the base it was learned on."""
    h = hashlib.sha256()
    for w, b in base.layers:
        h.update(np.ascontiguousarray(w, np.float32).tobytes())
        h.update(np.ascontiguousarray(b, np.float32).tobytes())
    return h.hexdigest()[:16]


def save_residual_version(path: str | Path, base: ParsedArtifact, actor: ResidualActor, contract: PolicyContract,
                          int8: bool) -> Path:
    """Write a version: the base artifact's network untouched plus ``actor``'s head (core/runtime/artifact.py)."""
    head = ResidualHead(layers=actor.head_layers(), bound=tuple(float(b) for b in actor.bound),
                        hidden_activation="relu")
    return save_residual_artifact(path, base, head, contract, int8=int8)
