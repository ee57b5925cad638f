"""Stable-Baselines3 import: PPO, A2C, SAC, TD3 and DDPG actors as lowrl artifacts (off-board; docs/import.md).

``load_sb3(source, options)`` is the ``sb3`` entry of the importer table (`lowrl import MODEL.zip`);
``import_sb3(...)`` and `lowrl import-sb3` are the older spelling of the same thing. The artifact
computes exactly what ``model.predict(obs, deterministic=True)`` returns for a Box action space:

- SAC: ``unscale(tanh(mu(latent_pi(obs))))``, the mean of the squashed Gaussian. With gSDE the mean
  is first clipped to ``±clip_mean`` (Hardtanh); since tanh is monotonic that is the same as narrowing
  the action limits to ``unscale(±tanh(clip_mean))``, which the contract then carries;
- TD3 and DDPG (one policy class): ``unscale(mu(obs))``, ``mu`` ending in Tanh;
- PPO and A2C: ``clip(action_net(policy_net(obs)), low, high)``, the Gaussian mean CLIPPED (not
  rescaled) to the Box: output activation ``none``, contract limits = the Box. With gSDE and
  ``squash_output=True`` the mean goes through tanh and is unscaled, as for SAC;

with ``unscale(y) = low + (y + 1) / 2 * (high - low)`` (the contract's default tanh transform). The
hidden activation and layer sizes are read from the model's own modules (SB3's defaults: Tanh for
PPO/A2C, ReLU for SAC/TD3); ReLU, Tanh, ELU, LeakyReLU, SiLU, GELU(approximate="tanh") and Softsign
map onto core/runtime/activations.py, anything else is refused. A ``VecNormalize.save()`` pickle
(``options.vecnormalize``) is folded into the contract: ``obs_offset = mean``,
``obs_scale = 1 / sqrt(var + epsilon)``, ``obs_clip = clip_obs``, which is VecNormalize's
``normalize_obs`` to the last rounding.

What cannot be represented exactly is refused with :class:`ImportRefused`, one line: discrete and
MultiDiscrete actions, Dict and image observations (CNN and MultiInput policies), recurrent policies
(sb3-contrib RecurrentPPO), other algorithms. Observation names are ``obs_0..``, action names
``action_0..``. SB3 and torch are needed here only (off-board), never on the robot.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from lowrl_ros.core.importers.registry import Imported, ImportOptions, ImportRefused
from lowrl_ros.core.runtime.artifact import (
    LAST_ACTION_KEY,
    MlpWeights,
    PolicyContract,
    prune_by_magnitude,
    save_artifact,
)

# The policy module recorded in the zip -> the algorithm (PPO and A2C share ActorCriticPolicy; TD3 and
# DDPG share TD3Policy: the training settings in the zip tell them apart, see _algo_from_data).
_POLICY_MODULES = {
    "stable_baselines3.sac.policies": "sac",
    "stable_baselines3.td3.policies": "td3",
    "stable_baselines3.common.policies": "ppo",
}
ALGOS = ("ppo", "a2c", "sac", "td3", "ddpg")
_HOW_TO = ("train an MlpPolicy on a flat Box observation and a Box action space with PPO, A2C, SAC, TD3 or DDPG "
           "(or export the actor MLP to ONNX and import it with a sidecar, docs/import.md)")


def read_sb3_data(model_path: Path) -> dict[str, Any]:
    """The ``data`` JSON of an SB3 zip (what model.save() writes); ImportRefused when it is not one."""
    model_path = Path(model_path)
    if not model_path.exists():
        raise ImportRefused(f"{model_path}: no such file; give the .zip written by model.save()")
    try:
        with zipfile.ZipFile(model_path) as zf:
            data = json.loads(zf.read("data"))
        data["policy_class"]["__module__"]
    except zipfile.BadZipFile as exc:
        raise ImportRefused(f"{model_path}: not a Stable-Baselines3 model zip ({exc}; truncated or not a zip); "
                            "give the .zip written by model.save()") from None
    except KeyError:
        raise ImportRefused(f"{model_path}: not a Stable-Baselines3 model zip (no 'data' entry with a policy class: "
                            "truncated, or not written by model.save()); give the .zip written by model.save()") \
            from None
    except (TypeError, ValueError, OSError, EOFError, zipfile.LargeZipFile) as exc:
        raise ImportRefused(f"{model_path}: not a Stable-Baselines3 model zip ({type(exc).__name__}: "
                            f"{_one_line(exc)}); give the .zip written by model.save()") from None
    return data


def _one_line(exc: BaseException, limit: int = 160) -> str:
    """An exception's text on one line, shortened (the CLI prints exactly one line)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _class_name(entry: dict[str, Any]) -> str:
    """The class name of a serialized SB3 class entry (policy_class, observation_space, ...), best effort."""
    init = str(entry.get("__init__", ""))
    m = re.match(r"<function (\w+)\.__init__", init)
    if m:
        return m.group(1)
    m = re.search(r"\.(\w+)'>$", str(entry.get(":type:", "")))
    return m.group(1) if m else "?"


