"""Engines: parity (numpy vs ORT vs the fp32 reference), clamps, kernels, and the auto choice."""
from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest

from lowrl_ros.core.runtime.artifact import (MlpWeights, PolicyContract, parse_artifact, prune_by_magnitude,
                                            reference_action, save_artifact)
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.runtime.engines import NumpyEngine, Policy, probe_observations
from test_artifact import make_contract, make_weights

DIMS = (5, 64, 64, 2)


def _obs(c: PolicyContract, n=64):
    return probe_observations(c, n, seed=7)


@pytest.mark.parametrize("hidden", ["relu", "tanh"])
@pytest.mark.parametrize("int8, sparsity", [(False, 0.0), (False, 0.9), (True, 0.0), (True, 0.9)])
def test_parity_with_reference(tmp_path, hidden, int8, sparsity):
    w = make_weights(DIMS, hidden=hidden)
    if sparsity:
        w = prune_by_magnitude(w, sparsity)
    c = make_contract()
    path = save_artifact(tmp_path / "p.onnx", w, c, int8=int8)
    obs = _obs(c)
    ref = reference_action(w, c, obs)
    span = 3.0
    # Quantization error budget (fraction of the action range): per-channel int8 weights in numpy,
    # plus dynamic uint8 activations in ORT. fp32: float32 rounding only.
    budget = {"numpy": 0.02 if int8 else 1e-5, "ort": 0.04 if int8 else 1e-5}
    errs = {}
    for engine in ("numpy", "ort"):
        p = load_artifact(path, engine=engine)
        assert p.engine == engine
        got = np.stack([p.act(o) for o in obs])
        errs[engine] = np.abs(got - ref).max()
        assert errs[engine] <= budget[engine] * span, (engine, errs[engine])
    if int8:
        assert errs["numpy"] > 1e-6  # int8 really changed the weights (the budget is not vacuous)


def test_gather_kernel_matches_dense(tmp_path):
    w = prune_by_magnitude(make_weights((5, 128, 128, 2)), 0.95)
    c = make_contract()
    parsed = parse_artifact(save_artifact(tmp_path / "p.onnx", w, c, int8=True).read_bytes(), "p")
    dense = Policy(parsed, NumpyEngine(parsed, kernel="dense"), "test", None)
    gather = Policy(parsed, NumpyEngine(parsed, kernel="gather"), "test", None)
    assert gather.kernels == ["gather"] * 3 and dense.kernels == ["dense"] * 3
    assert gather.macs == gather.nnz_macs < 0.1 * dense.macs and dense.macs == dense.dense_macs
    for o in _obs(c):
        np.testing.assert_allclose(gather.act(o), dense.act(o), atol=1e-5)


def test_gather_kernel_with_empty_rows_and_zero_bias(tmp_path):
    """Rows with no weights and a zero bias still give 0 (add.reduceat has a trap for empty segments)."""
    w0 = np.zeros((4, 3), np.float32)
    w0[1, 2] = 1.0
    w = MlpWeights([(w0, np.zeros(4, np.float32)), (np.eye(1, 4, 1, dtype=np.float32), np.zeros(1, np.float32))],
                   output_activation="none")
    c = PolicyContract(["a", "b", "c"], ["u"], [-5], [5])
    parsed = parse_artifact(save_artifact(tmp_path / "p.onnx", w, c).read_bytes(), "p")
    p = Policy(parsed, NumpyEngine(parsed, kernel="gather"), "test", None)
    assert p.act(np.array([9.0, 9.0, 2.0]))[0] == pytest.approx(2.0)
    assert p.act(np.array([9.0, 9.0, -2.0]))[0] == pytest.approx(0.0)  # relu


