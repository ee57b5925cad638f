"""The policy artifact: one ONNX file with the I/O contract in its metadata (no torch, no ROS).

An artifact is what reaches a robot (docs/architecture.md, "Policy artifacts"): a standard ONNX model any
ONNX runtime can run (normalisation, MLP, rescaling and clamping are all inside the graph), int8
weights where quantized, zero weights stored compactly, and a JSON document under the metadata key
``lowrl.contract`` carrying the contract (observation/action names and order, scaling, limits,
control period, version, parent version, tier, provenance) and the architecture. A version-3 artifact
also carries a residual correction head on its frozen base (ResidualHead, save_residual_artifact).

Loading validates everything and raises :class:`ArtifactError` naming the file, the problem and
the fix. See docs/CONTRACTS.md ("Artifact and runtime API") for the pinned interface.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from lowrl_ros.core.runtime import activations, onnx_graph
from lowrl_ros.core.runtime.onnx_graph import StoredLayer

METADATA_KEY = "lowrl.contract"
FORMAT = "lowrl.policy"
# Bump when the graph layout or the JSON changes incompatibly. An artifact is written with the lowest
# version that describes it, so one that uses nothing new still loads on an older robot:
#   1: relu/tanh, obs (offset, scale), tanh output mapped to the limits or clamp
#   2: + the other activations of core/runtime/activations.py, obs_clip, action_scale/action_offset
#   3: + a residual correction head: y = y_base + bound * tanh(head(x)) (arch "residual", initializers r{i}.*)
FORMAT_VERSION = 3
# What each version adds, for the message an older reader's successor gives (parse_artifact).
_VERSION_ADDS = {2: "activations beyond relu/tanh, obs_clip, action_scale/offset",
                 3: "a residual correction head on a frozen base policy"}
ACTIVATIONS_HIDDEN = activations.HIDDEN
ACTIVATIONS_OUTPUT = activations.OUTPUT
_V2_CONTRACT_KEYS = ("obs_clip", "action_scale", "action_offset")
# What the policy was trained to read back as its ``last_action`` observation, recorded at import as the
# provenance entry LAST_ACTION_KEY: "raw" is the network's output y before the action transform and the clip
# (Isaac Lab's ActionManager.action, rsl_rl's envs, rl_sar); "action" is the executed action in contract units,
# clip(o + s*y, low, high) (a gymnasium env that stores what step() got: SB3, our own kits). Absent: "action".
LAST_ACTION_KEY = "last_action"
LAST_ACTION_CONVENTIONS = ("raw", "action")
_HEAD_INIT = re.compile(r"r\d+\.")  # a residual head layer's initializers (onnx_graph.build_model)


class ArtifactError(ValueError):
    """An artifact or bundle is unusable; the message says what is wrong and how to fix it."""


def _floats(name: str, values: Any, n: int | None) -> tuple[float, ...]:
    try:
        out = tuple(float(v) for v in np.asarray(values, dtype=np.float64).reshape(-1))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a list of numbers ({exc})") from None
    if n is not None and len(out) != n:
        raise ValueError(f"{name} has {len(out)} values but there are {n}; give exactly one per entry")
    if not all(math.isfinite(v) for v in out):
        raise ValueError(f"{name} contains NaN or Inf; give finite numbers")
    return out


@dataclass(frozen=True)
class PolicyContract:
    """The I/O contract of a policy, stored in the artifact and checked by the robot.

    Attributes:
        obs_names: observation entries, in the order the network reads them.
        action_names: action entries (joints/actuators), in output order.
        action_low: lower action limit per action entry.
        action_high: upper action limit per action entry (each > its low).
        obs_offset: normalised obs = clip((obs - obs_offset) * obs_scale, -obs_clip, obs_clip); default 0.
        obs_scale: see obs_offset; default 1.
        obs_clip: see obs_offset; None (the default) clips nothing. SB3's VecNormalize uses 10.
        action_scale: action = clip(action_offset + action_scale * y, action_low, action_high), with
            y the network's output. None (with action_offset None) takes them from the output
            activation: tanh maps [-1, 1] onto [low, high], none is the identity. Isaac Lab's joint
            position action is scale 0.5, offset the default joint positions.
        action_offset: see action_scale; default 0 when only action_scale is given.
        control_period_s: the control period the policy was trained for, seconds.
        version: policy version, an int >= 1; versions only go up.
        parent_version: the version this one was derived from (fine-tuned, distilled), or None.
        tier: the compute tier this policy serves ("full", "lite", ...).
        env_id: the environment it was trained in, if any (e.g. "Pendulum-v1").
        provenance: free-form strings: who/what made it (tool, source file, seed, ...).
    """

    obs_names: tuple[str, ...]
    action_names: tuple[str, ...]
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    obs_offset: tuple[float, ...] | None = None
    obs_scale: tuple[float, ...] | None = None
    obs_clip: float | None = None
    action_scale: tuple[float, ...] | None = None
    action_offset: tuple[float, ...] | None = None
    control_period_s: float = 0.02
    version: int = 1
    parent_version: int | None = None
    tier: str = "full"
    env_id: str | None = None
    provenance: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        for name in ("obs_names", "action_names"):
            names = getattr(self, name)
            if isinstance(names, str) or not all(isinstance(s, str) and s for s in names):
                raise ValueError(f"{name} must be a list of non-empty strings, got {names!r}")
            names = tuple(names)
            if not names:
                raise ValueError(f"{name} is empty; name at least one entry")
            if len(set(names)) != len(names):
                raise ValueError(f"{name} has duplicates {names}; each entry needs a unique name")
            put(name, names)
        put("action_low", _floats("action_low", self.action_low, self.action_dim))
        put("action_high", _floats("action_high", self.action_high, self.action_dim))
        for i, (lo, hi) in enumerate(zip(self.action_low, self.action_high)):
            if not lo < hi:
                raise ValueError(
                    f"action limits of {self.action_names[i]!r}: low {lo} must be < high {hi}; fix the limits"
                )
        offset = (0.0,) * self.obs_dim if self.obs_offset is None else self.obs_offset
        scale = (1.0,) * self.obs_dim if self.obs_scale is None else self.obs_scale
        put("obs_offset", _floats("obs_offset", offset, self.obs_dim))
        put("obs_scale", _floats("obs_scale", scale, self.obs_dim))
        if any(s == 0 for s in self.obs_scale):
            raise ValueError("obs_scale contains 0, which erases that observation; use a non-zero scale")
        if self.obs_clip is not None:
            clip = float(self.obs_clip)
            if not (math.isfinite(clip) and clip > 0):
                raise ValueError(f"obs_clip must be a finite number > 0 or None, got {self.obs_clip!r}")
            put("obs_clip", clip)
        for name in ("action_scale", "action_offset"):
            if getattr(self, name) is not None:
                put(name, _floats(name, getattr(self, name), self.action_dim))
        if self.action_scale is not None and any(s == 0 for s in self.action_scale):
            raise ValueError("action_scale contains 0, which pins that action to its offset; use a non-zero scale")
        period = float(self.control_period_s)
        if not (math.isfinite(period) and period > 0):
            raise ValueError(f"control_period_s must be > 0 seconds, got {self.control_period_s}")
        put("control_period_s", period)
        if isinstance(self.version, bool) or not isinstance(self.version, (int, np.integer)) or self.version < 1:
            raise ValueError(f"version must be an integer >= 1, got {self.version!r}; versions start at 1")
        put("version", int(self.version))
        if self.parent_version is not None:
            if isinstance(self.parent_version, bool) or not isinstance(self.parent_version, (int, np.integer)):
                raise ValueError(f"parent_version must be an integer or None, got {self.parent_version!r}")
            if not 1 <= self.parent_version < self.version:
                raise ValueError(
                    f"parent_version {self.parent_version} must be >= 1 and < version {self.version}"
                    " (versions only go up)"
                )
            put("parent_version", int(self.parent_version))
        if not isinstance(self.tier, str) or not self.tier:
            raise ValueError(f"tier must be a non-empty string such as 'full' or 'lite', got {self.tier!r}")
        if self.env_id is not None and not isinstance(self.env_id, str):
            raise ValueError(f"env_id must be a string or None, got {self.env_id!r}")
        if not isinstance(self.provenance, dict):
            raise ValueError(f"provenance must be a dict of strings, got {type(self.provenance).__name__}")
        put("provenance", {str(k): str(v) for k, v in self.provenance.items()})

    @property
    def obs_dim(self) -> int:
        return len(self.obs_names)

    @property
    def action_dim(self) -> int:
        return len(self.action_names)

    @property
    def uses_v2(self) -> bool:
        """True when the contract needs format version 2 (obs clip or action scale/offset)."""
        return any(getattr(self, k) is not None for k in _V2_CONTRACT_KEYS)

    def action_transform(self, output_activation: str) -> tuple[np.ndarray, np.ndarray]:
        """(scale, offset) float64 arrays: action = clip(offset + scale * y, low, high)."""
        low, high = np.array(self.action_low), np.array(self.action_high)
        if self.action_scale is None and self.action_offset is None:
            if output_activation == "tanh":
                return (high - low) / 2.0, (high + low) / 2.0
            return np.ones(self.action_dim), np.zeros(self.action_dim)
        scale = np.ones(self.action_dim) if self.action_scale is None else np.array(self.action_scale)
        offset = np.zeros(self.action_dim) if self.action_offset is None else np.array(self.action_offset)
        return scale, offset

    def normalise(self, obs: np.ndarray) -> np.ndarray:
        """Observations as the network reads them (float64): clip((obs - offset) * scale, -obs_clip, obs_clip)."""
        x = (np.asarray(obs, dtype=np.float64) - np.array(self.obs_offset)) * np.array(self.obs_scale)
        return x if self.obs_clip is None else np.clip(x, -self.obs_clip, self.obs_clip)

    def to_action(self, y: np.ndarray, output_activation: str) -> np.ndarray:
        """The action (float64) for network outputs ``y``: clip(offset + scale * y, low, high)."""
        scale, offset = self.action_transform(output_activation)
        return np.clip(offset + scale * np.asarray(y, dtype=np.float64), self.action_low, self.action_high)

    def retargeted(self, teacher_output: str, student_output: str) -> "PolicyContract":
        """The contract of a network with output activation ``student_output`` that imitates this one's actions.

        The observation side (names, offset, scale, obs_clip) and the limits are kept. The action
        transform is the one that suits the student's output, not blindly the teacher's: with the same
        output activation the student works in the teacher's output space and keeps its transform; a
        linear ("none") student of a tanh teacher gets the teacher's transform written out explicitly;
        a tanh student gets the default mapping of [-1, 1] onto [low, high] (the teacher's transform,
        e.g. Isaac Lab's 0.5 * y around the default pose, would confine a tanh output to offset +- scale).
        """
        for name, act in (("teacher_output", teacher_output), ("student_output", student_output)):
            if act not in activations.OUTPUT:
                raise ValueError(f"{name} {act!r}: use one of {activations.OUTPUT}")
        if student_output == teacher_output:
            return self
        if student_output == "none":
            scale, offset = self.action_transform(teacher_output)
            return replace(self, action_scale=tuple(scale), action_offset=tuple(offset))
        return replace(self, action_scale=None, action_offset=None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (lists, not tuples); the version-2 keys only when set (older robots read the rest)."""
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()
                if not (k in _V2_CONTRACT_KEYS and v is None)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PolicyContract":
        """Inverse of to_dict; ValueError names unknown or missing keys."""
        if not isinstance(data, dict):
            raise ValueError(f"the contract must be a JSON object, got {type(data).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown contract keys {sorted(unknown)}; known keys: {sorted(known)}")
        required = {"obs_names", "action_names", "action_low", "action_high"}
        missing = required - set(data)
        if missing:
            raise ValueError(f"contract is missing {sorted(missing)}")
        return cls(**data)

    def same_io(self, other: "PolicyContract") -> bool:
        """True when both read the same observations and write the same actions within the same limits."""
        return (
            self.obs_names == other.obs_names
            and self.action_names == other.action_names
            and self.action_low == other.action_low
            and self.action_high == other.action_high
        )


def last_action_convention(contract: Any) -> str:
    """``"raw"`` or ``"action"``: which action ``contract``'s policy reads back as its ``last_action`` term.

    From the provenance entry ``last_action`` the importer recorded (see LAST_ACTION_KEY); a contract
    without one (our own kits, artifacts made before it existed) is ``"action"``. Raises ValueError for
    any other recorded value, so a typo never silently picks the wrong feedback.
    """
    value = (getattr(contract, "provenance", None) or {}).get(LAST_ACTION_KEY, "action")
    if value not in LAST_ACTION_CONVENTIONS:
        raise ValueError(f"the contract's provenance {LAST_ACTION_KEY!r} is {value!r}; use one of "
                         f"{', '.join(LAST_ACTION_CONVENTIONS)}")
    return value


def raw_from_action(contract: PolicyContract, output_activation: str, action: np.ndarray) -> np.ndarray:
    """The network output y that gives ``action`` (float64): (action - o) / s, inverting action_transform.

    Exact where the action is inside [low, high]; where the clip bit, it returns the y of the clipped
    action, not the network's own (only the engine's pre-transform output has that: Policy.raw_output).
    """
    scale, offset = contract.action_transform(output_activation)
    return (np.asarray(action, dtype=np.float64) - offset) / scale


class _Layers:
    """``layers`` ((W [out, in], b [out]) per layer, input to output) and the sizes they map between."""

    layers: list[tuple[np.ndarray, np.ndarray]]

    @property
    def input_dim(self) -> int:
        return int(self.layers[0][0].shape[1])

    @property
    def output_dim(self) -> int:
        return int(self.layers[-1][0].shape[0])


@dataclass(frozen=True)
class MlpWeights(_Layers):
    """An MLP actor: normalised obs -> hidden layers -> output y.

    Attributes:
        layers: (W float32 [out, in], b float32 [out]) per layer, input to output.
        hidden_activation: one of core/runtime/activations.HIDDEN, after every layer but the last.
        output_activation: "tanh" or "none"; the contract's action_transform() maps y to the action.
    """

    layers: list[tuple[np.ndarray, np.ndarray]]
    hidden_activation: str = "relu"
    output_activation: str = "tanh"

    def __post_init__(self) -> None:
        if not self.layers:
            raise ValueError("MlpWeights needs at least one (W, b) layer")
        if self.hidden_activation not in ACTIVATIONS_HIDDEN:
            raise ValueError(f"hidden_activation {self.hidden_activation!r}: use one of {ACTIVATIONS_HIDDEN}")
        if self.output_activation not in ACTIVATIONS_OUTPUT:
            raise ValueError(f"output_activation {self.output_activation!r}: use one of {ACTIVATIONS_OUTPUT}")
        layers = []
        for i, (w, b) in enumerate(self.layers):
            w = np.ascontiguousarray(w, dtype=np.float32)
            b = np.ascontiguousarray(b, dtype=np.float32)
            if w.ndim != 2 or b.shape != (w.shape[0],):
                raise ValueError(f"layer {i}: W must be [out, in] and b [out]; got W {w.shape}, b {b.shape}")
            if i and w.shape[1] != layers[-1][0].shape[0]:
                raise ValueError(
                    f"layer {i} takes {w.shape[1]} inputs but layer {i - 1} gives {layers[-1][0].shape[0]}"
                )
            if not (np.isfinite(w).all() and np.isfinite(b).all()):
                raise ValueError(f"layer {i} has NaN or Inf weights; retrain or re-export the policy")
            layers.append((w, b))
        object.__setattr__(self, "layers", layers)


    @property
    def macs(self) -> int:
        """Multiply-adds per call if every weight is computed (dense)."""
        return int(sum(w.size for w, _ in self.layers))

    @property
    def nnz(self) -> int:
        return int(sum(np.count_nonzero(w) for w, _ in self.layers))

    @property
    def sparsity(self) -> float:
        return 1.0 - self.nnz / self.macs

    def forward(self, obs_norm: np.ndarray) -> np.ndarray:
        """Reference float64 forward pass of normalised observations [..., in] -> y [..., out]."""
        x = np.asarray(obs_norm, dtype=np.float64)
        for i, (w, b) in enumerate(self.layers):
            x = x @ w.T.astype(np.float64) + b
            x = activations.apply(self.output_activation if i == len(self.layers) - 1 else self.hidden_activation, x)
        return x


@dataclass(frozen=True)
class ResidualHead(_Layers):
    """A bounded correction on top of a frozen base policy (format version 3).

    The artifact's network output is y = y_base(x) + bound * tanh(head(x)), with x the contract's
    normalised observation; the contract's action transform and clip then apply to y as for any
    artifact. The tanh and the per-action bound keep the correction within +-bound of the base,
    whatever the head learns (the residual learner's safety argument), and a head whose last layer
    is zero gives exactly the base's actions.

    Attributes:
        layers: (W float32 [out, in], b float32 [out]) per layer; input obs_dim, output action_dim.
        bound: per action entry, > 0 and finite, in the units of the base network's output y.
        hidden_activation: one of core/runtime/activations.HIDDEN, after every layer but the last
            (the last layer feeds the tanh directly).
    """

    layers: list[tuple[np.ndarray, np.ndarray]]
    bound: tuple[float, ...]
    hidden_activation: str = "relu"

    def __post_init__(self) -> None:
        try:
            mlp = MlpWeights(self.layers, self.hidden_activation, "none")
        except ValueError as exc:
            raise ValueError(f"residual head: {exc}") from None
        bound = _floats("residual head bound", self.bound, mlp.output_dim)
        if not all(b > 0 for b in bound):
            raise ValueError(f"residual head bound {list(bound)} must be > 0 per action (y units); a correction "
                             "that may not move an action is bound 0+: give a small positive number, e.g. 1e-3")
        object.__setattr__(self, "layers", mlp.layers)
        object.__setattr__(self, "bound", bound)


    def forward(self, obs_norm: np.ndarray) -> np.ndarray:
        """Reference float64 correction d = bound * tanh(head(x)) of normalised observations [..., in]."""
        mlp = MlpWeights(self.layers, self.hidden_activation, "tanh")
        return np.array(self.bound) * mlp.forward(obs_norm)


def reference_action(weights: MlpWeights, contract: PolicyContract, obs: np.ndarray,
                     residual: ResidualHead | None = None) -> np.ndarray:
    """The float64 action the contract defines for ``obs`` (the parity reference for engines).

    ``residual``: the artifact's correction head (ParsedArtifact.residual), added to the base's y
    before the action transform; an artifact's own reference is ParsedArtifact.reference_action.
    """
    x = contract.normalise(obs)
    y = weights.forward(x) if residual is None else weights.forward(x) + residual.forward(x)
    return contract.to_action(y, weights.output_activation)


def prune_by_magnitude(weights: MlpWeights, sparsity: float, *, skip_output: bool = False) -> MlpWeights:
    """Zero the smallest-|w| fraction ``sparsity`` of each layer's weights (biases stay dense).

    Per layer rather than global, so a small input or output layer is never wiped out; every layer
    keeps at least one weight. ``skip_output`` leaves the last layer dense (it is small and often
    the most sensitive).
    """
    if not 0.0 <= float(sparsity) < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}; e.g. 0.9 keeps 10% of the weights")
    layers = []
    for i, (w, b) in enumerate(weights.layers):
        if skip_output and i == len(weights.layers) - 1:
            layers.append((w.copy(), b.copy()))
            continue
        keep = max(1, int(round((1.0 - sparsity) * w.size)))
        flat = np.abs(w).reshape(-1)
        kept = np.argpartition(flat, w.size - keep)[w.size - keep:]  # indices of the `keep` largest
        mask = np.zeros(w.size, bool)
        mask[kept] = True
        layers.append((np.where(mask.reshape(w.shape), w, 0.0).astype(np.float32), b.copy()))
    return MlpWeights(layers, weights.hidden_activation, weights.output_activation)