def _algo_from_data(model_path: Path, data: dict[str, Any]) -> str:
    """One of ALGOS from the zip's data, or ImportRefused naming what was found (checked before loading)."""
    policy = data["policy_class"]
    module, cls = policy.get("__module__", "?"), _class_name(policy)
    found = f"{model_path}: found {cls} ({module})"
    if module.startswith("sb3_contrib"):
        if "recurrent" in module or "Recurrent" in cls:
            raise ImportRefused(f"{found}, a recurrent (LSTM) policy from sb3-contrib RecurrentPPO; the runtime "
                                "runs feed-forward MLPs only: " + _HOW_TO)
        raise ImportRefused(f"{found}, an sb3-contrib algorithm; supported: Stable-Baselines3 PPO, A2C, SAC, TD3, "
                            "DDPG: " + _HOW_TO)
    if module not in _POLICY_MODULES:
        what = "a DQN policy (discrete actions)" if module.endswith("dqn.policies") else "an unknown policy class"
        raise ImportRefused(f"{found}, {what}; supported: PPO, A2C, SAC, TD3, DDPG with Box actions: " + _HOW_TO)
    act_type = _class_name(data.get("action_space", {}))
    if act_type != "Box":
        raise ImportRefused(f"{found} with {act_type} actions; only continuous Box actions can be imported "
                            "(a discrete policy picks an argmax, not an action to send to joints): " + _HOW_TO)
    obs_type = _class_name(data.get("observation_space", {}))
    if obs_type != "Box" or "MultiInput" in cls:
        raise ImportRefused(f"{found} with {obs_type} observations; only a flat Box observation can be imported: "
                            "flatten a Dict observation with gymnasium.wrappers.FlattenObservation and retrain, "
                            "or " + _HOW_TO)
    if "Cnn" in cls:
        raise ImportRefused(f"{found}, a CNN policy (image observations); only MLP policies can be imported: "
                            + _HOW_TO)
    algo = _POLICY_MODULES[module]
    if algo == "ppo":
        if "cg_max_steps" in data:
            raise ImportRefused(f"{found}, sb3-contrib TRPO; supported: PPO, A2C, SAC, TD3, DDPG: " + _HOW_TO)
        # PPO saves its clipping settings; A2C has none (both use ActorCriticPolicy).
        algo = "ppo" if "clip_range" in data or "n_epochs" in data else "a2c"
    elif algo == "td3" and data.get("policy_delay") == 1 and data.get("target_noise_clip") == 0.0:
        algo = "ddpg"  # DDPG is TD3 with these two settings (stable_baselines3/ddpg/ddpg.py)
    return algo


def detect_algo(model_path: Path) -> str:
    """"ppo", "a2c", "sac", "td3" or "ddpg" from an SB3 zip; ImportRefused (a ValueError) otherwise."""
    model_path = Path(model_path)
    return _algo_from_data(model_path, read_sb3_data(model_path))