@pytest.mark.parametrize("engine", ["ort", "numpy"])
def test_actions_always_clamped(tmp_path, engine):
    # Linear output far beyond the limits: the clamp, not the network, keeps it in range.
    w = MlpWeights([(np.full((2, 5), 100.0, np.float32), np.zeros(2, np.float32))], output_activation="none")
    c = make_contract(action_low=[-2.0, -0.5], action_high=[1.0, 0.25])
    path = save_artifact(tmp_path / "p.onnx", w, c)
    p = load_artifact(path, engine=engine)
    hi, lo = p.act(np.full(5, 10.0)), p.act(np.full(5, -10.0))
    assert hi.dtype == np.float64
    np.testing.assert_array_equal(hi, [1.0, 0.25])
    np.testing.assert_array_equal(lo, [-2.0, -0.5])
    # The graph clamps too, so a plain ONNX Runtime user is safe.
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    raw = sess.run(None, {"obs": np.full((1, 5), 10.0, np.float32)})[0][0]
    np.testing.assert_allclose(raw, [1.0, 0.25], rtol=1e-6)


@pytest.mark.parametrize("engine", ["ort", "numpy"])
def test_act_input_checks_and_no_aliasing(tmp_path, engine):
    c = make_contract()
    p = load_artifact(save_artifact(tmp_path / "p.onnx", make_weights(DIMS), c), engine=engine)
    with pytest.raises(ValueError, match=r"expects \(5,\)"):
        p.act(np.zeros(4))
    for bad in (np.nan, np.inf, -np.inf):
        obs = np.zeros(5)
        obs[3] = bad
        with pytest.raises(ValueError, match="NaN or Inf"):
            p.act(obs)
    a1 = p.act([0.0] * 5)  # lists are accepted
    a2 = p.act(np.ones(5))
    assert not np.shares_memory(a1, a2) and not np.array_equal(a1, a2)
    out = np.empty(2)
    assert p.act_into(np.ones(5), out) is out
    np.testing.assert_array_equal(out, a2)
    batch = p.act_batch(np.stack([np.zeros(5), np.ones(5)]))
    np.testing.assert_allclose(batch, np.stack([a1, a2]), atol=1e-6)


def test_auto_chooses_faster_engine_and_says_why(tmp_path):
    c = make_contract()
    p = load_artifact(save_artifact(tmp_path / "p.onnx", make_weights(DIMS), c, int8=True))
    assert p.engine in ("ort", "numpy")
    m = re.search(r"numpy ([\d.]+) µs vs ort ([\d.]+) µs", p.engine_choice_reason)
    assert m, p.engine_choice_reason
    t_np, t_ort = float(m.group(1)), float(m.group(2))
    assert p.engine == ("numpy" if t_np <= t_ort else "ort")


def test_unknown_engine(tmp_path):
    path = save_artifact(tmp_path / "p.onnx", make_weights(DIMS), make_contract())
    with pytest.raises(ValueError, match="use one of"):
        load_artifact(path, engine="tensorrt")


def test_bench_inference_smoke(tmp_path):
    """The benchmark runs end to end on a tiny budget and writes rows with same-run ratios."""
    import json

    from lowrl_ros.cli import main as lowrl_main

    assert lowrl_main(["bench", "inference", "--calls", "40", "--rounds", "2", "--nets", "64", "isaac_elu",
                       "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "inference" / "seed0.json").read_text())
    isaac = {r["variant"]: r for r in result["results"]["rows"] if r["net"] == "isaac_elu"}
    rows = {r["variant"]: r for r in result["results"]["rows"] if r["net"] == "64"}
    # The Isaac-Lab-shaped ELU net: baselines and artifacts compute the same contract (clip, offset + 0.5 y).
    assert max(isaac[v]["max_abs_err_vs_fp32"] for v in ("sb3_predict", "torch_eager_fp32")) < 1e-5
    assert isaac["numpy_fp32"]["max_abs_err_vs_fp32"] < 1e-4 and isaac["ort_int8"]["max_abs_err_vs_fp32"] < 0.05
    assert rows["sb3_predict"]["speedup_vs_sb3_p50"] == pytest.approx(1.0)
    assert {"torch_eager_fp32", "ort_int8", "numpy_int8_s90", "auto_int8_s95"} <= set(rows)
    assert rows["ort_int8_s90"]["bytes"] < rows["ort_fp32"]["bytes"]
    assert (tmp_path / "inference" / "seed0.png").stat().st_size > 0
    assert "command" in result and "machine" in result
