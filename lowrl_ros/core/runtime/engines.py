"""Inference engines behind one boundary: ``Policy.act(obs) -> action`` (no torch, no ROS).

Two engines run a validated artifact:

- ``OrtEngine``: ONNX Runtime on the artifact's own graph, one intra-op and one inter-op thread,
  sequential execution, all graph optimisations (constant-folds the sparse expansion, fuses the int8
  QOperator chain), inputs/outputs bound once to preallocated buffers (io_binding), so a call is one
  ``run_with_iobinding`` and no allocation.
- ``NumpyEngine``: reads the same ONNX initializers and runs them with preallocated buffers and
  ``out=`` everywhere. Normalisation is folded into the first layer and every bias into an extra
  weight column (the input buffer ends in a constant 1), so a dense layer is one ``np.dot`` and one
  activation. Layers sparse enough get a gather kernel (take, multiply, add.reduceat) when it
  measures faster than the dense matvec on this machine.

At 256 wide, per-call overhead dominates (docs/architecture.md, "Measured baselines"), which is why
both engines avoid allocation and framework dispatch. ``engine="auto"`` builds both, checks they agree on probe
observations, times them interleaved, and keeps the faster; ``Policy.engine_choice_reason`` says why.
"""
from __future__ import annotations

import functools
import math
import time
from pathlib import Path

import numpy as np

from lowrl_ros.core.runtime import activations
from lowrl_ros.core.runtime.artifact import (
    ArtifactError,
    ParsedArtifact,
    PolicyContract,
    parse_artifact,
    raw_from_action,
    read_artifact_bytes,
)
from lowrl_ros.core.runtime.onnx_graph import IN_NAME, OUT_NAME

ENGINES = ("auto", "ort", "numpy")
_isfinite = math.isfinite
_SPARSE_KERNEL_MAX_DENSITY = 0.5  # above this a gather kernel cannot beat a dense matvec


class OrtEngine:
    """ONNX Runtime, single-threaded, warmed up, with preallocated bound buffers."""

    name = "ort"

    def __init__(self, parsed: ParsedArtifact) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1  # a thread pool costs more than it saves at batch 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # No worker may busy-wait after a run (ORT's pools spin by default): at 1 thread there is no pool,
        # and this keeps it so if the thread counts above ever change. The policy runs at 50-100 Hz.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        data, raw_name = _with_raw_output(parsed)
        try:
            self.session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own Fail/InvalidGraph types
            raise ArtifactError(
                f"{parsed.source}: ONNX Runtime cannot load the graph ({exc}); re-export the artifact"
            ) from None
        c = parsed.contract
        self._x = np.zeros((1, c.obs_dim), np.float32)
        self._y = np.zeros((1, c.action_dim), np.float32)
        self._x_row = self._x[0]
        self._y_row = self._y[0]
        # OrtValues over our numpy buffers: ORT reads/writes them in place, nothing is allocated per call.
        self._x_val = ort.OrtValue.ortvalue_from_numpy(self._x)
        self._y_val = ort.OrtValue.ortvalue_from_numpy(self._y)
        self._binding = self.session.io_binding()
        self._binding.bind_ortvalue_input(IN_NAME, self._x_val)
        self._binding.bind_ortvalue_output(OUT_NAME, self._y_val)
        # The network's own output y, before the action transform and the clip (last_action "raw").
        self.raw = np.zeros((1, c.action_dim), np.float32)
        self._binding.bind_ortvalue_output(raw_name, ort.OrtValue.ortvalue_from_numpy(self.raw))
        self.raw = self.raw[0]
        self._run = self.session.run_with_iobinding

    def run_into(self, obs: np.ndarray, out: np.ndarray) -> None:
        """Write the action for one observation into ``out`` (float64 [action_dim])."""
        np.copyto(self._x_row, obs, casting="same_kind")
        self._run(self._binding)
        np.copyto(out, self._y_row)

    def run_batch(self, obs: np.ndarray) -> np.ndarray:
        """Actions for a batch [n, obs_dim] (allocates; for evaluation, not the control path)."""
        return self.session.run([OUT_NAME], {IN_NAME: np.asarray(obs, np.float32)})[0].astype(np.float64)


