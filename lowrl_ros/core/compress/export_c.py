"""Export a policy artifact as dependency-free C99 for microcontrollers (no torch, no ROS).

``export_c(artifact, out_dir, name="policy")`` writes ``<name>.h`` and ``<name>.c``: the weights as
static const arrays and one function ``void <name>_act(const float *obs, float *action)`` that
computes exactly the artifact's graph (onnx_graph.py):

    obs -> (obs - offset) * scale -> [clip to +-obs_clip] -> [layer -> activation]*
        -> [+ bound * tanh(residual head)] -> action_offset + action_scale * y -> clamp -> action

(the clip only when the contract sets ``obs_clip``; the rescale only when
``PolicyContract.action_transform`` is not the identity: a tanh output maps [-1, 1] onto
[low, high] by default, a linear "none" output passes through unless action_scale/offset are given).

Decisions (and why):

- int8 layers keep the artifact's math *bit for bit where it can*: the input row is quantized
  dynamically to uint8 the way ONNX ``DynamicQuantizeLinear`` does (range widened to include 0,
  scale = (max - min) / 255, zero point and values rounded half to even, saturated to 0..255),
  the dot products accumulate exactly in int32, and the result is ``acc * (x_scale * w_scale[o]) +
  b[o]`` in float, as ORT's fused DynamicQuantizeMatMul does. Keeping activations in float instead
  would be simpler but would differ from what the robot's ONNX Runtime computes by up to a
  quantization step per layer; matching ORT lets one probe-set test vouch for both.
- Weights are stored per output row (``[out][in]``), so each output is one contiguous dot product.
- A layer is stored as CSR (row pointers, column indices, non-zero values) when that is smaller
  than dense: column indices are uint8 when the layer has at most 256 inputs, else uint16; row
  pointers uint16 when nnz < 65536, else uint32.
- No malloc: two static float buffers of the widest layer and one uint8 buffer for the quantized
  row. The function is therefore not reentrant (one policy instance per name; export twice
  under two names for two). libm is used only where an activation needs it: ``tanhf`` (tanh,
  gelu_tanh), ``expm1f`` (elu), ``expf`` (silu); relu, leaky_relu and softsign need none. Link with -lm.
  Every activation is written as its formula in core/runtime/activations.py, in float.
- Floats are written as C99 hexadecimal literals: every float32 survives the round trip exactly.
- Inputs must be finite: NaN observations are not checked here (the caller's safety layer is).
- Known limit: on x86 CPUs without AVX-512 VNNI, ORT's u8s8 int8 kernels may saturate 16-bit
  intermediate sums (vpmaddubsw); there the C result is the exact one and ORT's may differ.
"""
from __future__ import annotations

import io
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lowrl_ros.core.runtime import activations
from lowrl_ros.core.runtime.artifact import ArtifactError, ParsedArtifact, parse_artifact, read_artifact_bytes
from lowrl_ros.core.runtime.onnx_graph import StoredLayer

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,30}$")
_C_KEYWORDS = {"auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
               "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return",
               "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
               "volatile", "while"}


@dataclass(frozen=True)
class CLayerPlan:
    """How one layer is written: storage chosen for the C arrays and its byte cost."""

    in_dim: int
    out_dim: int
    dtype: str  # "fp32" | "int8"
    storage: str  # "dense" | "csr"
    nnz: int
    bytes: int


@dataclass(frozen=True)
class CExport:
    """What export_c wrote."""

    header: Path
    source: Path
    name: str
    layers: tuple[CLayerPlan, ...]
    weight_bytes: int  # bytes of all static const weight/index/scale/bias arrays
    scratch_bytes: int  # bytes of the static work buffers
    sha256: str  # of the source artifact
    head_layers: tuple[CLayerPlan, ...] = ()  # a residual correction head's layers (format version 3)