def save_artifact(path: str | Path, weights: MlpWeights, contract: PolicyContract, *, int8: bool = False) -> Path:
    """Write ``weights`` and ``contract`` as one ONNX artifact; return the path.

    Args:
        path: destination file (conventionally ``*.onnx``); written atomically.
        weights: the actor; its input/output sizes must match the contract.
        contract: the I/O contract stored in the metadata.
        int8: store weights as symmetric per-output-channel int8 (the ORT graph quantizes
            activations dynamically).

    Zero weights of a layer are stored as (values, bitmask) when that is smaller than dense.
    """
    if weights.input_dim != contract.obs_dim or weights.output_dim != contract.action_dim:
        raise ArtifactError(
            f"{path}: the network maps {weights.input_dim} -> {weights.output_dim} but the contract has "
            f"{contract.obs_dim} observations and {contract.action_dim} actions; make them agree"
        )
    stored = [onnx_graph.pack_layer(w, b, int8=int8) for w, b in weights.layers]
    return _write(path, stored, weights.hidden_activation, weights.output_activation, contract)


def save_residual_artifact(path: str | Path, base: "str | Path | ParsedArtifact", head: ResidualHead,
                           contract: PolicyContract | None = None, *, int8: bool = True) -> Path:
    """Write base + correction head as one artifact (format version 3); return the path.

    The base's stored layers are written bit for bit (the base stays frozen: its int8 values, scales
    and sparse masks are not re-quantised); when ``base`` already carries a head, only its base part
    is kept and ``head`` replaces that head.

    Args:
        path: destination file; written atomically (as save_artifact).
        base: the base artifact, a path or a ParsedArtifact.
        head: the correction (ResidualHead); input obs_dim, output action_dim of the contract.
        contract: the new version's contract (version, parent, provenance); default the base's. It
            must read and write what the base does (PolicyContract.same_io).
        int8: store the head int8 per output channel, like the base layers (False: float32).
    """
    parsed = base if isinstance(base, ParsedArtifact) else parse_artifact(read_artifact_bytes(base), str(base))
    if not isinstance(head, ResidualHead):
        raise ArtifactError(f"{path}: head must be a ResidualHead, got {type(head).__name__}")
    if contract is None:
        contract = parsed.contract
    elif not contract.same_io(parsed.contract):
        raise ArtifactError(f"{path}: the contract's observations, actions or limits differ from the base "
                            f"{parsed.source}'s; a residual version keeps the base's IO: change only version, "
                            "parent_version and provenance (dataclasses.replace(base.contract, ...))")
    if head.input_dim != contract.obs_dim or head.output_dim != contract.action_dim:
        raise ArtifactError(f"{path}: the residual head maps {head.input_dim} -> {head.output_dim} but the contract "
                            f"has {contract.obs_dim} observations and {contract.action_dim} actions; build the head "
                            "with the contract's obs_dim inputs and action_dim outputs")
    stored = [onnx_graph.pack_layer(w, b, int8=int8) for w, b in head.layers]
    return _write(path, parsed.layers, parsed.hidden_activation, parsed.output_activation, contract,
                  (stored, head.hidden_activation, head.bound))


