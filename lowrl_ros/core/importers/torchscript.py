"""TorchScript MLP policies (``policy.pt``) as lowrl artifacts (off-board; docs/import.md).

Three conventions are read, all by walking the scripted submodules by their ``original_name``:

- a scripted ``nn.Sequential`` of Linear and activation modules (legged_gym / rl_sar:
  ``torch.jit.script(actor)``; rsl_rl's ``MLP`` is a Sequential too);
- Isaac Lab's ``export_policy_as_jit`` (``_TorchPolicyExporter``): ``normalizer`` (rsl_rl
  ``EmpiricalNormalization`` or Identity) then ``actor`` (a Sequential);
- rsl-rl-lib 5.x ``export_policy_to_jit`` (``_TorchMLPModel``): ``obs_normalizer``, ``mlp`` and
  ``deterministic_output`` (identity for the Gaussian).

Recurrent modules (LSTM/GRU, an ``rnn`` or hidden-state buffers), convolutions and any module not in
the table are refused in one line. Because a scripted module's ``forward`` could do anything, the
reconstruction is then run against the module itself on random observations and refused unless the
two agree. The contract comes from a sidecar, as for plain ONNX.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from lowrl_ros.core.importers.contract import Affine, build_contract, sidecar_for
from lowrl_ros.core.importers.registry import Imported, ImportOptions, ImportRefused
from lowrl_ros.core.runtime import activations
from lowrl_ros.core.runtime.artifact import MlpWeights

_NOOP = {"Identity", "Dropout", "_IdentityDeterministicOutput"}
_RECURRENT = {"LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"}
_SUPPORTED = ("Linear with ReLU, Tanh, ELU(alpha=1), LeakyReLU(0.01), SiLU, GELU(approximate='tanh') or Softsign, "
              "optionally behind an EmpiricalNormalization")


def _name(m) -> str:
    return str(getattr(m, "original_name", type(m).__name__))


def _refuse(where: str, found: str) -> ImportRefused:
    return ImportRefused(f"{where}: {found}; supported: {_SUPPORTED}; script the feed-forward actor alone and import "
                         "that")


def _activation(m, where: str) -> str | None:
    """The activations.py name of an activation module, None for a no-op; refuses anything else."""
    kind = _name(m)
    if kind in _NOOP:
        return None
    simple = {"ReLU": "relu", "Tanh": "tanh", "SiLU": "silu", "Softsign": "softsign"}
    if kind in simple:
        return simple[kind]
    if kind == "ELU":
        if float(getattr(m, "alpha", 1.0)) != activations.ELU_ALPHA:
            raise _refuse(where, f"ELU with alpha {m.alpha}")
        return "elu"
    if kind == "LeakyReLU":
        if abs(float(getattr(m, "negative_slope", 0.01)) - activations.LEAKY_RELU_SLOPE) > 1e-12:
            raise _refuse(where, f"LeakyReLU with slope {m.negative_slope}")
        return "leaky_relu"
    if kind == "GELU":
        if str(getattr(m, "approximate", "none")) != "tanh":
            raise _refuse(where, "GELU with the exact (erf) formula")
        return "gelu_tanh"
    if kind in _RECURRENT:
        raise _refuse(where, f"a recurrent module ({kind})")
    if kind.startswith("Conv"):
        raise _refuse(where, f"a convolutional module ({kind})")
    raise _refuse(where, f"module {kind}")


def _sequential(seq, where: str) -> tuple[list, list]:
    """(layers, activation per position) of a Sequential-like module's children, in order."""
    layers: list[tuple[np.ndarray, np.ndarray]] = []
    acts: list[str | None] = []
    for child in seq.children():
        kind = _name(child)
        if kind == "Linear":
            w = child.weight.detach().cpu().numpy().astype(np.float64)
            b = child.bias.detach().cpu().numpy().astype(np.float64) if child.bias is not None \
                else np.zeros(w.shape[0])
            layers.append((w, b))
            acts.append(None)
        elif kind in ("Sequential", "MLP"):
            sub_layers, sub_acts = _sequential(child, where)
            layers += sub_layers
            acts += sub_acts
        else:
            act = _activation(child, where)
            if act is None:
                continue
            if not layers or acts[-1] is not None:
                raise _refuse(where, f"activation {_name(child)} not directly after a Linear layer")
            acts[-1] = act
    return layers, acts


def _normalizer(m, where: str) -> Affine | None:
    kind = _name(m)
    if kind in _NOOP:
        return None
    if kind == "EmpiricalNormalization":
        mean = m._mean.detach().cpu().numpy().astype(np.float64).reshape(-1)
        std = m._std.detach().cpu().numpy().astype(np.float64).reshape(-1)
        eps = float(getattr(m, "eps", 0.01))
        norm = Affine.identity(mean.size)
        norm.then("sub", mean, where)
        norm.then("div", std + eps, where)
        return norm
    raise _refuse(where, f"normaliser module {kind} (only rsl_rl's EmpiricalNormalization or Identity)")


