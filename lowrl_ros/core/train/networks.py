"""Actor and critic networks, built so that a CPU spends its time in matmuls, not in Python.

The twin critics of SAC/TD3 are one ``FusedMLP`` with two members: each layer is a single
``torch.baddbmm`` over a weight of shape ``[members, in, out]``, so both critics cost one kernel
launch per layer instead of two (and one autograd node instead of two). Weights are stored
``[in, out]`` (transposed against ``nn.Linear``) because that is what ``bmm`` wants; the export
transposes back to the artifact's ``W[out, in]``.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # the usual SAC clamp (Haarnoja et al. 2018 reference code)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


# The artifact activations (lowrl_ros/core/runtime/activations.py) as torch functions, the same constants:
# an imported actor trains with exactly the function the robot runs.
TORCH_ACTIVATIONS = {
    "relu": torch.relu,
    "tanh": torch.tanh,
    "elu": lambda x: F.elu(x, alpha=1.0),  # activations.ELU_ALPHA
    "leaky_relu": lambda x: F.leaky_relu(x, 0.01),  # activations.LEAKY_RELU_SLOPE
    "silu": F.silu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "softsign": F.softsign,
    "none": lambda x: x,
}


class FusedMLP(nn.Module):
    """``members`` independent MLPs of identical shape (ReLU unless ``activation`` says otherwise), evaluated together.

    Args:
        members: number of independent networks (1 for an actor, 2 for twin critics).
        sizes: layer widths from input to output, e.g. ``[obs_dim, 256, 256, out_dim]``.
        activation: hidden activation, a key of TORCH_ACTIVATIONS (an imported actor's own).
        layer_norm: LayerNorm (no affine: the next layer's weights carry the scale) after every
            hidden layer, before the activation: RLPD's critics (the fine-tuner's ``rlpd`` learner).
    """

    def __init__(self, members: int, sizes: list[int], activation: str = "relu", layer_norm: bool = False) -> None:
        super().__init__()
        if members < 1 or len(sizes) < 2 or min(sizes) < 1:
            raise ValueError(f"FusedMLP needs members >= 1 and at least two positive sizes, got {members}, {sizes}")
        if activation not in TORCH_ACTIVATIONS:
            raise ValueError(f"FusedMLP: activation {activation!r} is unknown; use one of {sorted(TORCH_ACTIVATIONS)}")
        self.members = members
        self.sizes = list(sizes)
        self.activation = activation
        self.layer_norm = bool(layer_norm)
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            # nn.Linear's default init: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
            bound = 1.0 / math.sqrt(fan_in)
            self.weights.append(nn.Parameter(torch.empty(members, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(members, 1, fan_out).uniform_(-bound, bound)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``x`` of shape ``[B, in]`` (shared by all members) or ``[members, B, in]`` to ``[members, B, out]``."""
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.members, -1, -1)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(b, x, w)
            if i < last:
                if self.layer_norm:
                    x = nn.functional.layer_norm(x, x.shape[-1:])
                if self.activation == "relu":
                    x = torch.relu_(x)  # in place: baddbmm's backward does not need its output
                else:
                    x = TORCH_ACTIVATIONS[self.activation](x)
        return x

    def layer_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of each layer."""
        return list(zip(self.sizes[:-1], self.sizes[1:]))


class GaussianActor(nn.Module):
    """SAC's squashed Gaussian policy; actions live in [-1, 1] (rescaled to the env's bounds outside)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int, depth: int) -> None:
        super().__init__()
        self.act_dim = act_dim
        # One output layer carries mean and log-std; the export keeps only the mean's rows.
        self.net = FusedMLP(1, [obs_dim] + [hidden] * depth + [2 * act_dim])

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.net(obs)[0]
        mu, log_std = out.split(self.act_dim, dim=-1)
        return mu, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised action in [-1, 1] and its log-probability (with the tanh correction)."""
        mu, log_std = self(obs)
        eps = torch.randn_like(mu)
        u = mu + eps * log_std.exp()
        a = torch.tanh(u)
        # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), the stable form (SAC paper, App. C).
        log_prob = (-0.5 * eps.square() - log_std - _HALF_LOG_2PI).sum(-1)
        log_prob = log_prob - (2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))).sum(-1)
        return a, log_prob

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """The action a deployed robot runs: tanh of the mean."""
        return torch.tanh(self(obs)[0])


class DeterministicActor(nn.Module):
    """TD3's deterministic policy with a tanh output in [-1, 1]."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int, depth: int) -> None:
        super().__init__()
        self.act_dim = act_dim
        self.net = FusedMLP(1, [obs_dim] + [hidden] * depth + [act_dim])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs)[0])

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return self(obs)