def reexport_artifact(src: str | Path, dst: str | Path | None = None) -> Path:
    """Rebuild an artifact's graph with this version's exporter, keeping its stored weights bit for bit.

    For artifacts written by an older lowrl_ros whose graph the loader now refuses (e.g. int8 graphs
    from before the U8U8 fix); the contract, version and weights (a residual head's too) are unchanged.
    ``dst`` defaults to ``src`` (replaced atomically).
    """
    parsed = parse_artifact(read_artifact_bytes(src), str(src))
    return rewrite_artifact(parsed, dst or src, parsed.contract)


def rewrite_artifact(parsed: "ParsedArtifact", path: str | Path, contract: PolicyContract) -> Path:
    """Write ``parsed``'s stored weights (base and any residual head, bit for bit) under another contract."""
    return _write(path, parsed.layers, parsed.hidden_activation, parsed.output_activation, contract,
                  parsed.stored_head())


def _layer_specs(stored: list) -> list[dict]:
    return [{"in": s.in_dim, "out": s.out_dim, "storage": s.storage, "dtype": s.dtype, "nnz": s.nnz} for s in stored]


def _write(path, stored: list, hidden_activation: str, output_activation: str, contract: PolicyContract,
           head: tuple[list, str, tuple[float, ...]] | None = None) -> Path:
    """Write the artifact; ``head``: (stored head layers, hidden activation, bound) of a residual head, or None."""
    version = 3 if head else 2 if (contract.uses_v2 or hidden_activation not in activations.LEGACY) else 1
    arch = {
        "kind": "mlp",
        "hidden_activation": hidden_activation,
        "output_activation": output_activation,
        "layers": _layer_specs(stored),
    }
    if head:
        arch["residual"] = {"hidden_activation": head[1], "bound": list(head[2]), "layers": _layer_specs(head[0])}
    meta = {"format": FORMAT, "format_version": version, "contract": contract.to_dict(), "arch": arch}
    explicit = contract.action_scale is not None or contract.action_offset is not None
    scale, offset = contract.action_transform(output_activation) if explicit else (None, None)
    model = onnx_graph.build_model(
        stored,
        hidden_activation=hidden_activation,
        output_activation=output_activation,
        obs_offset=np.array(contract.obs_offset),
        obs_scale=np.array(contract.obs_scale),
        action_low=np.array(contract.action_low),
        action_high=np.array(contract.action_high),
        metadata={METADATA_KEY: json.dumps(meta, sort_keys=True)},
        obs_clip=contract.obs_clip,
        # Only an explicit transform goes in as such: the default one is built the version-1 way (same bytes).
        action_scale=scale,
        action_offset=offset,
        head_layers=head[0] if head else None,
        head_hidden_activation=head[1] if head else "relu",
        head_bound=np.array(head[2]) if head else None,
    )
    path = Path(path)
    data = model.SerializeToString()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)  # a reader (a watching policy node) never sees a half-written file
    return path


