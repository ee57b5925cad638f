"""What SAC and TD3 share: networks and masks built from a config, acting, Polyak, state.

The subclasses (sac.py, td3.py) only write their losses. The sparse bookkeeping lives here and in
sparse.py so that every variant (dense, small dense, static, SET, RigL, RLx2) runs through the same
code path and comparisons between them are fair.
"""
from __future__ import annotations

import copy

import numpy as np
import torch

from lowrl_ros.core.train.config import TrainConfig
from lowrl_ros.core.train.networks import FusedMLP, small_dense_width
from lowrl_ros.core.train.optim import LeanAdam
from lowrl_ros.core.train.replay import Batch
from lowrl_ros.core.train.sparse import SparseMasker, erdos_renyi_densities

_METHOD = {"static": "static", "set": "set", "rigl": "rigl", "rlx2": "rigl"}


def sparse_param_count(sizes: list[int], members: int, sparsity: float) -> int:
    """Non-zero parameters (weights under ER allocation + dense biases) of a network."""
    shapes = list(zip(sizes[:-1], sizes[1:]))
    dens = erdos_renyi_densities(shapes, sparsity)
    weights = sum(max(1, round(d * i * o)) for d, (i, o) in zip(dens, shapes))
    return members * (weights + sum(sizes[1:]))