# Each activation as a C float expression of {x}: the formulas (and constants) of core/runtime/activations.py.
_C_ACTIVATIONS = {
    "relu": "{x} > 0.0f ? {x} : 0.0f",
    "tanh": "tanhf({x})",
    "elu": "{x} > 0.0f ? {x} : " + ("" if activations.ELU_ALPHA == 1.0 else f"{activations.ELU_ALPHA!r}f * ")
           + "expm1f({x})",
    "leaky_relu": f"{{x}} > 0.0f ? {{x}} : {activations.LEAKY_RELU_SLOPE!r}f * {{x}}",
    "silu": "{x} / (1.0f + expf(-{x}))",  # expf(-x) = inf for x < -88 gives -0, never NaN
    "gelu_tanh": f"0.5f * {{x}} * (1.0f + tanhf({activations.GELU_K!r}f * ({{x}} + {activations.GELU_C!r}f"
                 " * {x} * {x} * {x})))",
    "softsign": "{x} / (1.0f + ({x} < 0.0f ? -{x} : {x}))",
}
assert set(_C_ACTIVATIONS) == set(activations.HIDDEN) | set(activations.OUTPUT) - {"none"}


def _hexf(v: float) -> str:
    v = float(np.float32(v))
    if v == 0:
        return "0.0f"
    mant, exp = float.hex(v).split("p")
    mant = mant.rstrip("0").rstrip(".")  # 0x1.8000p+1 -> 0x1.8p+1, 0x1.000p+0 -> 0x1p+0
    return f"{mant}p{exp}f"


def _array(ctype: str, name: str, values: np.ndarray, per_line: int = 12) -> str:
    vals = np.asarray(values).reshape(-1)
    fmt = _hexf if ctype == "float" else (lambda v: str(int(v)))
    items = [fmt(v) for v in vals] or ["0"]
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    body = ",\n    ".join(lines)
    return f"static const {ctype} {name}[{max(len(vals), 1)}] = {{\n    {body}\n}};\n"


def _rows(layer: StoredLayer) -> np.ndarray:
    """The stored weight as [out, in] (int8 stays int8, fp32 stays fp32; no dequantisation)."""
    return np.ascontiguousarray(layer.dense_t().T)


def _plan(layer: StoredLayer) -> CLayerPlan:
    w = _rows(layer)
    nnz = int(np.count_nonzero(w))
    vbytes = 1 if layer.dtype == "int8" else 4
    dense = w.size * vbytes
    col = 1 if layer.in_dim <= 256 else 2
    ptr = 2 if nnz < 65536 else 4
    csr = nnz * (vbytes + col) + (layer.out_dim + 1) * ptr
    extra = layer.out_dim * 4 * (2 if layer.dtype == "int8" else 1)  # bias (+ scales)
    storage = "csr" if csr < dense else "dense"
    return CLayerPlan(layer.in_dim, layer.out_dim, layer.dtype, storage, nnz, min(csr, dense) + extra)


def _load(path: Path, tier: str | None) -> ParsedArtifact:
    data = read_artifact_bytes(path)
    if data[:4] != b"PK\x03\x04":  # a plain .onnx artifact
        if tier not in (None, "full"):
            raise ArtifactError(f"{path}: a single artifact has no tier {tier!r}; drop --tier or pass a bundle")
        return parse_artifact(data, str(path))
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        tiers = json.loads(zf.read("manifest.json"))["tiers"]
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path}: not a readable bundle ({exc}); rebuild it with save_bundle()") from None
    tier = tier or ("full" if "full" in tiers else sorted(tiers)[0])
    if tier not in tiers:
        raise ArtifactError(f"{path}: the bundle has no tier {tier!r}; pick one of {sorted(tiers)} with --tier")
    return parse_artifact(zf.read(tiers[tier]["file"]), f"{path}!{tier}")


def check_name(name: str) -> str:
    """``name`` if it is a usable C identifier prefix, else ValueError saying how to fix it."""
    if not isinstance(name, str) or not _IDENT.match(name) or name in _C_KEYWORDS:
        raise ValueError(f"--name {name!r} is not a usable C identifier; use letters, digits and '_' "
                         "(not starting with a digit, at most 31 characters, not a C keyword), e.g. 'policy'")
    return name


