"""Export a trained actor to the project's policy artifact (lowrl_ros.core.runtime.artifact).

The deployed action is the deterministic one: SAC's tanh(mean) (the log-std rows of the output
layer are dropped) or TD3's tanh output, rescaled from [-1, 1] to the environment's bounds, which
is exactly the artifact's ``output_activation="tanh"`` contract. Weights are transposed from the
trainer's ``[in, out]`` (bmm layout) to the artifact's ``W[out, in]``; masked weights are exact
zeros, which the artifact stores compactly.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lowrl_ros.core.train.agent import OffPolicyAgent


def actor_weights(agent: OffPolicyAgent):
    """The deterministic actor as ``MlpWeights`` (normalised obs → pre-tanh action)."""
    from lowrl_ros.core.runtime.artifact import MlpWeights

    net = agent.actor_net
    layers = []
    for w, b in zip(net.weights, net.biases):
        layers.append((w.detach()[0].numpy().T.copy(), b.detach()[0, 0].numpy().copy()))
    w_last, b_last = layers[-1]
    layers[-1] = (w_last[: agent.act_dim], b_last[: agent.act_dim])  # SAC: keep the mean, drop log-std
    return MlpWeights(layers=layers, hidden_activation="relu", output_activation="tanh")


def actor_contract(agent: OffPolicyAgent, env, provenance: dict[str, str]):
    """The I/O contract of a gymnasium environment's observation and action spaces."""
    from lowrl_ros.core.runtime.artifact import PolicyContract

    space = env.action_space
    dt = float(getattr(env.unwrapped, "dt", 0.0) or 0.05)  # MuJoCo envs expose dt; Pendulum's is 0.05 s
    return PolicyContract(
        obs_names=tuple(f"obs_{i}" for i in range(agent.obs_dim)),
        action_names=tuple(f"action_{i}" for i in range(agent.act_dim)),
        action_low=tuple(float(x) for x in space.low), action_high=tuple(float(x) for x in space.high),
        control_period_s=dt, version=1, tier="full", env_id=agent.cfg.env_id,
        provenance={k: str(v) for k, v in provenance.items()},
    )


def export_actor(agent: OffPolicyAgent, env, run_dir: str | Path, steps: int) -> tuple[Path, Path]:
    """Write ``actor.onnx`` (fp32) and ``actor_int8.onnx`` into ``run_dir``; return both paths."""
    from lowrl_ros.core.runtime.artifact import save_artifact

    cfg = agent.cfg
    weights = actor_weights(agent)
    contract = actor_contract(agent, env, {"tool": "lowrl train", "algo": cfg.algo, "variant": cfg.variant,
                                           "seed": cfg.seed, "env_steps": steps,
                                           "actor_sparsity": f"{1 - _density(weights):.4f}"})
    run_dir = Path(run_dir)
    fp32 = save_artifact(run_dir / "actor.onnx", weights, contract, int8=False)
    int8 = save_artifact(run_dir / "actor_int8.onnx", weights, contract, int8=True)
    return Path(fp32), Path(int8)


def _density(weights) -> float:
    total = sum(w.size for w, _ in weights.layers)
    return sum(int(np.count_nonzero(w)) for w, _ in weights.layers) / total
