"""Format version 3: a frozen base policy plus a bounded residual correction head in one artifact.

y = y_base(x) + bound * tanh(head(x)), then the contract's action transform and clip; the base's stored
layers are written bit for bit, both engines run it, raw_output is the combined y, and hot-swap, the
streamed bundle's parity gate, the kit's parity gate and `lowrl inspect` see the head.
"""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from lowrl_ros.core.runtime import artifact as artifact_mod
from lowrl_ros.core.runtime.artifact import (ArtifactError, MlpWeights, PolicyContract, ResidualHead,
                                             artifact_head_bytes, parse_artifact, read_artifact_bytes,
                                             reexport_artifact, save_artifact, save_residual_artifact)
from lowrl_ros.core.runtime.bundle import load_bundle
from lowrl_ros.core.runtime.control import ControlConfig, PolicyController
from lowrl_ros.core.runtime.engines import load_artifact, probe_observations

OBS, ACT = 6, 3


def _layer(rng, out_dim: int, in_dim: int, gain: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    return (rng.normal(0, gain / np.sqrt(in_dim), (out_dim, in_dim)).astype(np.float32),
            rng.normal(0, 0.1, out_dim).astype(np.float32))


def _contract(explicit: bool = False, version: int = 1) -> PolicyContract:
    extra = dict(obs_clip=2.5, action_scale=[0.5, 0.25, 1.0], action_offset=[0.1, -0.2, 0.0]) if explicit else {}
    return PolicyContract([f"o{i}" for i in range(OBS)], [f"j{i}" for i in range(ACT)], [-1.0, -2.0, -0.5],
                          [1.0, 1.5, 2.0], obs_offset=np.linspace(-0.3, 0.3, OBS),
                          obs_scale=np.linspace(0.5, 2.0, OBS), version=version, **extra)


def _base(tmp_path, output: str = "tanh", explicit: bool = False, int8: bool = True, seed: int = 0):
    rng = np.random.default_rng(seed)
    weights = MlpWeights([_layer(rng, 32, OBS), _layer(rng, 32, 32), _layer(rng, ACT, 32)], "relu", output)
    return save_artifact(tmp_path / f"base_{output}_{explicit}_{int8}.onnx", weights, _contract(explicit), int8=int8)


def _head(seed: int = 1, bound=(0.4, 0.3, 0.5), hidden: str = "elu", zero_last: bool = False) -> ResidualHead:
    rng = np.random.default_rng(seed)
    layers = [_layer(rng, 16, OBS), _layer(rng, ACT, 16, gain=2.0)]
    if zero_last:
        layers[-1] = (np.zeros((ACT, 16), np.float32), np.zeros(ACT, np.float32))
    return ResidualHead(layers, bound, hidden)


def _parse(path) -> artifact_mod.ParsedArtifact:
    return parse_artifact(read_artifact_bytes(path), str(path))


def _meta(path) -> dict:
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    return json.loads(props[artifact_mod.METADATA_KEY])


def _base_inits(path) -> dict[str, bytes]:
    """The base layers' initializers (``l{i}.*``) as stored bytes."""
    return {t.name: numpy_helper.to_array(t).tobytes() for t in onnx.load(str(path)).graph.initializer
            if t.name[0] == "l" and t.name[1].isdigit()}


def test_round_trip_keeps_the_base_bit_for_bit_and_the_head(tmp_path):
    base = _base(tmp_path)
    head = _head()
    path = save_residual_artifact(tmp_path / "v2.onnx", base, head, replace(_contract(), version=2, parent_version=1))
    meta = _meta(path)
    assert meta["format_version"] == 3
    assert meta["arch"]["residual"]["bound"] == list(head.bound)
    assert meta["arch"]["residual"]["hidden_activation"] == "elu"
    parsed, plain = _parse(path), _parse(base)
    assert parsed.contract.version == 2 and plain.residual is None
    assert _base_inits(path) == _base_inits(base)  # the frozen base: every stored byte of it
    for a, b in zip(parsed.layers, plain.layers):
        assert a.storage == b.storage and a.dtype == b.dtype and np.array_equal(a.dense_t(), b.dense_t())
    assert parsed.residual.bound == head.bound and parsed.residual.hidden_activation == "elu"
    for (w, b), (w0, b0) in zip(parsed.residual.layers, head.layers):  # int8 per output channel
        assert np.abs(w - w0).max() <= np.abs(w0).max(axis=1).max() / 127 and np.array_equal(b, b0)
    fp32 = _parse(save_residual_artifact(tmp_path / "fp32.onnx", base, head, int8=False))
    assert all(np.array_equal(w, w0) for (w, _), (w0, _) in zip(fp32.residual.layers, head.layers))
    assert [layer.dtype for layer in fp32.head_layers] == ["fp32", "fp32"]
    # The bytes that change per version: the head's initializers, a small part of the file.
    head_bytes = artifact_head_bytes(parsed)
    stored = sum(layer.nbytes() for layer in parsed.head_layers) + 4 * ACT
    assert stored <= head_bytes < stored + 64 and head_bytes < len(parsed.data) / 3
    assert artifact_head_bytes(plain) == 0
    # reexport keeps everything, head included.
    assert reexport_artifact(path, tmp_path / "re.onnx").read_bytes() == path.read_bytes()


@pytest.mark.parametrize("output,explicit,int8", [("tanh", False, True), ("none", False, True),
                                                   ("tanh", True, False), ("none", True, True)])
def test_both_engines_match_the_reference_and_raw_output_is_the_combined_y(tmp_path, output, explicit, int8):
    base = _base(tmp_path, output, explicit, int8)
    path = save_residual_artifact(tmp_path / "r.onnx", base, _head(), int8=int8)
    parsed = _parse(path)
    c = parsed.contract
    obs = probe_observations(c, n=64, seed=3)
    span = np.array(c.action_high) - np.array(c.action_low)
    want = parsed.reference_action(obs)
    base_want = _parse(base).reference_action(obs)
    # The head moves the actions by far more than the tolerances below, so dropping it would fail.
    assert (np.abs(want - base_want) / span).max() > 0.05
    for engine, tol in (("numpy", 1e-4), ("ort", 0.1 if int8 else 1e-3)):  # _check_agree's int8 tolerance
        policy = load_artifact(path, engine)
        assert policy.int8 == int8 and len(policy.kernels) == (5 if engine == "numpy" else 0)
        got = np.array([policy.act(o) for o in obs])
        assert (np.abs(got - want) / span).max() <= tol, engine
        for o in obs[:8]:
            policy.act(o)
            y = parsed.forward(c.normalise(o))
            assert np.abs(policy.raw_output - y).max() <= (0.05 if engine == "ort" and int8 else 1e-4), engine
    assert load_artifact(path, "auto").macs == parsed.dense_macs == 6 * 32 + 32 * 32 + 32 * 3 + 6 * 16 + 16 * 3


@pytest.mark.parametrize("engine", ["ort", "numpy"])
def test_a_zero_head_gives_exactly_the_base_actions(tmp_path, engine):
    base = _base(tmp_path, "none", explicit=True)
    path = save_residual_artifact(tmp_path / "zero.onnx", base, _head(zero_last=True))
    obs = probe_observations(_contract(True), n=32, seed=5)
    a, b = load_artifact(base, engine), load_artifact(path, engine)
    for o in obs:
        assert np.array_equal(a.act(o), b.act(o))
        assert np.array_equal(a.raw_output, b.raw_output)


def test_a_new_head_replaces_the_old_one_and_keeps_the_base(tmp_path):
    base = _base(tmp_path)
    first = save_residual_artifact(tmp_path / "v2.onnx", base, _head(1))
    contract = replace(_contract(), version=3, parent_version=2)
    again = save_residual_artifact(tmp_path / "v3.onnx", first, _head(2, bound=(0.1, 0.1, 0.2)), contract)
    direct = save_residual_artifact(tmp_path / "direct.onnx", _parse(base), _head(2, bound=(0.1, 0.1, 0.2)), contract)
    assert again.read_bytes() == direct.read_bytes()  # nothing of the first head is left
    assert _base_inits(again) == _base_inits(base)
    assert _parse(again).residual.bound == (0.1, 0.1, 0.2)


def test_an_older_reader_refuses_a_v3_file_with_the_update_message(tmp_path, monkeypatch):
    path = save_residual_artifact(tmp_path / "r.onnx", _base(tmp_path), _head())
    monkeypatch.setattr(artifact_mod, "FORMAT_VERSION", 2)
    with pytest.raises(ArtifactError, match=r"format_version 3 .*newer lowrl_ros.*version 3 adds a residual "
                                            r"correction head.*update lowrl_ros on the robot"):
        parse_artifact(path.read_bytes(), str(path))


def test_a_plain_artifact_stays_version_1_or_2_without_a_residual_key(tmp_path):
    for explicit in (False, True):
        path = _base(tmp_path, explicit=explicit)
        meta = _meta(path)
        assert meta["format_version"] == (2 if explicit else 1) and "residual" not in meta["arch"]
        parsed = _parse(path)
        assert parsed.residual is None and parsed.head_layers == []
        assert len(parsed.weights().layers) == 3  # weights() unchanged for a plain artifact


def test_weights_refuses_to_drop_a_head_and_base_weights_is_the_base(tmp_path):
    base = _base(tmp_path)
    parsed = _parse(save_residual_artifact(tmp_path / "r.onnx", base, _head()))
    with pytest.raises(ArtifactError, match="residual correction head"):
        parsed.weights()
    with pytest.raises(ArtifactError, match="takes one network and would drop the head"):
        artifact_mod.load_weights(parsed.source)
    want = _parse(base).weights()
    assert all(np.array_equal(w, w0) for (w, _), (w0, _) in zip(parsed.base_weights().layers, want.layers))


@pytest.mark.parametrize("bound,match", [((0.1, 0.0, 0.1), "must be > 0"), ((0.1, float("nan"), 0.1), "NaN or Inf"),
                                         ((0.1, 0.2), "has 2 values but there are 3")])
def test_a_bad_bound_is_refused_naming_the_entry(bound, match):
    with pytest.raises(ValueError, match=match):
        _head(bound=bound)


def test_bad_head_weights_shapes_and_contracts_are_refused(tmp_path):
    rng = np.random.default_rng(0)
    nan = _layer(rng, ACT, 16)
    nan[0][0, 0] = np.nan
    with pytest.raises(ValueError, match="residual head: layer 1 has NaN or Inf weights"):
        ResidualHead([_layer(rng, 16, OBS), nan], (0.1,) * ACT)
    with pytest.raises(ValueError, match="hidden_activation"):
        ResidualHead([_layer(rng, ACT, OBS)], (0.1,) * ACT, "swish")
    base = _base(tmp_path)
    wrong_in = ResidualHead([_layer(rng, ACT, OBS + 1)], (0.1,) * ACT)
    with pytest.raises(ArtifactError, match=r"maps 7 -> 3 .*6 observations and 3 actions"):
        save_residual_artifact(tmp_path / "x.onnx", base, wrong_in)
    other = replace(_contract(), action_high=(1.0, 1.5, 3.0))
    with pytest.raises(ArtifactError, match="same_io|keeps the base's IO"):
        save_residual_artifact(tmp_path / "x.onnx", base, _head(), other)
    # A file whose arch bound and graph bound disagree is refused at load.
    path = save_residual_artifact(tmp_path / "r.onnx", base, _head())
    model = onnx.load(str(path))
    meta = json.loads(model.metadata_props[0].value)
    meta["arch"]["residual"]["bound"] = [9.0, 9.0, 9.0]
    model.metadata_props[0].value = json.dumps(meta)
    with pytest.raises(ArtifactError, match="residual.bound"):
        parse_artifact(model.SerializeToString(), "edited.onnx")


def test_hot_swap_plain_to_residual_and_back(tmp_path):
    base = _base(tmp_path)
    resid = save_residual_artifact(tmp_path / "v2.onnx", base, _head(), replace(_contract(), version=2,
                                                                                parent_version=1))
    controller = PolicyController(ControlConfig(soft_start_steps=0), load_bundle(base, engine="numpy"))
    controller.activate()
    obs = probe_observations(_contract(), n=1, seed=9)[0]
    for path in (resid, base):
        bundle = load_bundle(path, engine="numpy")
        controller.check_compatible(bundle)
        controller.swap(bundle)
        controller.observe(obs)
        want = _parse(path).reference_action(obs[None])[0]
        assert np.abs(controller.step().action - want).max() < 1e-4


def test_the_streamed_bundle_parity_gate_includes_the_head(tmp_path):
    from lowrl_ros.core.stream.protocol import encode_bundle
    from lowrl_ros.core.stream.receiver import BundleReceiver, ReceiverConfig

    key = b"0123456789abcdef0123456789abcdef"
    receiver = BundleReceiver(ReceiverConfig(receive_dir=str(tmp_path / "recv"), engine="numpy"), key)
    path = save_residual_artifact(tmp_path / "v2.onnx", _base(tmp_path), _head(),
                                  replace(_contract(), version=2, parent_version=1))
    parsed = _parse(path)
    policy = load_artifact(path, "numpy")
    receiver._parity(2, "full", policy, parsed)  # the head's actions pass
    base_only = load_artifact(_base(tmp_path), "numpy")
    with pytest.raises(Exception, match="differ by"):
        receiver._parity(2, "full", base_only, parsed)  # a head dropped by the engine would not
    received = receiver.receive(encode_bundle(path.read_bytes(), 2, key), current_version=1,
                                running=_contract())
    assert received.bundle.version == 2


def test_the_kit_parity_compares_against_base_plus_head(tmp_path):
    from lowrl_ros.core.finetune.kit import KitRefused, _check_parity

    class BaseOnly:  # what a kit's actor computes from the base network
        def __init__(self, parsed):
            self.parsed = parsed

        def act(self, obs):
            return artifact_mod.reference_action(self.parsed.base_weights(), self.parsed.contract, obs)

    base = _base(tmp_path)
    zero = _parse(save_residual_artifact(tmp_path / "z.onnx", base, _head(zero_last=True)))
    _check_parity(BaseOnly(zero), zero, 0)
    moved = _parse(save_residual_artifact(tmp_path / "m.onnx", base, _head()))
    with pytest.raises(KitRefused, match="residual correction head"):
        _check_parity(BaseOnly(moved), moved, 0)


def test_inspect_shows_the_head(tmp_path, capsys):
    from lowrl_ros.cli import main as lowrl
    from lowrl_ros.commands.inspect import describe

    path = save_residual_artifact(tmp_path / "r.onnx", _base(tmp_path), _head())
    info = describe(path, "numpy")["tiers"]["full"]
    assert info["residual"]["bytes"] == artifact_head_bytes(_parse(path))
    assert info["residual"]["bound"] == [0.4, 0.3, 0.5] and len(info["residual"]["layers"]) == 2
    assert lowrl(["inspect", str(path), "--engine", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "residual head: y = base + bound * tanh(head(x)), hidden elu" in out and "head 1:" in out


def test_a_residual_version_changes_only_its_head_bytes(tmp_path):
    from lowrl_ros.bench.sim2real import _changed_bytes

    base = _base(tmp_path)
    path = artifact_mod.save_residual_artifact(tmp_path / "v2.onnx", base, _head())
    head = artifact_mod.artifact_head_bytes(_parse(path))
    assert 0 < head == _changed_bytes(str(path)) < path.stat().st_size
    assert _changed_bytes(str(base)) == base.stat().st_size  # a plain version: the whole file reaches the robot
