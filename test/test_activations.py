"""Every activation of core/runtime/activations.py, obs_clip and the action transform, in every consumer.

The fp32 reference is ``reference_action`` (float64). The ONNX graph (ONNX Runtime) and the numpy
engine must equal it within 1e-5 of the action range in fp32, and stay inside the int8 budget of
test_engines when int8. Artifacts that use nothing new must stay format version 1 and byte- and
action-identical to what the version-1 writer made (the shipped models/).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from lowrl_ros.core.runtime import activations, artifact as artifact_mod
from lowrl_ros.core.runtime.artifact import (METADATA_KEY, ArtifactError, MlpWeights, PolicyContract,
                                            parse_artifact, reexport_artifact, reference_action, save_artifact)
from lowrl_ros.core.runtime.bundle import load_bundle
from lowrl_ros.core.runtime.engines import load_artifact, probe_observations
from test_artifact import make_contract, make_weights

ROOT = Path(__file__).resolve().parents[1]
DIMS = (6, 32, 32, 3)
ENGINES = ("ort", "numpy")


def new_features_contract(obs_dim: int = DIMS[0], act_dim: int = DIMS[-1], **kw) -> PolicyContract:
    """Isaac-Lab-like: obs normalised and clipped, linear output scaled around a default pose."""
    base = dict(obs_clip=1.5, action_scale=np.linspace(0.25, 0.5, act_dim),
                action_offset=np.linspace(-0.3, 0.6, act_dim), action_low=[-1.5] * act_dim,
                action_high=[1.5] * act_dim)
    base.update(kw)
    return make_contract(obs_dim, act_dim, **base)


def fmt_version(path: Path) -> int:
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    return json.loads(props[METADATA_KEY])["format_version"]


def engine_actions(path: Path, obs: np.ndarray) -> dict[str, np.ndarray]:
    out = {}
    for engine in ENGINES:
        policy = load_artifact(path, engine=engine)
        assert policy.engine == engine
        out[engine] = np.stack([policy.act(o) for o in obs])
    return out


def identity_net(act: str, n: int) -> MlpWeights:
    eye = np.eye(n, dtype=np.float32)
    zero = np.zeros(n, np.float32)
    return MlpWeights([(eye, zero), (eye, zero)], act, "none")


@pytest.mark.parametrize("act", activations.HIDDEN)
def test_each_activation_op_equals_the_table(tmp_path, act):
    """Through an identity network the action is act(obs): each engine's op against activations.apply."""
    n = 16
    c = make_contract(n, n, obs_offset=None, obs_scale=None, action_low=[-100.0] * n, action_high=[100.0] * n)
    path = save_artifact(tmp_path / "id.onnx", identity_net(act, n), c)
    x = np.linspace(-12.0, 12.0, 8 * n).reshape(8, n)
    x[0, :4] = [0.0, -0.0, 1e-4, -1e-4]
    want = activations.apply(act, x.astype(np.float32).astype(np.float64))
    for engine, got in engine_actions(path, x).items():
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6, err_msg=f"{act} via {engine}")


@pytest.mark.parametrize("features", ["v1", "clip+transform"])
@pytest.mark.parametrize("act", activations.HIDDEN)
def test_fp32_engines_equal_reference(tmp_path, act, features):
    if features == "v1":
        w, c = make_weights(DIMS, hidden=act, output="tanh"), make_contract(DIMS[0], DIMS[-1])
    else:
        w, c = make_weights(DIMS, hidden=act, output="none"), new_features_contract()
    path = save_artifact(tmp_path / "p.onnx", w, c)
    new = features != "v1" or act not in activations.LEGACY
    assert fmt_version(path) == (2 if new else 1)
    obs = probe_observations(c, 32, seed=5)
    ref = reference_action(w, c, obs)
    span = np.array(c.action_high) - np.array(c.action_low)
    for engine, got in engine_actions(path, obs).items():
        err = (np.abs(got - ref) / span).max()
        assert err <= 1e-5, (act, features, engine, err)


def test_obs_clip_and_transform_are_really_applied(tmp_path):
    """The probes reach past the clip and the transform moves actions: the parity above is not vacuous."""
    w = make_weights(DIMS, hidden="elu", output="none")
    c = new_features_contract(action_low=[-50.0] * 3, action_high=[50.0] * 3)
    obs = probe_observations(c, 16, seed=5)
    norm = (obs - np.array(c.obs_offset)) * np.array(c.obs_scale)
    assert (np.abs(norm) > c.obs_clip).any() and (np.abs(norm) < c.obs_clip).any()
    no_clip = PolicyContract(**{**c.to_dict(), "obs_clip": None})
    identity = PolicyContract(**{**c.to_dict(), "action_scale": None, "action_offset": None})
    ref = reference_action(w, c, obs)
    assert np.abs(ref - reference_action(w, no_clip, obs)).max() > 0.01
    assert np.abs(ref - reference_action(w, identity, obs)).max() > 0.01
    for got in engine_actions(save_artifact(tmp_path / "p.onnx", w, c), obs).values():
        np.testing.assert_allclose(got, ref, atol=1e-4)