@dataclass
class ParsedArtifact:
    """A validated artifact, before any engine is built.

    ``layers`` are the base network's stored layers; ``head_layers`` and ``residual`` the residual
    correction head of a format-version-3 artifact (empty and None for a plain one).
    """

    source: str
    data: bytes
    model: onnx.ModelProto
    contract: PolicyContract
    layers: list[StoredLayer]
    hidden_activation: str
    output_activation: str
    sha256: str
    head_layers: list[StoredLayer] = field(default_factory=list)
    residual: ResidualHead | None = None

    @property
    def all_layers(self) -> list[StoredLayer]:
        """Every stored layer an engine computes: the base's, then the head's."""
        return self.layers + self.head_layers

    @property
    def macs(self) -> int:
        """Multiply-adds per call that a sparse kernel must do (non-zero weights, head included)."""
        return int(sum(layer.nnz for layer in self.all_layers))

    @property
    def dense_macs(self) -> int:
        return int(sum(layer.in_dim * layer.out_dim for layer in self.all_layers))

    def base_weights(self) -> MlpWeights:
        """The base network alone, with dequantised float32 weights (without any residual head)."""
        return MlpWeights(
            [(layer.dequantized(), layer.bias.copy()) for layer in self.layers],
            self.hidden_activation,
            self.output_activation,
        )

    def weights(self) -> MlpWeights:
        """The network with dequantised float32 weights; ArtifactError for an artifact with a residual head.

        An MlpWeights cannot hold the head, and returning the base alone would let a parity check or a
        reference run silently drop the correction: use base_weights() with ``residual``, or
        reference_action()/forward(), which include it.
        """
        if self.residual is not None:
            raise ArtifactError(f"{self.source}: this artifact carries a residual correction head, which an "
                                "MlpWeights cannot hold; use ParsedArtifact.reference_action()/forward() (base + "
                                "head) or base_weights() with .residual")
        return self.base_weights()

    def forward(self, obs_norm: np.ndarray) -> np.ndarray:
        """Reference float64 network output y (base + correction) of normalised observations."""
        y = self.base_weights().forward(obs_norm)
        return y if self.residual is None else y + self.residual.forward(obs_norm)

    def reference_action(self, obs: np.ndarray) -> np.ndarray:
        """The float64 action the artifact defines for ``obs``, head included (every parity gate's reference)."""
        return reference_action(self.base_weights(), self.contract, obs, self.residual)

    def stored_head(self) -> tuple[list[StoredLayer], str, tuple[float, ...]] | None:
        """(stored head layers, hidden activation, bound) for rewriting the artifact, or None."""
        if self.residual is None:
            return None
        return self.head_layers, self.residual.hidden_activation, self.residual.bound


