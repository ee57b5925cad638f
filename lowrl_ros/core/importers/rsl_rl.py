"""rsl_rl training checkpoints (``model_*.pt``) as lowrl artifacts (off-board; docs/import.md).

rsl-rl-lib 5.x (``OnPolicyRunner.save``) writes ``{"actor_state_dict", "critic_state_dict",
"optimizer_state_dict", "iter", "infos"}``; the actor (``rsl_rl.models.MLPModel``) holds
``obs_normalizer._mean/_std`` (``EmpiricalNormalization``, only with ``obs_normalization``),
``mlp.<i>.weight/bias`` (``rsl_rl.modules.MLP``: Linear, activation, ..., Linear) and the Gaussian's
``distribution.std_param`` / ``log_std_param``. Older rsl_rl (1.x/2.x, legged_gym) writes
``{"model_state_dict": {"actor.<i>.weight", ..., "std"}, "obs_norm_state_dict": {...}}`` (2.3 keeps
``actor_obs_normalizer.*`` inside the model dict); both are read.

Deterministic inference (``act_inference`` / ``MLPModel.forward``) is the Gaussian mean: the MLP
output with no squashing, after ``(obs - mean) / (std + 0.01)`` when the normaliser is on (no clip).
The checkpoint does not record the activation: it comes from ``params/agent.yaml`` next to the
checkpoint (Isaac Lab and rsl_rl's own logger write it), else ``--activation``, else rsl_rl's
default ``elu``; the notes say which.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from lowrl_ros.core.importers.contract import Affine, build_contract, sidecar_for
from lowrl_ros.core.importers.isaaclab import lenient_yaml_loader, run_sidecar
from lowrl_ros.core.importers.registry import Imported, ImportOptions, ImportRefused
from lowrl_ros.core.runtime import activations
from lowrl_ros.core.runtime.artifact import MlpWeights

EMPIRICAL_NORM_EPS = 0.01  # rsl_rl.modules.EmpiricalNormalization's default, not configurable from MLPModel
DEFAULT_ACTIVATION = "elu"  # rsl_rl.modules.MLP's default
# rsl_rl.utils.resolve_nn_activation names -> core/runtime/activations.py names (ours accepted as they are)
RSL_ACTIVATIONS = {"elu": "elu", "relu": "relu", "lrelu": "leaky_relu", "tanh": "tanh", "swish": "silu",
                   **{a: a for a in activations.HIDDEN}}


def _activation(name: str, where: str) -> str:
    key = str(name).lower()
    if key not in RSL_ACTIVATIONS:
        raise ImportRefused(f"{where}: activation {name!r} is not supported; supported: elu, relu, lrelu, tanh, swish "
                            f"(and {', '.join(activations.HIDDEN)}); retrain with one of them")
    return RSL_ACTIVATIONS[key]


def _agent_cfg(source: Path) -> tuple[dict | None, Path | None]:
    """params/agent.yaml beside the checkpoint (Isaac Lab / rsl_rl run layout), if any."""
    import yaml

    for path in (source.parent / "params" / "agent.yaml", source.parent / "agent.yaml"):
        if path.is_file():
            try:
                cfg = yaml.load(path.read_text(), Loader=lenient_yaml_loader())  # noqa: S506 - a SafeLoader subclass
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                raise ImportRefused(f"{path}: not a readable YAML file; fix or remove it, or give --activation") \
                    from None
            return (cfg if isinstance(cfg, dict) else None), path
    return None, None


def _load_checkpoint(source: Path) -> dict:
    try:
        import torch
    except ImportError:
        raise ImportError("importing an rsl_rl checkpoint needs torch (an off-board extra): pip install torch") \
            from None
    if not source.is_file():
        raise ImportRefused(f"{source}: no such file")
    try:
        ckpt = torch.load(str(source), map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated zip, bad pickle, foreign classes: torch raises many kinds
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise ImportRefused(f"{source}: not a readable torch checkpoint ({type(exc).__name__}: {first}); the file is "
                            "truncated or not a model_*.pt: copy it again from the run directory") from None
    if not isinstance(ckpt, dict):
        raise ImportRefused(f"{source}: a torch file holding {type(ckpt).__name__}, not an rsl_rl checkpoint dict; "
                            "for a TorchScript policy.pt use --from torchscript")
    return ckpt


def _np(t: Any) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64) if hasattr(t, "detach") else np.asarray(t, np.float64)


def _layers(sd: dict, prefix: str, where: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Linear layers ``<prefix><i>.weight/bias`` in index order."""
    idx = sorted({int(m.group(1)) for k in sd if (m := re.fullmatch(re.escape(prefix) + r"(\d+)\.weight", k))})
    if not idx:
        raise ImportRefused(f"{where}: no actor layers ({prefix}<i>.weight) in the checkpoint; is this an rsl_rl "
                            "model_*.pt?")
    out = []
    for i in idx:
        w = _np(sd[f"{prefix}{i}.weight"])
        b = _np(sd.get(f"{prefix}{i}.bias", np.zeros(w.shape[0])))
        if w.ndim != 2:
            raise ImportRefused(f"{where}: {prefix}{i}.weight has shape {w.shape}; only Linear layers are supported")
        out.append((w, b))
    return out


