"""int8 quantization maths: weights, activation calibration, error bounds (numpy only).

What the artifact stores is fixed by ``onnx_graph.pack_layer``: weights symmetric per output
channel (``scale = max|w[o, :]| / 127``, so an exact zero stays zero and sparsity survives), and
activations quantized *dynamically* at run time by ONNX Runtime's ``DynamicQuantizeLinear``
(asymmetric uint8 over the range of each input row, always including 0). This module is the
maths around that format, so compression can reason about it before anything is written:

- :func:`quantize_per_channel` / :func:`dequantize`: the same weight quantizer, with optional
  outlier clipping at a percentile of ``|w|`` per channel. One large weight otherwise sets the
  scale of its whole row and rounds every small weight of that row to zero (Jacob et al. 2018,
  "Quantization and Training of Neural Networks for Efficient Integer-Arithmetic-Only Inference";
  percentile clipping as in Wu et al. 2020, "Integer Quantization for Deep Learning Inference").
  :func:`clip_outliers` returns float weights whose row maxima *are* the clipped ranges, so
  ``save_artifact(..., int8=True)`` stores exactly this quantization.
- :func:`weight_error_bound`: the worst-case |w - dequant(quant(w))| per weight, which tests check.
- :func:`calibrate_activation_ranges`: per-layer input ranges from observations (rollouts or a
  replay buffer), percentile-clipped, for *static* activation quantization.
- :func:`int8_forward`: a numpy simulation of the int8 graph with dynamic or static activations,
  so the error static quantization would add is measured before any graph supports it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowrl_ros.core.runtime import activations as act_table
from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract

QMAX = 127  # symmetric int8: [-127, 127]; -128 is left out so the range is symmetric


@dataclass(frozen=True)
class QuantizedMatrix:
    """A weight matrix as int8 with one scale per output channel.

    Attributes:
        q: int8 [out, in].
        scale: float32 [out], > 0.
        clip: float32 [out], the magnitude each row was clipped to before quantization
            (``127 * scale``; equals max|w[o, :]| when nothing was clipped).
    """

    q: np.ndarray
    scale: np.ndarray
    clip: np.ndarray


def _check_matrix(w: np.ndarray) -> np.ndarray:
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 2:
        raise ValueError(f"expected a weight matrix [out, in], got shape {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("the weight matrix has NaN or Inf entries; retrain or fix the weights first")
    return w


def channel_clip(w: np.ndarray, percentile: float | None = None) -> np.ndarray:
    """Per-output-channel clipping magnitude: max|w[o, :]|, or its ``percentile`` of |w[o, :]|.

    Only non-zero weights count toward the percentile, so a pruned row is not clipped to zero
    just because most of it is zero. Rows that are entirely zero get 0.
    """
    w = _check_matrix(w)
    absw = np.abs(w)
    if percentile is None:
        return absw.max(axis=1)
    if not 50.0 <= float(percentile) <= 100.0:
        raise ValueError(f"clip percentile {percentile} must be in [50, 100]; e.g. 99.9 clips the top 0.1%")
    out = np.zeros(w.shape[0], np.float32)
    for o in range(w.shape[0]):
        nz = absw[o][absw[o] > 0]
        out[o] = np.percentile(nz, percentile) if nz.size else 0.0
    return out


def quantize_per_channel(w: np.ndarray, percentile: float | None = None) -> QuantizedMatrix:
    """Symmetric per-output-channel int8 quantization of ``w`` [out, in].

    Args:
        w: float weights [out, in].
        percentile: clip each row at this percentile of its non-zero |w| before quantizing
            (None: no clipping, the row maximum sets the scale, as ``onnx_graph.pack_layer`` does).

    Returns:
        The int8 matrix, its scales and the clipping magnitudes.
    """
    w = _check_matrix(w)
    clip = channel_clip(w, percentile)
    # An all-zero row gets scale 1 (any positive value works; the graph requires > 0).
    scale = np.where(clip > 0, clip / QMAX, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale[:, None]), -QMAX, QMAX).astype(np.int8)
    return QuantizedMatrix(q=q, scale=scale, clip=np.where(clip > 0, clip, 0.0).astype(np.float32))


def dequantize(qm: QuantizedMatrix) -> np.ndarray:
    """float32 [out, in] = q * scale per row."""
    return qm.q.astype(np.float32) * qm.scale[:, None]


def weight_error_bound(w: np.ndarray, qm: QuantizedMatrix) -> np.ndarray:
    """Worst-case |w - dequantize(qm)| per weight, [out, in].

    Within the clipping range rounding moves a weight by at most half a step (scale / 2);
    beyond it the weight is saturated at ±clip, so the error is |w| - clip (plus at most the
    half step of float rounding, which is covered by the first term's max).
    """
    w = _check_matrix(w)
    half_step = np.broadcast_to(qm.scale[:, None] / 2.0, w.shape)
    saturated = np.maximum(np.abs(w) - qm.clip[:, None], 0.0)
    # float32 arithmetic in w / scale adds a few ulps; allow them so the bound is a true bound.
    return np.maximum(half_step, saturated) + 4 * np.finfo(np.float32).eps * np.abs(w)


def clip_outliers(weights: MlpWeights, percentile: float | None, *, skip_output: bool = False) -> MlpWeights:
    """Weights with every row clipped at its ``percentile`` magnitude (None: unchanged copy).

    Saving the result with ``save_artifact(..., int8=True)`` stores exactly
    ``quantize_per_channel(w, percentile)``, because the clipped row maximum becomes the scale.
    Zeros stay zeros (sparsity is kept).
    """
    layers = []
    for i, (w, b) in enumerate(weights.layers):
        if percentile is None or (skip_output and i == len(weights.layers) - 1):
            layers.append((w.copy(), b.copy()))
            continue
        clip = channel_clip(w, percentile)[:, None]
        layers.append((np.clip(w, -clip, clip).astype(np.float32), b.copy()))
    return MlpWeights(layers, weights.hidden_activation, weights.output_activation)


def fake_quantize(weights: MlpWeights, percentile: float | None = None) -> MlpWeights:
    """The weights the int8 artifact will compute with: quantized then dequantized, as float32."""
    layers = [(dequantize(quantize_per_channel(w, percentile)), b.copy()) for w, b in weights.layers]
    return MlpWeights(layers, weights.hidden_activation, weights.output_activation)


# --- activations -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ActivationRange:
    """Calibrated range of one layer's input, for static asymmetric uint8 quantization."""

    low: float
    high: float

    @property
    def scale(self) -> float:
        """uint8 step: the range (always including 0, as DynamicQuantizeLinear does) over 255."""
        span = max(self.high, 0.0) - min(self.low, 0.0)
        return span / 255.0 if span > 0 else 1.0

    @property
    def zero_point(self) -> int:
        return int(np.clip(np.rint(-min(self.low, 0.0) / self.scale), 0, 255))


def layer_inputs(weights: MlpWeights, obs_norm: np.ndarray) -> list[np.ndarray]:
    """The float input of every layer for a batch of normalised observations [n, in]."""
    x = np.asarray(obs_norm, dtype=np.float64)
    inputs = []
    for i, (w, b) in enumerate(weights.layers):
        inputs.append(x)
        x = x @ w.T.astype(np.float64) + b
        if i < len(weights.layers) - 1:
            x = act_table.apply(weights.hidden_activation, x)
    return inputs


def calibrate_activation_ranges(weights: MlpWeights, contract: PolicyContract, observations: np.ndarray,
                                percentile: float = 99.99) -> list[ActivationRange]:
    """Per-layer input ranges for static activation quantization, from observed states.

    Args:
        weights: the actor.
        contract: its contract (the observations are normalised with its offset and scale and
            clipped to its obs_clip, as the graph does).
        observations: raw observations [n, obs_dim], e.g. from rollouts or a replay buffer.
        percentile: the range is [percentile (100 - p) of the values, percentile p]; below 100 it
            clips rare outliers, trading their saturation for a finer step for everyone else.

    Returns:
        One range per layer (its input).
    """
    obs = np.asarray(observations, dtype=np.float64)
    if obs.ndim != 2 or obs.shape[1] != contract.obs_dim or len(obs) < 2:
        raise ValueError(f"calibration needs observations [n >= 2, {contract.obs_dim}], got shape {obs.shape}; "
                         "collect some rollouts or pass replay-buffer observations")
    if not 50.0 < float(percentile) <= 100.0:
        raise ValueError(f"calibration percentile {percentile} must be in (50, 100]; e.g. 99.99")
    ranges = []
    for x in layer_inputs(weights, contract.normalise(obs)):
        ranges.append(ActivationRange(float(np.percentile(x, 100.0 - percentile)), float(np.percentile(x, percentile))))
    return ranges


def quantize_activation(x: np.ndarray, rng: ActivationRange) -> np.ndarray:
    """Asymmetric uint8 fake quantization of ``x`` with a (static or dynamic) range; float64 back."""
    q = np.clip(np.rint(x / rng.scale) + rng.zero_point, 0, 255)
    return (q - rng.zero_point) * rng.scale


def activation_error_bound(x: np.ndarray, rng: ActivationRange) -> np.ndarray:
    """Worst-case |x - quantize_activation(x)|: half a step inside the range, the overshoot outside."""
    x = np.asarray(x, dtype=np.float64)
    lo = -rng.zero_point * rng.scale
    hi = (255 - rng.zero_point) * rng.scale
    outside = np.maximum(x - hi, 0.0) + np.maximum(lo - x, 0.0)
    return np.maximum(rng.scale / 2.0, outside) + 1e-12 * np.abs(x)


def int8_forward(weights: MlpWeights, contract: PolicyContract, observations: np.ndarray, *,
                 activations: str = "dynamic", ranges: list[ActivationRange] | None = None,
                 percentile: float | None = None) -> np.ndarray:
    """Actions of the int8 graph, simulated in numpy (for analysis; the robot runs the artifact).

    Args:
        weights: float actor; quantized per channel here (``percentile`` clips outliers).
        contract: normalisation (offset, scale, obs_clip), the action transform and the limits.
        observations: raw observations [n, obs_dim].
        activations: "dynamic" (range of each row, as the artifact's DynamicQuantizeLinear) or
            "static" (fixed calibrated ``ranges``, one per layer).
        ranges: from :func:`calibrate_activation_ranges`; needed for "static".

    Returns:
        Actions [n, action_dim], clamped to the contract's limits.
    """
    if activations not in ("dynamic", "static"):
        raise ValueError(f"activations={activations!r}: use 'dynamic' or 'static'")
    if activations == "static" and (ranges is None or len(ranges) != len(weights.layers)):
        raise ValueError("static activations need one calibrated range per layer; "
                         "call calibrate_activation_ranges() first")
    x = contract.normalise(np.atleast_2d(np.asarray(observations, dtype=np.float64)))
    last = len(weights.layers) - 1
    for i, (w, b) in enumerate(weights.layers):
        wq = dequantize(quantize_per_channel(w, percentile)).astype(np.float64)
        if activations == "static":
            xq = quantize_activation(x, ranges[i])
        else:
            xq = np.stack([quantize_activation(row, ActivationRange(float(row.min()), float(row.max()))) for row in x])
        x = xq @ wq.T + b
        x = act_table.apply(weights.output_activation if i == last else weights.hidden_activation, x)
    return contract.to_action(x, weights.output_activation)
