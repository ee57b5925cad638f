"""`lowrl export-c`: the generated C99 compiles warning-free with gcc and matches ONNX Runtime."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from lowrl_ros.cli import main as lowrl
from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, prune_by_magnitude, save_artifact
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.runtime.bundle import load_bundle
from lowrl_ros.core.compress.export_c import check_name, export_c

GCC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="gcc is not installed: install gcc to compile the C export")
CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2", "-fPIC", "-shared"]
# int8: C repeats ORT's dynamic uint8 activation quantization and exact int32 sums, so the only
# differences are float rounding order (measured here: 1.4e-7 of the action range) and, rarely, a
# hidden value within an ulp of a quantization bin edge landing in the neighbour bin (one step of
# one input: ~1e-5..1e-4). fp32: summation order only (measured: 3.2e-7).
TOL_INT8 = 1e-4  # fraction of the action range
TOL_FP32 = 1e-5


def _weights(sizes: list[int], hidden: str = "relu", seed: int = 0) -> MlpWeights:
    rng = np.random.default_rng(seed)
    layers = [(rng.normal(0, 1.5 / np.sqrt(i), (o, i)).astype(np.float32), rng.normal(0, 0.2, o).astype(np.float32))
              for i, o in zip(sizes[:-1], sizes[1:])]
    return MlpWeights(layers, hidden_activation=hidden, output_activation="tanh")


def _contract(obs_dim: int, act_dim: int) -> PolicyContract:
    return PolicyContract([f"o{i}" for i in range(obs_dim)], [f"joint_{i}" for i in range(act_dim)],
                          np.linspace(-2.0, -0.5, act_dim), np.linspace(1.0, 3.0, act_dim),
                          obs_offset=np.linspace(-0.5, 0.5, obs_dim), obs_scale=np.linspace(0.5, 2.0, obs_dim),
                          version=3, parent_version=2, env_id="Test-v0", provenance={"test": "export_c"})


def _compile_and_load(out_dir: Path, name: str):
    lib = out_dir / f"lib{name}.so"
    proc = subprocess.run([GCC, *CFLAGS, "-o", str(lib), str(out_dir / f"{name}.c"), "-lm"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"gcc failed:\n{proc.stderr}"
    so = ctypes.CDLL(str(lib))
    fn = getattr(so, f"{name}_act")
    fn.restype = None
    fn.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_float)]
    return fn


def _c_actions(fn, obs: np.ndarray, act_dim: int) -> np.ndarray:
    out = np.zeros((len(obs), act_dim), np.float32)
    x = np.ascontiguousarray(obs, np.float32)
    fp = ctypes.POINTER(ctypes.c_float)
    for i in range(len(obs)):
        fn(x[i].ctypes.data_as(fp), out[i].ctypes.data_as(fp))
    return out.astype(np.float64)


CASES = {
    "dense_int8": dict(sizes=[11, 64, 64, 3], int8=True, sparsity=0.0, hidden="relu"),
    "sparse_int8": dict(sizes=[11, 300, 64, 3], int8=True, sparsity=0.9, hidden="relu"),
    "dense_fp32": dict(sizes=[11, 64, 64, 3], int8=False, sparsity=0.0, hidden="tanh"),
    "sparse_fp32": dict(sizes=[11, 64, 64, 3], int8=False, sparsity=0.85, hidden="relu"),
}


@needs_gcc
@pytest.mark.parametrize("case", sorted(CASES))
def test_c_export_matches_onnx_runtime(tmp_path, case):
    spec = CASES[case]
    w = _weights(spec["sizes"], spec["hidden"])
    if spec["sparsity"]:
        w = prune_by_magnitude(w, spec["sparsity"], skip_output=True)
    contract = _contract(spec["sizes"][0], spec["sizes"][-1])
    art = save_artifact(tmp_path / f"{case}.onnx", w, contract, int8=spec["int8"])
    result = export_c(art, tmp_path / "c", name=case)
    if spec["sparsity"]:
        assert any(p.storage == "csr" for p in result.layers), result.layers
    if case == "sparse_int8":
        assert any(p.storage == "csr" and p.in_dim > 256 for p in result.layers)  # uint16 column indices
    fn = _compile_and_load(tmp_path / "c", case)
    policy = load_artifact(art, engine="ort")
    rng = np.random.default_rng(1)
    z = rng.standard_normal((300, contract.obs_dim)) * 2.0  # normalised obs up to ~6 sigma
    obs = np.array(contract.obs_offset) + z / np.array(contract.obs_scale)
    ort = np.array([policy.act(o) for o in obs])  # one row at a time: ORT quantizes per call, as on the robot
    c_out = _c_actions(fn, obs, contract.action_dim)
    span = np.array(contract.action_high) - np.array(contract.action_low)
    err = np.abs(c_out - ort) / span
    tol = TOL_INT8 if spec["int8"] else TOL_FP32
    print(f"{case}: max |C - ORT| = {err.max():.3g} of the action range")
    assert err.max() <= tol, f"{case}: C vs ORT max error {err.max():.3g} of the action range > {tol}"
    # The C output obeys the limits and is not trivially saturated (the probe set exercises the network).
    assert (c_out >= np.array(contract.action_low) - 1e-6).all()
    assert (c_out <= np.array(contract.action_high) + 1e-6).all()
    assert np.std(c_out, axis=0).min() > 1e-3
    header = (tmp_path / "c" / f"{case}.h").read_text()
    assert policy.sha256 in header and "joint_2" in header and f"{case}_act" in header


@needs_gcc
def test_c_export_detects_a_wrong_weight(tmp_path):
    """The comparison can fail: a C file built from different weights disagrees with ORT."""
    contract = _contract(11, 3)
    good = save_artifact(tmp_path / "good.onnx", _weights([11, 32, 3], seed=0), contract, int8=True)
    other = save_artifact(tmp_path / "other.onnx", _weights([11, 32, 3], seed=5), contract, int8=True)
    export_c(other, tmp_path / "c", name="other")
    fn = _compile_and_load(tmp_path / "c", "other")
    obs = np.random.default_rng(2).standard_normal((50, 11))
    ort = np.array([load_artifact(good, engine="ort").act(o) for o in obs])
    err = np.abs(_c_actions(fn, obs, 3) - ort) / (np.array(contract.action_high) - np.array(contract.action_low))
    assert err.max() > TOL_INT8


@needs_gcc
def test_cli_exports_a_bundle_tier(tmp_path):
    root = Path(__file__).resolve().parents[1]
    assert lowrl(["export-c", str(root / "models" / "pendulum_sac.lowrl"), "-o", str(tmp_path), "--tier", "lite",
                  "--name", "pendulum"]) == 0
    fn = _compile_and_load(tmp_path, "pendulum")
    lite = load_bundle(root / "models" / "pendulum_sac.lowrl", engine="ort").policies["lite"]
    angle = np.random.default_rng(3).uniform(-np.pi, np.pi, 100)
    obs = np.stack([np.cos(angle), np.sin(angle), np.random.default_rng(4).uniform(-8, 8, 100)], axis=1)
    c_out = _c_actions(fn, obs, 1)
    ort = np.array([lite.act(o) for o in obs])
    assert np.abs(c_out - ort).max() / 4.0 <= TOL_INT8  # Pendulum's action range is [-2, 2]
    assert lite.sha256 in (tmp_path / "pendulum.h").read_text()


def test_bad_names_and_inputs_are_explained(tmp_path, capsys):
    for bad in ("1policy", "my-policy", "int", ""):
        with pytest.raises(ValueError, match="C identifier"):
            check_name(bad)
    assert lowrl(["export-c", str(tmp_path / "none.onnx"), "-o", str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err
    root = Path(__file__).resolve().parents[1]
    assert lowrl(["export-c", str(root / "models" / "pendulum_sac.lowrl"), "-o", str(tmp_path), "--tier", "x"]) == 2
    assert "no tier 'x'" in capsys.readouterr().err


@needs_gcc
@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("act", ["elu", "leaky_relu", "silu", "gelu_tanh", "softsign"])
def test_every_activation_obs_clip_and_action_transform(tmp_path, act, int8):
    """fp32: C equals reference_action within 1e-5 of the action range; int8: C equals ORT's int8 graph."""
    from lowrl_ros.core.runtime.artifact import reference_action
    from lowrl_ros.core.runtime.engines import probe_observations
    from test_activations import DIMS, new_features_contract
    from test_artifact import make_weights

    w, contract = make_weights(DIMS, hidden=act, output="none"), new_features_contract()
    art = save_artifact(tmp_path / "p.onnx", w, contract, int8=int8)
    export_c(art, tmp_path / "c", name="p")
    source = (tmp_path / "c" / "p.c").read_text()
    assert "_action_offset" in source and f"{_hexf_clip(contract.obs_clip)}" in source
    fn = _compile_and_load(tmp_path / "c", "p")
    obs = probe_observations(contract, 64, seed=9)  # every 4th row reaches past obs_clip
    c_out = _c_actions(fn, obs, contract.action_dim)
    span = np.array(contract.action_high) - np.array(contract.action_low)
    if int8:
        policy = load_artifact(art, engine="ort")
        want, tol = np.array([policy.act(o) for o in obs]), TOL_INT8
    else:
        want, tol = reference_action(w, contract, obs), TOL_FP32
    err = (np.abs(c_out - want) / span).max()
    assert err <= tol, f"{act} int8={int8}: C error {err:.3g} of the action range > {tol}"
    assert np.std(c_out, axis=0).min() > 1e-3


