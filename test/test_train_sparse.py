"""Mask invariants of RLx2's dynamic sparse training (sparse.py, agent.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from lowrl_ros.core.train.config import TrainConfig
from lowrl_ros.core.train.replay import ReplayBuffer
from lowrl_ros.core.train.sac import SACAgent
from lowrl_ros.core.train.sparse import SparseMasker, cosine_drop_fraction, erdos_renyi_densities
from lowrl_ros.core.train.td3 import TD3Agent

torch.set_num_threads(1)  # as the Trainer does; two threads on tiny matrices only contend


def test_erdos_renyi_hits_target_and_caps_dense_layers():
    shapes = [(17, 256), (256, 256), (256, 6)]
    dens = erdos_renyi_densities(shapes, 0.9)
    sizes = [i * o for i, o in shapes]
    total = sum(d * n for d, n in zip(dens, sizes))
    assert total == pytest.approx(0.1 * sum(sizes), rel=1e-9)
    assert all(0 < d <= 1 for d in dens)
    # Density ∝ (in+out)/(in·out): the big square layer is the sparsest, the thin ones end up dense.
    assert dens[1] < dens[0] and dens[1] < dens[2]
    assert dens[2] == 1.0
    with pytest.raises(ValueError, match="sparsity"):
        erdos_renyi_densities(shapes, 1.0)


def test_cosine_schedule():
    assert cosine_drop_fraction(0.5, 0, 100) == pytest.approx(0.5)
    assert cosine_drop_fraction(0.5, 50, 100) == pytest.approx(0.25)
    assert cosine_drop_fraction(0.5, 100, 100) == 0.0


def _filled_buffer(obs_dim: int, act_dim: int, n: int = 600) -> ReplayBuffer:
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(obs_dim, act_dim, n)
    for i in range(n):
        buf.add(rng.standard_normal(obs_dim), rng.uniform(-1, 1, act_dim), rng.standard_normal(),
                rng.standard_normal(obs_dim), i % 97 == 96, i % 50 == 49, rng.uniform(-1, 1, act_dim))
    return buf


def _cfg(algo: str, variant: str = "rlx2", **kw) -> TrainConfig:
    base = dict(algo=algo, variant=variant, hidden=32, batch_size=32, total_steps=2000, warmup_steps=100,
                mask_interval=5, actor_sparsity=0.9, critic_sparsity=0.8, policy_delay=2)
    base.update(kw)
    return TrainConfig(**base)


@pytest.mark.parametrize("algo", ["sac", "td3"])
@pytest.mark.parametrize("variant", ["rlx2", "set", "static"])
def test_mask_invariants_through_training(algo, variant):
    agent = (SACAgent if algo == "sac" else TD3Agent)(_cfg(algo, variant), 3, 1)
    buf = _filled_buffer(3, 1)
    rng = np.random.default_rng(1)
    maskers = [agent.actor_masker, agent.critic_masker]
    counts0 = [m.nonzero_counts() for m in maskers]
    masks0 = [[x.clone() for x in m.masks] for m in maskers]
    # Per-layer counts match the Erdős–Rényi allocation (per member, rounded).
    for m in maskers:
        for w, d, c in zip(m.weights, m.densities, m.nonzero_counts()):
            assert c == w.shape[0] * max(1, round(d * w.shape[1] * w.shape[2]))
    for _ in range(40):
        agent.update(buf.sample(32, rng, nstep=3))
        for m in maskers:
            for w, mask in zip(m.weights, m.masks):
                assert torch.all(w[mask == 0] == 0), "a masked weight became non-zero"
    # Targets share the online masks.
    for w, mask in zip(agent.critic_target.net.weights, agent.critic_masker.masks):
        assert torch.all(w[mask == 0] == 0)
    if algo == "td3":
        for w, mask in zip(agent.actor_target.net.weights, agent.actor_masker.masks):
            assert torch.all(w[mask == 0] == 0)
    # Drop/grow keeps the count; dynamic variants really changed the topology, static did not.
    assert [m.nonzero_counts() for m in maskers] == counts0
    changed = any(not torch.equal(a, b) for m, old in zip(maskers, masks0) for a, b in zip(m.masks, old))
    assert changed == (variant != "static")
    assert (agent.topology_updates > 0) == (variant != "static")


def test_topology_update_skips_optimizer_and_resets_moments():
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(1, 20, 20))
    opt = torch.optim.Adam([w], lr=1e-2)
    masker = SparseMasker([w], 0.8, "rigl", interval=3, zeta0=0.5, t_end=1000)
    before_count = masker.nonzero_counts()
    for step in range(1, 4):
        w.grad = torch.randn_like(w)
        snapshot = w.detach().clone()
        old_mask = masker.masks[0].clone()
        topology = masker.step(opt)
        assert topology == (step == 3)
    # On the topology step the surviving weights did not move (no optimizer step)...
    kept = (old_mask * masker.masks[0]).bool()
    assert torch.equal(w.detach()[kept], snapshot[kept])
    # ...grown weights start at 0, and Adam's moments of changed entries are 0.
    grown = (masker.masks[0] > 0) & (old_mask == 0)
    assert grown.any()
    assert torch.all(w.detach()[grown] == 0)
    changed = grown | ((masker.masks[0] == 0) & (old_mask > 0))
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.all(opt.state[w][key][changed] == 0)
    assert masker.nonzero_counts() == before_count


def test_rigl_grows_where_the_gradient_is_largest():
    w = torch.nn.Parameter(torch.ones(1, 10, 10))
    masker = SparseMasker([w], 0.5, "rigl", interval=1, zeta0=0.5, t_end=1000)
    inactive = (masker.masks[0] == 0)
    g = torch.zeros_like(w)
    target = inactive.nonzero()[0]
    g[tuple(target)] = 100.0
    w.grad = g
    masker.update_topology(None)
    assert masker.masks[0][tuple(target)] == 1.0


def test_masker_rejects_unknown_method():
    with pytest.raises(ValueError, match="method"):
        SparseMasker([torch.nn.Parameter(torch.ones(1, 2, 2))], 0.5, "magic", 1, 0.5, 10)
    with pytest.raises(ValueError, match="init"):
        SparseMasker([torch.nn.Parameter(torch.ones(1, 2, 2))], 0.5, "rigl", 1, 0.5, 10, init="magic")
    with pytest.raises(ValueError, match="sparse_init='magic' is unknown"):
        _cfg("td3", sparse_init="magic")


def _layer_stds(agent: TD3Agent, obs: torch.Tensor) -> list[float]:
    """Each actor layer's pre-activation standard deviation on ``obs``."""
    net, x, out = agent.actor_net, obs.unsqueeze(0), []
    with torch.no_grad():
        for i, (w, b) in enumerate(zip(net.weights, net.biases)):
            x = torch.baddbmm(b, x, w)
            out.append(float(x.std()))
            x = torch.relu(x) if i < len(net.weights) - 1 else x
    return out