def _actor_from_checkpoint(ckpt: dict, where: str) -> tuple[list, Affine | None, str, int | None]:
    """(layers, normaliser or None, layout, std size) from either checkpoint layout."""
    if "actor_state_dict" in ckpt:  # rsl-rl-lib >= 3 (MLPModel)
        sd = ckpt["actor_state_dict"]
        layout = "rsl_rl>=3 actor_state_dict"
        if any(k.startswith(("rnn.", "memory")) for k in sd):
            raise ImportRefused(f"{where}: a recurrent actor (RNNModel: rnn.* weights); only MLP actors can be "
                                "imported: train with MLPModel")
        if any(k.startswith(("cnn", "cnns.")) for k in sd):
            raise ImportRefused(f"{where}: a convolutional actor (CNNModel); only MLP actors on flat "
                                "observations can be imported")
        layers = _layers(sd, "mlp.", where)
        norm_prefix = "obs_normalizer."
        std_keys = ("distribution.std_param", "distribution.log_std_param")
    elif "model_state_dict" in ckpt:  # rsl_rl 1.x/2.x ActorCritic
        sd = ckpt["model_state_dict"]
        layout = "rsl_rl<=2 model_state_dict"
        if any(k.startswith("memory_a.") for k in sd):
            raise ImportRefused(f"{where}: a recurrent actor (ActorCriticRecurrent: memory_a.rnn.*); only MLP actors "
                                "can be imported")
        layers = _layers(sd, "actor.", where)
        norm_prefix = "actor_obs_normalizer."
        if "obs_norm_state_dict" in ckpt and isinstance(ckpt["obs_norm_state_dict"], dict):
            sd = {**sd, **{norm_prefix + k: v for k, v in ckpt["obs_norm_state_dict"].items()}}
        std_keys = ("std", "log_std")
    else:
        raise ImportRefused(f"{where}: a torch dict with keys {sorted(ckpt)[:6]} but no actor_state_dict or "
                            "model_state_dict; give an rsl_rl model_*.pt (OnPolicyRunner.save)")
    norm = None
    if norm_prefix + "_mean" in sd:
        mean = _np(sd[norm_prefix + "_mean"]).reshape(-1)
        std = _np(sd[norm_prefix + "_std"]).reshape(-1)
        norm = Affine.identity(mean.size)
        norm.then("sub", mean, where)
        norm.then("div", std + EMPIRICAL_NORM_EPS, where)
    std_size = None
    for k in std_keys:
        if k in sd:
            std_size = int(np.asarray(_np(sd[k])).size)
    return layers, norm, layout, std_size


def _activation_for(source: Path, options: ImportOptions, notes: list[str]) -> str:
    cfg, path = _agent_cfg(source)
    if cfg is not None:
        for section in ("actor", "policy"):  # rsl_rl >= 3 / Isaac Lab <= 2 (ActorCritic)
            sec = cfg.get(section)
            if isinstance(sec, dict) and sec.get("activation"):
                cls = str(sec.get("class_name", ""))
                if "Recurrent" in cls or "RNN" in cls:
                    raise ImportRefused(f"{path}: {section}.class_name {sec['class_name']!r} is recurrent; only MLP "
                                        "actors can be imported")
                dist = sec.get("distribution_cfg")
                if isinstance(dist, dict) and dist.get("class_name") and "GaussianDistribution" != str(
                        dist["class_name"]).split(":")[-1].split(".")[-1]:
                    raise ImportRefused(f"{path}: {section}.distribution_cfg {dist['class_name']!r}; only the "
                                        "state-independent GaussianDistribution (deterministic output = the mean) "
                                        "is supported")
                act = _activation(sec["activation"], str(path))
                notes.append(f"activation {act} from {path.parent.name}/{path.name} ({section}.activation)")
                return act
    if options.activation:
        act = _activation(options.activation, "--activation")
        notes.append(f"activation {act} from --activation")
        return act
    notes.append(f"activation not recorded in the checkpoint and no params/agent.yaml beside it: rsl_rl's default "
                 f"{DEFAULT_ACTIVATION} assumed; give --activation if the run used another")
    return DEFAULT_ACTIVATION