def load_sb3_model(model_path: Path, algo: str = "auto"):
    """Load an SB3 model on the CPU; returns (model, algo). Checks what it can from the zip first."""
    model_path = Path(model_path)
    detected = detect_algo(model_path)
    if algo not in ("auto", detected) and {algo, detected} != {"td3", "ddpg"}:
        raise ImportRefused(f"{model_path}: is a {detected.upper()} model, not {algo.upper()}; "
                            "drop --algo (it is read from the zip)")
    algo = detected if algo == "auto" else algo
    try:
        import stable_baselines3 as sb3
    except ImportError:
        raise ImportError("importing an SB3 model needs Stable-Baselines3 (an off-board extra): "
                          "pip install 'stable-baselines3' or pip install 'lowrl_ros[sb3]'") from None
    cls = {"ppo": sb3.PPO, "a2c": sb3.A2C, "sac": sb3.SAC, "td3": sb3.TD3, "ddpg": sb3.DDPG}[algo]
    try:
        model = cls.load(str(model_path), device="cpu")
    except Exception as exc:  # noqa: BLE001 - torch/pickle raise anything on a damaged zip; report it in one line
        raise ImportRefused(f"{model_path}: SB3 could not load this {algo.upper()} zip ({type(exc).__name__}: "
                            f"{_one_line(exc)}); re-save it with model.save()") from None
    return model, algo


# Activation modules SB3 instantiates from activation_fn, with the parameters the runtime implements.
def _activation_name(m) -> str | None:
    """The activations.py name of an activation module, None when it is not one we can represent."""
    import torch.nn as nn

    t = type(m)
    if t is nn.ReLU:
        return "relu"
    if t is nn.Tanh:
        return "tanh"
    if t is nn.ELU and float(m.alpha) == 1.0:
        return "elu"
    if t is nn.LeakyReLU and float(m.negative_slope) == 0.01:
        return "leaky_relu"
    if t is nn.SiLU:
        return "silu"
    if t is nn.GELU and m.approximate == "tanh":
        return "gelu_tanh"
    if t is nn.Softsign:
        return "softsign"
    return None


def _describe(m) -> str:
    extra = m.extra_repr()
    return f"{type(m).__name__}({extra})" if extra else type(m).__name__


def _mlp_layers(modules, where: str, *, ends_with_activation: bool) -> tuple[list, str | None]:
    """Linear layers and the one hidden activation of Linear/activation modules in order.

    ``ends_with_activation``: the modules are hidden layers only (an activation after every Linear),
    as SB3's ``policy_net`` / ``latent_pi``; otherwise the last Linear has no activation after it.
    """
    import torch.nn as nn

    layers, acts = [], []
    expect_linear = True
    for m in modules:
        if isinstance(m, nn.Linear) and type(m) is nn.Linear and expect_linear:
            w = m.weight.detach().cpu().numpy().astype(np.float32)
            b = (m.bias.detach().cpu().numpy() if m.bias is not None else np.zeros(w.shape[0])).astype(np.float32)
            layers.append((w, b))
            expect_linear = False
            continue
        name = None if expect_linear else _activation_name(m)
        if name is None:
            raise ImportRefused(
                f"{where}: layer {_describe(m)} cannot be represented; supported: Linear layers with one of ReLU, "
                "Tanh, ELU, LeakyReLU(0.01), SiLU, GELU(approximate='tanh'), Softsign as activation_fn")
        acts.append(name)
        expect_linear = True
    if ends_with_activation and not expect_linear:
        raise ImportRefused(f"{where}: ends in a Linear layer without activation; not an SB3 MLP")
    if not ends_with_activation and layers and expect_linear:
        raise ImportRefused(f"{where}: ends in an activation where the output layer was expected")
    if len(set(acts)) > 1:
        raise ImportRefused(f"{where}: mixed activations {sorted(set(acts))}; use one activation_fn")
    return layers, (acts[0] if acts else None)


def _check_finite(layers: list, where: str) -> None:
    for i, (w, b) in enumerate(layers):
        if not (np.isfinite(w).all() and np.isfinite(b).all()):
            raise ImportRefused(f"{where}: layer {i} has NaN or Inf weights (the training diverged); "
                                "import an earlier checkpoint")