def read_torchscript(module, where: str) -> tuple[MlpWeights, Affine | None, str]:
    """(weights, normaliser, convention) from a loaded ScriptModule."""
    for name, sub in module.named_modules():
        if _name(sub) in _RECURRENT:
            raise _refuse(where, f"a recurrent module {name or 'top'} ({_name(sub)})")
    buffers = {n for n, _ in module.named_buffers()}
    if {"hidden_state", "cell_state"} & buffers:
        raise _refuse(where, "a recurrent policy (hidden_state/cell_state buffers and reset())")
    top = _name(module)
    children = dict(module.named_children())
    norm = None
    if top in ("Sequential", "MLP"):
        actor, convention = module, f"scripted {top}"
    else:
        actor_keys = [k for k in ("actor", "mlp", "student") if k in children]
        norm_keys = [k for k in ("normalizer", "obs_normalizer") if k in children]
        other = set(children) - set(actor_keys) - set(norm_keys) - {"deterministic_output"}
        if len(actor_keys) != 1 or other:
            raise _refuse(where, f"a {top} with submodules {sorted(children)} (expected actor/mlp and an optional "
                                 "normalizer)")
        actor = children[actor_keys[0]]
        if norm_keys:
            norm = _normalizer(children[norm_keys[0]], where)
        if "deterministic_output" in children and _name(children["deterministic_output"]) not in _NOOP:
            raise _refuse(where, f"deterministic output {_name(children['deterministic_output'])} (a heteroscedastic "
                                 "or Beta distribution head)")
        convention = f"{top} ({actor_keys[0]}{' + ' + norm_keys[0] if norm_keys else ''})"
    layers, acts = _sequential(actor, where)
    if not layers:
        raise _refuse(where, "no Linear layers")
    hidden = acts[:-1]
    if any(a is None for a in hidden):
        raise _refuse(where, "two Linear layers in a row without an activation")
    if len(set(hidden)) > 1:
        raise _refuse(where, f"mixed hidden activations {sorted(set(hidden))}")
    output = acts[-1] or "none"
    if output not in activations.OUTPUT:
        raise _refuse(where, f"output activation {output} (a linear or tanh output is supported)")
    try:
        weights = MlpWeights([(w.astype(np.float32), b.astype(np.float32)) for w, b in layers],
                             hidden[0] if hidden else "relu", output)
    except ValueError as exc:
        raise ImportRefused(f"{where}: {exc}") from None
    return weights, norm, convention


def _check_against_module(module, weights: MlpWeights, pre: Affine, where: str) -> float:
    """Max |module(x) - reconstruction(x)| on random observations; refuses when they disagree."""
    import torch

    rng = np.random.default_rng(0)
    obs = rng.normal(0.0, 2.0, (256, weights.input_dim)).astype(np.float32)
    try:
        with torch.no_grad():
            want = np.concatenate([module(torch.from_numpy(o[None])).numpy() for o in obs[:64]]
                                  + [module(torch.from_numpy(obs[64:])).numpy()]).astype(np.float64)
    except Exception as exc:  # a forward that takes other inputs, returns a tuple, ...
        raise _refuse(where, f"forward(obs [1, {weights.input_dim}]) failed ({type(exc).__name__})") from None
    x = np.clip(pre.a * obs + pre.b, -pre.clip, pre.clip) if pre.clip else pre.a * obs + pre.b
    got = weights.forward(x)
    if want.shape != got.shape:
        raise _refuse(where, f"forward returns shape {want.shape[1:]}, the layers give {got.shape[1:]}")
    err = float(np.max(np.abs(want - got)))
    if not err <= 1e-4 * (1.0 + float(np.max(np.abs(want)))):
        raise _refuse(where, f"the module's forward computes something else than its layers in order "
                             f"(max difference {err:.3g})")
    return err


def load_torchscript(source: Path, options: ImportOptions) -> Imported:
    """A TorchScript MLP ``policy.pt`` with its contract sidecar (see the module docstring)."""
    try:
        import torch
    except ImportError:
        raise ImportError("importing TorchScript needs torch (an off-board extra): pip install torch") from None
    source = Path(source)
    where = str(source)
    if not source.is_file():
        raise ImportRefused(f"{source}: no such file")
    try:
        with warnings.catch_warnings():  # torch 2.13 marks TorchScript deprecated; the format is what users have
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(source), map_location="cpu")
    except Exception as exc:  # truncated zip, not TorchScript: torch raises RuntimeError and others
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise ImportRefused(f"{source}: not a readable TorchScript file ({type(exc).__name__}: {first}); export it "
                            "again with torch.jit.script(...).save(), or for an rsl_rl model_*.pt use --from rsl_rl") \
            from None
    module.eval()
    weights, norm, convention = read_torchscript(module, where)
    pre = norm if norm is not None else Affine.identity(weights.input_dim)
    if norm is not None and norm.a.size != weights.input_dim:
        raise ImportRefused(f"{where}: the normaliser has {norm.a.size} entries but the actor reads "
                            f"{weights.input_dim}")
    if not (np.isfinite(pre.a).all() and np.isfinite(pre.b).all()):
        raise ImportRefused(f"{where}: the observation normaliser has NaN or Inf statistics; fix them and re-export")
    _check_against_module(module, weights, pre, where)
    dims = [weights.input_dim] + [w.shape[0] for w, _ in weights.layers]
    notes = [f"TorchScript {convention}: MLP {'->'.join(map(str, dims))}, hidden {weights.hidden_activation}, "
             f"output {weights.output_activation}"]
    if norm is not None:
        notes.append("empirical observation normaliser folded into the contract (obs offset/scale)")
    sidecar = sidecar_for(source, options, required=True)
    contract = build_contract(n_obs=weights.input_dim, n_act=weights.output_dim, graph_pre=pre, sidecar=sidecar,
                              options=options, source=source, kind="torchscript", notes=notes,
                              provenance={"torchscript": convention})
    return Imported(weights, contract, "torchscript", notes)