@pytest.mark.parametrize("act", activations.HIDDEN)
def test_int8_engines_within_budget(tmp_path, act):
    w, c = make_weights(DIMS, hidden=act, output="none"), new_features_contract()
    path = save_artifact(tmp_path / "p.onnx", w, c, int8=True)
    obs = probe_observations(c, 32, seed=6)
    ref = reference_action(w, c, obs)
    span = np.array(c.action_high) - np.array(c.action_low)
    # The budget of test_engines.test_parity_with_reference: int8 weights (numpy), + uint8 activations (ORT).
    budget = {"numpy": 0.02, "ort": 0.04}
    errs = {e: (np.abs(got - ref) / span).max() for e, got in engine_actions(path, obs).items()}
    for engine, err in errs.items():
        assert err <= budget[engine], (act, engine, err)
    assert errs["numpy"] > 1e-6  # int8 really changed something


def test_shipped_v1_models_unchanged():
    """The version-1 artifacts in models/ load, stay version 1 when re-exported, byte for byte, and act as before.

    test/data/v1_model_actions.json was recorded with the version-1 runtime (the commit before this
    work) on 8 probe observations per model, with both engines.
    """
    recorded = json.loads((ROOT / "test/data/v1_model_actions.json").read_text())
    for key, rec in recorded.items():
        rel, _, tier = key.partition("!")
        if tier:
            policies = {"ort": load_bundle(ROOT / rel, engine="ort").policies[tier]}
        else:
            assert fmt_version(ROOT / rel) == 1
            policies = {e: load_artifact(ROOT / rel, engine=e) for e in ENGINES}
        for engine, policy in policies.items():
            got = np.stack([policy.act(np.array(o)) for o in rec["obs"]])
            np.testing.assert_allclose(got, rec[engine], atol=1e-6, err_msg=f"{key} {engine}")


def test_v1_graph_bytes_unchanged_by_reexport(tmp_path):
    for rel in ("models/pendulum_sac_int8.onnx", "models/pendulum_rlx2/actor_int8.onnx"):
        out = reexport_artifact(ROOT / rel, tmp_path / "re.onnx")
        assert out.read_bytes() == (ROOT / rel).read_bytes(), rel


def test_older_reader_refuses_v2_clearly(tmp_path, monkeypatch):
    """A version-1 reader (FORMAT_VERSION 1, as lowrl_ros before this work) names the version and the fix."""
    path = save_artifact(tmp_path / "p.onnx", make_weights(DIMS, hidden="elu"), make_contract(DIMS[0], DIMS[-1]))
    assert fmt_version(path) == 2
    monkeypatch.setattr(artifact_mod, "FORMAT_VERSION", 1)
    with pytest.raises(ArtifactError, match=r"format_version 2 .*newer lowrl_ros.*update lowrl_ros on the robot"):
        parse_artifact(path.read_bytes(), str(path))


def _drop_node(path: Path, output_name: str) -> None:
    """Remove the node producing ``output_name`` and feed its input to its consumers (a broken exporter)."""
    model = onnx.load(str(path))
    graph = model.graph
    victim = next(n for n in graph.node if n.output[0] == output_name)
    for n in graph.node:
        for i, name in enumerate(n.input):
            if name == output_name:
                n.input[i] = victim.input[0]
    graph.node.remove(victim)
    onnx.save(model, str(path))


@pytest.mark.parametrize("dropped", ["obs_clipped", "action_unclamped"])
def test_parity_checks_catch_a_graph_without_the_new_ops(tmp_path, dropped):
    """load_artifact's ORT/numpy check and the receiver's parity probe both see a missing clip or offset."""
    from lowrl_ros.core.stream.protocol import BundleRejected
    from lowrl_ros.core.stream.receiver import BundleReceiver, ReceiverConfig

    w, c = make_weights(DIMS, hidden="silu", output="none"), new_features_contract()
    path = save_artifact(tmp_path / "p.onnx", w, c)
    _drop_node(path, dropped)
    with pytest.raises(ArtifactError, match="disagree"):
        load_artifact(path)
    receiver = BundleReceiver(ReceiverConfig(receive_dir=str(tmp_path / "rx"), engine="ort"), None)
    parsed = parse_artifact(path.read_bytes(), str(path))
    with pytest.raises(BundleRejected, match="differ") as info:
        receiver._parity(c.version, "full", load_artifact(path, engine="ort"), parsed)
    assert info.value.code == "parity"
