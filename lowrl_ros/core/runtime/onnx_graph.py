"""Build and read the ONNX graph of a policy artifact (no torch, no ROS).

The graph is plain standard ONNX (opset 18), so any ONNX runtime gets actions from it:

    obs -> (obs - offset) * scale -> [clip to +-obs_clip] -> [layer -> activation]*
        -> [+ bound * tanh(residual head of the same normalised obs)]
        -> action_offset + action_scale * y -> clamp to [low, high] -> action

The clip is there only when the contract sets ``obs_clip``; the rescale (Mul, Add) only when it is not
the identity (``PolicyContract.action_transform``: a tanh output maps [-1, 1] onto [low, high] by
default, a linear "none" output passes through unless the contract gives action_scale/offset).
Hidden activations are those of ``activations.HIDDEN``: Relu, Tanh, Elu (alpha 1), LeakyRelu (alpha
0.01) and Softsign are single opset-18 ops; SiLU is ``x * Sigmoid(x)`` and GELU (tanh
approximation) ``0.5 * x * (1 + Tanh(k * (x + c * x^3)))`` composed from Mul/Add/Tanh (opset 18 has
no Gelu op; ORT fuses the pattern where it can). An artifact that uses nothing of format version 2
gets exactly the graph (and bytes) the version-1 writer made. The residual head (format version 3)
is a second MLP with initializers ``r{i}.*`` (stored like the base's ``l{i}.*``), its last layer
followed by Tanh, a Mul by ``residual.bound`` and an Add onto the base's y (``residual.y``, which the
action transform then reads).

Each layer's weight is stored one of four ways (``StoredLayer.storage`` / ``.dtype``):

- dense fp32: ``l{i}.w`` float32 [in, out] -> MatMul + Add.
- dense int8: ``l{i}.wq`` int8 [in, out] with symmetric per-output-channel ``l{i}.w_scale``; the
  activations are quantized on the fly (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by
  x_scale * w_scale -> Add bias). This is the QOperator pattern ORT's optimizer fuses into one
  DynamicQuantizeMatMul kernel. MatMulInteger gets the weights as uint8 (int8 + 128, zero point
  128), converted by constant-folded graph ops: with int8 weights ORT picks its U8S8 kernel, whose
  AVX2 path (VPMADDUBSW, x86 without VNNI) saturates pairs of products to int16 and gave actions
  off by a third of the range; U8U8 is exact on every CPU (checked in test_quantize).
- sparse (fp32 or int8): the non-zero values in row-major order of the [in, out] matrix, with one
  leading 0 (``l{i}.values``), and a little-endian packed bitmask ``l{i}.mask`` (uint8, one bit
  per weight). Graph ops (BitShift, BitwiseAnd, CumSum, Gather) expand them to the dense matrix.
  All their inputs are initializers, so ORT constant-folds the expansion once when the session is
  created: the file is small and nothing is paid per call.

Weights are kept transposed ([in, out]) because that is what MatMul wants for a row of
observations; ``StoredLayer.dense_t()`` gives the same matrix back in numpy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lowrl_ros.core.runtime import activations

OPSET = 18  # BitwiseAnd needs 18; ORT >= 1.14 and onnx >= 1.13 run it
IN_NAME = "obs"
OUT_NAME = "action"
RESIDUAL_Y = "residual.y"  # the combined y = y_base + correction that the action transform reads
STORAGES = ("dense", "sparse")
DTYPES = ("fp32", "int8")


@dataclass
class StoredLayer:
    """One layer as stored in the file (arrays exactly as in the ONNX initializers)."""

    in_dim: int
    out_dim: int
    storage: str  # "dense" | "sparse"
    dtype: str  # "fp32" | "int8"
    bias: np.ndarray  # float32 [out]
    weight_t: np.ndarray | None = None  # dense: [in, out] float32 or int8
    values: np.ndarray | None = None  # sparse: [nnz + 1] float32 or int8, values[0] == 0
    mask: np.ndarray | None = None  # sparse: uint8 [ceil(in*out/8)], bit k of byte j = weight 8j+k
    w_scale: np.ndarray | None = None  # int8: float32 [out]

    @property
    def nnz(self) -> int:
        if self.storage == "sparse":
            return int(self.values.size - 1)
        return int(np.count_nonzero(self.weight_t))

    def dense_t(self) -> np.ndarray:
        """The stored weight as a dense [in, out] array of the stored dtype (no dequantisation)."""
        if self.storage == "dense":
            return self.weight_t
        n = self.in_dim * self.out_dim
        bits = np.unpackbits(self.mask, bitorder="little")[:n].astype(np.int64)
        # Same expansion as the graph: the k-th set bit takes values[k] (values[0] is the 0 pad).
        index = np.cumsum(bits) * bits
        return self.values[index].reshape(self.in_dim, self.out_dim)

    def dequantized(self) -> np.ndarray:
        """The layer's weight as float32 [out, in], dequantised when int8."""
        w = self.dense_t().astype(np.float32)
        if self.dtype == "int8":
            w = w * self.w_scale[None, :]
        return np.ascontiguousarray(w.T)

    def nbytes(self) -> int:
        """Bytes of the stored arrays (what the layer costs on disk, before protobuf framing)."""
        arrays = [self.bias, self.weight_t, self.values, self.mask, self.w_scale]
        return int(sum(a.nbytes for a in arrays if a is not None))