def _check_extractor(extractor, algo: str) -> None:
    from stable_baselines3.common.torch_layers import FlattenExtractor

    if type(extractor) is not FlattenExtractor:
        raise ImportRefused(f"the {algo.upper()} policy uses the features extractor {type(extractor).__name__}; "
                            "only FlattenExtractor (the MlpPolicy default, flat Box observations) can be imported")


def sb3_actor(model, algo: str) -> MlpWeights:
    """The deterministic actor of a loaded SB3 model as MlpWeights (see the module docstring for the paths)."""
    import torch.nn as nn

    policy = model.policy
    if algo == "sac":
        actor = policy.actor
        _check_extractor(actor.features_extractor, algo)
        hidden, act = _mlp_layers(actor.latent_pi, "SAC actor.latent_pi", ends_with_activation=True)
        mu = actor.mu
        if isinstance(mu, nn.Sequential):  # gSDE: Linear then Hardtanh(-clip_mean, clip_mean), see sac_contract
            mods = list(mu)
            if len(mods) != 2 or type(mods[1]) is not nn.Hardtanh:
                raise ImportRefused(f"SAC actor.mu is {mu}; expected Linear or Linear + Hardtanh (gSDE)")
            mu = mods[0]
        head, _ = _mlp_layers([mu], "SAC actor.mu", ends_with_activation=False)
        layers, output = hidden + head, "tanh"
    elif algo in ("td3", "ddpg"):
        actor = policy.actor
        _check_extractor(actor.features_extractor, algo)
        mods = list(actor.mu)
        if not mods or type(mods[-1]) is not nn.Tanh:
            raise ImportRefused(f"the {algo.upper()} actor.mu does not end in Tanh; only tanh-squashed actors "
                                "(SB3's TD3Policy) can be imported")
        layers, act = _mlp_layers(mods[:-1], f"{algo.upper()} actor.mu", ends_with_activation=False)
        output = "tanh"
    elif algo in ("ppo", "a2c"):
        _check_extractor(policy.pi_features_extractor, algo)
        hidden, act = _mlp_layers(policy.mlp_extractor.policy_net, f"{algo.upper()} mlp_extractor.policy_net",
                                  ends_with_activation=True)
        head, _ = _mlp_layers([policy.action_net], f"{algo.upper()} action_net", ends_with_activation=False)
        layers = hidden + head
        # predict() unscales a squashed output (gSDE + squash_output) and clips an unsquashed one.
        output = "tanh" if policy.squash_output else "none"
    else:
        raise ImportRefused(f"unknown SB3 algorithm {algo!r}; use one of {', '.join(ALGOS)}")
    _check_finite(layers, f"{algo.upper()} actor")
    return MlpWeights(layers, hidden_activation=act or "relu", output_activation=output)


def sb3_actor_module(model, algo: str):
    """The torch modules of the deterministic actor (for its fp32 size: ``state_dict()``), critics left out."""
    import torch.nn as nn

    if algo in ("ppo", "a2c"):
        return nn.ModuleDict({"policy_net": model.policy.mlp_extractor.policy_net,
                              "action_net": model.policy.action_net})
    return model.policy.actor


def _env_dt(env_id: str) -> float:
    import gymnasium as gym

    try:
        env = gym.make(env_id)
    except gym.error.Error as exc:
        raise ImportRefused(f"--env-id {env_id!r}: gymnasium cannot make it ({exc}); give a registered id or "
                            "--control-period instead") from None
    try:
        return float(getattr(env.unwrapped, "dt", 0.02))
    finally:
        env.close()


