"""Plain ONNX policies, the YAML contract sidecar and Isaac Lab run directories (off-board; docs/import.md).

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

The I/O contract of a plain ONNX file comes from a YAML sidecar (``--sidecar``, default: the file
next to the ONNX with the same stem and ``.yaml``): see :func:`read_sidecar` and docs/import.md.
``load_isaaclab_run`` fills that sidecar from an Isaac Lab run directory instead.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lowrl_ros.core.compress.importing import Imported, ImportOptions, ImportRefused
from lowrl_ros.core.runtime import activations
from lowrl_ros.core.runtime.artifact import METADATA_KEY, MlpWeights, PolicyContract

# Limits used when a source says nothing about them (rsl_rl checkpoints without a sidecar, a sidecar
# without actions.low/high): wide enough never to clip a policy's output, so the artifact equals the
# source; a robot should always give its joint limits instead.
DEFAULT_ACTION_LIMIT = 1000.0
DEFAULT_PERIOD_S = 0.02
DOCS = "docs/import.md"

# --------------------------------------------------------------------------------------------------
# The observation pre-processing as one per-entry affine map and a clip: x = clip(a * obs + b, +-clip)


@dataclass
class Affine:
    """Per-entry ``x = clip(a * obs + b, -clip, clip)``, composed op by op (clip only last)."""

    a: np.ndarray
    b: np.ndarray
    clip: float | None = None

    @classmethod
    def identity(cls, n: int) -> "Affine":
        return cls(np.ones(n), np.zeros(n))

    def then(self, op: str, c: np.ndarray, where: str) -> None:
        """Apply ``x op c`` (``c op x`` for "rsub"/"rdiv") after what is already there."""
        if self.clip is not None:
            raise ImportRefused(f"{where}: a {op} after the observation Clip; only a Clip at the end of the "
                                f"normalisation can be represented (see {DOCS}, 'What is refused')")
        c = np.broadcast_to(np.asarray(c, np.float64), self.a.shape)
        if op == "sub":
            self.b = self.b - c
        elif op == "add":
            self.b = self.b + c
        elif op == "rsub":  # c - x
            self.a, self.b = -self.a, c - self.b
        elif op == "mul":
            self.a, self.b = self.a * c, self.b * c
        elif op == "div":
            if np.any(c == 0):
                raise ImportRefused(f"{where}: the normaliser divides by 0; fix the normaliser's std")
            self.a, self.b = self.a / c, self.b / c
        else:
            raise ValueError(op)

    def clip_to(self, lo: float, hi: float, where: str) -> None:
        if not (math.isfinite(lo) and math.isfinite(hi) and lo == -hi and hi > 0):
            raise ImportRefused(f"{where}: observation Clip to [{lo}, {hi}]; only a symmetric clip [-c, c] "
                                "(c > 0) of the normalised observation is supported")
        self.clip = hi if self.clip is None else min(self.clip, hi)

    @property
    def is_identity(self) -> bool:
        return bool(np.all(self.a == 1) and np.all(self.b == 0) and self.clip is None)

    def offset_scale(self) -> tuple[np.ndarray, np.ndarray]:
        """(offset, scale) with a * obs + b == (obs - offset) * scale."""
        if np.any(self.a == 0):
            raise ImportRefused("the observation normalisation multiplies an entry by 0; fix the normaliser")
        return -self.b / self.a, self.a.copy()


def compose(first: Affine, second: Affine, where: str) -> Affine:
    """``second`` applied after ``first`` (a clip in ``first`` may only be followed by an identity)."""
    if first.clip is not None and not (np.all(second.a == 1) and np.all(second.b == 0)):
        raise ImportRefused(f"{where}: the observations are clipped and then normalised again; the artifact clips "
                            "only once, after all normalisation: drop obs_clip from the sidecar or the graph's Clip")
    out = Affine(second.a * first.a, second.a * first.b + second.b, first.clip)
    if second.clip is not None:
        out.clip = second.clip if out.clip is None else min(out.clip, second.clip)
    return out


# --------------------------------------------------------------------------------------------------
# The contract sidecar


_TOP_KEYS = {"observations", "actions", "obs_normalizer", "obs_clip", "control_period_s", "env_id", "provenance"}
_OBS_KEYS = {"name", "size", "names", "scale", "offset", "clip"}
_ACT_KEYS = {"names", "scale", "offset", "low", "high"}
_NORM_KEYS = {"mean", "std", "eps"}


@dataclass
class Sidecar:
    """A parsed contract sidecar (the ``observations`` groups expanded entry by entry)."""

    obs_names: list[str]
    obs_pre: Affine  # entry offset/scale, then obs_normalizer, then obs_clip
    action_names: list[str]
    action_scale: np.ndarray
    action_offset: np.ndarray
    action_low: np.ndarray | None
    action_high: np.ndarray | None
    control_period_s: float | None = None
    env_id: str | None = None
    term_clips: dict[str, tuple[float, float]] = field(default_factory=dict)
    provenance: dict[str, str] = field(default_factory=dict)


def _fail(where: str, problem: str) -> ImportRefused:
    return ImportRefused(f"{where}: {problem} (the sidecar format is in {DOCS})")


def _finite(where: str, key: str, value: Any, n: int) -> np.ndarray:
    """A scalar (repeated n times) or a list of n finite numbers."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise _fail(where, f"{key} must be a number or a list of numbers, got {value!r}") from None
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.ndim != 1 or arr.size != n:
        raise _fail(where, f"{key} has {arr.size} values for {n} entries; give one number or exactly {n}")
    if not np.isfinite(arr).all():
        raise _fail(where, f"{key} contains NaN or Inf; give finite numbers")
    return arr