def artifact_head_bytes(parsed: ParsedArtifact) -> int:
    """Bytes of the residual head's initializers (weights, scales, biases, bound, their graph constants).

    What changes between two versions that share a frozen base: a benchmark reports it against the
    whole file (len(parsed.data)). 0 for a plain artifact.
    """
    if parsed.residual is None:
        return 0
    return int(sum(numpy_helper.to_array(t).nbytes for t in parsed.model.graph.initializer
                   if t.name.startswith("residual.") or _HEAD_INIT.match(t.name)))


def parse_artifact(data: bytes, source: str) -> ParsedArtifact:
    """Validate artifact bytes (``source`` names them in errors); raise ArtifactError on any problem."""

    def fail(problem: str, fix: str) -> ArtifactError:
        return ArtifactError(f"{source}: {problem}; {fix}")

    # The advice per kind of file: an artifact lowrl wrote is made again from its source (`lowrl import` takes
    # every kind: SB3, rsl_rl, ONNX, TorchScript, Isaac Lab); a foreign ONNX is imported, with its contract.
    regen = "re-export it from its source with `lowrl import SOURCE -o OUT.onnx` (docs/import.md) or save_artifact()"
    try:
        model = onnx.load_from_string(data)
    except Exception as exc:  # protobuf raises DecodeError and others, depending on the damage
        raise fail(f"not a readable ONNX file ({type(exc).__name__}: {exc})",
                   f"the file is truncated or corrupt; {regen}") from None
    props = {p.key: p.value for p in model.metadata_props}
    if METADATA_KEY not in props:
        raise fail(f"no '{METADATA_KEY}' entry in the ONNX metadata",
                   f"this is a plain ONNX file, not a lowrl artifact: import it with its contract, `lowrl import "
                   f"{Path(source).name} --sidecar CONTRACT.yaml -o OUT.onnx` (an Isaac Lab exported/policy.onnx "
                   "needs no sidecar; docs/import.md)")
    try:
        meta = json.loads(props[METADATA_KEY])
    except json.JSONDecodeError as exc:
        raise fail(f"'{METADATA_KEY}' is not valid JSON ({exc})", regen) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise fail(f"'{METADATA_KEY}' does not describe a {FORMAT} artifact", regen)
    fv = meta.get("format_version")
    if isinstance(fv, int) and fv > FORMAT_VERSION:
        adds = "; ".join(f"version {v} adds {what}" for v, what in sorted(_VERSION_ADDS.items())
                        if FORMAT_VERSION < v <= fv)
        raise fail(f"format_version {fv} was written by a newer lowrl_ros (this one reads 1..{FORMAT_VERSION}; "
                   f"{adds})", "update lowrl_ros on the robot")
    if not isinstance(fv, int) or not 1 <= fv <= FORMAT_VERSION:
        raise fail(f"format_version {fv!r} is not supported (this lowrl reads 1..{FORMAT_VERSION})",
                   "update lowrl_ros on the robot or re-export with this version")
    try:
        contract = PolicyContract.from_dict(meta.get("contract"))
    except (TypeError, ValueError) as exc:
        raise fail(f"invalid contract: {exc}", f"fix the contract and {regen}") from None
    arch = meta.get("arch")
    if not (isinstance(arch, dict) and arch.get("kind") == "mlp"
            and isinstance(arch.get("layers"), list) and arch["layers"]):
        raise fail("the architecture description ('arch') is missing or not an MLP", regen)
    if (arch.get("hidden_activation") not in ACTIVATIONS_HIDDEN
            or arch.get("output_activation") not in ACTIVATIONS_OUTPUT):
        raise fail(f"unknown activations {arch.get('hidden_activation')!r}/{arch.get('output_activation')!r}", regen)
    layers = _read_mlp(model, arch["layers"], "l", "layer", contract, fail, regen)
    head_layers, residual = [], None
    if "residual" in arch:
        head_layers, residual = _read_head(model, arch["residual"], fv, contract, fail, regen)
    _check_io(model, contract, fail, regen)
    return ParsedArtifact(
        source=source, data=data, model=model, contract=contract, layers=layers,
        hidden_activation=arch["hidden_activation"], output_activation=arch["output_activation"],
        sha256=hashlib.sha256(data).hexdigest(), head_layers=head_layers, residual=residual,
    )