class TwinCritic(nn.Module):
    """Two Q-networks Q(s, a) as one fused two-member MLP; output ``[2, B]``."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int, depth: int, layer_norm: bool = False) -> None:
        super().__init__()
        self.net = FusedMLP(2, [obs_dim + act_dim] + [hidden] * depth + [1], layer_norm=layer_norm)

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, act], dim=-1)).squeeze(-1)

    def q1(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """Only the first critic (TD3's actor loss): a plain addmm chain over member 0."""
        x = torch.cat([obs, act], dim=-1)
        last = len(self.net.weights) - 1
        for i, (w, b) in enumerate(zip(self.net.weights, self.net.biases)):
            x = torch.addmm(b[0], x, w[0])
            if i < last:
                if self.net.layer_norm:
                    x = nn.functional.layer_norm(x, x.shape[-1:])
                x = torch.relu_(x)  # in place: baddbmm's backward does not need its output
        return x.squeeze(-1)


def small_dense_width(obs_dim: int, out_dim: int, depth: int, params: int) -> int:
    """Hidden width of a dense MLP with about ``params`` parameters (weights + biases).

    Used by the ``small_dense`` baseline: same parameter budget as the sparse network, spent on
    a narrower dense one (RLx2 paper, Table 1's "SmallDense").
    """
    # params = (obs+1) h + (depth-1)(h^2 + h) + (h+1) out  ->  a h^2 + b h + c = 0
    a = depth - 1
    b = obs_dim + 1 + (depth - 1) + out_dim
    c = out_dim - params
    if a == 0:
        h = -c / b
    else:
        h = (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    return max(1, int(round(h)))


class _InwardClamp(torch.autograd.Function):
    """clamp(x, -1, 1) whose gradient also passes where x is outside but the step points back inside.

    An imported actor's deployed action is clamped to the limits (PPO means routinely sit beyond
    them: SB3 clips, it does not squash). The true derivative of a clamp is zero there, so a
    saturated actor would never learn to back off; the straight-through gradient would let it
    drift further out for ever. Passing only the inward part keeps the forward pass exact and
    lets the critic pull a saturated action back into the range.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        ctx.save_for_backward(x)
        return x.clamp(-1.0, 1.0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # noqa: D102
        (x,) = ctx.saved_tensors
        # Gradient descent moves x by -grad: above 1 that is inward when grad > 0, below -1 when grad < 0.
        keep = ((x >= -1.0) & (x <= 1.0)) | ((x > 1.0) & (grad > 0)) | ((x < -1.0) & (grad < 0))
        return grad * keep


def inward_clamp(x: torch.Tensor) -> torch.Tensor:
    """clamp(x, -1, 1) with the inward gradient of :class:`_InwardClamp` (the actors of imported policies)."""
    return _InwardClamp.apply(x)


class ArtifactActor(nn.Module):
    """An imported policy artifact's actor, exactly, as a trainable torch module.

    The artifact's MLP (its sizes, hidden and output activations, its zero pattern) with the
    contract's observation normaliser and action transform as frozen buffers::

        x      = clip((obs - obs_offset) * obs_scale, -obs_clip, obs_clip)      normalize()
        y      = out_act(MLP(x))
        action = clip(action_offset + action_scale * y, action_low, action_high)   act()

    Inside a learner everything is normalised, as for our own actors: ``forward`` takes ``x`` and
    returns the action mapped from [low, high] onto [-1, 1] (the replay buffer's and the critics'
    units). Only the MLP's weights (and, with ``stochastic``, a state-independent log-std) are
    parameters: the normaliser and the action transform stay as the artifact has them, so every
    version the fine-tuner makes keeps them.

    Args:
        sizes: layer widths, input to output.
        hidden_activation, output_activation: the artifact's (core/runtime/activations.py names).
        obs_offset, obs_scale, obs_clip: the contract's normaliser (obs_clip None: no clip).
        action_scale, action_offset: the contract's transform (``contract.action_transform``).
        action_low, action_high: the contract's limits.
        masked_layers: layers whose zero weights stay zero (the artifact stored them sparse).
        stochastic: add a learned state-independent log-std (SAC), initialised to ``init_std``.
    """

    def __init__(self, sizes: list[int], hidden_activation: str, output_activation: str, *,
                 obs_offset, obs_scale, obs_clip: float | None, action_scale, action_offset, action_low,
                 action_high, masked_layers: tuple[int, ...] = (), stochastic: bool = False,
                 init_std: float = 0.1) -> None:
        super().__init__()
        if output_activation not in ("tanh", "none"):
            raise ValueError(f"ArtifactActor: output activation {output_activation!r}: use tanh or none")
        self.act_dim = sizes[-1]
        self.output_activation = output_activation
        self.net = FusedMLP(1, sizes, activation=hidden_activation)
        f32 = dict(dtype=torch.float32)

        def buf(name: str, values) -> None:
            self.register_buffer(name, torch.as_tensor(np.asarray(values, dtype=np.float64), **f32), persistent=True)

        buf("obs_offset", obs_offset)
        buf("obs_scale", obs_scale)
        buf("obs_clip", [np.inf if obs_clip is None else float(obs_clip)])
        low, high = np.asarray(action_low, np.float64), np.asarray(action_high, np.float64)
        scale, offset = np.asarray(action_scale, np.float64), np.asarray(action_offset, np.float64)
        buf("action_low", low)
        buf("action_high", high)
        buf("action_scale", scale)
        buf("action_offset", offset)
        # y -> action normalised onto [-1, 1] over [low, high], folded into one affine map (float64 folding).
        half, mid = (high - low) / 2.0, (high + low) / 2.0
        buf("norm_gain", scale / half)
        buf("norm_bias", (offset - mid) / half)
        self.masked_layers = tuple(int(i) for i in masked_layers)
        for i in self.masked_layers:
            self.register_buffer(f"mask{i}", torch.ones_like(self.net.weights[i]))
        self.log_std = nn.Parameter(torch.full((self.act_dim,), math.log(init_std))) if stochastic else None

    # -- the artifact's weights in and out --
    @torch.no_grad()
    def load_layers(self, layers: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Copy artifact layers (W [out, in], b [out]); masked layers take their zero pattern as the mask."""
        if len(layers) != len(self.net.weights):
            raise ValueError(f"ArtifactActor has {len(self.net.weights)} layers, the weights {len(layers)}")
        for i, ((w, b), wt, bt) in enumerate(zip(layers, self.net.weights, self.net.biases)):
            w_t = torch.as_tensor(np.asarray(w, dtype=np.float32).T.copy())
            if w_t.shape != wt.shape[1:]:
                raise ValueError(f"layer {i}: weight {tuple(w_t.shape[::-1])} does not fit {tuple(wt.shape[1:][::-1])}")
            wt.copy_(w_t[None])
            bt.copy_(torch.as_tensor(np.asarray(b, dtype=np.float32))[None, None])
            if i in self.masked_layers:
                getattr(self, f"mask{i}").copy_((wt != 0).to(wt.dtype))

    def layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The MLP as artifact layers (W float32 [out, in], b [out]): masked weights are exact zeros."""
        return [(w.detach()[0].numpy().T.copy(), b.detach()[0, 0].numpy().copy())
                for w, b in zip(self.net.weights, self.net.biases)]

    @torch.no_grad()
    def apply_masks(self) -> None:
        """Re-zero the masked weights (after an optimizer step)."""
        for i in self.masked_layers:
            self.net.weights[i].mul_(getattr(self, f"mask{i}"))

    # -- forward passes --
    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """Raw observations -> the network's input (the contract's normaliser and clip)."""
        x = (obs - self.obs_offset) * self.obs_scale
        return torch.maximum(torch.minimum(x, self.obs_clip), -self.obs_clip)

    def output(self, x: torch.Tensor) -> torch.Tensor:
        """y: the MLP's output on normalised observations, through the output activation."""
        y = self.net(x)[0]
        return torch.tanh(y) if self.output_activation == "tanh" else y

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """The deployed action on [-1, 1] before the clamp (may lie outside)."""
        return self.norm_bias + self.norm_gain * self.output(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised observations -> the deterministic action on [-1, 1] (clamped, inward gradient)."""
        return inward_clamp(self.mean(x))

    def deterministic(self, x: torch.Tensor) -> torch.Tensor:
        """The action a deployed robot runs, on [-1, 1]."""
        return self(x)

    def sample(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(stochastic actor) Gaussian around the mean on [-1, 1], clamped; log-prob of the unclamped draw.

        No tanh squash: the deployed action is the clamped mean, as the artifact computes it.
        """
        if self.log_std is None:
            raise ValueError("ArtifactActor.sample needs stochastic=True (a log-std)")
        mu = self.mean(x)
        log_std = self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        eps = torch.randn_like(mu)
        a = inward_clamp(mu + eps * log_std.exp())
        log_prob = (-0.5 * eps.square() - log_std - _HALF_LOG_2PI).sum(-1)
        return a, log_prob

    @torch.no_grad()
    def act(self, obs) -> np.ndarray:
        """Raw observations ``[..., obs_dim]`` -> the action in robot units, as the artifact's fp32 reference.

        Computed in float64 from the float32 weights (as ``reference_action``), so it is the
        reference to rounding, whatever the network's gain; the learner's own passes stay float32.
        """
        x = torch.as_tensor(np.asarray(obs, dtype=np.float64))
        single = x.dim() == 1
        x = (x[None] if single else x)
        x = (x - self.obs_offset.double()) * self.obs_scale.double()
        clip = self.obs_clip.double()
        x = torch.maximum(torch.minimum(x, clip), -clip)
        last = len(self.net.weights) - 1
        for i, (w, b) in enumerate(zip(self.net.weights, self.net.biases)):
            x = x @ w[0].double() + b[0, 0].double()
            if i < last:
                x = TORCH_ACTIVATIONS[self.net.activation](x)
        y = torch.tanh(x) if self.output_activation == "tanh" else x
        a = torch.minimum(torch.maximum(self.action_offset.double() + self.action_scale.double() * y,
                                        self.action_low.double()), self.action_high.double())
        return (a[0] if single else a).numpy()
