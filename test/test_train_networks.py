"""The fused networks compute what the textbook networks compute."""
from __future__ import annotations

import math

import torch
from torch import nn

from lowrl_ros.core.train.networks import GaussianActor, TwinCritic, small_dense_width

torch.set_num_threads(1)


def test_fused_twin_critic_equals_two_separate_mlps():
    torch.manual_seed(0)
    critic = TwinCritic(5, 2, 16, 2)
    obs, act = torch.randn(7, 5), torch.randn(7, 2)
    q = critic(obs, act)
    assert q.shape == (2, 7)
    for m in range(2):
        layers = []
        for i, (w, b) in enumerate(zip(critic.net.weights, critic.net.biases)):
            lin = nn.Linear(w.shape[1], w.shape[2])
            lin.weight.data.copy_(w[m].T)
            lin.bias.data.copy_(b[m, 0])
            layers += [lin, nn.ReLU()] if i < 2 else [lin]
        ref = nn.Sequential(*layers)(torch.cat([obs, act], -1)).squeeze(-1)
        torch.testing.assert_close(q[m], ref)
    torch.testing.assert_close(critic.q1(obs, act), q[0])


def test_squashed_gaussian_log_prob_matches_torch_distributions():
    torch.manual_seed(1)
    actor = GaussianActor(4, 3, 16, 2)
    obs = torch.randn(64, 4)
    torch.manual_seed(2)
    a, logp = actor.sample(obs)
    mu, log_std = actor(obs)
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mu, log_std.exp()), [torch.distributions.TanhTransform(cache_size=1)])
    # Recover the pre-tanh sample with the same noise and score it with torch's own distribution.
    torch.manual_seed(2)
    u = mu + torch.randn_like(mu) * log_std.exp()
    torch.testing.assert_close(a, torch.tanh(u))
    ref = dist.log_prob(torch.tanh(u)).sum(-1)
    ok = a.abs().max(-1).values < 0.999  # away from the saturated ends where atanh is ill-conditioned
    torch.testing.assert_close(logp[ok], ref[ok], rtol=1e-3, atol=1e-3)
    assert torch.all(actor.deterministic(obs).abs() <= 1)


def test_small_dense_width_solves_the_parameter_budget():
    h = small_dense_width(17, 12, 2, 20_000)
    params = (17 + 1) * h + (h * h + h) + (h + 1) * 12
    assert abs(params - 20_000) / 20_000 < 0.02
    assert math.isclose(small_dense_width(3, 1, 1, 5 * 4 + 5), 4, abs_tol=1)