def _names(where: str, key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(s, str) and s for s in value):
        raise _fail(where, f"{key} must be a non-empty list of names, got {value!r}")
    return list(value)


def parse_sidecar(data: Any, where: str) -> Sidecar:
    """Validate a sidecar document (already loaded from YAML); ImportRefused names the first problem.

    The format (docs/import.md has a complete example)::

        observations:            # in the order the network reads them
          - name: base_ang_vel   # a group of `size` entries named base_ang_vel[0..size-1]
            size: 3
            scale: 0.25          # x = (obs - offset) * scale, per group (a number or one per entry)
          - name: joint_pos_rel
            names: [FL_hip, FL_thigh]   # entries named joint_pos_rel[FL_hip], ...
            offset: [0.1, 0.8]
          - yaw_rate             # a bare string is one entry
        obs_normalizer: {mean: [...], std: [...], eps: 0.01}   # optional: x = (x - mean) / (std + eps)
        obs_clip: 100.0          # optional: x = clip(x, -100, 100) after all of the above
        actions:
          names: [FL_hip, FL_thigh]
          scale: 0.5             # action = clip(offset + scale * y, low, high), y the network output
          offset: [0.1, 0.8]     # e.g. the default joint positions
          low: [-1.0, -0.5]      # joint limits (default +-1000 with a note)
          high: [1.0, 2.0]
        control_period_s: 0.02
    """
    if not isinstance(data, dict):
        raise _fail(where, f"expected a mapping with keys {sorted(_TOP_KEYS)}, got {type(data).__name__}")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise _fail(where, f"unknown keys {sorted(unknown)}; known keys: {sorted(_TOP_KEYS)}")
    for key in ("observations", "actions"):
        if key not in data:
            raise _fail(where, f"'{key}' is missing")
    groups = data["observations"]
    if not isinstance(groups, list) or not groups:
        raise _fail(where, "observations must be a non-empty list of entries or groups")
    names: list[str] = []
    a_parts, b_parts = [], []
    term_clips: dict[str, tuple[float, float]] = {}
    for i, g in enumerate(groups):
        if isinstance(g, str) and g:
            g = {"name": g}
        if not isinstance(g, dict):
            raise _fail(where, f"observations[{i}] must be a name or a mapping with keys {sorted(_OBS_KEYS)}")
        bad = set(g) - _OBS_KEYS
        if bad:
            raise _fail(where, f"observations[{i}] has unknown keys {sorted(bad)}; known: {sorted(_OBS_KEYS)}")
        name = g.get("name")
        if not isinstance(name, str) or not name:
            raise _fail(where, f"observations[{i}] needs a 'name'")
        if "names" in g and "size" in g:
            raise _fail(where, f"observation group {name!r}: give 'size' or 'names', not both")
        if "names" in g:
            sub = _names(where, f"observations[{i}].names", g["names"])
            entries = [f"{name}[{s}]" for s in sub]
        elif "size" in g:
            size = g["size"]
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise _fail(where, f"observation group {name!r}: size must be an integer >= 1, got {size!r}")
            entries = [name] if size == 1 else [f"{name}[{k}]" for k in range(size)]
        else:
            entries = [name]
        n = len(entries)
        scale = _finite(where, f"observations[{i}].scale", g.get("scale", 1.0), n)
        offset = _finite(where, f"observations[{i}].offset", g.get("offset", 0.0), n)
        if np.any(scale == 0):
            raise _fail(where, f"observation group {name!r} has scale 0, which erases it; use a non-zero scale")
        if "clip" in g:
            lo_hi = _finite(where, f"observations[{i}].clip", g["clip"], 2)
            if not lo_hi[0] < lo_hi[1]:
                raise _fail(where, f"observation group {name!r}: clip must be [low, high] with low < high")
            term_clips[name] = (float(lo_hi[0]), float(lo_hi[1]))
        names += entries
        a_parts.append(scale)
        b_parts.append(-offset * scale)
    if len(set(names)) != len(names):
        dup = sorted({s for s in names if names.count(s) > 1})
        raise _fail(where, f"observation names repeat: {dup}; each entry needs a unique name")
    pre = Affine(np.concatenate(a_parts), np.concatenate(b_parts))
    n_obs = len(names)
    norm = data.get("obs_normalizer")
    if norm is not None:
        if not isinstance(norm, dict) or set(norm) - _NORM_KEYS or not {"mean", "std"} <= set(norm):
            raise _fail(where, "obs_normalizer must be a mapping {mean: [...], std: [...], eps: number (default 0)}")
        mean = _finite(where, "obs_normalizer.mean", norm["mean"], n_obs)
        std = _finite(where, "obs_normalizer.std", norm["std"], n_obs)
        eps = float(_finite(where, "obs_normalizer.eps", norm.get("eps", 0.0), 1)[0])
        if np.any(std + eps <= 0):
            raise _fail(where, "obs_normalizer: std + eps must be > 0 for every entry")
        pre.then("sub", mean, where)
        pre.then("div", std + eps, where)
    if data.get("obs_clip") is not None:
        c = float(_finite(where, "obs_clip", data["obs_clip"], 1)[0])
        if c <= 0:
            raise _fail(where, f"obs_clip must be > 0, got {c}")
        pre.clip_to(-c, c, where)

    acts = data["actions"]
    if isinstance(acts, list):
        acts = {"names": acts}
    if not isinstance(acts, dict):
        raise _fail(where, f"actions must be a mapping with keys {sorted(_ACT_KEYS)}")
    bad = set(acts) - _ACT_KEYS
    if bad:
        raise _fail(where, f"actions has unknown keys {sorted(bad)}; known: {sorted(_ACT_KEYS)}")
    if "names" not in acts:
        raise _fail(where, "actions.names is missing")
    action_names = _names(where, "actions.names", acts["names"])
    if len(set(action_names)) != len(action_names):
        raise _fail(where, "actions.names repeat; each action needs a unique name")
    n_act = len(action_names)
    scale = _finite(where, "actions.scale", acts.get("scale", 1.0), n_act)
    if np.any(scale == 0):
        raise _fail(where, "actions.scale contains 0, which pins that action; use a non-zero scale")
    offset = _finite(where, "actions.offset", acts.get("offset", 0.0), n_act)
    low = _finite(where, "actions.low", acts["low"], n_act) if "low" in acts else None
    high = _finite(where, "actions.high", acts["high"], n_act) if "high" in acts else None
    if low is not None and high is not None and not np.all(low < high):
        raise _fail(where, "actions.low must be < actions.high for every action")
    period = None
    if data.get("control_period_s") is not None:
        period = float(_finite(where, "control_period_s", data["control_period_s"], 1)[0])
        if period <= 0:
            raise _fail(where, f"control_period_s must be > 0 seconds, got {period}")
    env_id = data.get("env_id")
    if env_id is not None and not isinstance(env_id, str):
        raise _fail(where, f"env_id must be a string, got {env_id!r}")
    prov = data.get("provenance") or {}
    if not isinstance(prov, dict):
        raise _fail(where, "provenance must be a mapping of strings")
    return Sidecar(names, pre, action_names, scale, offset, low, high, period, env_id, term_clips,
                   {str(k): str(v) for k, v in prov.items()})


