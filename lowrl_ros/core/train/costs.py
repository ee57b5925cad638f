"""Analytic cost of a run: parameters per layer, FLOPs of inference and of training.

FLOPs count a multiply-add as 2 and follow the RLx2/RigL convention: a sparse layer costs in
proportion to its non-zero weights (as it would with a sparse kernel), biases and activations are
ignored (they are < 1% at these sizes). Per sample, with F(net) = forward FLOPs:

* a backward pass costs 2·F (input gradient + weight gradient), F when only the input gradient
  is needed (the critic inside the actor loss);
* SAC gradient step = actor fwd (next action) + target critics fwd + critics fwd/bwd (3·F_c) +
  actor fwd + critics fwd + critics input-bwd + actor bwd  = 4·F_a + 6·F_c;
* TD3 gradient step = target actor fwd + target critics fwd + 3·F_c, plus every ``policy_delay``
  steps actor fwd + Q1 fwd + Q1 input-bwd + actor bwd = 3·F_a + F_c (F_c of both critics = 2·F_q1);
* a topology update needs the dense weight gradient of that network once: 2·F_dense per sample,
  amortised over the mask interval.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from lowrl_ros.core.train.agent import OffPolicyAgent


@dataclass(frozen=True)
class LayerCost:
    """One weight matrix (all members of a fused network together)."""

    network: str
    layer: int
    shape: tuple[int, int, int]  # members, in, out
    weights: int
    nonzero: int
    biases: int

    @property
    def density(self) -> float:
        return self.nonzero / self.weights


def layer_costs(agent: OffPolicyAgent) -> list[LayerCost]:
    """Parameter counts per layer of the actor and the critics (masks taken into account)."""
    rows = []
    for name, net, masker in (("actor", agent.actor_net, agent.actor_masker),
                              ("critic", agent.critic_net, agent.critic_masker)):
        for i, (w, b) in enumerate(zip(net.weights, net.biases)):
            nonzero = int(masker.masks[i].sum().item()) if masker is not None else w.numel()
            rows.append(LayerCost(name, i, tuple(w.shape), w.numel(), nonzero, b.numel()))
    return rows


def _forward(rows: list[LayerCost], network: str, sparse: bool) -> float:
    return float(sum(2 * (r.nonzero if sparse else r.weights) for r in rows if r.network == network))


def cost_summary(agent: OffPolicyAgent) -> dict:
    """Parameters and FLOPs of this agent, sparse and dense-equivalent, as a JSON-ready dict."""
    cfg = agent.cfg
    rows = layer_costs(agent)
    out: dict = {"layers": [dict(network=r.network, layer=r.layer, shape=list(r.shape), weights=r.weights,
                                 nonzero=r.nonzero, biases=r.biases, density=round(r.density, 5))
                            for r in rows]}
    for net in ("actor", "critic"):
        sel = [r for r in rows if r.network == net]
        out[f"{net}_params"] = sum(r.nonzero + r.biases for r in sel)
        out[f"{net}_params_dense"] = sum(r.weights + r.biases for r in sel)
    for mode in ("sparse", "dense"):
        fa = _forward(rows, "actor", mode == "sparse")
        fc = _forward(rows, "critic", mode == "sparse")
        if cfg.algo == "sac":
            per_sample = 4 * fa + 6 * fc
        else:
            per_sample = fa + 4 * fc + (3 * fa + fc) / cfg.policy_delay
        train = per_sample * cfg.batch_size
        if mode == "sparse" and agent.actor_masker is not None and cfg.variant != "static":
            dense_a, dense_c = _forward(rows, "actor", False), _forward(rows, "critic", False)
            actor_every = cfg.mask_interval * (cfg.policy_delay if cfg.algo == "td3" else 1)
            train += cfg.batch_size * (2 * dense_c / cfg.mask_interval + 2 * dense_a / actor_every)
        # Inference: the deployed actor (SAC: the mean head only, half of the output layer).
        infer = fa
        if cfg.algo == "sac":
            last = [r for r in rows if r.network == "actor"][-1]
            infer -= (last.nonzero if mode == "sparse" else last.weights)
        out[f"train_flops_per_gradient_step_{mode}"] = train
        out[f"inference_flops_{mode}"] = infer
    out["train_flops_reduction"] = (out["train_flops_per_gradient_step_dense"]
                                    / out["train_flops_per_gradient_step_sparse"])
    out["inference_flops_reduction"] = out["inference_flops_dense"] / out["inference_flops_sparse"]
    out["compression"] = ((out["actor_params_dense"] + out["critic_params_dense"])
                          / (out["actor_params"] + out["critic_params"]))
    return out


def reference_dense_flops(cfg, obs_dim: int, act_dim: int) -> dict:
    """FLOPs of the full-width dense networks of ``cfg`` (the baseline a reduction is quoted against)."""
    from lowrl_ros.core.train.sac import SACAgent
    from lowrl_ros.core.train.td3 import TD3Agent

    dense_cfg = cfg.replace(variant="dense")
    with torch.random.fork_rng():
        agent = (SACAgent if cfg.algo == "sac" else TD3Agent)(dense_cfg, obs_dim, act_dim)
    return cost_summary(agent)
