"""Plain ONNX policies and Isaac Lab's exported ONNX: the graph walk (off-board; docs/import.md).

``load_onnx`` reads the weights out of an ONNX MLP from any exporter (``torch.onnx.export`` of an
``nn.Sequential``, Isaac Lab's ``export_policy_as_onnx``, rsl_rl's ``export_policy_to_onnx``):

    obs -> [normaliser: Sub/Add/Mul/Div by constants, then an optional symmetric Clip]
        -> [Gemm | MatMul (+ Add bias)] -> activation -> ... -> [Gemm | MatMul (+ Add)] -> output activation

It walks the graph from the one input to the one output. Identity, Cast, Dropout and Flatten of a
[batch, N] row are no-ops. Between two layers any chain of elementwise ops (the exporters decompose
SiLU, Softsign and GELU differently) is identified *numerically* against the runtime's activation
table (core/runtime/activations.py), so ``Sigmoid*x``, ``x/(1+|x|)`` or GELU's tanh formula written
out op by op are all recognised, and anything that is none of them (GELU with erf, a Tanh that is
then scaled, ...) is refused. Recurrent cells, convolutions, extra inputs (``h_in``/``c_in``),
branches and ops outside that set are refused in one line.

The contract comes from a sidecar (importers/contract.py) or, for ``<run>/exported/policy.onnx`` and
``load_isaaclab_run``, from the Isaac Lab run directory (importers/isaaclab.py). Both entries live
here because both read an ONNX file; the run-directory reader needs no onnx. No torch.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lowrl_ros.core.importers.contract import Affine, build_contract, read_sidecar, sidecar_for
from lowrl_ros.core.importers.isaaclab import run_provenance, run_sidecar
from lowrl_ros.core.importers.registry import Imported, ImportOptions, ImportRefused
from lowrl_ros.core.runtime import activations
from lowrl_ros.core.runtime.artifact import METADATA_KEY, MlpWeights

# --------------------------------------------------------------------------------------------------
# Numeric evaluation of small elementwise/constant sub-graphs (no onnxruntime needed)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _attr(node, name: str, default: Any) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _eval_node(node, ins: list[np.ndarray | None]) -> np.ndarray:
    """One node on float64 numpy arrays; KeyError when the op is not in this small table."""
    op = node.op_type
    x = ins[0]
    unary = {
        "Identity": lambda v: v, "Neg": np.negative, "Abs": np.abs, "Exp": np.exp, "Log": np.log,
        "Sqrt": np.sqrt, "Tanh": np.tanh, "Sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
        "Relu": lambda v: np.maximum(v, 0.0), "Softsign": lambda v: v / (1.0 + np.abs(v)),
        "Softplus": lambda v: np.logaddexp(0.0, v), "Erf": _erf, "Reciprocal": lambda v: 1.0 / v,
        "Dropout": lambda v: v,
    }
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
              "Max": np.maximum, "Min": np.minimum}
    if op in unary:
        return unary[op](x)
    if op in binary:
        return binary[op](x, ins[1])
    if op == "Cast":
        return np.asarray(x, np.float64)
    if op == "Elu":
        alpha = float(_attr(node, "alpha", 1.0))
        return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0)))
    if op == "LeakyRelu":
        alpha = float(_attr(node, "alpha", 0.01))
        return np.where(x > 0, x, alpha * x)
    if op == "Gelu":
        if _attr(node, "approximate", b"none") in (b"tanh", "tanh"):
            return activations.apply("gelu_tanh", x)
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    if op == "Clip":
        lo = ins[1] if len(ins) > 1 and ins[1] is not None else _attr(node, "min", -np.inf)
        hi = ins[2] if len(ins) > 2 and ins[2] is not None else _attr(node, "max", np.inf)
        return np.clip(x, lo, hi)
    if op == "Reshape":
        return np.reshape(x, [int(d) for d in ins[1]])
    if op == "Unsqueeze":
        axes = ins[1] if len(ins) > 1 else _attr(node, "axes", [])
        for ax in sorted(int(a) for a in np.atleast_1d(axes)):
            x = np.expand_dims(x, ax)
        return x
    if op == "Squeeze":
        return np.squeeze(x)
    if op == "Transpose":
        return np.transpose(x, _attr(node, "perm", None))
    raise KeyError(op)


def _constants(model) -> dict[str, np.ndarray]:
    """Initializers, Constant nodes and everything computable from them alone (float64 arrays)."""
    from onnx import numpy_helper

    consts = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer
              if t.data_type in (1, 6, 7, 10, 11)}  # float, int32, int64, float16, double
    for node in model.graph.node:
        if node.op_type == "Constant":
            t = _attr(node, "value", None)
            if t is not None:
                consts[node.output[0]] = numpy_helper.to_array(t).astype(np.float64)
            continue
        real = [i for i in node.input if i]
        if real and all(i in consts for i in real) and len(node.output) == 1:
            try:
                consts[node.output[0]] = np.asarray(_eval_node(node, [consts.get(i) if i else None
                                                                      for i in node.input]), np.float64)
            except (KeyError, ValueError, TypeError):
                pass
    return consts


# --------------------------------------------------------------------------------------------------
# The graph walk


_NOOPS = {"Identity", "Cast", "Dropout", "Flatten"}
_LINEAR = {"Gemm", "MatMul"}
_ELEMENTWISE = {"Identity", "Cast", "Dropout", "Neg", "Abs", "Exp", "Log", "Sqrt", "Tanh", "Sigmoid", "Relu",
                "Softsign", "Softplus", "Erf", "Reciprocal", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min",
                "Elu", "LeakyRelu", "Gelu", "Clip"}
_KNOWN_REFUSALS = {
    "LSTM": "a recurrent policy (LSTM)", "GRU": "a recurrent policy (GRU)", "RNN": "a recurrent policy (RNN)",
    "Conv": "a convolutional policy (Conv)", "ConvTranspose": "a convolutional policy (ConvTranspose)",
    "ArgMax": "a discrete-action policy (ArgMax)", "Softmax": "a discrete-action policy (Softmax)",
    "LogSoftmax": "a discrete-action policy (LogSoftmax)",
}
_SUPPORTED = f"an MLP (Gemm/MatMul layers, {'|'.join(activations.HIDDEN)} between them, linear or tanh output)"
_EXPORT_HINT = "export the feed-forward actor alone, with one observation input"
_PROBE = np.concatenate([np.linspace(-8.0, 8.0, 321), [-30.0, -0.001, 0.001, 30.0]])


@dataclass
class WalkedGraph:
    """What the walk found: the layers, the activations and the normaliser in front."""

    layers: list[tuple[np.ndarray, np.ndarray]]
    hidden_activation: str
    output_activation: str
    pre: Affine
    input_name: str
    output_name: str
    opset: int


def _refuse(where: str, found: str, hint: str = _EXPORT_HINT) -> ImportRefused:
    return ImportRefused(f"{where}: {found}; supported: {_SUPPORTED}; {hint}")


def load_onnx_model(source: Path):
    """The ONNX ModelProto, or a one-line ImportRefused for a missing, truncated or non-ONNX file."""
    import onnx

    source = Path(source)
    if not source.is_file():
        raise ImportRefused(f"{source}: no such file")
    try:
        model = onnx.load(str(source), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError and others, depending on the damage
        raise ImportRefused(f"{source}: not a readable ONNX file ({type(exc).__name__}); the file is truncated or "
                            "corrupt: export it again") from None
    external = {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}
    if external:
        # torch's dynamo exporter (rsl_rl 5.x export_policy_to_onnx) keeps the weights in policy.onnx.data
        missing = sorted(x for x in external if not (source.parent / x).is_file())
        if missing:
            raise ImportRefused(f"{source}: its weights are stored in {', '.join(missing)} beside it, which is "
                                "missing; "
                                "copy the .onnx together with its .data file")
        try:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(model, str(source.parent))
        except Exception as exc:
            raise ImportRefused(f"{source}: cannot read its external weight file ({type(exc).__name__}); copy the "
                                ".onnx together with its .data file again") from None
    if not model.graph.node:
        raise ImportRefused(f"{source}: not a readable ONNX file (no graph nodes); the file is truncated or "
                            "corrupt: export it again")
    return model


def walk_graph(model, where: str) -> WalkedGraph:
    """Read an MLP out of an ONNX graph (see the module docstring); ImportRefused otherwise."""
    graph = model.graph
    consts = _constants(model)
    inits = {t.name for t in graph.initializer}
    inputs = [i.name for i in graph.input if i.name not in inits]
    outputs = [o.name for o in graph.output]
    for node in graph.node:
        if node.op_type in _KNOWN_REFUSALS:
            raise _refuse(where, f"found {_KNOWN_REFUSALS[node.op_type]}, node {node.name or node.output[0]!r}")
    if len(inputs) != 1:
        recurrent = any(re.search(r"(^|_)(h|c)_?in$|hidden|state", i) for i in inputs[1:])
        kind = " (a recurrent policy's state inputs)" if recurrent else ""
        raise _refuse(where, f"the graph has inputs {inputs}{kind}; exactly one observation input is supported")
    if len(outputs) != 1:
        raise _refuse(where, f"the graph has outputs {outputs}; exactly one action output is supported")
    nodes = [n for n in graph.node if n.op_type != "Constant" and not (n.output and n.output[0] in consts)]
    consumers: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            if i and i not in consts:
                consumers.setdefault(i, []).append(n)
    visited: set[int] = set()

    def only_consumer(value: str):
        users = consumers.get(value, [])
        if len(users) != 1:
            if value == outputs[0] and not users:
                return None
            names = [u.op_type for u in users]
            raise _refuse(where, f"value {value!r} feeds {names or 'nothing'}; only a single chain of layers "
                                 "is supported (no branches, no dead ends)")
        return users[0]

    def const_of(node, k: int, what: str) -> np.ndarray:
        name = node.input[k] if k < len(node.input) else ""
        if name not in consts:
            raise _refuse(where, f"{node.op_type} {node.name or node.output[0]!r} has a non-constant {what}")
        return consts[name]

    cur = inputs[0]
    in_dims = [d.dim_value for d in graph.input[[i.name for i in graph.input].index(cur)].type.tensor_type.shape.dim]
    if len(in_dims) not in (1, 2):
        raise _refuse(where, f"observation input {cur!r} has shape {in_dims}; a flat [batch, N] row is supported "
                             "(Dict or image observations are not)")
    # 1. the normaliser, up to the first layer: symbolic, op by op
    pre_ops: list[tuple] = []
    node = only_consumer(cur)
    while node is not None and node.op_type not in _LINEAR:
        visited.add(id(node))
        op = node.op_type
        x_pos = list(node.input).index(cur) if cur in node.input else 0
        if op in _NOOPS:
            if op == "Flatten" and int(_attr(node, "axis", 1)) != 1:
                raise _refuse(where, f"Flatten with axis {_attr(node, 'axis', 1)} before the first layer")
        elif op in ("Sub", "Add", "Mul", "Div"):
            c = const_of(node, 1 - x_pos, "operand")
            kind = {"Sub": "sub" if x_pos == 0 else "rsub", "Add": "add", "Mul": "mul",
                    "Div": "div" if x_pos == 0 else None}[op]
            if kind is None:
                raise _refuse(where, f"Div of a constant by the observation ({node.name or node.output[0]!r})")
            pre_ops.append((kind, c.reshape(-1) if c.size > 1 else c.reshape(()), node.name or node.output[0]))
        elif op == "Clip":
            lo = consts.get(node.input[1]) if len(node.input) > 1 and node.input[1] else _attr(node, "min", None)
            hi = consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else _attr(node, "max", None)
            if lo is None or hi is None:
                raise _refuse(where, "an observation Clip without constant min and max")
            pre_ops.append(("clip", (float(np.asarray(lo).reshape(-1)[0]), float(np.asarray(hi).reshape(-1)[0])),
                            node.name or node.output[0]))
        else:
            raise _refuse(where, f"op {op} ({node.name or node.output[0]!r}) before the first layer")
        cur = node.output[0]
        node = only_consumer(cur)
    if node is None:
        raise _refuse(where, "no Gemm or MatMul layer between the input and the output")
    # 2. layers and the elementwise stretch after each
    layers: list[tuple[np.ndarray, np.ndarray]] = []
    acts: list[str] = []
    while node is not None:
        visited.add(id(node))
        li = len(layers)
        if node.input[0] != cur:
            raise _refuse(where, f"{node.op_type} {node.name!r} multiplies a constant by the activations")
        if node.op_type == "Gemm":
            if int(_attr(node, "transA", 0)):
                raise _refuse(where, f"Gemm {node.name!r} with transA=1")
            b = const_of(node, 1, "weight")
            w = (b.T if int(_attr(node, "transB", 0)) else b) * float(_attr(node, "alpha", 1.0))  # [in, out]
            out_dim = w.shape[1]
            bias = np.zeros(out_dim)
            if len(node.input) > 2 and node.input[2]:
                bias = np.broadcast_to(const_of(node, 2, "bias") * float(_attr(node, "beta", 1.0)),
                                       (1, out_dim)).reshape(-1)
            cur = node.output[0]
        else:  # MatMul, maybe followed by Add(bias)
            w = const_of(node, 1, "weight")
            if w.ndim != 2:
                raise _refuse(where, f"MatMul {node.name!r} with a {w.ndim}-D weight")
            out_dim = w.shape[1]
            bias = np.zeros(out_dim)
            cur = node.output[0]
            users = consumers.get(cur, [])
            if len(users) == 1 and users[0].op_type == "Add":
                other = [i for i in users[0].input if i != cur]
                if len(other) == 1 and other[0] in consts and consts[other[0]].size == out_dim:
                    visited.add(id(users[0]))
                    bias = consts[other[0]].reshape(-1)
                    cur = users[0].output[0]
        if w.ndim != 2:
            raise _refuse(where, f"layer {li} has a {w.ndim}-D weight")
        if layers and layers[-1][0].shape[0] != w.shape[0]:
            raise _refuse(where, f"layer {li} takes {w.shape[0]} inputs but layer {li - 1} gives "
                                 f"{layers[-1][0].shape[0]}")
        layers.append((np.ascontiguousarray(w.T, np.float32), np.asarray(bias, np.float32)))
        # the elementwise stretch up to the next layer (or the output)
        users = consumers.get(cur, [])
        region, value = [], cur
        if not (len(users) == 1 and users[0].op_type in _LINEAR) and users:
            region, value = _collect_region(cur, consumers, consts, where)
            visited.update(id(r) for r in region)
        nxt = only_consumer(value)
        acts.append(_identify(region, cur, value, consts, where, li))
        cur = value
        node = nxt
    if cur != outputs[0]:
        raise _refuse(where, f"the chain ends at {cur!r}, not at the graph output {outputs[0]!r}")
    stray = [n for n in nodes if id(n) not in visited]
    if stray:
        raise _refuse(where, f"op {stray[0].op_type} ({stray[0].name or stray[0].output[0]!r}) is not on the "
                             "path from the observation to the action")
    hidden, output = acts[:-1], acts[-1]
    if any(a == "none" for a in hidden):
        raise _refuse(where, "two linear layers in a row without an activation between them")
    if len(set(hidden)) > 1:
        raise _refuse(where, f"mixed hidden activations {sorted(set(hidden))}; one activation for every hidden layer "
                             "is supported")
    if output not in activations.OUTPUT:
        raise _refuse(where, f"the output layer ends in {output}; a linear or tanh output is supported")
    n_in = layers[0][0].shape[1]
    pre = Affine.identity(n_in)
    for kind, c, name in pre_ops:
        if kind == "clip":
            pre.clip_to(c[0], c[1], f"{where}: {name}")
        else:
            if c.ndim and c.size != n_in:
                raise _refuse(where, f"normaliser {name!r} has {c.size} values for {n_in} observations")
            pre.then(kind, c, f"{where}: {name}")
    if in_dims and in_dims[-1] not in (0, n_in):
        raise _refuse(where, f"the input has {in_dims[-1]} entries but the first layer reads {n_in}")
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return WalkedGraph(layers, hidden[0] if hidden else "relu", output, pre, inputs[0], outputs[0], opset)


def _collect_region(start: str, consumers: dict, consts: dict, where: str) -> tuple[list, str]:
    """Nodes of the elementwise stretch after a layer output ``start``, and its single output value.

    Grows the set of values reachable from ``start`` through elementwise nodes until the stretch has
    exactly one value that leaves it (consumed by a linear layer or by nothing: the graph output).
    """
    region: list = []
    seen: set[int] = set()
    values = {start}
    frontier = [start]
    while frontier:
        v = frontier.pop()
        for n in consumers.get(v, []):
            if id(n) in seen or n.op_type in _LINEAR:
                continue
            if n.op_type not in _ELEMENTWISE:
                raise _refuse(where, f"op {n.op_type} ({n.name or n.output[0]!r}) after a layer")
            if len(n.output) != 1:
                raise _refuse(where, f"op {n.op_type} with {len(n.output)} outputs after a layer")
            seen.add(id(n))
            region.append(n)
            values.add(n.output[0])
            frontier.append(n.output[0])
    # inputs of the region must come from the region or be scalar constants (an activation is elementwise)
    for n in region:
        for i in n.input:
            if i and i not in values and i not in consts:
                raise _refuse(where, f"op {n.op_type} ({n.name or n.output[0]!r}) mixes in another tensor {i!r}")
            if i in consts and consts[i].size != 1:
                raise _refuse(where, f"op {n.op_type} ({n.name or n.output[0]!r}) after a layer uses a constant of "
                                     f"{consts[i].size} values (a per-action scale or offset in the graph?)",
                              "export the network without it and put the action scale and offset in the sidecar's "
                              "actions.scale/offset")
    leaving = [v for v in values
               if not consumers.get(v) or any(c.op_type in _LINEAR or id(c) not in seen for c in consumers[v])]
    if len(leaving) != 1:
        raise _refuse(where, f"the ops after a layer produce {len(leaving)} results {sorted(leaving)}; one is needed")
    # keep graph (topological) order for evaluation
    return region, leaving[0]


def _identify(region: list, start: str, end: str, consts: dict, where: str, layer: int) -> str:
    """Which activation of the table the stretch computes, by evaluating it on probe values."""
    if not region:
        return "none"
    vals: dict[str, np.ndarray] = {start: _PROBE}
    order = list(region)
    done: set[int] = set()
    while len(done) < len(order):  # region nodes in dependency order
        progressed = False
        for n in order:
            if id(n) in done:
                continue
            ins = [i for i in n.input if i]
            if all(i in vals or i in consts for i in ins):
                try:
                    out = _eval_node(n, [vals.get(i, consts.get(i)) if i else None for i in n.input])
                except (KeyError, ValueError, TypeError) as exc:
                    raise _refuse(where, f"op {n.op_type} after layer {layer} ({exc})") from None
                vals[n.output[0]] = np.broadcast_to(np.asarray(out, np.float64), _PROBE.shape)
                done.add(id(n))
                progressed = True
        if not progressed:
            raise _refuse(where, f"cannot follow the ops after layer {layer}")
    y = vals[end]
    with np.errstate(all="ignore"):
        for name in activations.HIDDEN + ("none",):
            want = activations.apply(name, _PROBE)
            if np.all(np.abs(y - want) <= 1e-6 * (1.0 + np.abs(want))):
                return name
    ops = [n.op_type for n in region]
    hint = _EXPORT_HINT
    if "Erf" in ops or "Gelu" in ops:
        hint = "GELU must be the tanh approximation: train with GELU(approximate='tanh')"
    elif "Tanh" in ops:
        hint = "a Tanh output that is then scaled or shifted: export the network up to the Tanh and put the " \
               "scale and offset in the sidecar's actions.scale/offset"
    raise _refuse(where, f"the ops after layer {layer} ({'->'.join(ops)}) compute no supported activation", hint)


def weights_from_walk(walked: WalkedGraph, where: str) -> MlpWeights:
    try:
        return MlpWeights(walked.layers, walked.hidden_activation, walked.output_activation)
    except ValueError as exc:
        raise ImportRefused(f"{where}: {exc}") from None


def check_against_ort(model, walked: WalkedGraph, weights: MlpWeights, where: str) -> float:
    """Max |onnxruntime(source) - reconstruction| on random observations; refuses when they disagree.

    The walk reads the graph op by op; this runs the source graph itself, so a mistake in the walk
    (or an exporter doing something unforeseen) can never become a silently different artifact.
    """
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT's own load errors: not a graph the runtime accepts
        raise ImportRefused(f"{where}: onnxruntime cannot load the graph ({type(exc).__name__}); export it "
                            "again") from None
    obs = np.random.default_rng(0).normal(0.0, 2.0, (32, weights.input_dim)).astype(np.float32)
    want = np.concatenate([sess.run(None, {walked.input_name: o[None]})[0].reshape(1, -1) for o in obs])
    x = walked.pre.a * obs + walked.pre.b
    if walked.pre.clip is not None:
        x = np.clip(x, -walked.pre.clip, walked.pre.clip)
    got = weights.forward(x)
    err = float(np.max(np.abs(want - got))) if want.shape == got.shape else float("inf")
    if not err <= 1e-4 * (1.0 + float(np.max(np.abs(want)))):
        raise _refuse(where, f"the graph computes something else than the layers read from it (max difference "
                             f"{err:.3g})")
    return err


def _read(model, where: str) -> tuple[WalkedGraph, MlpWeights, list[str]]:
    """The walked graph, its weights checked against onnxruntime, and the notes describing them."""
    walked = walk_graph(model, where)
    weights = weights_from_walk(walked, where)
    check_against_ort(model, walked, weights, where)
    dims = [walked.layers[0][0].shape[1]] + [w.shape[0] for w, _ in walked.layers]
    notes = [f"MLP {'->'.join(map(str, dims))}, hidden {walked.hidden_activation}, output {walked.output_activation}"]
    if not walked.pre.is_identity:
        clip = f", clip +-{walked.pre.clip:g}" if walked.pre.clip is not None else ""
        notes.append(f"normaliser baked into the graph folded into the contract (obs offset/scale{clip})")
    return walked, weights, notes


def load_onnx(source: Path, options: ImportOptions) -> Imported:
    """A plain ONNX MLP with its contract sidecar (see the module docstring and docs/import.md)."""
    source = Path(source)
    model = load_onnx_model(source)
    if any(p.key == METADATA_KEY for p in model.metadata_props):
        raise ImportRefused(f"{source}: this is already a lowrl artifact (it has '{METADATA_KEY}' metadata); "
                            "use it as it is (lowrl inspect shows its contract)")
    walked, weights, notes = _read(model, str(source))
    sidecar = sidecar_for(source, options, required=False)
    run = source.parent.parent
    if sidecar is None and source.parent.name == "exported" and (run / "params" / "env.yaml").is_file():
        # <run>/exported/policy.onnx of an Isaac Lab run: the run's env config is the sidecar
        sidecar = run_sidecar(run, weights.input_dim, weights.output_dim, notes, options.io_descriptors)
        notes.append(f"contract from the Isaac Lab run directory {run.name} (params/env.yaml)")
    if sidecar is None:
        sidecar_for(source, options, required=True)  # refuses, saying what to write
    contract = build_contract(n_obs=weights.input_dim, n_act=weights.output_dim, graph_pre=walked.pre,
                              sidecar=sidecar, options=options, source=source, kind="onnx", notes=notes,
                              provenance={"onnx_opset": str(walked.opset)})
    return Imported(weights, contract, "onnx", notes)


def load_isaaclab_run(run_dir: Path, options: ImportOptions) -> Imported:
    """An Isaac Lab run directory: ``exported/policy.onnx`` + ``params/env.yaml`` (+ IO descriptors)."""
    run_dir = Path(run_dir)
    onnx_path = run_dir / "exported" / "policy.onnx"
    if not onnx_path.is_file():
        raise ImportRefused(f"{run_dir}: no exported/policy.onnx; run Isaac Lab's play.py on the checkpoint first "
                            "(it exports the policy), or import the model_*.pt with --from rsl_rl")
    walked, weights, notes = _read(load_onnx_model(onnx_path), str(onnx_path))
    if options.sidecar is not None:
        sidecar = read_sidecar(options.sidecar)
        notes.append(f"contract from the sidecar {options.sidecar}; params/env.yaml not read")
    else:
        sidecar = run_sidecar(run_dir, weights.input_dim, weights.output_dim, notes, options.io_descriptors)
    contract = build_contract(n_obs=weights.input_dim, n_act=weights.output_dim, graph_pre=walked.pre,
                              sidecar=sidecar, options=options, source=onnx_path, kind="isaaclab", notes=notes,
                              provenance={"onnx_opset": str(walked.opset), **run_provenance(run_dir)},
                              last_action="raw")
    return Imported(weights, contract, "isaaclab", notes)