_TRANSFORM_NODES = ("action_scaled", "action_unclamped", "action_le_high")  # onnx_graph.build_model's names


def _with_raw_output(parsed: ParsedArtifact) -> tuple[bytes, str]:
    """The artifact's graph with the output activation's result as a second output, and that output's name.

    The first node of the action transform (onnx_graph.build_model names them) reads the network's y;
    exposing it lets ORT hand y over in the same run, with no change to the artifact's bytes on disk.
    """
    import onnx
    from onnx import TensorProto, helper

    nodes = {n.name: n for n in parsed.model.graph.node}
    first = next(nodes[name] for name in _TRANSFORM_NODES if name in nodes)
    model = onnx.ModelProto()
    model.CopyFrom(parsed.model)
    raw_name = first.input[0]
    model.graph.output.append(helper.make_tensor_value_info(raw_name, TensorProto.FLOAT,
                                                            ["batch", parsed.contract.action_dim]))
    return model.SerializeToString(), raw_name


class _DenseKernel:
    """y = act(W_aug @ x_aug) with W_aug = [W | b]: one np.dot, one activation, no allocation."""

    kind = "dense"

    def __init__(self, w_aug: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
        self.w, self.x, self.y = np.ascontiguousarray(w_aug, np.float32), x, y

    def __call__(self) -> None:
        np.dot(self.w, self.x, self.y)

    def calls(self) -> list[tuple]:
        return [(np.dot, (self.w, self.x, self.y))]


class _GatherKernel:
    """Sparse rows: y = add.reduceat(vals * x[cols], row_starts).

    Each row also holds its bias as an entry on the constant-1 input column, so no row is empty
    (add.reduceat mishandles empty segments) and the bias costs nothing extra.
    """

    kind = "gather"

    def __init__(self, w_aug: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
        rows, cols = np.nonzero(w_aug)
        bias_col = w_aug.shape[1] - 1
        # Force the bias entry of every row even when the bias is exactly 0.
        forced = np.setdiff1d(np.arange(w_aug.shape[0]), rows[cols == bias_col])
        rows = np.concatenate([rows, forced])
        cols = np.concatenate([cols, np.full(forced.size, bias_col)])
        order = np.lexsort((cols, rows))
        rows, cols = rows[order], cols[order]
        self.vals = w_aug[rows, cols].astype(np.float32)
        self.cols = cols.astype(np.intp)
        self.starts = np.searchsorted(rows, np.arange(w_aug.shape[0])).astype(np.intp)
        self.tmp = np.empty(self.vals.size, np.float32)
        self.x, self.y = x, y

    def __call__(self) -> None:
        for f, args in self.calls():
            f(*args)

    def calls(self) -> list[tuple]:
        return [
            (np.take, (self.x, self.cols, None, self.tmp)),
            (np.multiply, (self.tmp, self.vals, self.tmp)),
            (np.add.reduceat, (self.tmp, self.starts, 0, None, self.y)),
        ]


def _activation_steps(act: str, out: np.ndarray, tmp: np.ndarray) -> list[tuple]:
    """(numpy function, args) steps applying ``act`` to ``out`` in place (``tmp``: scratch of the same size).

    float32 throughout, no allocation. Each matches activations.FUNCTIONS within float32 rounding;
    relu and tanh are the one-call steps the benchmark targets were measured with.
    """
    f32 = np.float32
    maximum = functools.partial(np.maximum, out=out)  # np.maximum's positional out is deprecated
    if act == "none":
        return []
    if act == "relu":
        return [(maximum, (out, f32(0)))]
    if act == "tanh":
        return [(np.tanh, (out, out))]
    if act == "elu":
        # exp, not expm1: numpy's float32 exp is vectorised, expm1 ~5x slower; exp(x) - 1 is off by at most
        # an ulp of 1 (6e-8) near 0. With alpha <= 1, alpha * (exp(min(x, 0)) - 1) >= x for x <= 0 and
        # is 0 for x > 0, so one max gives ELU.
        steps = [(functools.partial(np.minimum, out=tmp), (out, f32(0))), (np.exp, (tmp, tmp)),
                 (np.subtract, (tmp, f32(1), tmp))]
        if activations.ELU_ALPHA != 1.0:
            steps.append((np.multiply, (tmp, f32(activations.ELU_ALPHA), tmp)))
        if activations.ELU_ALPHA <= 1.0:
            return steps + [(maximum, (out, tmp))]
        return steps + [(maximum, (out, f32(0))), (np.add, (out, tmp, out))]
    if act == "leaky_relu":  # max(x, slope * x) for a slope below 1
        return [(np.multiply, (out, f32(activations.LEAKY_RELU_SLOPE), tmp)), (maximum, (out, tmp))]
    if act == "silu":  # x * sigmoid(x) = h + h * tanh(h) with h = x / 2: no exp to overflow
        return [(np.multiply, (out, f32(0.5), out)), (np.tanh, (out, tmp)), (np.multiply, (out, tmp, tmp)),
                (np.add, (out, tmp, out))]
    if act == "gelu_tanh":  # 0.5 * x * (1 + tanh(x * (k + k * c * x^2)))
        k, c = activations.GELU_K, activations.GELU_C
        return [(np.multiply, (out, out, tmp)), (np.multiply, (tmp, f32(k * c), tmp)), (np.add, (tmp, f32(k), tmp)),
                (np.multiply, (tmp, out, tmp)), (np.tanh, (tmp, tmp)), (np.multiply, (tmp, f32(0.5), tmp)),
                (np.add, (tmp, f32(0.5), tmp)), (np.multiply, (out, tmp, out))]
    if act == "softsign":  # x / (1 + |x|)
        return [(np.absolute, (out, tmp)), (np.add, (tmp, f32(1), tmp)), (np.divide, (out, tmp, out))]
    raise ValueError(f"activation {act!r} is not in the numpy engine; use one of {activations.HIDDEN}")


class NumpyEngine:
    """numpy kernels over the artifact's initializers (dequantised once at load), preallocated.

    The contract's obs clip is applied to the raw observation, before the folded normalisation:
    clip((obs - offset) * scale, -c, c) equals (clip(obs, offset - c/|scale|, offset + c/|scale|) -
    offset) * scale, so the normalisation stays folded into the first layer and the clip costs two
    ufunc calls on obs_dim numbers.
    """

    name = "numpy"

    def __init__(self, parsed: ParsedArtifact, *, kernel: str = "auto") -> None:
        if kernel not in ("auto", "dense", "gather"):
            raise ValueError(f"kernel {kernel!r}: use 'auto', 'dense' or 'gather'")
        c = parsed.contract
        offset = np.array(c.obs_offset)
        scale = np.array(c.obs_scale)
        # Buffers: each layer's input ends with a constant 1 that multiplies the bias column.
        x_aug = np.ones(c.obs_dim + 1, np.float32)
        self._x_body = x_aug[:-1]
        self._y = np.zeros(c.action_dim, np.float32)
        self.raw = self._y  # the network's output y, before the action transform (last_action "raw")
        self._steps: list[tuple] = []
        if c.obs_clip is not None:
            reach = c.obs_clip / np.abs(scale)
            lo, hi = (offset - reach).astype(np.float32), (offset + reach).astype(np.float32)
            self._steps += [(functools.partial(np.maximum, out=self._x_body), (self._x_body, lo)),
                            (functools.partial(np.minimum, out=self._x_body), (self._x_body, hi))]
        self.kernel_kinds: list[str] = []
        self._add_mlp(parsed.layers, x_aug, self._y, parsed.hidden_activation, parsed.output_activation,
                      offset, scale, kernel)
        if parsed.residual is not None:
            # y = y_base + bound * tanh(head(x)): the head reads the same (clipped) observation buffer.
            d = np.zeros(c.action_dim, np.float32)
            self._add_mlp(parsed.head_layers, x_aug, d, parsed.residual.hidden_activation, "tanh",
                          offset, scale, kernel)
            bound = np.array(parsed.residual.bound, np.float32)
            self._steps += [(np.multiply, (d, bound, d)), (np.add, (self._y, d, self._y))]
        self._steps = tuple(self._steps)
        a_scale, a_offset = c.action_transform(parsed.output_activation)
        self.run_into = self._make_run_into(a_scale, a_offset)

    def _add_mlp(self, layers: list, x_aug: np.ndarray, y: np.ndarray, hidden: str, output: str,
                 offset: np.ndarray, scale: np.ndarray, kernel: str) -> None:
        """Append the steps of one MLP reading ``x_aug`` (raw obs + a constant 1) and writing ``y``."""
        bufs = [x_aug] + [np.ones(layer.out_dim + 1, np.float32) for layer in layers[:-1]]
        n = len(layers)
        for i, layer in enumerate(layers):
            w = layer.dequantized().astype(np.float64)
            b = layer.bias.astype(np.float64)
            if i == 0:
                # Fold (obs - offset) * scale into the first layer: W' = W*scale, b' = b - W' @ offset.
                w = w * scale[None, :]
                b = b - w @ offset
            w_aug = np.concatenate([w, b[:, None]], axis=1).astype(np.float32)
            out = y if i == n - 1 else bufs[i + 1][:-1]
            dense = _DenseKernel(w_aug, bufs[i], out)
            chosen = dense
            density = np.count_nonzero(w_aug) / w_aug.size
            if kernel == "gather" or (kernel == "auto" and density <= _SPARSE_KERNEL_MAX_DENSITY):
                gather = _GatherKernel(w_aug, bufs[i], out)
                if kernel == "gather" or _faster(gather, dense):
                    chosen = gather
            # The hot loop is a flat tuple of (numpy function, positional args incl. out): no Python
            # method layer per step, no keyword parsing, no allocation.
            self._steps += chosen.calls()
            self._steps += _activation_steps(output if i == n - 1 else hidden, out, np.empty_like(out))
            self.kernel_kinds.append(chosen.kind)

    def _make_run_into(self, a_scale: np.ndarray, a_offset: np.ndarray):
        """The per-call function, as a closure over locals (no attribute lookups in the hot path)."""
        steps, x_body, y, copyto, multiply, add = self._steps, self._x_body, self._y, np.copyto, np.multiply, np.add
        identity = bool(np.all(a_scale == 1.0) and np.all(a_offset == 0.0))  # e.g. tanh onto [-1, 1]: no rescale

        def run_into(obs: np.ndarray, out: np.ndarray) -> None:
            """Write the (unclamped) action for one observation into ``out`` (float64 [action_dim])."""
            copyto(x_body, obs, casting="same_kind")
            for f, args in steps:
                f(*args)
            if identity:
                copyto(out, y)
            else:
                multiply(y, a_scale, out=out)
                add(out, a_offset, out=out)

        return run_into

    def run_batch(self, obs: np.ndarray) -> np.ndarray:
        out = np.empty((len(obs), self._y.size))
        for i, row in enumerate(np.asarray(obs)):
            self.run_into(row, out[i])
        return out


def _faster(a, b, rounds: int = 5, calls: int = 40) -> bool:
    """True when callable ``a`` is faster than ``b``: median of interleaved timed rounds."""
    ta, tb = [], []
    for _ in range(rounds):
        for f, t in ((a, ta), (b, tb)):
            start = time.perf_counter()
            for _ in range(calls):
                f()
            t.append(time.perf_counter() - start)
    return float(np.median(ta)) < float(np.median(tb))


class Policy:
    """A loaded, validated, warmed-up policy: ``act(obs) -> action`` (float64, always clamped).

    Attributes:
        contract: the artifact's PolicyContract.
        engine: "ort" or "numpy", the engine serving act().
        engine_choice_reason: why that engine (asked for, or the measurement that chose it).
        macs: multiply-adds per call the serving engine performs (dense layers count every weight,
            gather-kernel layers only their non-zero weights).
        dense_macs: multiply-adds if every weight is computed; nnz_macs: the non-zero weights.
        path: the file it came from; sha256: of the artifact's bytes; nbytes: artifact bytes.
        kernels: the numpy engine's kernel per layer ("dense"/"gather"; the base's, then a residual
            head's), empty for ORT.
    """

    def __init__(self, parsed: ParsedArtifact, engine_impl, reason: str, path: Path | None) -> None:
        c: PolicyContract = parsed.contract
        self.contract = c
        self.engine = engine_impl.name
        self.engine_choice_reason = reason
        self.dense_macs = parsed.dense_macs
        self.nnz_macs = parsed.macs
        self.kernels = list(getattr(engine_impl, "kernel_kinds", []))
        # What the serving engine really computes: ORT and dense numpy kernels multiply every
        # weight (zeros included); a gather kernel only the non-zero ones.
        if self.kernels:
            self.macs = int(sum(layer.nnz if k == "gather" else layer.in_dim * layer.out_dim
                                for layer, k in zip(parsed.all_layers, self.kernels)))
        else:
            self.macs = parsed.dense_macs
        self.path = path
        self.source = parsed.source
        self.sha256 = parsed.sha256
        self.nbytes = len(parsed.data)
        self.int8 = any(layer.dtype == "int8" for layer in parsed.all_layers)
        self._impl = engine_impl
        self._run = engine_impl.run_into
        self._low = np.array(c.action_low, np.float64)
        self._high = np.array(c.action_high, np.float64)
        self._obs_shape = (c.obs_dim,)
        self._out = np.zeros(c.action_dim, np.float64)
        self._output_activation = parsed.output_activation

    @property
    def raw_output(self) -> np.ndarray:
        """The network's own output y of the last act() (float32, overwritten by the next call): before the
        action transform and the clip to the limits, the ``last_action`` that Isaac Lab and rsl_rl feed back."""
        return self._impl.raw

    def raw_from_action(self, action: np.ndarray) -> np.ndarray:
        """The y that gives ``action`` (artifact.raw_from_action): for an action the network did not choose."""
        return raw_from_action(self.contract, self._output_activation, action)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """The action for one observation [obs_dim]: a new float64 array, clamped to the limits.

        Raises:
            ValueError: the observation has the wrong size or contains NaN/Inf (a NaN would pass
                through any clamp, so it is refused rather than turned into an action).

        Not thread-safe: a Policy owns its buffers; use one Policy per thread.
        """
        return self.act_into(obs, self._out).copy()

    def act_into(self, obs: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Allocation-free act: write the clamped action into ``out`` (float64 [action_dim]) and return it."""
        if getattr(obs, "shape", None) != self._obs_shape:
            obs = np.asarray(obs, dtype=np.float64)
            if obs.shape != self._obs_shape:
                raise ValueError(
                    f"observation has shape {obs.shape} but the policy expects ({self.contract.obs_dim},) "
                    f"in the order {list(self.contract.obs_names)}"
                )
        if not _isfinite(obs.dot(obs)):  # one cheap reduction: any NaN/Inf makes it non-finite
            raise ValueError(
                "observation contains NaN or Inf (or values so large their square overflows); "
                "the caller must hold the safe action and fix the sensor or adapter"
            )
        self._run(obs, out)
        # Clamp in float64 too: the graph's float32 limits can sit a hair outside the contract's.
        np.minimum(out, self._high, out=out)
        np.maximum(out, self._low, out=out)
        return out

    def act_batch(self, obs: np.ndarray) -> np.ndarray:
        """Actions for [n, obs_dim] observations (allocates; evaluation and parity checks)."""
        return np.clip(self._impl.run_batch(obs), self._low, self._high)

    def __repr__(self) -> str:
        return (f"Policy({self.source}, engine={self.engine}, version={self.contract.version}, "
                f"tier={self.contract.tier}, macs={self.macs})")


def probe_observations(contract: PolicyContract, n: int = 16, seed: int = 0) -> np.ndarray:
    """Observations whose normalised values are standard normal (what the network was trained on).

    When the contract clips observations (``obs_clip``), every fourth row (the first included) is
    stretched to 3 * obs_clip standard deviations, so each parity check also sees entries beyond
    the clip (about 3/4 of that row's entries) beside ones inside it.
    """
    z = np.random.default_rng(seed).standard_normal((n, contract.obs_dim))
    if contract.obs_clip is not None:
        z[::4] *= 3.0 * contract.obs_clip
    return np.array(contract.obs_offset) + z / np.array(contract.obs_scale)


def _time_act(policies: list[Policy], obs: np.ndarray, rounds: int = 7, calls: int = 60) -> list[float]:
    """Median µs per act() of each policy, interleaved rounds (the machine's speed drifts)."""
    times: list[list[float]] = [[] for _ in policies]
    out = np.zeros(policies[0].contract.action_dim)
    for _ in range(rounds):
        for p, t in zip(policies, times):
            start = time.perf_counter()
            for k in range(calls):
                p.act_into(obs[k % len(obs)], out)
            t.append((time.perf_counter() - start) / calls * 1e6)
    return [float(np.median(t)) for t in times]


def build_policy(parsed: ParsedArtifact, engine: str = "auto", path: Path | None = None) -> Policy:
    """Build, warm up and (for "auto") check and choose the engine for a validated artifact."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is unknown; use one of {ENGINES}")
    probes = probe_observations(parsed.contract)
    if engine == "ort":
        policy = Policy(parsed, OrtEngine(parsed), "asked for engine='ort'", path)
    elif engine == "numpy":
        policy = Policy(parsed, NumpyEngine(parsed), "asked for engine='numpy'", path)
    else:
        ort_p = Policy(parsed, OrtEngine(parsed), "", path)
        np_p = Policy(parsed, NumpyEngine(parsed), "", path)
        _check_agree(parsed, ort_p, np_p, probes)
        _time_act([ort_p, np_p], probes, rounds=2, calls=30)  # warm both before timing
        t_ort, t_np = _time_act([ort_p, np_p], probes)
        policy = np_p if t_np <= t_ort else ort_p
        policy.engine_choice_reason = (
            f"auto: numpy {t_np:.1f} µs vs ort {t_ort:.1f} µs per act() (median of 7 interleaved rounds "
            f"of 60 calls at load); numpy kernels {np_p.kernels}"
        )
    # Warm-up: first calls touch caches, lazily initialised kernels and branch predictors.
    out = np.zeros(parsed.contract.action_dim)
    for k in range(50):
        policy.act_into(probes[k % len(probes)], out)
    return policy


def _check_agree(parsed: ParsedArtifact, a: Policy, b: Policy, probes: np.ndarray) -> None:
    """Both engines must give (nearly) the same actions; catches a graph that disagrees with its weights."""
    span = np.array(parsed.contract.action_high) - np.array(parsed.contract.action_low)
    # int8 ORT also quantizes activations (dynamic uint8), the numpy engine does not: allow for it.
    tol = (0.1 if a.int8 else 1e-3) * span
    for obs in probes:
        diff = np.abs(a.act(obs) - b.act(obs))
        if (diff > tol).any():
            raise ArtifactError(
                f"{parsed.source}: the ONNX graph and its weights disagree (ORT vs numpy action differ "
                f"by {diff.max():.4g} > {tol.max():.4g}); the graph was edited, is corrupt or was written by an "
                "older lowrl_ros: re-export it (scripts/reexport_models.py FILE keeps its weights)"
            )


def load_artifact(path: str | Path, engine: str = "auto"):
    """Validate an artifact and return a ready, warmed-up :class:`Policy`.

    Args:
        path: the ``.onnx`` artifact.
        engine: "ort" (ONNX Runtime), "numpy" (this package's kernels) or "auto" (both are built,
            checked against each other and timed; the faster one serves ``act``; the reason is in
            ``policy.engine_choice_reason``).
    """
    parsed = parse_artifact(read_artifact_bytes(path), str(path))
    return build_policy(parsed, engine, path=Path(path))