def pack_layer(w: np.ndarray, b: np.ndarray, *, int8: bool, allow_sparse: bool = True) -> StoredLayer:
    """Store one layer (``w`` float32 [out, in]), sparse only when that is smaller on disk.

    int8 quantisation is symmetric per output channel: scale = max|w[o, :]| / 127, so an exact
    zero stays zero and pruned weights remain prunable.
    """
    out_dim, in_dim = w.shape
    bias = np.ascontiguousarray(b, dtype=np.float32)
    w_scale = None
    if int8:
        amax = np.abs(w).max(axis=1)
        w_scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
        wt = np.clip(np.rint(w / w_scale[:, None]), -127, 127).astype(np.int8).T
    else:
        wt = w.astype(np.float32).T
    wt = np.ascontiguousarray(wt)
    dtype = "int8" if int8 else "fp32"
    dense = StoredLayer(in_dim, out_dim, "dense", dtype, bias, weight_t=wt, w_scale=w_scale)
    if not allow_sparse:
        return dense
    flat = wt.reshape(-1)
    bits = flat != 0
    values = np.concatenate([np.zeros(1, wt.dtype), flat[bits]])
    mask = np.packbits(bits, bitorder="little")
    sparse = StoredLayer(in_dim, out_dim, "sparse", dtype, bias, values=values, mask=mask, w_scale=w_scale)
    # The expansion costs ~10 graph nodes (~600 bytes of protobuf); only worth it when it saves more.
    return sparse if sparse.nbytes() + 600 < dense.nbytes() else dense


def _const(graph_inits: list, name: str, array: np.ndarray) -> str:
    graph_inits.append(numpy_helper.from_array(np.asarray(array), name))
    return name


