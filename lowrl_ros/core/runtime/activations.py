"""The activations a policy artifact may use, as numpy functions (no torch, no ROS).

One table for every consumer: the float64 reference (``MlpWeights.forward``), the numpy engine, the
ONNX graph builder, the int8 simulation and the C exporter all take their names from here, so an
activation is either supported everywhere or nowhere.

Hidden layers: ``relu``, ``tanh``, ``elu`` (alpha 1, torch's default), ``leaky_relu`` (slope 0.01,
torch's default), ``silu`` (x * sigmoid(x), a.k.a. swish), ``gelu_tanh`` (GELU's tanh
approximation, torch ``GELU(approximate="tanh")``) and ``softsign`` (x / (1 + |x|)).
Output layer: ``tanh`` (squashed into [-1, 1], then mapped to the action limits) or ``none``.
"""
from __future__ import annotations

import numpy as np

ELU_ALPHA = 1.0
LEAKY_RELU_SLOPE = 0.01
GELU_K = float(np.sqrt(2.0 / np.pi))
GELU_C = 0.044715


def _elu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, ELU_ALPHA * np.expm1(np.minimum(x, 0.0)))


def _silu(x: np.ndarray) -> np.ndarray:
    # x * sigmoid(x), written so that neither branch overflows
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, x / (1.0 + e), x * e / (1.0 + e))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(GELU_K * (x + GELU_C * x * x * x)))


FUNCTIONS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
    "elu": _elu,
    "leaky_relu": lambda x: np.where(x > 0, x, LEAKY_RELU_SLOPE * x),
    "silu": _silu,
    "gelu_tanh": _gelu_tanh,
    "softsign": lambda x: x / (1.0 + np.abs(x)),
    "none": lambda x: x,
}
HIDDEN = ("relu", "tanh", "elu", "leaky_relu", "silu", "gelu_tanh", "softsign")
OUTPUT = ("tanh", "none")
# Activations a format-version-1 reader (lowrl_ros before the import work) understands.
LEGACY = ("relu", "tanh", "none")


def apply(name: str, x: np.ndarray) -> np.ndarray:
    """``name`` applied elementwise to ``x`` (a new array); KeyError for an unknown name."""
    return FUNCTIONS[name](x)