def read_sidecar(path: Path) -> Sidecar:
    """Load and validate a YAML sidecar file."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ImportRefused(f"{path}: no such sidecar file; give --sidecar PATH (the format is in {DOCS})") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ImportRefused(f"{path}: not a readable YAML sidecar ({first})") from None
    return parse_sidecar(data, str(path))


def build_contract(*, n_obs: int, n_act: int, graph_pre: Affine, sidecar: Sidecar | None, options: ImportOptions,
                   source: Path, kind: str, notes: list[str], provenance: dict[str, str] | None = None
                   ) -> PolicyContract:
    """The contract of an imported network: sidecar (or generic names) + the normaliser found in the source.

    The source's own output is kept exactly (action = offset + scale * y with the sidecar's scale and
    offset, identity without one), so the artifact computes what the source framework computes.
    """
    where = str(source)
    if sidecar is None:
        obs_names = [f"obs_{i}" for i in range(n_obs)]
        action_names = [f"action_{i}" for i in range(n_act)]
        pre = graph_pre
        scale, offset = np.ones(n_act), np.zeros(n_act)
        low = high = None
        period, env_id = None, None
        notes.append("no sidecar: generic names obs_0.., action_0.. and limits "
                     f"+-{DEFAULT_ACTION_LIMIT:g}; give --sidecar with your robot's names and limits ({DOCS})")
    else:
        if len(sidecar.obs_names) != n_obs:
            raise ImportRefused(f"{where}: the sidecar names {len(sidecar.obs_names)} observations but the network "
                                f"reads {n_obs}; list every observation entry in order ({DOCS})")
        if len(sidecar.action_names) != n_act:
            raise ImportRefused(f"{where}: the sidecar names {len(sidecar.action_names)} actions but the network "
                                f"outputs {n_act}; list every action in order ({DOCS})")
        obs_names, action_names = sidecar.obs_names, sidecar.action_names
        pre = compose(sidecar.obs_pre, graph_pre, where)
        scale, offset = sidecar.action_scale, sidecar.action_offset
        low, high = sidecar.action_low, sidecar.action_high
        period, env_id = sidecar.control_period_s, sidecar.env_id
        for term, (lo, hi) in sidecar.term_clips.items():
            notes.append(f"observation {term!r} is clipped to [{lo:g}, {hi:g}] before its scale in training; the "
                         "artifact does not clip single terms: clip it in the robot's observation config")
    if low is None or high is None:
        if sidecar is not None:
            notes.append(f"no action limits in the sidecar: +-{DEFAULT_ACTION_LIMIT:g} used; give actions.low/high "
                         "(the joint limits) for a robot")
        low = np.full(n_act, -DEFAULT_ACTION_LIMIT) if low is None else low
        high = np.full(n_act, DEFAULT_ACTION_LIMIT) if high is None else high
    if options.control_period_s is not None:
        period = options.control_period_s
    if period is None:
        period = DEFAULT_PERIOD_S
        notes.append(f"control period not given: {DEFAULT_PERIOD_S} s assumed; set control_period_s in the sidecar "
                     "or --control-period")
    obs_offset, obs_scale = pre.offset_scale()
    prov = {"tool": "lowrl import", "kind": kind, "source": source.name}
    if source.is_file():
        prov["source_sha256"] = hashlib.sha256(source.read_bytes()).hexdigest()
    prov.update(provenance or {})
    if sidecar is not None:
        prov.update(sidecar.provenance)
        for term, (lo, hi) in sidecar.term_clips.items():
            prov[f"obs_term_clip.{term}"] = f"[{lo:g}, {hi:g}]"
    try:
        return PolicyContract(
            obs_names=obs_names, action_names=action_names, action_low=low, action_high=high,
            obs_offset=obs_offset, obs_scale=obs_scale, obs_clip=pre.clip,
            action_scale=scale, action_offset=offset, control_period_s=period,
            version=options.version, tier=options.tier, env_id=options.env_id or env_id, provenance=prov,
        )
    except ValueError as exc:
        raise ImportRefused(f"{where}: {exc}") from None


def sidecar_for(source: Path, options: ImportOptions, *, required: bool) -> Sidecar | None:
    """options.sidecar, else ``<stem>.yaml`` beside the source; None (or a refusal when required)."""
    path = options.sidecar
    if path is None:
        beside = source.with_suffix(".yaml")
        if beside.is_file():
            path = beside
    if path is None:
        if required:
            raise ImportRefused(f"{source}: a plain ONNX/TorchScript policy needs a contract sidecar (observation and "
                                f"action names, scaling, limits, period): write {source.with_suffix('.yaml').name} "
                                f"beside it or give --sidecar PATH (format in {DOCS})")
        return None
    return read_sidecar(Path(path))


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


def load_onnx(source: Path, options: ImportOptions) -> Imported:
    """A plain ONNX MLP with its contract sidecar (see the module docstring and docs/import.md)."""
    source = Path(source)
    model = load_onnx_model(source)
    if any(p.key == METADATA_KEY for p in model.metadata_props):
        raise ImportRefused(f"{source}: this is already a lowrl artifact (it has '{METADATA_KEY}' metadata); "
                            "use it as it is (lowrl inspect shows its contract)")
    walked = walk_graph(model, str(source))
    weights = weights_from_walk(walked, str(source))
    check_against_ort(model, walked, weights, str(source))
    notes = _graph_notes(walked)
    sidecar = sidecar_for(source, options, required=False)
    run = source.parent.parent
    if sidecar is None and source.parent.name == "exported" and (run / "params" / "env.yaml").is_file():
        # <run>/exported/policy.onnx of an Isaac Lab run: the run's env config is the sidecar
        sidecar = parse_sidecar(isaaclab_sidecar(run, weights.input_dim, weights.output_dim, notes), str(run))
        notes.append(f"contract from the Isaac Lab run directory {run.name} (params/env.yaml)")
    if sidecar is None:
        sidecar_for(source, options, required=True)  # refuses, saying what to write
    contract = build_contract(n_obs=weights.input_dim, n_act=weights.output_dim, graph_pre=walked.pre,
                              sidecar=sidecar, options=options, source=source, kind="onnx", notes=notes,
                              provenance={"onnx_opset": str(walked.opset)})
    return Imported(weights, contract, "onnx", notes)


def _graph_notes(walked: WalkedGraph) -> list[str]:
    dims = [walked.layers[0][0].shape[1]] + [w.shape[0] for w, _ in walked.layers]
    notes = [f"MLP {'->'.join(map(str, dims))}, hidden {walked.hidden_activation}, output {walked.output_activation}"]
    if not walked.pre.is_identity:
        clip = f", clip +-{walked.pre.clip:g}" if walked.pre.clip is not None else ""
        notes.append(f"normaliser baked into the graph folded into the contract (obs offset/scale{clip})")
    return notes


# --------------------------------------------------------------------------------------------------
# Isaac Lab run directories
#
# Read from params/env.yaml (a dump of the env cfg dataclass): decimation, sim.dt,
# observations.policy.<term>.{func, scale, clip, history_length, params.asset_cfg.joint_names},
# actions.<term>.{class_type, joint_names, scale, offset, use_default_offset, clip},
# scene.robot.init_state.joint_pos (regex -> default position).
# From IO_descriptors.yaml (Isaac Lab >= 2.2, env.export_io_descriptors=true), when present, which
# wins: observations.policy[*].{name, shape, joint_names, overloads.{scale, clip, history_length}},
# actions[*].{joint_names, scale, offset, clip}, scene.{dt}.
# From params/agent.yaml: nothing the contract needs (the ONNX carries the normaliser); recorded.

# Sizes of Isaac Lab's standard observation functions (isaaclab.envs.mdp.observations) when no IO
# descriptors say so; "J" = one per joint of the action, "A" = the action size.
_TERM_SIZES = {"base_lin_vel": 3, "base_ang_vel": 3, "projected_gravity": 3, "generated_commands": 3,
               "root_lin_vel_w": 3, "root_ang_vel_w": 3, "base_pos_z": 1, "root_quat_w": 4,
               "joint_pos": "J", "joint_pos_rel": "J", "joint_vel": "J", "joint_vel_rel": "J",
               "joint_pos_limit_normalized": "J", "joint_effort": "J", "last_action": "A"}


def _yaml(path: Path, where: str) -> Any:
    import yaml

    class _Loader(yaml.SafeLoader):
        """Isaac Lab's dump writes python tags for tuples and slices: read them as plain data."""

    def _seq(loader, suffix, node):  # noqa: ARG001
        return loader.construct_sequence(node) if isinstance(node, yaml.SequenceNode) else loader.construct_scalar(node)

    _Loader.add_multi_constructor("tag:yaml.org,2002:python/", _seq)
    try:
        return yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ImportRefused(f"{where}: not a readable YAML file ({first})") from None


