"""Cost accounting: parameter counts per layer and analytic FLOPs against hand-computed values."""
from __future__ import annotations

import pytest
import torch

from lowrl_ros.core.train.config import TrainConfig
from lowrl_ros.core.train.costs import cost_summary, layer_costs
from lowrl_ros.core.train.sac import SACAgent
from lowrl_ros.core.train.td3 import TD3Agent

torch.set_num_threads(1)


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(**{**dict(hidden=4, depth=1, batch_size=10, total_steps=2000, warmup_steps=100), **kw})


def test_dense_sac_flops_by_hand():
    agent = SACAgent(_cfg(algo="sac", variant="dense"), 3, 1)
    c = cost_summary(agent)
    # actor 3->4->2 (mean and log-std), critics 2 x (4->4->1): FLOPs per sample = 2 x weights.
    fa, fc = 2 * (12 + 8), 2 * 2 * (16 + 4)
    assert c["train_flops_per_gradient_step_dense"] == 10 * (4 * fa + 6 * fc)
    assert c["inference_flops_dense"] == 2 * (12 + 4)  # the mean head only
    assert c["actor_params"] == 12 + 4 + 8 + 2 and c["critic_params"] == 2 * (16 + 4 + 4 + 1)
    assert c["compression"] == 1.0


def test_td3_flops_by_hand():
    agent = TD3Agent(_cfg(algo="td3", variant="dense", policy_delay=2), 3, 1)
    c = cost_summary(agent)
    fa, fc = 2 * (12 + 4), 2 * 2 * (16 + 4)
    assert c["train_flops_per_gradient_step_dense"] == pytest.approx(10 * (fa + 4 * fc + (3 * fa + fc) / 2))


def test_sparse_costs_follow_the_masks():
    cfg = TrainConfig(algo="sac", variant="rlx2", hidden=64, total_steps=2000, warmup_steps=100,
                      actor_sparsity=0.9, critic_sparsity=0.8, mask_interval=100)
    agent = SACAgent(cfg, 17, 6)
    rows = layer_costs(agent)
    actor_nz = sum(r.nonzero for r in rows if r.network == "actor")
    actor_w = sum(r.weights for r in rows if r.network == "actor")
    assert actor_nz / actor_w == pytest.approx(0.1, abs=0.005)
    c = cost_summary(agent)
    fa = 2 * actor_nz
    fc = 2 * sum(r.nonzero for r in rows if r.network == "critic")
    dense_a = 2 * actor_w
    dense_c = 2 * sum(r.weights for r in rows if r.network == "critic")
    # Sparse training FLOPs + the dense gradient of each topology update, amortised over ΔT.
    expected = 256 * (4 * fa + 6 * fc) + 256 * (2 * dense_c / 100 + 2 * dense_a / 100)
    assert c["train_flops_per_gradient_step_sparse"] == pytest.approx(expected)
    assert c["train_flops_reduction"] > 3 and c["inference_flops_reduction"] > 3