class OffPolicyAgent:
    """Base of SAC and TD3 learners.

    Args:
        cfg: the run's configuration.
        obs_dim: observation size.
        act_dim: action size (actions are normalised to [-1, 1] everywhere inside the learner).
    """

    actor_out_mult = 1  # SAC's actor outputs mean and log-std: 2
    uses_target_critic = True  # CrossQ (crossq.py) has no target networks at all

    def __init__(self, cfg: TrainConfig, obs_dim: int, act_dim: int) -> None:
        self.cfg = cfg
        self.obs_dim, self.act_dim = obs_dim, act_dim
        torch.manual_seed(cfg.seed)
        self.generator = torch.Generator().manual_seed(cfg.seed + 1)
        actor_hidden = critic_hidden = cfg.hidden
        if cfg.variant == "small_dense":
            # Same parameter count as the sparse networks of this config, spent on a narrower MLP.
            a_sizes = [obs_dim] + [cfg.hidden] * cfg.depth + [self.actor_out_mult * act_dim]
            c_sizes = [obs_dim + act_dim] + [cfg.hidden] * cfg.depth + [1]
            actor_hidden = small_dense_width(obs_dim, a_sizes[-1], cfg.depth,
                                             sparse_param_count(a_sizes, 1, cfg.actor_sparsity))
            critic_hidden = small_dense_width(obs_dim + act_dim, 1, cfg.depth,
                                              sparse_param_count(c_sizes, 1, cfg.critic_sparsity))
        self.actor = self.build_actor(actor_hidden)
        self.critic = self.build_critic(critic_hidden)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False) if self.uses_target_critic else None
        self.actor_params = list(self.actor.parameters())
        self.critic_params = list(self.critic.parameters())
        # Fused Adam: one kernel for the whole update, measured ~2.7x faster than foreach=True on
        # this CPU for 2x256x256 weights; LeanAdam also skips the Python torch wraps around it
        # (optim.py; both in lowrl bench train --part kernels).
        self.actor_opt = LeanAdam(self.actor_params, lr=cfg.lr)
        self.critic_opt = LeanAdam(self.critic_params, lr=cfg.lr)
        self.actor_masker: SparseMasker | None = None
        self.critic_masker: SparseMasker | None = None
        if cfg.sparse:
            learn_steps = (cfg.total_steps - cfg.warmup_steps) * cfg.updates_per_step
            self.critic_masker = SparseMasker(list(self.critic_net.weights), cfg.critic_sparsity,
                                              _METHOD[cfg.variant], cfg.mask_interval, cfg.zeta0,
                                              learn_steps, self.generator, cfg.sparse_init)
            self.actor_masker = SparseMasker(list(self.actor_net.weights), cfg.actor_sparsity,
                                             _METHOD[cfg.variant], cfg.mask_interval, cfg.zeta0,
                                             self.actor_updates_total(learn_steps), self.generator,
                                             cfg.sparse_init)
        self.target_pairs = self.build_target_pairs()
        self.polyak_masks_only()  # targets start as exact copies of the masked online networks
        self.gradient_steps = 0
        self.topology_updates = 0

    # --- to be provided by subclasses ---------------------------------------------------------
    def build_actor(self, hidden: int) -> torch.nn.Module:
        raise NotImplementedError

    def build_critic(self, hidden: int) -> torch.nn.Module:
        raise NotImplementedError

    def actor_updates_total(self, critic_updates: int) -> int:
        return critic_updates

    def update(self, batch: Batch, train_actor: bool = True, bc_weight: float = 0.0) -> None:
        """One gradient step of the critics and (unless ``train_actor`` is False) of the actor.

        ``train_actor=False`` lets the critics learn new dynamics while the policy stays put
        (the fine-tuner's critic warm-up on the robot). ``bc_weight > 0`` turns the actor loss into
        TD3+BC's: the Q term divided by the batch's mean |Q| plus ``bc_weight`` x the mean squared
        distance between the policy's (mean) action and the batch's recorded action (the
        fine-tuner's guard against exploiting the critic off the robot's narrow action set);
        0, the default, is the plain loss (the trainer's)."""
        raise NotImplementedError

    def explore(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(exploration action, noise-free behaviour action), both normalised."""
        raise NotImplementedError

    # --- shared -------------------------------------------------------------------------------
    @property
    def actor_net(self) -> FusedMLP:
        return self.actor.net

    @property
    def critic_net(self) -> FusedMLP:
        return self.critic.net

    def build_target_pairs(self) -> list[tuple[list[torch.Tensor], list[torch.Tensor], SparseMasker | None,
                                                list[torch.Tensor]]]:
        """(target params, online params, masker, target weights to re-mask) for each target net."""
        pairs = [] if self.critic_target is None else [
            (list(self.critic_target.parameters()), self.critic_params, self.critic_masker,
             list(self.critic_target.net.weights))]
        target_actor = getattr(self, "actor_target", None)
        if target_actor is not None:
            pairs.append((list(target_actor.parameters()), self.actor_params, self.actor_masker,
                          list(target_actor.net.weights)))
        return pairs

    @torch.no_grad()
    def polyak(self, which: slice = slice(None)) -> None:
        """θ' ← θ' + τ(θ − θ'), then re-mask θ' with the online masks (RLx2 §4.1)."""
        for target, online, masker, target_w in self.target_pairs[which]:
            torch._foreach_lerp_(target, online, self.cfg.tau)
            if masker is not None:
                masker.apply_to_weights(target_w)

    def step_network(self, masker: SparseMasker | None, opt: torch.optim.Optimizer) -> None:
        """Optimizer step with masks (or a topology update that replaces it)."""
        if masker is None:
            opt.step()
        elif masker.step(opt):
            self.topology_updates += 1
            # The target net must share the new mask right away, not only after the next Polyak.
            self.polyak_masks_only()

    def critic_step(self, critic_loss: torch.Tensor) -> None:
        """One critic update from its loss: fresh gradients, backward, masked optimizer step (SAC, TD3, CrossQ
        and the kit's imported-actor agents share it)."""
        for p in self.critic_params:
            p.grad = None
        critic_loss.backward()
        self.step_network(self.critic_masker, self.critic_opt)

    def actor_step(self, actor_loss: torch.Tensor) -> None:
        """One actor update from its loss: the gradient over the actor's parameters only (the critic's weight
        gradients are never computed), then the masked optimizer step."""
        grads = torch.autograd.grad(actor_loss, self.actor_params)
        for p, g in zip(self.actor_params, grads):
            p.grad = g
        self.step_network(self.actor_masker, self.actor_opt)

    @torch.no_grad()
    def polyak_masks_only(self) -> None:
        for _, _, masker, target_w in self.target_pairs:
            if masker is not None:
                masker.apply_to_weights(target_w)

    @torch.no_grad()
    def deterministic(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic normalised actions for a batch ``[K, obs_dim]`` (or one observation)."""
        x = torch.as_tensor(np.asarray(obs, dtype=np.float32))
        single = x.dim() == 1
        a = self.actor.deterministic(x[None] if single else x)
        return (a[0] if single else a).numpy().astype(np.float64)

    def state_dict(self) -> dict:
        state = {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                 "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
                 "gradient_steps": self.gradient_steps, "topology_updates": self.topology_updates,
                 "generator": self.generator.get_state()}
        if self.critic_target is not None:
            state["critic_target"] = self.critic_target.state_dict()
        for name in ("actor_masker", "critic_masker"):
            masker = getattr(self, name)
            if masker is not None:
                state[name] = masker.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        if self.critic_target is not None:
            self.critic_target.load_state_dict(state["critic_target"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.gradient_steps = int(state["gradient_steps"])
        self.topology_updates = int(state["topology_updates"])
        self.generator.set_state(state["generator"])
        for name in ("actor_masker", "critic_masker"):
            masker = getattr(self, name)
            if masker is not None:
                if name not in state:
                    raise ValueError(f"checkpoint has no {name}: it was written by a dense run; "
                                     "resume with the same --variant it was trained with")
                masker.load_state_dict(state[name])


def to_tensors(batch: Batch) -> tuple[torch.Tensor, ...]:
    """Zero-copy numpy → torch views of a minibatch."""
    return (torch.from_numpy(batch.obs), torch.from_numpy(batch.action), torch.from_numpy(batch.reward),
            torch.from_numpy(batch.next_obs), torch.from_numpy(batch.discount))