def _func_name(func: Any) -> str:
    s = str(func or "")
    return re.split(r"[:.]", s)[-1]


def _scalar_or_list(v: Any) -> Any:
    return 1.0 if v is None else v


def _default_positions(init_joint_pos: Any, joint_names: list[str], where: str) -> np.ndarray:
    """Isaac Lab's init_state.joint_pos (regex -> value) resolved for ``joint_names`` (first match wins)."""
    if not isinstance(init_joint_pos, dict):
        init_joint_pos = {".*": 0.0}
    out = []
    for j in joint_names:
        for pattern, value in init_joint_pos.items():
            if re.fullmatch(str(pattern), j):
                out.append(float(value))
                break
        else:
            raise ImportRefused(f"{where}: no default position for joint {j!r} in scene.robot.init_state.joint_pos")
    return np.array(out)


def _joint_limits(io: Any, joint_names: list[str]) -> tuple[list[float], list[float]] | None:
    """Per-joint (low, high) position limits from the IO descriptors' articulation, if recorded."""
    for art in ((io or {}).get("articulations") or {}).values():
        names, lims = art.get("joint_names"), art.get("default_joint_pos_limits")
        if not (isinstance(names, list) and isinstance(lims, list) and len(names) == len(lims)):
            continue
        table = dict(zip(names, lims))
        if all(j in table for j in joint_names):
            pairs = np.asarray([table[j] for j in joint_names], np.float64)
            if pairs.shape == (len(joint_names), 2) and np.isfinite(pairs).all() and np.all(pairs[:, 0] < pairs[:, 1]):
                return pairs[:, 0].tolist(), pairs[:, 1].tolist()
    return None