def _read_mlp(model: onnx.ModelProto, specs: Any, prefix: str, what: str, contract: PolicyContract,
              fail, regen: str) -> list[StoredLayer]:
    """The stored layers ``{prefix}{i}.*`` that ``specs`` describe, checked to map obs_dim -> action_dim."""
    if not (isinstance(specs, list) and specs):
        raise fail(f"the {what}s' description is missing or empty", regen)
    for i, spec in enumerate(specs):
        if not (isinstance(spec, dict) and spec.get("storage") in onnx_graph.STORAGES
                and spec.get("dtype") in onnx_graph.DTYPES):
            raise fail(f"{what} {i} description {spec!r} is malformed", regen)
        if not all(isinstance(spec.get(k), int) and spec[k] > 0 for k in ("in", "out")):
            raise fail(f"{what} {i} sizes {spec.get('in')!r}x{spec.get('out')!r} are not positive integers", regen)
    dims = [specs[0]["in"]] + [s["out"] for s in specs]
    for i in range(1, len(specs)):
        if specs[i]["in"] != specs[i - 1]["out"]:
            raise fail(f"{what} {i} takes {specs[i]['in']} inputs but {what} {i - 1} gives {specs[i - 1]['out']}",
                       regen)
    if dims[0] != contract.obs_dim or dims[-1] != contract.action_dim:
        network = "network" if prefix == "l" else "residual head"
        raise fail(f"the {network} maps {dims[0]} -> {dims[-1]} but the contract names {contract.obs_dim} "
                   f"observations and {contract.action_dim} actions",
                   "make the contract match the network and re-export")
    try:
        layers = onnx_graph.read_layers(model, specs, prefix)
    except KeyError as exc:
        raise fail(f"initializer {exc} is missing from the graph", regen) from None
    for i, layer in enumerate(layers):
        _check_layer(f"{what} {i}", layer, fail, regen)
    return layers