_KERNELS = r"""
static int32_t NAME_round_even(float v)
{
    /* Round half to even without libm (the rounding ONNX DynamicQuantizeLinear uses); |v| < 2^31. */
    int32_t i = (int32_t)v; /* truncates toward zero */
    float d = v - (float)i; /* exact: v and its truncation share the exponent range */
    if (d > 0.5f || (d == 0.5f && (i & 1))) {
        i += 1;
    } else if (d < -0.5f || (d == -0.5f && (i & 1))) {
        i -= 1;
    }
    return i;
}

static int32_t NAME_quantize(const float *x, int32_t n, uint8_t *q, float *scale)
{
    /* DynamicQuantizeLinear: uint8 with the range widened to include 0; returns the zero point. */
    float lo = 0.0f, hi = 0.0f, s, lim_lo, lim_hi, v, zp_f;
    int32_t i, zp;
    for (i = 0; i < n; ++i) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    s = (hi == lo) ? 1.0f : (hi - lo) / 255.0f;
    zp_f = 0.0f - lo / s;
    zp_f = zp_f < 0.0f ? 0.0f : (zp_f > 255.0f ? 255.0f : zp_f);
    zp = NAME_round_even(zp_f);
    lim_lo = (float)(0 - zp);
    lim_hi = (float)(255 - zp);
    for (i = 0; i < n; ++i) {
        v = x[i] / s;
        v = v < lim_lo ? lim_lo : v; /* saturate before rounding, as ORT's MLAS kernel does */
        v = v > lim_hi ? lim_hi : v;
        q[i] = (uint8_t)(NAME_round_even(v) + zp);
    }
    *scale = s;
    return zp;
}

static void NAME_dense_f32(const float *w, const float *b, const float *x, float *y, int32_t nin, int32_t nout)
{
    int32_t o, i;
    for (o = 0; o < nout; ++o) {
        const float *row = w + (size_t)o * (size_t)nin;
        float acc = 0.0f;
        for (i = 0; i < nin; ++i) {
            acc += x[i] * row[i];
        }
        y[o] = acc + b[o];
    }
}

static void NAME_dense_i8(const int8_t *w, const float *ws, const float *b, const float *x, float *y,
                          int32_t nin, int32_t nout, uint8_t *xq)
{
    float xs;
    int32_t zp = NAME_quantize(x, nin, xq, &xs);
    int32_t o, i;
    for (o = 0; o < nout; ++o) {
        const int8_t *row = w + (size_t)o * (size_t)nin;
        int32_t acc = 0;
        for (i = 0; i < nin; ++i) {
            acc += ((int32_t)xq[i] - zp) * (int32_t)row[i];
        }
        y[o] = (float)acc * (xs * ws[o]) + b[o];
    }
}
"""

_CSR = r"""
static void NAME_csr_f32_PT_CT(const PT *ptr, const CT *col, const float *val, const float *b, const float *x,
                               float *y, int32_t nout)
{
    int32_t o;
    PT k;
    for (o = 0; o < nout; ++o) {
        float acc = 0.0f;
        for (k = ptr[o]; k < ptr[o + 1]; ++k) {
            acc += x[col[k]] * val[k];
        }
        y[o] = acc + b[o];
    }
}

static void NAME_csr_i8_PT_CT(const PT *ptr, const CT *col, const int8_t *val, const float *ws, const float *b,
                              const float *x, float *y, int32_t nin, int32_t nout, uint8_t *xq)
{
    float xs;
    int32_t zp = NAME_quantize(x, nin, xq, &xs);
    int32_t o;
    PT k;
    for (o = 0; o < nout; ++o) {
        int32_t acc = 0;
        for (k = ptr[o]; k < ptr[o + 1]; ++k) {
            acc += ((int32_t)xq[col[k]] - zp) * (int32_t)val[k];
        }
        y[o] = (float)acc * (xs * ws[o]) + b[o];
    }
}
"""