def build_model(
    layers: list[StoredLayer],
    *,
    hidden_activation: str,
    output_activation: str,
    obs_offset: np.ndarray,
    obs_scale: np.ndarray,
    action_low: np.ndarray,
    action_high: np.ndarray,
    metadata: dict[str, str],
    obs_clip: float | None = None,
    action_scale: np.ndarray | None = None,
    action_offset: np.ndarray | None = None,
    head_layers: list[StoredLayer] | None = None,
    head_hidden_activation: str = "relu",
    head_bound: np.ndarray | None = None,
) -> onnx.ModelProto:
    """The whole artifact graph; ``metadata`` goes into the model's metadata_props.

    Args:
        obs_clip: clip the normalised observation to [-obs_clip, obs_clip]; None: no Clip node.
        action_scale, action_offset: the contract's explicit action transform
            (``action_offset + action_scale * y``); both None: the version-1 default (tanh output
            mapped onto [low, high], none output unchanged). Give both or neither.
        head_layers, head_hidden_activation, head_bound: the residual correction head (format
            version 3): the action transform then reads y_base + head_bound * tanh(head(x_norm)),
            with the head's initializers named ``r{i}.*`` beside the base's ``l{i}.*``.
    """
    if (action_scale is None) != (action_offset is None):
        raise ValueError("give both action_scale and action_offset (PolicyContract.action_transform) or neither")
    for name, act in (("hidden", hidden_activation), ("output", output_activation)):
        allowed = activations.HIDDEN if name == "hidden" else activations.OUTPUT
        if act not in allowed:
            raise ValueError(f"{name} activation {act!r} has no ONNX form here; use one of {allowed}")
    inits: list = []
    nodes: list = []

    def node(op: str, inputs: list[str], output: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    x = IN_NAME
    x = node("Sub", [x, _const(inits, "obs_offset", obs_offset.astype(np.float32))], "obs_centred")
    x = node("Mul", [x, _const(inits, "obs_scale", obs_scale.astype(np.float32))], "obs_norm")
    if obs_clip is not None:
        clip = np.float32(obs_clip)
        x = node("Clip", [x, _const(inits, "obs_clip_low", np.array(-clip, np.float32)),
                          _const(inits, "obs_clip_high", np.array(clip, np.float32))], "obs_clipped")
    x_norm = x
    x = _mlp(node, nodes, inits, "l", layers, x, hidden_activation, output_activation)
    if head_layers:
        # The residual correction head (format version 3): y = y_base + bound * tanh(head(x_norm)).
        d = _mlp(node, nodes, inits, "r", head_layers, x_norm, head_hidden_activation, "tanh")
        d = node("Mul", [d, _const(inits, "residual.bound", np.asarray(head_bound, np.float64).astype(np.float32))],
                 "residual.d")
        x = node("Add", [x, d], RESIDUAL_Y)
    low = action_low.astype(np.float32)
    high = action_high.astype(np.float32)
    if action_scale is None:
        if output_activation == "tanh":
            # The version-1 graph, kept byte for byte: low + (y + 1) / 2 * (high - low) == mid + half * y
            x = node("Mul", [x, _const(inits, "action_half_range", (high - low) / 2)], "action_scaled")
            x = node("Add", [x, _const(inits, "action_mid", (high + low) / 2)], "action_unclamped")
    else:
        scale = np.asarray(action_scale, np.float64).astype(np.float32)
        offset = np.asarray(action_offset, np.float64).astype(np.float32)
        if not np.all(scale == 1.0):
            x = node("Mul", [x, _const(inits, "action_scale", scale)], "action_scaled")
        if not np.all(offset == 0.0):
            x = node("Add", [x, _const(inits, "action_offset", offset)], "action_unclamped")
    x = node("Min", [x, _const(inits, "action_high", high)], "action_le_high")
    nodes.append(helper.make_node("Max", [x, _const(inits, "action_low", low)], [OUT_NAME], name=OUT_NAME))

    obs_dim = layers[0].in_dim
    act_dim = layers[-1].out_dim
    graph = helper.make_graph(
        nodes,
        "lowrl_policy",
        [helper.make_tensor_value_info(IN_NAME, TensorProto.FLOAT, ["batch", obs_dim])],
        [helper.make_tensor_value_info(OUT_NAME, TensorProto.FLOAT, ["batch", act_dim])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="lowrl_ros")
    model.ir_version = 8  # onnx 1.13+ / ORT 1.14+ read it; newer IR versions lock older runtimes out
    helper.set_model_props(model, metadata)
    return model


def _mlp(node, nodes: list, inits: list, prefix: str, layers: list[StoredLayer], x: str, hidden: str,
         output: str) -> str:
    """Append the layers (initializers ``{prefix}{i}.*``) reading ``x``; returns the last activation's output."""
    for i, layer in enumerate(layers):
        p = f"{prefix}{i}"
        if layer.storage == "dense":
            w = _const(inits, f"{p}.w" if layer.dtype == "fp32" else f"{p}.wq", layer.weight_t)
        else:
            w = _expand_sparse(node, inits, p, layer)
        bias = _const(inits, f"{p}.b", layer.bias)
        if layer.dtype == "fp32":
            y = node("MatMul", [x, w], f"{p}.mm")
        else:
            q = [f"{p}.xq", f"{p}.xs", f"{p}.xzp"]
            nodes.append(helper.make_node("DynamicQuantizeLinear", [x], q, name=f"{p}.dql"))
            wu8 = _int8_to_uint8(node, inits, p, w)
            wzp = _const(inits, f"{p}.wzp", np.full(layer.out_dim, 128, np.uint8))
            acc = node("MatMulInteger", [q[0], wu8, q[2], wzp], f"{p}.mmi")
            accf = node("Cast", [acc], f"{p}.accf", to=TensorProto.FLOAT)
            scale = node("Mul", [q[1], _const(inits, f"{p}.w_scale", layer.w_scale)], f"{p}.scale")
            y = node("Mul", [accf, scale], f"{p}.mm")
        y = node("Add", [y, bias], f"{p}.pre")
        last = i == len(layers) - 1
        act = output if last else hidden
        x = _activation(node, inits, act, y, f"{p}.act")
    return x


def _activation(node, inits: list, act: str, y: str, out: str) -> str:
    """Append ``act`` (a name of activations.FUNCTIONS) applied to ``y``; returns the output's name.

    Scalar constants are shared by every layer (added once). relu and tanh keep their version-1
    node names, so graphs that use nothing new stay byte-identical.
    """
    def const(name: str, value: float) -> str:
        if not any(t.name == name for t in inits):
            _const(inits, name, np.array(value, np.float32))
        return name

    if act == "none":
        return y
    single = {"relu": ("Relu", {}), "tanh": ("Tanh", {}), "elu": ("Elu", {"alpha": activations.ELU_ALPHA}),
              "leaky_relu": ("LeakyRelu", {"alpha": activations.LEAKY_RELU_SLOPE}), "softsign": ("Softsign", {})}
    if act in single:
        op, attrs = single[act]
        return node(op, [y], out, **attrs)
    if act == "silu":  # x * sigmoid(x): ORT has no SiLU op in the default domain
        return node("Mul", [y, node("Sigmoid", [y], f"{out}.sig")], out)
    if act == "gelu_tanh":  # 0.5 * x * (1 + tanh(k * (x + c * x^3)))
        x2 = node("Mul", [y, y], f"{out}.x2")
        x3 = node("Mul", [x2, y], f"{out}.x3")
        inner = node("Add", [y, node("Mul", [x3, const("gelu.c", activations.GELU_C)], f"{out}.cx3")], f"{out}.in")
        t = node("Tanh", [node("Mul", [inner, const("gelu.k", activations.GELU_K)], f"{out}.kin")], f"{out}.t")
        half_x = node("Mul", [y, const("gelu.half", 0.5)], f"{out}.hx")
        return node("Mul", [half_x, node("Add", [t, const("gelu.one", 1.0)], f"{out}.t1")], out)
    raise ValueError(f"activation {act!r} has no ONNX form here; use one of {activations.HIDDEN}")


def _int8_to_uint8(node, inits: list, p: str, w: str) -> str:
    """int8 weights + 128 as uint8 (for ORT's exact U8U8 kernel); constant-folded at session start."""
    wide = node("Cast", [w], f"{p}.wq16", to=TensorProto.INT16)
    shifted = node("Add", [wide, _const(inits, f"{p}.k128", np.array(128, np.int16))], f"{p}.wq16_shift")
    return node("Cast", [shifted], f"{p}.wu8", to=TensorProto.UINT8)


def _expand_sparse(node, inits: list, p: str, layer: StoredLayer) -> str:
    """Graph ops turning (values, packed mask) into the dense [in, out] weight; constant-folded."""
    n = layer.in_dim * layer.out_dim
    mask = _const(inits, f"{p}.mask", layer.mask)
    values = _const(inits, f"{p}.values", layer.values)
    m = node("Unsqueeze", [mask, _const(inits, f"{p}.ax1", np.array([1], np.int64))], f"{p}.mask_col")
    shifted = node("BitShift", [m, _const(inits, f"{p}.shifts", np.arange(8, dtype=np.uint8))],
                   f"{p}.mask_shift", direction="RIGHT")
    bits = node("BitwiseAnd", [shifted, _const(inits, f"{p}.one", np.array(1, np.uint8))], f"{p}.bits8")
    bits = node("Reshape", [bits, _const(inits, f"{p}.flat", np.array([-1], np.int64))], f"{p}.bits_flat")
    bits = node("Slice", [bits, _const(inits, f"{p}.zero", np.array([0], np.int64)),
                          _const(inits, f"{p}.n", np.array([n], np.int64))], f"{p}.bits_n")
    bits = node("Cast", [bits], f"{p}.bits64", to=TensorProto.INT64)
    csum = node("CumSum", [bits, _const(inits, f"{p}.axis0", np.array(0, np.int64))], f"{p}.csum")
    index = node("Mul", [csum, bits], f"{p}.index")
    flat = node("Gather", [values, index], f"{p}.w_flat", axis=0)
    shape = _const(inits, f"{p}.shape", np.array([layer.in_dim, layer.out_dim], np.int64))
    return node("Reshape", [flat, shape], f"{p}.w_dense")


def read_layers(model: onnx.ModelProto, arch_layers: list[dict], prefix: str = "l") -> list[StoredLayer]:
    """Read the layer initializers ``{prefix}{i}.*`` named by the arch description; KeyError names a missing one."""
    inits = {t.name: t for t in model.graph.initializer}

    def get(name: str) -> np.ndarray:
        if name not in inits:
            raise KeyError(name)
        return numpy_helper.to_array(inits[name])

    layers = []
    for i, spec in enumerate(arch_layers):
        p = f"{prefix}{i}"
        layer = StoredLayer(int(spec["in"]), int(spec["out"]), spec["storage"], spec["dtype"], get(f"{p}.b"))
        if layer.dtype == "int8":
            layer.w_scale = get(f"{p}.w_scale")
        if layer.storage == "dense":
            layer.weight_t = get(f"{p}.w" if layer.dtype == "fp32" else f"{p}.wq")
        else:
            layer.values = get(f"{p}.values")
            layer.mask = get(f"{p}.mask")
        layers.append(layer)
    return layers


def initializer(model: onnx.ModelProto, name: str) -> np.ndarray:
    """One named initializer as numpy (KeyError when absent)."""
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    raise KeyError(name)