def sb3_contract(model, *, algo: str, source: Path, version: int, tier: str, env_id: str | None,
                 control_period_s: float | None, extra: dict[str, str]) -> PolicyContract:
    """Contract from the model's Box spaces: obs_0.., action_0.., limits (and transform) from the action space."""
    from gymnasium import spaces

    obs_space, act_space = model.observation_space, model.action_space
    if not isinstance(obs_space, spaces.Box) or len(obs_space.shape) != 1:
        raise ImportRefused(f"{source}: observation space {obs_space} is not a flat (1-D) Box; image and "
                            "multi-dimensional observations need a CNN or a flatten step the runtime does not have: "
                            + _HOW_TO)
    if not isinstance(act_space, spaces.Box) or len(act_space.shape) != 1:
        raise ImportRefused(f"{source}: action space {act_space} is not a 1-D Box: " + _HOW_TO)
    low, high = act_space.low.astype(np.float64), act_space.high.astype(np.float64)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ImportRefused(
            f"{source}: the action space {act_space} has infinite limits; the robot needs finite ones: set "
            "model.action_space = gymnasium.spaces.Box(low, high) to the joint limits and model.save() again "
            "(PPO/A2C only clip to it, so limits beyond what the policy outputs change nothing)")
    scale = offset = None
    if algo == "sac" and getattr(model.policy.actor, "use_sde", False):
        clip_mean = float(getattr(model.policy.actor, "clip_mean", 0.0))
        if clip_mean > 0:
            # tanh(hardtanh(x, -c, c)) == clip(tanh(x), -tanh(c), tanh(c)): the same unscale, narrower limits.
            scale, offset = (high - low) / 2.0, (high + low) / 2.0
            t = math.tanh(clip_mean)
            low, high = offset - scale * t, offset + scale * t
    if control_period_s is None:
        control_period_s = _env_dt(env_id) if env_id else 0.02
    digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()
    return PolicyContract(
        obs_names=[f"obs_{i}" for i in range(obs_space.shape[0])],
        action_names=[f"action_{i}" for i in range(act_space.shape[0])],
        action_low=low,
        action_high=high,
        action_scale=None if scale is None else tuple(scale),
        action_offset=None if offset is None else tuple(offset),
        control_period_s=control_period_s,
        version=version,
        tier=tier,
        env_id=env_id,
        # last_action "action": SB3's predict() hands env.step() the unscaled, clipped action (the squashed
        # output mapped onto the Box, or clip(y, low, high)), never the network's y, so an env that observes
        # its last action (a gymnasium wrapper, our kits) saw what it was given: the executed action.
        provenance={"tool": "lowrl import", "kind": "sb3", "algo": algo, "source": Path(source).name,
                    "source_sha256": digest, LAST_ACTION_KEY: "action", **extra},
    )


@dataclasses.dataclass(frozen=True)
class VecNormStats:
    """What a VecNormalize pickle contributes to the contract (None: nothing to fold)."""

    obs_offset: tuple[float, ...] | None
    obs_scale: tuple[float, ...] | None
    obs_clip: float | None
    note: str