def _header_comment(parsed: ParsedArtifact, name: str, plans: list[CLayerPlan]) -> str:
    c = parsed.contract
    lines = [
        f"{name}: policy exported by `lowrl export-c` (lowrl_ros.core.compress.export_c); do not edit.",
        f"source artifact sha256: {parsed.sha256}",
        f"version {c.version}, parent {c.parent_version}, tier {c.tier}, env {c.env_id}, "
        f"control period {c.control_period_s} s",
        f"observations ({c.obs_dim}, in order): {', '.join(c.obs_names)}",
        f"obs_offset: {list(c.obs_offset)}",
        f"obs_scale: {list(c.obs_scale)}",
        f"obs_clip: {c.obs_clip} (normalised obs = clip((obs - obs_offset) * obs_scale, -obs_clip, obs_clip))",
        f"actions ({c.action_dim}, in order): {', '.join(c.action_names)}",
        f"action_low: {list(c.action_low)}",
        f"action_high: {list(c.action_high)}",
        "action = clamp(action_offset + action_scale * y, action_low, action_high); (scale, offset): "
        + json.dumps([list(map(float, v)) for v in c.action_transform(parsed.output_activation)]),
        f"activations: hidden {parsed.hidden_activation}, output {parsed.output_activation}",
        "layers: " + "; ".join(f"{p.in_dim}->{p.out_dim} {p.dtype} {p.storage} nnz {p.nnz}" for p in plans),
    ]
    if parsed.residual is not None:
        head = parsed.residual
        lines.append(f"residual head (format version 3): y = y_base + bound * tanh(head(normalised obs)), hidden "
                     f"{head.hidden_activation}, bound {list(head.bound)}, layers: "
                     + "; ".join(f"{p.in_dim}->{p.out_dim} {p.dtype} {p.storage} nnz {p.nnz}"
                                 for p in map(_plan, parsed.head_layers)))
    lines += [
        "int8 layers quantize their input row dynamically to uint8 exactly like ONNX DynamicQuantizeLinear",
        "(as the artifact's ONNX graph does) and accumulate in int32. Not reentrant (static buffers).",
        "provenance: " + json.dumps(c.provenance, sort_keys=True),
    ]
    body = "\n".join(" * " + line.replace("*/", "* /") for line in lines)
    return f"/*\n{body}\n */\n"