def _read_head(model: onnx.ModelProto, spec: Any, fv: int, contract: PolicyContract, fail,
               regen: str) -> tuple[list[StoredLayer], ResidualHead]:
    """The residual head of a version-3 artifact: its stored layers and the dequantised ResidualHead."""
    if fv < 3:
        raise fail(f"the arch has a 'residual' head but format_version {fv} (a head needs 3)", regen)
    if not (isinstance(spec, dict) and spec.get("hidden_activation") in ACTIVATIONS_HIDDEN
            and isinstance(spec.get("bound"), list)):
        raise fail("the 'residual' head description needs hidden_activation (one of "
                   f"{ACTIVATIONS_HIDDEN}), bound (one number per action) and layers", regen)
    stored = _read_mlp(model, spec.get("layers"), "r", "residual head layer", contract, fail, regen)
    try:
        bound = onnx_graph.initializer(model, "residual.bound")
    except KeyError:
        raise fail("initializer 'residual.bound' is missing from the graph", regen) from None
    if bound.shape != (contract.action_dim,) or not np.array_equal(bound, np.float32(spec["bound"])):
        raise fail(f"the graph's residual.bound {bound.tolist()} differs from the arch's {spec['bound']}", regen)
    try:
        head = ResidualHead([(layer.dequantized(), layer.bias.copy()) for layer in stored], tuple(spec["bound"]),
                            spec["hidden_activation"])
    except ValueError as exc:
        raise fail(str(exc), "retrain the head or fix its bound, then save_residual_artifact() again") from None
    return stored, head


