"""Actor and critic networks, built so that a CPU spends its time in matmuls, not in Python.

The twin critics of SAC/TD3 are one ``FusedMLP`` with two members: each layer is a single
``torch.baddbmm`` over a weight of shape ``[members, in, out]``, so both critics cost one kernel
launch per layer instead of two (and one autograd node instead of two). Weights are stored
``[in, out]`` (transposed against ``nn.Linear``) because that is what ``bmm`` wants; the export
transposes back to the artifact's ``W[out, in]``.
"""
from __future__ import annotations

import math

import torch
from torch import nn

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # the usual SAC clamp (Haarnoja et al. 2018 reference code)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class FusedMLP(nn.Module):
    """``members`` independent ReLU MLPs of identical shape, evaluated together.

    Args:
        members: number of independent networks (1 for an actor, 2 for twin critics).
        sizes: layer widths from input to output, e.g. ``[obs_dim, 256, 256, out_dim]``.
        layer_norm: LayerNorm (no affine: the next layer's weights carry the scale) after every
            hidden layer, before the ReLU: RLPD's critics (the fine-tuner's ``rlpd`` learner).
    """

    def __init__(self, members: int, sizes: list[int], layer_norm: bool = False) -> None:
        super().__init__()
        if members < 1 or len(sizes) < 2 or min(sizes) < 1:
            raise ValueError(f"FusedMLP needs members >= 1 and at least two positive sizes, got {members}, {sizes}")
        self.members = members
        self.sizes = list(sizes)
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
                x = torch.relu_(x)  # in place: baddbmm's backward does not need its output
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