def export_c(artifact: str | Path, out_dir: str | Path, name: str = "policy", tier: str | None = None) -> CExport:
    """Write ``<name>.h`` and ``<name>.c`` for the artifact (or one tier of a bundle).

    Args:
        artifact: a ``.onnx`` artifact or ``.lowrl`` bundle.
        out_dir: directory to write into (created).
        name: C identifier prefix of every symbol (``<name>_act``, ``<NAME>_OBS_DIM``, ...).
        tier: for a bundle, which tier (default "full").

    Raises:
        ValueError: a bad name; ArtifactError (a ValueError) when the artifact does not load.
    """
    check_name(name)
    parsed = _load(Path(artifact), tier)
    c = parsed.contract
    plans = [_plan(layer) for layer in parsed.layers]
    head_plans = [_plan(layer) for layer in parsed.head_layers]
    up = name.upper()
    widest = max(max(layer.in_dim, layer.out_dim) for layer in parsed.all_layers)
    any_int8 = any(p.dtype == "int8" for p in plans + head_plans)
    csr_kinds: set = set()
    arrays: list[str] = []
    calls: list[str] = []
    src = _emit_mlp(name, "l", parsed.layers, plans, f"{name}_buf_a", parsed.hidden_activation,
                    parsed.output_activation, arrays, calls, csr_kinds)
    y_expr = f"{src}[j]"
    head = parsed.residual
    if head is not None:
        # y = y_base + bound * tanh(head(x)), as the graph: the head reads the kept normalised obs.
        calls.append(f"for (j = 0; j < {c.action_dim}; ++j) {{ {name}_yb[j] = {src}[j]; }}")
        h = _emit_mlp(name, "r", parsed.head_layers, head_plans, f"{name}_xn", head.hidden_activation, "tanh",
                      arrays, calls, csr_kinds)
        arrays.append(_array("float", f"{name}_bound", np.asarray(head.bound, np.float32)))
        y_expr = f"{name}_yb[j] + {h}[j] * {name}_bound[j]"
    low = np.asarray(c.action_low, np.float32)
    high = np.asarray(c.action_high, np.float32)
    arrays += [_array("float", f"{name}_obs_offset", np.asarray(c.obs_offset, np.float32)),
               _array("float", f"{name}_obs_scale", np.asarray(c.obs_scale, np.float32)),
               _array("float", f"{name}_low", low), _array("float", f"{name}_high", high)]
    # The graph's float32 constants: the v1 default (tanh onto the limits) is half/mid computed in float32.
    if c.action_scale is None and c.action_offset is None:
        a_scale = (high - low) / 2 if parsed.output_activation == "tanh" else np.ones_like(low)
        a_offset = (high + low) / 2 if parsed.output_activation == "tanh" else np.zeros_like(low)
    else:
        a_scale, a_offset = (np.asarray(v, np.float32) for v in c.action_transform(parsed.output_activation))
    tail = ""
    if not np.all(a_scale == 1.0):
        arrays.append(_array("float", f"{name}_action_scale", a_scale))
        tail += f" * {name}_action_scale[j]"  # as the graph: Mul, then Add
    if not np.all(a_offset == 0.0):
        arrays.append(_array("float", f"{name}_action_offset", a_offset))
        tail += f" + {name}_action_offset[j]"
    rescale = f"v = {y_expr};" + (f" v = v{tail};" if tail else "")
    if c.obs_clip is None:
        clip = ""
    else:
        lim = _hexf(c.obs_clip)
        clip = (f"        {name}_buf_a[j] = {name}_buf_a[j] < -{lim} ? -{lim} : {name}_buf_a[j];\n"
                f"        {name}_buf_a[j] = {name}_buf_a[j] > {lim} ? {lim} : {name}_buf_a[j];\n")
    if head is not None:
        clip += f"        {name}_xn[j] = {name}_buf_a[j];\n"  # the head's input, kept past the base's layers
    kernels = _KERNELS
    for pt, ct in sorted(csr_kinds):
        kernels += _CSR.replace("_PT_CT", f"_{pt}_{ct}").replace("PT", pt).replace("CT", ct)
    kernels = kernels.replace("NAME_", f"{name}_")
    # Only emit the kernels some layer calls (-Werror=unused-function).
    used = "\n".join(calls)
    kernels = _keep_used(kernels, used, name)
    comment = _header_comment(parsed, name, plans)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    header = (
        f"{comment}#ifndef {up}_H\n#define {up}_H\n\n"
        f"#define {up}_OBS_DIM {c.obs_dim}\n#define {up}_ACTION_DIM {c.action_dim}\n"
        f"#define {up}_VERSION {c.version}\n#define {up}_SOURCE_SHA256 \"{parsed.sha256}\"\n\n"
        "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
        f"/* action[{c.action_dim}] for obs[{c.obs_dim}] (raw, un-normalised observations, finite);"
        " the action is clamped to the limits. */\n"
        f"void {name}_act(const float *obs, float *action);\n\n"
        "#ifdef __cplusplus\n}\n#endif\n\n#endif\n"
    )
    needs_math = any(f in "\n".join(calls) for f in ("tanhf(", "expf(", "expm1f("))
    source = (
        f"{comment}#include <stddef.h>\n#include <stdint.h>\n" + ("#include <math.h>\n" if needs_math else "")
        + f"\n#include \"{name}.h\"\n\n"
        + "".join(arrays)
        + f"\nstatic float {name}_buf_a[{widest}];\nstatic float {name}_buf_b[{widest}];\n"
        + (f"static uint8_t {name}_xq[{widest}];\n" if any_int8 else "")
        + (f"static float {name}_xn[{c.obs_dim}];\nstatic float {name}_yb[{c.action_dim}];\n" if head else "")
        + kernels
        + f"\nvoid {name}_act(const float *obs, float *action)\n{{\n    int32_t j;\n    float v;\n"
        + f"    for (j = 0; j < {c.obs_dim}; ++j) {{\n"
        + f"        {name}_buf_a[j] = (obs[j] - {name}_obs_offset[j]) * {name}_obs_scale[j];\n{clip}    }}\n"
        + "".join(f"    {line}\n" for line in calls)
        + f"    for (j = 0; j < {c.action_dim}; ++j) {{\n        {rescale}\n"
        + f"        v = v < {name}_high[j] ? v : {name}_high[j];\n"
        + f"        action[j] = v > {name}_low[j] ? v : {name}_low[j];\n    }}\n}}\n"
    )
    h_path, c_path = out / f"{name}.h", out / f"{name}.c"
    h_path.write_text(header)
    c_path.write_text(source)
    per_action = int(not np.all(a_scale == 1.0)) + int(not np.all(a_offset == 0.0)) + int(head is not None)
    weight_bytes = (sum(p.bytes for p in plans + head_plans) + 4 * (2 * c.obs_dim + 2 * c.action_dim)
                    + 4 * c.action_dim * per_action)
    scratch = 2 * 4 * widest + (widest if any_int8 else 0) + (4 * (c.obs_dim + c.action_dim) if head else 0)
    return CExport(h_path, c_path, name, tuple(plans), weight_bytes, scratch, parsed.sha256, tuple(head_plans))