def vecnormalize_stats(path: Path, obs_dim: int) -> VecNormStats:
    """Read a ``VecNormalize.save()`` pickle and return its observation normalisation as contract fields.

    The pickle is unpickled (as ``VecNormalize.load`` does): give only files you made yourself.
    """
    path = Path(path)
    try:
        from stable_baselines3.common.vec_env import VecNormalize
    except ImportError:
        raise ImportError("--vecnormalize needs Stable-Baselines3: pip install 'stable-baselines3'") from None
    try:
        with open(path, "rb") as f:
            obj = pickle.load(f)  # noqa: S301 - the user's own VecNormalize.save() file, as VecNormalize.load
    except FileNotFoundError:
        raise ImportRefused(f"--vecnormalize {path}: no such file; give the file written by VecNormalize.save()") \
            from None
    except Exception as exc:  # noqa: BLE001 - unpickling raises anything on a damaged file
        raise ImportRefused(f"--vecnormalize {path}: not a readable pickle ({type(exc).__name__}: "
                            f"{_one_line(exc)}); give the file written by VecNormalize.save()") from None
    if not isinstance(obj, VecNormalize):
        raise ImportRefused(f"--vecnormalize {path}: holds a {type(obj).__module__}.{type(obj).__name__}, not a "
                            "VecNormalize; give the file written by VecNormalize.save() (not the model zip)")
    if not obj.norm_obs:
        return VecNormStats(None, None, None, f"VecNormalize {path.name}: norm_obs=False, so observations reach the "
                                              "policy unnormalised: nothing folded in")
    rms = obj.obs_rms
    if isinstance(rms, dict):
        raise ImportRefused(f"--vecnormalize {path}: statistics of a Dict observation ({sorted(rms)}); "
                            "only flat Box observations can be imported")
    mean = np.asarray(rms.mean, np.float64).reshape(-1)
    var = np.asarray(rms.var, np.float64).reshape(-1)
    if mean.size != obs_dim or var.size != obs_dim:
        raise ImportRefused(f"--vecnormalize {path}: has statistics for {mean.size} observations but the model reads "
                            f"{obs_dim}; give the VecNormalize saved with this model")
    eps = float(obj.epsilon)
    if not (np.isfinite(mean).all() and np.isfinite(var).all() and (var >= 0).all() and eps >= 0):
        raise ImportRefused(f"--vecnormalize {path}: its running mean/var hold NaN, Inf or negative variances; "
                            "save the VecNormalize of a healthy run")
    scale = 1.0 / np.sqrt(var + eps)
    if not np.isfinite(scale).all():
        raise ImportRefused(f"--vecnormalize {path}: a variance of 0 with epsilon 0 divides by zero; "
                            "save it with epsilon > 0 (the default is 1e-8)")
    clip = float(obj.clip_obs)
    if math.isnan(clip) or clip <= 0:
        raise ImportRefused(f"--vecnormalize {path}: clip_obs={obj.clip_obs!r}; it must be > 0 (the default is 10)")
    obs_clip = clip if math.isfinite(clip) else None
    note = (f"VecNormalize {path.name} folded in: mean/var of {obs_dim} observations (count {float(rms.count):.0f}), "
            f"epsilon {eps:g}, clip_obs {clip:g}")
    return VecNormStats(tuple(mean), tuple(scale), obs_clip, note)


_ALGO_NOTES = {
    "sac": "SAC: the squashed Gaussian mean, tanh then mapped onto the action limits",
    "td3": "TD3: the actor's tanh output mapped onto the action limits",
    "ddpg": "DDPG: the actor's tanh output mapped onto the action limits",
    "ppo": "PPO: the Gaussian mean, clipped (not rescaled) to the action limits",
    "a2c": "A2C: the Gaussian mean, clipped (not rescaled) to the action limits",
}


def load_sb3(source: Path, options: ImportOptions) -> Imported:
    """The importer of an SB3 zip (the ``sb3`` entry of registry.IMPORTERS): the actor, contract and notes.

    Control period: ``options.control_period_s``, else the ``options.env_id`` environment's ``dt``,
    else 0.02 s. ``options.vecnormalize`` folds that VecNormalize's observation statistics in.
    """
    source = Path(source)
    model, algo = load_sb3_model(source)
    weights = sb3_actor(model, algo)
    stats, extra = None, {}
    if options.vecnormalize is not None:
        vn = Path(options.vecnormalize)
        stats = vecnormalize_stats(vn, int(np.prod(model.observation_space.shape)))
        extra = {"vecnormalize": vn.name, "vecnormalize_sha256": hashlib.sha256(vn.read_bytes()).hexdigest()}
    if options.last_action is not None:
        extra[LAST_ACTION_KEY] = options.last_action
    contract = sb3_contract(model, algo=algo, source=source, version=options.version, tier=options.tier,
                            env_id=options.env_id, control_period_s=options.control_period_s, extra=extra)
    if algo in ("ppo", "a2c") and weights.output_activation == "tanh":
        notes = [f"{algo.upper()} (gSDE, squash_output): the mean, tanh then mapped onto the action limits"]
    else:
        notes = [_ALGO_NOTES[algo]]
    if contract.action_scale is not None:
        notes.append("SAC gSDE: the mean is clipped to ±clip_mean before tanh; the action limits are narrowed to "
                     f"[{', '.join(f'{v:.4g}' for v in contract.action_low)}] .. "
                     f"[{', '.join(f'{v:.4g}' for v in contract.action_high)}] to match")
    notes.append(f"network {weights.input_dim} -> " + " -> ".join(str(w.shape[0]) for w, _ in weights.layers)
                 + f", hidden activation {weights.hidden_activation}, output {weights.output_activation}")
    if stats is None:
        notes.append("no --vecnormalize: if the model was trained under VecNormalize, give its VecNormalize.save() "
                     "file, or the policy sees unnormalised observations")
    else:
        notes.append(stats.note)
        if stats.obs_offset is not None:
            contract = dataclasses.replace(contract, obs_offset=stats.obs_offset, obs_scale=stats.obs_scale,
                                           obs_clip=stats.obs_clip)
    if options.control_period_s is not None:
        origin = "--control-period"
    elif options.env_id:
        origin = f"dt of {options.env_id}"
    else:
        origin = "default; set --env-id or --control-period"
    notes.append(f"control period {contract.control_period_s:g} s ({origin})")
    return Imported(weights, contract, "sb3", notes)