def test_scaled_sparse_init_keeps_the_dense_activation_scale():
    """A Hopper-shaped TD3 actor at 90 %: top-k init shrinks the 94 %-sparse hidden layer's output
    to ~0.45 of the dense one's; scaled init keeps it, with the same masks and dense layers."""
    obs = torch.randn(4096, 11, generator=torch.Generator().manual_seed(0))
    big = dict(hidden=256, actor_sparsity=0.9, critic_sparsity=0.85)
    dense = _layer_stds(TD3Agent(_cfg("td3", "dense", **big), 11, 3), obs)
    topk_agent = TD3Agent(_cfg("td3", **big), 11, 3)
    scaled_agent = TD3Agent(_cfg("td3", sparse_init="scaled", **big), 11, 3)
    topk, scaled = _layer_stds(topk_agent, obs), _layer_stds(scaled_agent, obs)
    assert topk_agent.actor_masker.layer_densities()[1] < 0.1  # the sparse hidden layer
    assert topk[1] < 0.6 * dense[1]
    assert scaled[1] == pytest.approx(dense[1], rel=0.15)
    for a, b in ((topk_agent.actor_masker, scaled_agent.actor_masker),
                 (topk_agent.critic_masker, scaled_agent.critic_masker)):
        assert all(torch.equal(m1, m2) for m1, m2 in zip(a.masks, b.masks))  # same topology
        for w, m, d in zip(b.weights, b.masks, b.densities):
            assert torch.all(w[m == 0] == 0)
            fan_in = m.sum(dim=1)  # [members, out]: active inputs of each unit
            bound = 1.0 / fan_in.clamp_min(1).sqrt().unsqueeze(1)
            assert d == 1.0 or torch.all(w.abs() <= bound + 1e-7)
    # dense layers (the output layer here) keep their initialisation
    assert scaled_agent.actor_masker.densities[2] == 1.0
    assert torch.equal(topk_agent.actor_net.weights[2], scaled_agent.actor_net.weights[2])