def _emit_mlp(name: str, prefix: str, layers: list[StoredLayer], plans: list[CLayerPlan], src: str, hidden: str,
              output: str, arrays: list[str], calls: list[str], csr_kinds: set) -> str:
    """Append one MLP's arrays (``<name>_<prefix><i>_*``) and calls reading ``src``; returns the output buffer.

    Layers ping-pong between the two static buffers (the first reads ``src``, which may be a third one).
    """
    buf_a, buf_b = f"{name}_buf_a", f"{name}_buf_b"
    dst = buf_b if src == buf_a else buf_a
    for i, (layer, plan) in enumerate(zip(layers, plans)):
        p = f"{name}_{prefix}{i}"
        w = _rows(layer)
        ctype = "int8_t" if plan.dtype == "int8" else "float"
        arrays.append(_array("float", f"{p}_b", layer.bias))
        if plan.dtype == "int8":
            arrays.append(_array("float", f"{p}_ws", layer.w_scale))
        if plan.storage == "dense":
            arrays.append(_array(ctype, f"{p}_w", w))
            if plan.dtype == "int8":
                calls.append(f"{name}_dense_i8({p}_w, {p}_ws, {p}_b, {src}, {dst}, {plan.in_dim}, {plan.out_dim}, "
                             f"{name}_xq);")
            else:
                calls.append(f"{name}_dense_f32({p}_w, {p}_b, {src}, {dst}, {plan.in_dim}, {plan.out_dim});")
        else:
            rows, cols = np.nonzero(w)  # row-major order: CSR by output row
            ptr = np.searchsorted(rows, np.arange(plan.out_dim + 1))
            pt = "uint16_t" if plan.nnz < 65536 else "uint32_t"
            ct = "uint8_t" if plan.in_dim <= 256 else "uint16_t"
            csr_kinds.add((pt, ct))
            arrays += [_array(pt, f"{p}_ptr", ptr), _array(ct, f"{p}_col", cols),
                       _array(ctype, f"{p}_val", w[rows, cols])]
            k = f"{pt}_{ct}"
            if plan.dtype == "int8":
                calls.append(f"{name}_csr_i8_{k}({p}_ptr, {p}_col, {p}_val, {p}_ws, {p}_b, {src}, {dst}, "
                             f"{plan.in_dim}, {plan.out_dim}, {name}_xq);")
            else:
                calls.append(f"{name}_csr_f32_{k}({p}_ptr, {p}_col, {p}_val, {p}_b, {src}, {dst}, {plan.out_dim});")
        act = output if i == len(plans) - 1 else hidden
        if act != "none":
            expr = _C_ACTIVATIONS[act].format(x=f"{dst}[j]")
            calls.append(f"for (j = 0; j < {plan.out_dim}; ++j) {{ {dst}[j] = {expr}; }}")
        src, dst = dst, (buf_a if dst == buf_b else buf_b)
    return src


def _keep_used(kernels: str, used: str, name: str) -> str:
    """Drop static kernel functions that nothing calls (they would trip -Wunused-function)."""
    blocks = re.split(r"\n(?=static )", kernels)
    kept = []
    for block in blocks:
        m = re.match(r"static \w+ (\w+)\(", block.strip())
        fn = m.group(1) if m else None
        if fn is None or fn in used or (fn.endswith(("_quantize", "_round_even")) and f"{name}_" in fn
                                        and ("_i8" in used)):
            kept.append(block)
    return "\n".join(kept)