def import_sb3(model_path: str | Path, out_path: str | Path, *, int8: bool = False, sparsity: float = 0.0,
               version: int = 1, tier: str = "full", env_id: str | None = None,
               control_period_s: float | None = None, algo: str = "auto",
               vecnormalize: str | Path | None = None) -> Path:
    """Convert an SB3 zip into an artifact at ``out_path``; return the path (the older API of load_sb3).

    ``algo`` other than "auto" must match the zip (it is read from it). The provenance records int8
    and sparsity, as it always has.
    """
    model_path = Path(model_path)
    if algo != "auto":
        load_sb3_model(model_path, algo)  # refuses a mismatch before the real import
    options = ImportOptions(vecnormalize=None if vecnormalize is None else Path(vecnormalize), env_id=env_id,
                            control_period_s=control_period_s, version=version, tier=tier)
    imported = load_sb3(model_path, options)
    weights = imported.weights
    if sparsity:
        # The output layer stays dense: it is tiny and carries the action directly.
        weights = prune_by_magnitude(weights, sparsity, skip_output=True)
    provenance = {**imported.contract.provenance, "tool": "lowrl import-sb3", "int8": str(bool(int8)).lower(),
                  "sparsity": f"{weights.sparsity:.3f}"}
    contract = dataclasses.replace(imported.contract, provenance=provenance)
    return save_artifact(out_path, weights, contract, int8=int8)


def sb3_critic(model, algo: str) -> tuple[MlpWeights, np.ndarray]:
    """PPO/A2C's value function (``mlp_extractor.value_net`` then ``value_net``) as MlpWeights (output "none"),
    and the Gaussian's std (``exp(log_std)``, in the network's output units), for continuing the training
    (core/retrain). SB3's critic reads the same observation as the actor: VecNormalize's statistics, folded into
    the contract at import, normalise both."""
    if algo not in ("ppo", "a2c"):
        raise ImportRefused(f"a {algo.upper()} model: only PPO and A2C have the state-value critic PPO continues "
                            "from; retrain with a fresh critic (no source checkpoint)")
    policy = model.policy
    _check_extractor(policy.vf_features_extractor, algo)
    hidden, act = _mlp_layers(policy.mlp_extractor.value_net, f"{algo.upper()} mlp_extractor.value_net",
                              ends_with_activation=True)
    head, _ = _mlp_layers([policy.value_net], f"{algo.upper()} value_net", ends_with_activation=False)
    _check_finite(hidden + head, f"{algo.upper()} critic")
    if getattr(policy, "use_sde", False):
        raise ImportRefused(f"the {algo.upper()} policy explores with gSDE (a state-dependent std); only a "
                            "state-independent log_std can start the retraining's Gaussian")
    std = np.exp(policy.log_std.detach().cpu().numpy().astype(np.float64))
    return MlpWeights(hidden + head, hidden_activation=act or "tanh", output_activation="none"), std