def isaaclab_sidecar(run_dir: Path, n_obs: int, n_act: int, notes: list[str]) -> dict:
    """A sidecar document (see :func:`parse_sidecar`) filled from an Isaac Lab run directory."""
    env_path = run_dir / "params" / "env.yaml"
    if not env_path.is_file():
        raise ImportRefused(f"{run_dir}: no params/env.yaml; give the run directory Isaac Lab wrote "
                            "(logs/rsl_rl/<task>/<date>) or the ONNX with --sidecar")
    env = _yaml(env_path, str(env_path)) or {}
    io_path = next((p for p in (run_dir / "IO_descriptors.yaml", run_dir / "params" / "IO_descriptors.yaml")
                    if p.is_file()), run_dir / "IO_descriptors.yaml")
    io = _yaml(io_path, str(io_path)) if io_path.is_file() else None
    where = str(env_path)
    try:
        dt = float(env["sim"]["dt"])
        decimation = int(env["decimation"])
    except (KeyError, TypeError, ValueError):
        raise ImportRefused(f"{where}: sim.dt and decimation are missing; is this an Isaac Lab env.yaml?") from None
    period = dt * decimation
    obs_cfg = ((env.get("observations") or {}).get("policy")) if isinstance(env.get("observations"), dict) else None
    if not isinstance(obs_cfg, dict):
        raise ImportRefused(f"{where}: observations.policy is missing; only manager-based envs with a 'policy' "
                            "observation group can be read (give --sidecar for a direct env)")
    if obs_cfg.get("concatenate_terms") is False:
        raise ImportRefused(f"{where}: observations.policy.concatenate_terms is false (Dict observations); only a "
                            "flat observation vector is supported")
    act_cfg = env.get("actions") or {}
    act_terms = [(k, v) for k, v in act_cfg.items() if isinstance(v, dict)]
    if len(act_terms) != 1:
        raise ImportRefused(f"{where}: {len(act_terms)} action terms {[k for k, _ in act_terms]}; one joint action "
                            "term is supported (give --sidecar for others)")
    act_name, act = act_terms[0]
    cls = str(act.get("class_type", ""))
    # ---- actions
    io_act = (io or {}).get("actions") if isinstance(io, dict) else None
    names_known = True
    if io_act:
        a = io_act[0]
        joint_names = list(a.get("joint_names") or [])
        scale = a.get("scale", 1.0)
        offset = a.get("offset", 0.0)
        clip = a.get("clip")
    else:
        jn = act.get("joint_names") or [".*"]
        default = ((env.get("scene") or {}).get("robot") or {}).get("init_state", {}).get("joint_pos", {})
        if jn != [".*"] and not isinstance(jn, list):
            jn = [jn]
        names_known = not any(re.escape(p) != p for p in jn)
        if not names_known:
            # regexes need the articulation's joint names, which only the IO descriptors record
            joint_names = [f"joint_{i}" for i in range(n_act)]
            if act.get("use_default_offset") and isinstance(default, dict) and len(set(default.values())) > 1:
                raise ImportRefused(f"{run_dir}: the action's default joint positions differ per joint but the joint "
                                    "names are not recorded; export IO descriptors (env.export_io_descriptors=true, "
                                    f"Isaac Lab >= 2.2) or give --sidecar ({DOCS})")
            notes.append("joint names not recorded (no IO_descriptors.yaml): actions named joint_0..; export IO "
                         "descriptors for real names")
        else:
            joint_names = list(jn)
        scale = act.get("scale", 1.0)
        offset = act.get("offset", 0.0)
        if act.get("use_default_offset"):
            if names_known:
                offset = _default_positions(default, joint_names, where)
            else:  # one value for every joint (checked above)
                offset = float(next(iter(default.values()))) if isinstance(default, dict) and default else 0.0
        clip = act.get("clip")
    if "JointPosition" not in cls and "JointAction" not in cls and cls:
        notes.append(f"action term {act_name!r} is {cls.split(':')[-1]}: check the controller interface it needs")
    if len(joint_names) != n_act:
        raise ImportRefused(f"{run_dir}: the action term has {len(joint_names)} joints but the policy outputs {n_act}")
    if isinstance(scale, dict) or isinstance(offset, dict):
        raise ImportRefused(f"{where}: per-joint action scale/offset given as a regex mapping; export IO descriptors "
                            f"or give --sidecar ({DOCS})")
    actions: dict[str, Any] = {"names": joint_names, "scale": _scalar_or_list(scale),
                               "offset": np.asarray(offset, np.float64).tolist() if offset is not None else 0.0}
    limits = _joint_limits(io, joint_names) if io_act and ("JointPosition" in cls or "JointPosition" in str(
        io_act[0].get("full_path", ""))) else None
    if limits is not None:
        actions["low"], actions["high"] = limits
        notes.append("action limits = the articulation's joint position limits (IO descriptors)")
    if clip is not None:
        clip_arr = np.asarray(clip, np.float64)
        if clip_arr.shape == (2,):
            clip_arr = np.tile(clip_arr, (n_act, 1))
        if clip_arr.shape != (n_act, 2):
            raise ImportRefused(f"{where}: action clip {clip!r} is not [low, high] per joint")
        notes.append("action clip from the action term applied to the raw action: the artifact clips the scaled "
                     "action instead (joint limits)")
        s = np.broadcast_to(np.asarray(actions["scale"], np.float64), (n_act,))
        o = np.broadcast_to(np.asarray(actions["offset"], np.float64), (n_act,))
        lo, hi = o + s * clip_arr[:, 0], o + s * clip_arr[:, 1]
        lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
        if "low" in actions:  # both apply: the tighter one wins
            lo, hi = np.maximum(lo, actions["low"]), np.minimum(hi, actions["high"])
        actions["low"], actions["high"] = lo.tolist(), hi.tolist()
    # ---- observations
    observations: list[dict] = []
    last_action_terms: list[str] = []
    io_obs = ((io or {}).get("observations") or {}).get("policy") if isinstance(io, dict) else None
    if io_obs:
        for t in io_obs:
            shape = t.get("shape") or [1]
            over = t.get("overloads") or {}
            size = int(np.prod(shape))
            g: dict[str, Any] = {"name": str(t["name"])}
            if _func_name(t.get("full_path")) == "last_action":
                last_action_terms.append(g["name"])
            if t.get("joint_names") and len(t["joint_names"]) == size:
                g["names"] = list(t["joint_names"])
            else:
                g["size"] = size
            if over.get("scale") is not None:
                g["scale"] = over["scale"]
            if over.get("clip") is not None:
                g["clip"] = list(over["clip"])
            observations.append(g)
    else:
        terms = [(k, v) for k, v in obs_cfg.items() if isinstance(v, dict) and "func" in v]
        sizes: list[int | None] = []
        for name, t in terms:
            s = _TERM_SIZES.get(_func_name(t.get("func")))
            sizes.append(n_act if s in ("J", "A") else s)
        unknown = [i for i, s in enumerate(sizes) if s is None]
        known = sum(s for s in sizes if s is not None)
        if len(unknown) == 1 and n_obs - known > 0:
            sizes[unknown[0]] = n_obs - known
            notes.append(f"size of observation term {terms[unknown[0]][0]!r} ({n_obs - known}) inferred from the "
                         "network's input size")
        elif unknown:
            raise ImportRefused(f"{run_dir}: sizes of observation terms {[terms[i][0] for i in unknown]} are not "
                                "recorded; export IO descriptors (env.export_io_descriptors=true) or give --sidecar")
        for (name, t), size in zip(terms, sizes):
            # the group's history_length, when set, overrides every term's (ObservationGroupCfg)
            group_hist = obs_cfg.get("history_length")
            hist = int(group_hist if group_hist is not None else (t.get("history_length") or 0))
            if _func_name(t.get("func")) == "last_action":
                last_action_terms.append(name)
            g = {"name": name, "size": int(size) * max(hist, 1)}
            if _TERM_SIZES.get(_func_name(t.get("func"))) == "J" and size == len(joint_names) and names_known \
                    and hist <= 1:
                g = {"name": name, "names": joint_names}
            if t.get("scale") is not None:
                sc = t["scale"]
                g["scale"] = sc if not isinstance(sc, list) or hist <= 1 else np.tile(sc, hist).tolist()
            if t.get("clip") is not None:
                g["clip"] = list(t["clip"])
            if hist > 1:
                notes.append(f"observation term {name!r} is a history of {hist} steps (Isaac Lab stacks oldest first)")
            observations.append(g)
        notes.append("observation terms read from params/env.yaml (no IO_descriptors.yaml)")
    if any("quat" in g["name"] for g in observations):
        notes.append("an observation term is a quaternion: Isaac Lab >= 3.0 orders it XYZW, earlier versions WXYZ; "
                     "set the order in the robot's observation config to the one this policy was trained with")
    notes.append(f"control period {period:g} s = sim.dt {dt:g} x decimation {decimation}")
    if last_action_terms:
        notes.append(f"observation {last_action_terms[0]!r} (last_action) is the network's raw output y, before the "
                     "action scale and offset: feed that back on the robot, not the joint targets")
    return {"observations": observations, "actions": actions, "control_period_s": period,
            "provenance": {"isaaclab_action_term": act_name, "isaaclab_io_descriptors": str(io_obs is not None
                                                                                           and bool(io_obs)).lower()}}


