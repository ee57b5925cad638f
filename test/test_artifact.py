"""Artifact round-trips (fp32, int8, sparse) and every validation error, with real ONNX files."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from lowrl_ros.core.runtime.artifact import (METADATA_KEY, ArtifactError, MlpWeights, PolicyContract, load_weights,
                                            prune_by_magnitude, reference_action, save_artifact)
from lowrl_ros.core.runtime.engines import load_artifact


def make_weights(dims=(5, 32, 32, 2), seed=0, hidden="relu", output="tanh") -> MlpWeights:
    rng = np.random.default_rng(seed)
    layers = [
        (rng.standard_normal((o, i)).astype(np.float32) / np.sqrt(i), 0.1 * rng.standard_normal(o).astype(np.float32))
        for i, o in zip(dims[:-1], dims[1:])
    ]
    return MlpWeights(layers, hidden, output)


def make_contract(obs_dim=5, act_dim=2, **kw) -> PolicyContract:
    base = dict(
        obs_names=[f"o{i}" for i in range(obs_dim)],
        action_names=[f"a{i}" for i in range(act_dim)],
        action_low=[-2.0] * act_dim,
        action_high=[1.0] * act_dim,
        obs_offset=np.linspace(-1, 1, obs_dim),
        obs_scale=np.linspace(0.5, 2, obs_dim),
        version=3,
        parent_version=2,
        env_id="Test-v0",
        provenance={"tool": "test"},
    )
    base.update(kw)
    return PolicyContract(**base)


def ort_action(path, obs):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"obs": np.asarray(obs, np.float32)})[0]


@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("sparsity", [0.0, 0.9])
def test_round_trip(tmp_path, int8, sparsity):
    w = make_weights()
    if sparsity:
        w = prune_by_magnitude(w, sparsity)
    c = make_contract()
    path = save_artifact(tmp_path / "p.onnx", w, c, int8=int8)
    w2, c2 = load_weights(path)
    assert c2 == c
    assert [x.shape for x, _ in w2.layers] == [x.shape for x, _ in w.layers]
    for (a, ab), (b, bb) in zip(w.layers, w2.layers):
        np.testing.assert_array_equal(ab, bb)
        # int8: symmetric per-output-channel, so the error per weight is at most half a step.
        step = np.abs(a).max(axis=1, keepdims=True) / 127 if int8 else 0
        assert np.all(np.abs(a - b) <= step / 2 + 1e-7)
        assert np.array_equal(a == 0, b == 0) or int8  # int8 may round tiny weights to 0 as well
    # A plain ONNX Runtime user gets contract actions (normalisation, rescale, clamp in the graph).
    obs = np.random.default_rng(1).standard_normal((8, 5)) * 3
    ref = reference_action(w, c, obs)
    got = ort_action(path, obs)
    tol = 0.15 if int8 else 1e-4
    np.testing.assert_allclose(got, ref, atol=tol)
    assert (got >= -2.0).all() and (got <= 1.0).all()


def test_sparse_int8_is_small_and_folded(tmp_path):
    """A 90%-sparse int8 17-256-256-6 artifact is <= 1/10 of its fp32 weights, and ORT folds the expansion."""
    w = prune_by_magnitude(make_weights((17, 256, 256, 6)), 0.9)
    c = make_contract(17, 6, obs_offset=None, obs_scale=None)
    dense = save_artifact(tmp_path / "dense.onnx", make_weights((17, 256, 256, 6)), c)
    sparse = save_artifact(tmp_path / "sparse.onnx", w, c, int8=True)
    fp32_bytes = sum(a.nbytes + b.nbytes for a, b in w.layers)
    assert sparse.stat().st_size <= fp32_bytes / 10
    assert dense.stat().st_size > fp32_bytes  # the dense one really stores every weight
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "opt.onnx")
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    ort.InferenceSession(str(sparse), opts, providers=["CPUExecutionProvider"])
    ops = {n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node}
    assert not ops & {"CumSum", "Gather", "BitShift", "Cast"}, ops  # expanded (and int8 -> uint8) once, at load
    assert "DynamicQuantizeMatMul" in ops  # the int8 QOperator chain is fused


def test_prune_by_magnitude_keeps_largest():
    w = make_weights()
    p = prune_by_magnitude(w, 0.75, skip_output=True)
    for i, ((a, _), (b, _)) in enumerate(zip(w.layers, p.layers)):
        if i == len(w.layers) - 1:
            np.testing.assert_array_equal(a, b)
            continue
        kept = b != 0
        assert abs(kept.mean() - 0.25) < 0.01
        assert np.abs(a[kept]).min() >= np.abs(a[~kept]).max()
    with pytest.raises(ValueError, match="sparsity"):
        prune_by_magnitude(w, 1.0)


# ---- every validation error --------------------------------------------------------------------

def _rewrite_meta(path, fn):
    model = onnx.load(str(path))
    for p in model.metadata_props:
        if p.key == METADATA_KEY:
            p.value = fn(p.value)
    onnx.save(model, str(path))


def _edit_contract(path, **changes):
    def fn(text):
        meta = json.loads(text)
        meta["contract"].update(changes)
        return json.dumps(meta)

    _rewrite_meta(path, fn)


@pytest.fixture
def artifact(tmp_path):
    return save_artifact(tmp_path / "p.onnx", make_weights(), make_contract(), int8=True)


def test_missing_file(tmp_path):
    with pytest.raises(ArtifactError, match="no such file"):
        load_artifact(tmp_path / "nope.onnx")


def test_missing_contract(artifact):
    model = onnx.load(str(artifact))
    del model.metadata_props[:]
    onnx.save(model, str(artifact))
    with pytest.raises(ArtifactError, match=f"no '{METADATA_KEY}'.*plain ONNX.*lowrl import"):
        load_artifact(artifact)


def test_bad_json(artifact):
    _rewrite_meta(artifact, lambda t: t[:-5])
    with pytest.raises(ArtifactError, match="not valid JSON"):
        load_weights(artifact)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"version": 0}, "version must be an integer >= 1"),
        ({"action_low": [1.0, 1.0], "action_high": [1.0, 2.0]}, "low 1.0 must be < high 1.0"),
        ({"action_low": [-1.0]}, "action_low has 1 values"),
        ({"obs_names": ["a", "a", "b", "c", "d"]}, "duplicates"),
        ({"obs_names": ["a", "b"]}, "obs_offset has 5 values but there are 2"),
        ({"control_period_s": -1}, "control_period_s"),
        ({"parent_version": 7}, "parent_version 7"),
        ({"colour": "red"}, "unknown contract keys"),
    ],
)
def test_bad_contract(artifact, changes, message):
    _edit_contract(artifact, **changes)
    with pytest.raises(ArtifactError, match=message):
        load_artifact(artifact)


def test_contract_dims_must_match_network(artifact):
    _edit_contract(artifact, obs_names=[f"o{i}" for i in range(6)], obs_offset=[0] * 6, obs_scale=[1] * 6)
    with pytest.raises(ArtifactError, match="maps 5 -> 2 but the contract names 6 observations"):
        load_artifact(artifact)


def test_shape_mismatch(artifact):
    model = onnx.load(str(artifact))
    for i, t in enumerate(model.graph.initializer):
        if t.name == "l1.b":
            model.graph.initializer[i].CopyFrom(onnx.numpy_helper.from_array(np.zeros(31, np.float32), "l1.b"))
    onnx.save(model, str(artifact))
    with pytest.raises(ArtifactError, match=r"layer 1 bias has shape \(31,\)"):
        load_artifact(artifact)


def test_nan_weights(tmp_path):
    path = save_artifact(tmp_path / "p.onnx", make_weights(), make_contract())
    model = onnx.load(str(path))
    for i, t in enumerate(model.graph.initializer):
        if t.name == "l0.w":
            w = onnx.numpy_helper.to_array(t).copy()
            w[0, 0] = np.nan
            model.graph.initializer[i].CopyFrom(onnx.numpy_helper.from_array(w, "l0.w"))
    onnx.save(model, str(path))
    with pytest.raises(ArtifactError, match="NaN or Inf weights"):
        load_artifact(path)


def test_nan_rejected_before_saving():
    w = make_weights()
    w.layers[0][0][0, 0] = np.inf
    with pytest.raises(ValueError, match="NaN or Inf"):
        MlpWeights(w.layers)


def test_truncated_and_corrupt(artifact):
    data = artifact.read_bytes()
    artifact.write_bytes(data[: len(data) // 2])
    with pytest.raises(ArtifactError, match="truncated or corrupt"):
        load_artifact(artifact)
    artifact.write_bytes(b"\x00garbage" * 50)
    with pytest.raises(ArtifactError):
        load_artifact(artifact)


def test_tampered_graph_is_caught(artifact):
    """A graph edited so that it no longer computes its stored weights fails the engine agreement check."""
    model = onnx.load(str(artifact))
    for node in model.graph.node:
        if node.op_type == "Relu":
            node.op_type = "Sigmoid"
    onnx.save(model, str(artifact))
    with pytest.raises(ArtifactError, match="disagree"):
        load_artifact(artifact, engine="auto")


def test_save_rejects_mismatched_contract(tmp_path):
    with pytest.raises(ArtifactError, match="make them agree"):
        save_artifact(tmp_path / "p.onnx", make_weights(), make_contract(obs_dim=4, obs_offset=None, obs_scale=None))


def test_sha256_and_size(artifact):
    import hashlib

    p = load_artifact(artifact, engine="numpy")
    assert p.sha256 == hashlib.sha256(artifact.read_bytes()).hexdigest()
    assert p.nbytes == artifact.stat().st_size
    assert p.dense_macs == sum(w.size for w, _ in make_weights().layers)
    assert p.macs == p.dense_macs  # dense kernels multiply every weight
    # int8 rounds the tiniest weights to exactly 0; nnz_macs counts only non-zero weights.
    assert 0.9 * p.dense_macs < p.nnz_macs <= p.dense_macs


def test_retargeted_contract_suits_the_student_output():
    """A student's action transform follows its own output activation; the observation side is the teacher's."""
    ppo = make_contract(obs_clip=5.0, action_scale=[0.5, 0.25], action_offset=[0.1, -0.2])
    assert ppo.retargeted("none", "none") is ppo
    tanh = ppo.retargeted("none", "tanh")
    assert (tanh.action_scale, tanh.action_offset, tanh.obs_clip, tanh.obs_scale) == (None, None, 5.0, ppo.obs_scale)
    np.testing.assert_allclose(tanh.action_transform("tanh")[0], [1.5, 1.5])  # [-1, 1] onto [-2, 1]
    sac = make_contract()  # tanh onto the limits by default
    linear = sac.retargeted("tanh", "none")
    y = np.linspace(-1, 1, 5)[:, None]
    np.testing.assert_allclose(linear.to_action(y, "none"), sac.to_action(y, "tanh"))
    with pytest.raises(ValueError, match="student_output"):
        sac.retargeted("tanh", "relu")
