"""`lowrl import` of TorchScript MLP policies (policy.pt): legged_gym/rl_sar, Isaac Lab and rsl_rl exports.

Each file is scripted here with real torch (and real rsl_rl modules where the convention uses them);
the imported contract is compared with the scripted module's own output on 1,000 observations.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import yaml
from rsl_rl.modules import EmpiricalNormalization

from lowrl_ros.cli import main as lowrl_main
from lowrl_ros.core.importers.registry import ImportOptions, ImportRefused, detect_kind, load_source, write_imported
from lowrl_ros.core.runtime.artifact import reference_action
from lowrl_ros.core.runtime.engines import load_artifact

N_OBS, N_ACT = 7, 4
SIDECAR = {"observations": [{"name": "q", "size": N_OBS}],
           "actions": {"names": [f"j{i}" for i in range(N_ACT)], "scale": 0.25, "offset": [0.1, -0.2, 0.3, 0.0],
                       "low": -2.0, "high": 2.0},
           "control_period_s": 0.02}


def actor(act=torch.nn.ELU, hidden=(32, 16), seed=0, out=N_ACT) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    dims = [N_OBS, *hidden]
    mods: list[torch.nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:]):
        mods += [torch.nn.Linear(a, b), act()]
    mods.append(torch.nn.Linear(dims[-1], out))
    with torch.no_grad():
        for m in mods:
            if isinstance(m, torch.nn.Linear):
                m.weight.mul_(2.0)
    return torch.nn.Sequential(*mods)


def fitted_normalizer(seed=0) -> EmpiricalNormalization:
    """rsl_rl's real EmpiricalNormalization with statistics from a few batches."""
    norm = EmpiricalNormalization(N_OBS)
    norm.train()
    g = torch.Generator().manual_seed(seed)
    for _ in range(3):
        norm.update(torch.randn(64, N_OBS, generator=g) * 3.0 + 1.0)
    return norm.eval()


class IsaacLabJitExporter(torch.nn.Module):
    """The shape of Isaac Lab's _TorchPolicyExporter for an MLP: actor(normalizer(x)), a no-op reset()."""

    def __init__(self, actor: torch.nn.Sequential, normalizer: torch.nn.Module | None) -> None:
        super().__init__()
        self.actor = actor
        self.normalizer = normalizer if normalizer is not None else torch.nn.Identity()

    def forward(self, x):
        return self.actor(self.normalizer(x))

    @torch.jit.export
    def reset(self):
        pass