def load_isaaclab_run(run_dir: Path, options: ImportOptions) -> Imported:
    """An Isaac Lab run directory: ``exported/policy.onnx`` + ``params/env.yaml`` (+ IO descriptors)."""
    run_dir = Path(run_dir)
    onnx_path = run_dir / "exported" / "policy.onnx"
    if not onnx_path.is_file():
        raise ImportRefused(f"{run_dir}: no exported/policy.onnx; run Isaac Lab's play.py on the checkpoint first "
                            "(it exports the policy), or import the model_*.pt with --from rsl_rl")
    model = load_onnx_model(onnx_path)
    walked = walk_graph(model, str(onnx_path))
    weights = weights_from_walk(walked, str(onnx_path))
    check_against_ort(model, walked, weights, str(onnx_path))
    notes = _graph_notes(walked)
    if options.sidecar is not None:
        sidecar = read_sidecar(options.sidecar)
        notes.append(f"contract from the sidecar {options.sidecar}; params/env.yaml not read")
    else:
        doc = isaaclab_sidecar(run_dir, weights.input_dim, weights.output_dim, notes)
        sidecar = parse_sidecar(doc, str(run_dir))
    agent = run_dir / "params" / "agent.yaml"
    prov = {"onnx_opset": str(walked.opset), "run_dir": run_dir.name}
    if agent.is_file():
        cfg = _yaml(agent, str(agent)) or {}
        if isinstance(cfg, dict):
            prov["agent_experiment"] = str(cfg.get("experiment_name", ""))
    contract = build_contract(n_obs=weights.input_dim, n_act=weights.output_dim, graph_pre=walked.pre,
                              sidecar=sidecar, options=options, source=onnx_path, kind="isaaclab", notes=notes,
                              provenance=prov)
    return Imported(weights, contract, "isaaclab", notes)