def load_rsl_rl(source: Path, options: ImportOptions) -> Imported:
    """An rsl_rl ``model_*.pt`` checkpoint (see the module docstring)."""
    source = Path(source)
    where = str(source)
    ckpt = _load_checkpoint(source)
    layers, norm, layout, std_size = _actor_from_checkpoint(ckpt, where)
    notes: list[str] = [f"rsl_rl checkpoint ({layout}, iteration {ckpt.get('iter', '?')})"]
    hidden = _activation_for(source, options, notes)
    n_out = layers[-1][0].shape[0]
    if std_size is not None and std_size != n_out:
        raise ImportRefused(f"{where}: the actor outputs {n_out} values but its Gaussian has {std_size} actions "
                            "(a heteroscedastic or Beta distribution); only the state-independent Gaussian "
                            "is supported")
    if std_size is None:
        raise ImportRefused(f"{where}: no Gaussian std in the actor (distribution.std_param/log_std_param); only the "
                            "state-independent GaussianDistribution (deterministic output = the mean) is supported")
    try:
        weights = MlpWeights([(w.astype(np.float32), b.astype(np.float32)) for w, b in layers], hidden, "none")
    except ValueError as exc:
        raise ImportRefused(f"{where}: {exc}") from None
    if norm is not None:
        if norm.a.size != weights.input_dim:
            raise ImportRefused(f"{where}: the normaliser has {norm.a.size} entries but the actor reads "
                                f"{weights.input_dim}")
        if not (np.isfinite(norm.a).all() and np.isfinite(norm.b).all()):
            raise ImportRefused(f"{where}: the observation normaliser has NaN or Inf statistics; retrain or fix them")
        notes.append("empirical observation normaliser folded in: "
                     f"(obs - mean) / (std + {EMPIRICAL_NORM_EPS}), no clip")
    pre = norm if norm is not None else Affine.identity(weights.input_dim)
    sidecar = sidecar_for(source, options, required=False)
    if sidecar is None and (source.parent / "params" / "env.yaml").is_file():
        # an Isaac Lab run directory: its env config gives names, action scale/offset and period
        sidecar = run_sidecar(source.parent, weights.input_dim, weights.output_dim, notes, options.io_descriptors)
        io = ", IO_descriptors.yaml" if sidecar.provenance["isaaclab_io_descriptors"] == "true" else ""
        notes.append(f"contract from the Isaac Lab run directory (params/env.yaml{io})")
    contract = build_contract(n_obs=weights.input_dim, n_act=weights.output_dim, graph_pre=pre, sidecar=sidecar,
                              options=options, source=source, kind="rsl_rl", notes=notes,
                              provenance={"rsl_rl_layout": layout, "activation": hidden},
                              last_action="raw")  # rsl_rl's envs (legged_gym, Isaac Lab) read back the raw y
    return Imported(weights, contract, "rsl_rl", notes)


def load_rsl_rl_critic(source: Path, options: ImportOptions) -> tuple[MlpWeights, Affine | None, np.ndarray]:
    """The checkpoint's critic (``critic_state_dict`` / ``critic.<i>``) as MlpWeights (output "none"), its own
    observation normaliser (None when off) and the actor's Gaussian std in the network's output units, for
    continuing the training (core/retrain). The critic's activation: ``critic.activation`` in params/agent.yaml,
    else the actor's."""
    source = Path(source)
    where = str(source)
    ckpt = _load_checkpoint(source)
    if "critic_state_dict" in ckpt:
        sd, prefix, norm_prefix = ckpt["critic_state_dict"], "mlp.", "obs_normalizer."
        actor_sd, std_keys = ckpt.get("actor_state_dict", {}), ("distribution.std_param", "distribution.log_std_param")
    elif "model_state_dict" in ckpt:
        sd, prefix, norm_prefix = ckpt["model_state_dict"], "critic.", "critic_obs_normalizer."
        if isinstance(ckpt.get("critic_obs_norm_state_dict"), dict):
            sd = {**sd, **{norm_prefix + k: v for k, v in ckpt["critic_obs_norm_state_dict"].items()}}
        actor_sd, std_keys = sd, ("std", "log_std")
    else:
        raise ImportRefused(f"{where}: no critic_state_dict or model_state_dict; give an rsl_rl model_*.pt "
                            "(OnPolicyRunner.save)")
    if any(k.startswith(("rnn.", "memory")) for k in sd):
        raise ImportRefused(f"{where}: a recurrent critic; only an MLP critic can start the retraining")
    layers = _layers(sd, prefix, where)
    if layers[-1][0].shape[0] != 1:
        raise ImportRefused(f"{where}: the critic outputs {layers[-1][0].shape[0]} values, not one state value")
    cfg, _ = _agent_cfg(source)
    critic_cfg = cfg.get("critic") if cfg is not None else None
    if isinstance(critic_cfg, dict) and critic_cfg.get("activation"):
        activation = _activation(critic_cfg["activation"], where)
    else:  # the actor's, found as the import finds it
        activation = _activation_for(source, options, [])
    norm = None
    if norm_prefix + "_mean" in sd:
        norm = Affine.identity(layers[0][0].shape[1])
        norm.then("sub", _np(sd[norm_prefix + "_mean"]).reshape(-1), where)
        norm.then("div", _np(sd[norm_prefix + "_std"]).reshape(-1) + EMPIRICAL_NORM_EPS, where)
    std = None
    for k in std_keys:
        if k in actor_sd:
            std = _np(actor_sd[k]).reshape(-1)
            std = np.exp(std) if "log" in k else np.abs(std)
    if std is None:
        raise ImportRefused(f"{where}: no Gaussian std in the actor ({' / '.join(std_keys)})")
    weights = MlpWeights([(w.astype(np.float32), b.astype(np.float32)) for w, b in layers], activation, "none")
    return weights, norm, std
