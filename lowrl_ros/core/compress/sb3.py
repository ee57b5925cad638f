"""Stable-Baselines3 conversion: a SAC or TD3 actor as a lowrl artifact (`lowrl import-sb3` is its CLI).

Users have SB3 policies; this is how they bring them to the robot. The actor's deterministic
path is exported exactly:

- SAC: ``action = unscale(tanh(mu(latent_pi(obs))))`` (the mean of the squashed Gaussian);
- TD3: ``action = unscale(mu(obs))`` where ``mu`` ends in Tanh;

with ``unscale(y) = low + (y + 1) / 2 * (high - low)`` from the model's Box action space, which is
what ``model.predict(obs, deterministic=True)`` returns. Observation names are ``obs_0..``, action
names ``action_0..``. SB3 and torch are needed here only (off-board), never on the robot.
"""
from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np

from lowrl_ros.core.runtime.artifact import (
    MlpWeights,
    PolicyContract,
    prune_by_magnitude,
    save_artifact,
)

_ALGOS = {"stable_baselines3.sac.policies": "sac", "stable_baselines3.td3.policies": "td3"}


def detect_algo(model_path: Path) -> str:
    """"sac" or "td3" from the policy class recorded in the SB3 zip; ValueError otherwise."""
    try:
        with zipfile.ZipFile(model_path) as zf:
            data = json.loads(zf.read("data"))
        module = data["policy_class"]["__module__"]
    except FileNotFoundError:
        raise ValueError(f"{model_path}: no such file; give the .zip written by model.save()") from None
    except (zipfile.BadZipFile, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(
            f"{model_path}: not a Stable-Baselines3 model zip ({exc}); give the .zip written by model.save()"
        ) from None
    if module not in _ALGOS:
        raise ValueError(
            f"{model_path}: policy module {module!r} is not SAC or TD3; only SAC and TD3 actors can be imported"
        )
    return _ALGOS[module]


def _mlp_from_sequential(modules, where: str) -> tuple[list, str | None]:
    """Linear layers and the (single) activation type of an nn.Sequential."""
    import torch.nn as nn

    layers, acts = [], set()
    for m in modules:
        if isinstance(m, nn.Linear):
            w = m.weight.detach().cpu().numpy().astype(np.float32)
            b = (m.bias.detach().cpu().numpy() if m.bias is not None else np.zeros(w.shape[0])).astype(np.float32)
            layers.append((w, b))
        elif isinstance(m, nn.ReLU):
            acts.add("relu")
        elif isinstance(m, nn.Tanh):
            acts.add("tanh")
        else:
            raise ValueError(
                f"{where}: unsupported layer {type(m).__name__}; only Linear with ReLU or Tanh can be exported"
            )
    if len(acts) > 1:
        raise ValueError(f"{where}: mixed activations {sorted(acts)}; use one activation_fn")
    return layers, (acts.pop() if acts else None)


def sb3_actor(model, algo: str) -> MlpWeights:
    """The deterministic actor of a loaded SB3 SAC/TD3 model as MlpWeights (tanh output)."""
    from stable_baselines3.common.torch_layers import FlattenExtractor

    actor = model.policy.actor
    if not isinstance(actor.features_extractor, FlattenExtractor):
        raise ValueError(
            f"the actor uses {type(actor.features_extractor).__name__}; only flat Box observations "
            "(FlattenExtractor, the MlpPolicy default) can be exported"
        )
    if algo == "sac":
        if getattr(actor, "use_sde", False):
            raise ValueError("the SAC actor uses gSDE (use_sde=True), which is not supported; train with use_sde=False")
        hidden, act = _mlp_from_sequential(actor.latent_pi, "SAC actor.latent_pi")
        head, _ = _mlp_from_sequential([actor.mu], "SAC actor.mu")
        layers = hidden + head  # tanh squash of the mean follows mu
    else:
        mods = list(actor.mu)
        import torch.nn as nn

        if not mods or not isinstance(mods[-1], nn.Tanh):
            raise ValueError("the TD3 actor.mu does not end in Tanh; only tanh-squashed actors are supported")
        layers, act = _mlp_from_sequential(mods[:-1], "TD3 actor.mu")
        if act is None and len(layers) > 1:
            raise ValueError("TD3 actor.mu has stacked Linear layers without activation; not supported")
    return MlpWeights(layers, hidden_activation=act or "relu", output_activation="tanh")


def sb3_contract(model, *, algo: str, source: Path, version: int, tier: str, env_id: str | None,
                 control_period_s: float | None, extra: dict[str, str]) -> PolicyContract:
    """Contract from the model's Box spaces: obs_0.., action_0.., limits from the action space."""
    from gymnasium import spaces

    obs_space, act_space = model.observation_space, model.action_space
    if not isinstance(obs_space, spaces.Box) or len(obs_space.shape) != 1:
        raise ValueError(f"observation space {obs_space} is not a flat Box; only 1-D Box observations are supported")
    if not isinstance(act_space, spaces.Box) or len(act_space.shape) != 1:
        raise ValueError(f"action space {act_space} is not a flat Box; only 1-D Box actions are supported")
    if not (np.isfinite(act_space.low).all() and np.isfinite(act_space.high).all()):
        raise ValueError("the action space has infinite limits; SAC/TD3 need a bounded Box action space")
    if control_period_s is None:
        control_period_s = _env_dt(env_id) if env_id else 0.02
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    return PolicyContract(
        obs_names=[f"obs_{i}" for i in range(obs_space.shape[0])],
        action_names=[f"action_{i}" for i in range(act_space.shape[0])],
        action_low=act_space.low.astype(np.float64),
        action_high=act_space.high.astype(np.float64),
        control_period_s=control_period_s,
        version=version,
        tier=tier,
        env_id=env_id,
        provenance={"tool": "lowrl import-sb3", "algo": algo, "source": source.name, "source_sha256": digest, **extra},
    )


def _env_dt(env_id: str) -> float:
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        return float(getattr(env.unwrapped, "dt", 0.02))
    finally:
        env.close()


def load_sb3(model_path: Path, algo: str = "auto"):
    """Load an SB3 model on the CPU; (model, algo)."""
    try:
        from stable_baselines3 import SAC, TD3
    except ImportError:
        raise ImportError(
            "import-sb3 needs Stable-Baselines3 (an off-board extra): pip install 'stable-baselines3' "
            "or pip install 'lowrl_ros[sb3]'"
        ) from None
    if algo == "auto":
        algo = detect_algo(model_path)
    cls = {"sac": SAC, "td3": TD3}[algo]
    return cls.load(str(model_path), device="cpu"), algo


def import_sb3(model_path: str | Path, out_path: str | Path, *, int8: bool = False, sparsity: float = 0.0,
               version: int = 1, tier: str = "full", env_id: str | None = None,
               control_period_s: float | None = None, algo: str = "auto") -> Path:
    """Convert an SB3 SAC/TD3 zip into an artifact at ``out_path``; return the path."""
    model_path = Path(model_path)
    model, algo = load_sb3(model_path, algo)
    weights = sb3_actor(model, algo)
    if sparsity:
        # The output layer stays dense: it is tiny and carries the action directly.
        weights = prune_by_magnitude(weights, sparsity, skip_output=True)
    extra = {"int8": str(bool(int8)).lower(), "sparsity": f"{weights.sparsity:.3f}"}
    contract = sb3_contract(model, algo=algo, source=model_path, version=version, tier=tier, env_id=env_id,
                            control_period_s=control_period_s, extra=extra)
    return save_artifact(out_path, weights, contract, int8=int8)