def _hexf_clip(v: float) -> str:
    from lowrl_ros.core.compress.export_c import _hexf

    return _hexf(v)


@needs_gcc
@pytest.mark.parametrize("int8", [False, True])
def test_a_residual_head_is_exported_and_matches(tmp_path, int8):
    """Format version 3: C runs base + bound * tanh(head) as the artifact does (ORT for int8, the reference for fp32),
    with obs_clip and an explicit action transform, a sparse base layer and a head of its own activation."""
    from lowrl_ros.core.runtime.artifact import ResidualHead, parse_artifact, save_residual_artifact
    from lowrl_ros.core.runtime.engines import probe_observations
    from test_activations import DIMS, new_features_contract
    from test_artifact import make_weights

    contract = new_features_contract()
    w = prune_by_magnitude(make_weights(DIMS, hidden="relu", output="none"), 0.85, skip_output=True)
    base = save_artifact(tmp_path / "base.onnx", w, contract, int8=int8)
    rng = np.random.default_rng(4)
    head = ResidualHead([(rng.normal(0, 0.5, (24, DIMS[0])).astype(np.float32), np.zeros(24, np.float32)),
                         (rng.normal(0, 0.5, (DIMS[-1], 24)).astype(np.float32), np.zeros(DIMS[-1], np.float32))],
                        tuple(np.linspace(0.2, 0.6, DIMS[-1])), "silu")
    art = save_residual_artifact(tmp_path / "r.onnx", base, head, int8=int8)
    result = export_c(art, tmp_path / "c", name="r")
    assert [p.out_dim for p in result.head_layers] == [24, DIMS[-1]]
    assert "residual head" in (tmp_path / "c" / "r.h").read_text()
    fn = _compile_and_load(tmp_path / "c", "r")
    obs = probe_observations(contract, 64, seed=9)
    c_out = _c_actions(fn, obs, contract.action_dim)
    span = np.array(contract.action_high) - np.array(contract.action_low)
    parsed = parse_artifact(art.read_bytes(), str(art))
    if int8:
        policy = load_artifact(art, engine="ort")
        want, tol = np.array([policy.act(o) for o in obs]), TOL_INT8
    else:
        want, tol = parsed.reference_action(obs), TOL_FP32
    err = (np.abs(c_out - want) / span).max()
    assert err <= tol, f"int8={int8}: C error {err:.3g} of the action range > {tol}"
    # The head matters here: the base alone is far off.
    base_only = load_artifact(base, engine="ort" if int8 else "numpy")
    assert (np.abs(c_out - np.array([base_only.act(o) for o in obs])) / span).max() > 100 * tol