class IsaacLabJitLstm(torch.nn.Module):
    """Isaac Lab's recurrent _TorchPolicyExporter: hidden/cell state kept in buffers, reset() zeroes them."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.LSTM(N_OBS, 8)
        self.actor = torch.nn.Sequential(torch.nn.Linear(8, N_ACT))
        self.normalizer = torch.nn.Identity()
        self.register_buffer("hidden_state", torch.zeros(1, 1, 8))
        self.register_buffer("cell_state", torch.zeros(1, 1, 8))

    def forward(self, x):
        x, (h, c) = self.rnn(self.normalizer(x).unsqueeze(0), (self.hidden_state, self.cell_state))
        self.hidden_state[:] = h
        self.cell_state[:] = c
        return self.actor(x.squeeze(0))

    @torch.jit.export
    def reset(self):
        self.hidden_state[:] = 0.0
        self.cell_state[:] = 0.0


class Shifted(torch.nn.Module):
    """A forward that is not its layers in order (the import must notice, not guess)."""

    def __init__(self) -> None:
        super().__init__()
        self.actor = actor()

    def forward(self, x):
        return self.actor(x) + 1.0


def save(module: torch.nn.Module, path, sidecar: dict | None = SIDECAR):
    torch.jit.script(module.eval()).save(str(path))
    if sidecar is not None:
        path.with_suffix(".yaml").write_text(yaml.safe_dump(sidecar))
    return path


def check_parity(path, module: torch.nn.Module) -> None:
    imp = load_source(path, None, ImportOptions())
    assert imp.kind == "torchscript"
    obs = np.random.default_rng(1).normal(0.0, 3.0, (1000, N_OBS)).astype(np.float32)
    with torch.no_grad():
        y = module(torch.from_numpy(obs)).numpy().astype(np.float64)
    c = imp.contract
    want = np.clip(np.array(SIDECAR["actions"]["offset"]) + 0.25 * y, -2.0, 2.0)
    got = reference_action(imp.weights, c, obs)
    assert np.abs(got - want).max() <= 1e-5 * 4.0
    assert np.ptp(want) > 0.5
    out = write_imported(imp, path.with_name(path.stem + "_fp32.onnx"))
    for engine in ("ort", "numpy"):  # the artifact the robot runs
        assert np.abs(load_artifact(out, engine=engine).act_batch(obs) - want).max() <= 1e-5 * 4.0, engine
    out = write_imported(imp, path.with_name(path.stem + "_int8.onnx"), int8=True)
    for engine in ("ort", "numpy"):  # int8 budget: docs/runtime.md (< 5 % of the range), docs/compression.md (mean 2 %)
        rel = np.abs(load_artifact(out, engine=engine).act_batch(obs) - want) / 4.0
        assert rel.max() <= 0.05 and rel.mean() <= 0.02, (engine, rel.max(), rel.mean())
    return imp


@pytest.mark.parametrize("act, name", [(torch.nn.ELU, "elu"), (torch.nn.ReLU, "relu"), (torch.nn.Tanh, "tanh"),
                                       (torch.nn.LeakyReLU, "leaky_relu"), (torch.nn.SiLU, "silu"),
                                       (torch.nn.Softsign, "softsign")])
def test_scripted_sequential_legged_gym_convention(tmp_path, act, name):
    """legged_gym / rl_sar: torch.jit.script(actor) of a Sequential."""
    module = actor(act)
    path = save(module, tmp_path / "policy.pt")
    assert detect_kind(path) == "torchscript"
    imp = check_parity(path, module)
    assert imp.weights.hidden_activation == name and "scripted Sequential" in imp.notes[0]


@pytest.mark.parametrize("with_norm", [True, False])
def test_isaaclab_export_policy_as_jit(tmp_path, with_norm):
    module = IsaacLabJitExporter(actor(), fitted_normalizer() if with_norm else None)
    imp = check_parity(save(module, tmp_path / "policy.pt"), module)
    assert ("normaliser" in " ".join(imp.notes)) == with_norm


def test_rsl_rl_export_policy_to_jit(tmp_path):
    """rsl-rl-lib 5.5.1's own JIT export (MLPModel.as_jit: obs_normalizer, mlp, deterministic_output)."""
    from rsl_rl.models import MLPModel
    from tensordict import TensorDict

    torch.manual_seed(0)
    obs = TensorDict({"policy": torch.randn(16, N_OBS) * 2 + 0.5}, batch_size=[16])
    model = MLPModel(obs, {"actor": ["policy"]}, "actor", N_ACT, hidden_dims=[32, 16], activation="elu",
                     obs_normalization=True, distribution_cfg={"class_name": "GaussianDistribution"})
    model.train()
    model.update_normalization(obs)
    model.eval()
    jit = model.as_jit()
    imp = check_parity(save(jit, tmp_path / "policy.pt"), jit)
    assert "_TorchMLPModel" in imp.notes[0] and imp.weights.hidden_activation == "elu"


def _refusal_sources(tmp_path) -> dict:
    srcs = {
        "lstm": (save(IsaacLabJitLstm(), tmp_path / "lstm.pt"), "recurrent"),
        "conv": (save(torch.nn.Sequential(torch.nn.Conv1d(1, 2, 3)), tmp_path / "conv.pt"), "convolutional"),
        "gelu_erf": (save(actor(torch.nn.GELU), tmp_path / "gelu_erf.pt"), "exact \\(erf\\)"),
        "shifted": (save(Shifted(), tmp_path / "shifted.pt"), "something else than its layers"),
        "discrete": (save(torch.nn.Sequential(actor(), torch.nn.Softmax(dim=-1)), tmp_path / "discrete.pt"),
                     "module Softmax"),
        "no_sidecar": (save(actor(), tmp_path / "no_sidecar.pt", sidecar=None), "needs a contract sidecar"),
        "wrong_names": (save(actor(), tmp_path / "wrong_names.pt",
                             sidecar={**SIDECAR, "observations": [{"name": "q", "size": N_OBS + 1}]}),
                        "names 8 observations but the network reads 7"),
    }
    nan_actor = actor()
    with torch.no_grad():
        nan_actor[0].weight[0, 0] = float("nan")
    srcs["nan"] = (save(nan_actor, tmp_path / "nan.pt"), "NaN or Inf")
    data = (tmp_path / "nan.pt").read_bytes()
    (tmp_path / "truncated.pt").write_bytes(data[: len(data) // 2])
    (tmp_path / "truncated.yaml").write_text(yaml.safe_dump(SIDECAR))
    srcs["truncated"] = (tmp_path / "truncated.pt", "not a readable")
    return srcs


def test_refusals_one_line_exit_2_nothing_written(tmp_path, capsys):
    for name, (src, why) in _refusal_sources(tmp_path).items():
        out = tmp_path / f"{name}_out.onnx"
        capsys.readouterr()
        assert lowrl_main(["import", str(src), "--from", "torchscript", "-o", str(out)]) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("lowrl import: "), (name, err)
        assert re.search(why, err), (name, err)
        assert not out.exists(), name


def test_recurrent_refused_in_the_library_too(tmp_path):
    with pytest.raises(ImportRefused, match="recurrent"):
        load_source(save(IsaacLabJitLstm(), tmp_path / "p.pt"), "torchscript", ImportOptions())