def _check_layer(name: str, layer: StoredLayer, fail, regen: str) -> None:
    want = np.int8 if layer.dtype == "int8" else np.float32
    if layer.bias.shape != (layer.out_dim,) or layer.bias.dtype != np.float32:
        raise fail(f"{name} bias has shape {layer.bias.shape} {layer.bias.dtype}, "
                   f"expected ({layer.out_dim},) float32", regen)
    if layer.storage == "dense":
        if layer.weight_t.shape != (layer.in_dim, layer.out_dim) or layer.weight_t.dtype != want:
            raise fail(f"{name} weight has shape {layer.weight_t.shape} {layer.weight_t.dtype}, "
                       f"expected ({layer.in_dim}, {layer.out_dim}) {np.dtype(want)}", regen)
    else:
        n = layer.in_dim * layer.out_dim
        if layer.mask.dtype != np.uint8 or layer.mask.shape != ((n + 7) // 8,):
            raise fail(f"{name} sparse mask has shape {layer.mask.shape} {layer.mask.dtype}, "
                       f"expected ({(n + 7) // 8},) uint8", regen)
        set_bits = int(np.unpackbits(layer.mask, bitorder="little")[:n].sum())
        if layer.values.dtype != want or layer.values.ndim != 1 or layer.values.size != set_bits + 1:
            raise fail(f"{name} stores {layer.values.size - 1} non-zero values but its mask has {set_bits}", regen)
    if layer.dtype == "int8":
        s = layer.w_scale
        if s.shape != (layer.out_dim,) or s.dtype != np.float32 or not (np.isfinite(s).all() and (s > 0).all()):
            raise fail(f"{name} int8 scales are missing, mis-shaped, non-finite or <= 0", regen)
    else:
        w = layer.weight_t if layer.storage == "dense" else layer.values
        if not np.isfinite(w).all():
            raise fail(f"{name} has NaN or Inf weights", "retrain or fix the weights, then re-export")
    if not np.isfinite(layer.bias).all():
        raise fail(f"{name} has NaN or Inf biases", "retrain or fix the weights, then re-export")


def _check_io(model: onnx.ModelProto, contract: PolicyContract, fail, regen: str) -> None:
    graph = model.graph
    if [i.name for i in graph.input] != [onnx_graph.IN_NAME] or [o.name for o in graph.output] != [onnx_graph.OUT_NAME]:
        raise fail(f"graph inputs/outputs are {[i.name for i in graph.input]}/{[o.name for o in graph.output]}, "
                   f"expected ['{onnx_graph.IN_NAME}']/['{onnx_graph.OUT_NAME}']", regen)
    for value, want in ((graph.input[0], contract.obs_dim), (graph.output[0], contract.action_dim)):
        dims = value.type.tensor_type.shape.dim
        if len(dims) != 2 or dims[1].dim_value != want:
            raise fail(f"graph {value.name} shape {[d.dim_value or d.dim_param for d in dims]} "
                       f"does not match the contract's {want}", regen)


def read_artifact_bytes(path: str | Path) -> bytes:
    """The file's bytes, or ArtifactError saying it is missing/unreadable."""
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ArtifactError(f"{path}: no such file; give the path of a .onnx artifact or bundle") from None
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read it ({exc}); check the path and permissions") from None


def load_weights(path: str | Path) -> tuple[MlpWeights, PolicyContract]:
    """Validate an artifact and return its (dequantised float32) weights and contract.

    For the tools that take one network (distillation's teacher, the torch reference node): an artifact
    with a residual head is refused, since its MlpWeights would be the base alone.
    """
    parsed = parse_artifact(read_artifact_bytes(path), str(path))
    if parsed.residual is not None:
        raise ArtifactError(f"{path}: carries a residual correction head (format version 3); this tool takes one "
                            "network and would drop the head, so it refuses: give the plain artifact the head was "
                            "trained on (its base)")
    return parsed.weights(), parsed.contract

