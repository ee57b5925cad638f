"""int8 quantization maths (lowrl_ros.core.compress.quantize) against its bounds, A's artifact format and ORT."""
from __future__ import annotations

import numpy as np
import pytest

from lowrl_ros.core.compress import quantize as q
from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, load_weights, save_artifact
from lowrl_ros.core.runtime.engines import load_artifact


def _rng_matrix(seed: int, shape=(32, 48), scale=0.3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # Row scales spread over three decades: a per-tensor scale would fail these bounds, per-channel must not.
    return (rng.normal(0, scale, shape) * np.logspace(-2, 1, shape[0])[:, None]).astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_round_trip_error_is_at_most_half_a_step_per_weight(seed):
    w = _rng_matrix(seed)
    qm = q.quantize_per_channel(w)
    err = np.abs(w - q.dequantize(qm))
    assert qm.q.dtype == np.int8 and qm.scale.shape == (w.shape[0],)
    assert np.all(err <= qm.scale[:, None] / 2 * (1 + 1e-5) + 1e-12)
    assert np.all(err <= q.weight_error_bound(w, qm))
    # The bound is tight: some weight in a big matrix lands close to half a step off.
    assert (err / (qm.scale[:, None] / 2)).max() > 0.9
    # Row maxima are represented exactly (up to float rounding) as +-127.
    assert np.abs(qm.q).max(axis=1).min() == 127


def test_zeros_stay_zero_and_an_all_zero_row_is_valid():
    w = _rng_matrix(3)
    w[:, ::3] = 0.0
    w[5] = 0.0
    qm = q.quantize_per_channel(w)
    assert np.all(qm.q[w == 0] == 0)
    assert np.all(qm.scale > 0) and np.all(q.dequantize(qm)[5] == 0)


def test_percentile_clipping_trades_one_outlier_for_a_finer_step():
    w = _rng_matrix(4, shape=(8, 256), scale=0.1)
    w[2, 7] = 40.0  # one outlier that, unclipped, sets row 2's step to 40/127
    plain = q.quantize_per_channel(w)
    clipped = q.quantize_per_channel(w, percentile=99.0)
    others = np.ones_like(w, bool)
    others[2, 7] = False
    err_plain = np.abs(w - q.dequantize(plain))[2][others[2]]
    err_clip = np.abs(w - q.dequantize(clipped))[2][others[2]]
    assert err_clip.mean() < err_plain.mean() / 10  # the other 255 weights get a ~10x finer step
    assert np.count_nonzero(np.abs(w[2]) > clipped.clip[2]) <= 3  # and only the top 1% saturate
    # The outlier is saturated at the clip, and the bound says so.
    out_err = abs(w[2, 7] - q.dequantize(clipped)[2, 7])
    assert out_err == pytest.approx(w[2, 7] - clipped.clip[2], rel=1e-5)
    assert np.all(np.abs(w - q.dequantize(clipped)) <= q.weight_error_bound(w, clipped))
    # Only non-zero weights count toward the percentile: a 95%-zero row is not clipped to zero.
    sparse_row = np.zeros((1, 200), np.float32)
    sparse_row[0, :10] = np.linspace(0.1, 1.0, 10)
    assert q.channel_clip(sparse_row, 90.0)[0] > 0.8


def test_clipped_weights_saved_as_int8_store_exactly_this_quantization(tmp_path):
    rng = np.random.default_rng(5)
    w0 = _rng_matrix(6, shape=(16, 3))
    w1 = _rng_matrix(7, shape=(1, 16))
    weights = MlpWeights([(w0, rng.normal(size=16).astype(np.float32)), (w1, np.zeros(1, np.float32))])
    contract = PolicyContract(["a", "b", "c"], ["u"], [-2.0], [2.0])
    path = save_artifact(tmp_path / "p.onnx", q.clip_outliers(weights, 95.0), contract, int8=True)
    stored, _ = load_weights(path)
    for (w, _), (ws, _) in zip(weights.layers, stored.layers):
        np.testing.assert_allclose(ws, q.dequantize(q.quantize_per_channel(w, 95.0)), rtol=1e-6, atol=1e-7)


def test_activation_quantization_bound_inside_and_outside_the_range():
    rng = q.ActivationRange(-1.0, 3.0)
    x = np.linspace(-2.0, 5.0, 1001)
    err = np.abs(x - q.quantize_activation(x, rng))
    bound = q.activation_error_bound(x, rng)
    assert np.all(err <= bound)
    inside = (x >= -1.0) & (x <= 3.0)
    assert err[inside].max() <= rng.scale / 2 + 1e-12
    assert err[~inside].max() > rng.scale  # saturation outside the calibrated range is real
    assert q.quantize_activation(np.array([0.0]), rng)[0] == 0.0  # zero (ReLU's favourite) is exact


def _policy(tmp_path):
    from lowrl_ros.core.runtime.artifact import load_weights as lw

    return lw("models/pendulum_sac_int8.onnx")


def test_simulated_dynamic_int8_matches_onnx_runtime(tmp_path):
    """int8_forward(dynamic) is the maths of the artifact's int8 graph: it must agree with ORT on it."""
    weights, contract = _policy(tmp_path)
    path = save_artifact(tmp_path / "p8.onnx", weights, contract, int8=True)
    policy = load_artifact(path, engine="ort")
    rng = np.random.default_rng(0)
    theta = rng.uniform(-np.pi, np.pi, 200)
    obs = np.stack([np.cos(theta), np.sin(theta), rng.uniform(-8, 8, 200)], axis=1)
    ort = np.stack([policy.act(o) for o in obs])
    sim = q.int8_forward(weights, contract, obs, activations="dynamic")
    assert np.abs(ort - sim).max() < 2e-3 * 4.0  # float32 vs float64 accumulation only


def test_int8_graph_is_exact_where_u8s8_kernels_saturate(tmp_path):
    """The worst case for ORT's U8S8 kernel on x86 without VNNI: activations quantized to 255 and
    weights at +127, so each pair of products (2 * 255 * 127) overflows int16. The artifact feeds
    MatMulInteger uint8 weights (U8U8), which is exact on every CPU: ORT equals the integer maths."""
    import onnx

    w1 = np.full((4, 8), 1.0)  # every weight quantizes to +127
    weights = MlpWeights([(w1, np.zeros(4)), (0.1 * np.eye(1, 4), np.zeros(1))], "relu", "tanh")
    contract = PolicyContract(
        obs_names=[f"o{i}" for i in range(8)], action_names=["a"], action_low=[-1.0], action_high=[1.0],
        obs_offset=np.zeros(8), obs_scale=np.full(8, 0.01), env_id="Test-v0",
    )
    path = save_artifact(tmp_path / "sat.onnx", weights, contract, int8=True)
    model = onnx.load(str(path))
    b_inputs = {n.input[1] for n in model.graph.node if n.op_type == "MatMulInteger"}
    assert b_inputs and all(b.endswith(".wu8") for b in b_inputs)  # uint8 weights, not int8
    obs = np.tile([100.0] * 7 + [-0.5], (1, 1))  # x in [-0.005, 1]: 7 of 8 quantize to 255
    ort = load_artifact(path, engine="ort").act(obs[0])
    sim = q.int8_forward(weights, contract, obs, activations="dynamic")[0]
    exact = np.tanh(0.1 * (7.0 - 0.005))  # what the fp32 network gives
    assert abs(ort[0] - sim[0]) < 1e-5 and abs(ort[0] - exact) < 0.01, (ort, sim, exact)


def test_static_calibration_ranges_and_error_analysis():
    weights, contract = _policy(None)
    rng = np.random.default_rng(1)
    theta = rng.uniform(-np.pi, np.pi, 500)
    obs = np.stack([np.cos(theta), np.sin(theta), rng.uniform(-8, 8, 500)], axis=1)
    ranges = q.calibrate_activation_ranges(weights, contract, obs, percentile=100.0)
    assert len(ranges) == len(weights.layers)
    assert ranges[0].low == pytest.approx(obs.min(axis=0).min()) and ranges[0].high == pytest.approx(8.0, abs=0.2)
    assert ranges[1].low == 0.0  # after ReLU
    ref = q.int8_forward(weights, contract, obs, activations="dynamic")
    static = q.int8_forward(weights, contract, obs, activations="static", ranges=ranges)
    # Static ranges cover the whole batch, so per-row dynamic ranges are finer: static costs a bit more error,
    # but stays within a few percent of the action range on states it was calibrated on.
    from lowrl_ros.core.runtime.artifact import reference_action

    fp = reference_action(weights, contract, obs)
    err_static = np.abs(static - fp).max() / 4.0
    err_dynamic = np.abs(ref - fp).max() / 4.0
    assert err_dynamic < 0.05 and err_static < 0.2
    clipped = q.calibrate_activation_ranges(weights, contract, obs, percentile=99.0)
    assert clipped[1].high < ranges[1].high  # percentile calibration clips the rare large activations


def test_bad_input_gets_a_clear_message():
    with pytest.raises(ValueError, match="percentile"):
        q.quantize_per_channel(np.ones((2, 2)), percentile=10)
    with pytest.raises(ValueError, match=r"\[out, in\]"):
        q.quantize_per_channel(np.ones(3))
    with pytest.raises(ValueError, match="NaN"):
        q.quantize_per_channel(np.array([[np.nan, 1.0]]))
    weights, contract = _policy(None)
    with pytest.raises(ValueError, match="calibrate_activation_ranges"):
        q.int8_forward(weights, contract, np.zeros((2, 3)), activations="static")
    with pytest.raises(ValueError, match="observations"):
        q.calibrate_activation_ranges(weights, contract, np.zeros((5, 4)))


def test_fake_quantize_is_what_the_int8_artifact_computes_with(tmp_path):
    weights, contract = load_weights("models/pendulum_sac_int8.onnx")
    layers = [(w * np.linspace(0.5, 2.0, w.shape[1], dtype=np.float32), b) for w, b in weights.layers]
    weights = MlpWeights(layers)  # off the int8 grid, so quantizing again changes something
    stored, _ = load_weights(save_artifact(tmp_path / "p8.onnx", weights, contract, int8=True))
    fake = q.fake_quantize(weights)
    for (wf, _), (ws, _), (w, _) in zip(fake.layers, stored.layers, weights.layers):
        np.testing.assert_allclose(wf, ws, rtol=1e-6, atol=1e-8)
        assert np.abs(wf - w).max() > 0


@pytest.mark.parametrize("act", ["elu", "leaky_relu", "silu", "gelu_tanh", "softsign", "tanh"])
def test_int8_forward_simulates_every_activation_clip_and_transform(tmp_path, act):
    """int8_forward applies the contract as the graph does (obs_clip, offset + scale * y) for every activation."""
    from lowrl_ros.core.runtime.engines import probe_observations
    from test_activations import DIMS, new_features_contract
    from test_artifact import make_weights

    weights, contract = make_weights(DIMS, hidden=act, output="none"), new_features_contract()
    path = save_artifact(tmp_path / "p8.onnx", weights, contract, int8=True)
    policy = load_artifact(path, engine="ort")
    obs = probe_observations(contract, 64, seed=2)  # every 4th row reaches past obs_clip
    ort = np.stack([policy.act(o) for o in obs])
    sim = q.int8_forward(weights, contract, obs, activations="dynamic")
    span = np.array(contract.action_high) - np.array(contract.action_low)
    # float32 (ORT) vs float64 (simulation): a value on a rounding boundary may land one uint8 step apart.
    assert (np.abs(ort - sim) / span).max() < 5e-3, act
    ranges = q.calibrate_activation_ranges(weights, contract, obs, percentile=100.0)
    assert -contract.obs_clip <= ranges[0].low < 0 < ranges[0].high <= contract.obs_clip  # normalised, clipped
