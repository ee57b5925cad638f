"""The I/O contract of an imported network: the YAML contract sidecar and the contract built from it.

A plain ONNX or TorchScript file carries only the network; its contract (observation and action
names, observation scaling and clip, action scale, offset and limits, control period) comes from a
YAML sidecar (``--sidecar``, default: the file next to the source with the same stem and ``.yaml``;
the format is in :func:`parse_sidecar` and docs/import.md). Every importer then composes the
normaliser it found in the source (an :class:`Affine`) with the sidecar's into one
:class:`PolicyContract` (:func:`build_contract`), so the artifact computes what the source framework
computes. Numpy and PyYAML only: no torch, no onnx.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lowrl_ros.core.importers.registry import ImportOptions, ImportRefused
from lowrl_ros.core.runtime.artifact import LAST_ACTION_CONVENTIONS, LAST_ACTION_KEY, PolicyContract


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
                   source: Path, kind: str, notes: list[str], provenance: dict[str, str] | None = None,
                   last_action: str = "action") -> PolicyContract:
    """The contract of an imported network: sidecar (or generic names) + the normaliser found in the source.

    The source's own output is kept exactly (action = offset + scale * y with the sidecar's scale and
    offset, identity without one), so the artifact computes what the source framework computes.
    ``last_action`` is the source framework's last-action convention (artifact.LAST_ACTION_KEY); a
    sidecar's ``provenance: {last_action: ...}`` overrides it and ``options.last_action`` both.
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
    prov[LAST_ACTION_KEY] = last_action
    prov.update(provenance or {})
    if sidecar is not None:
        prov.update(sidecar.provenance)
        for term, (lo, hi) in sidecar.term_clips.items():
            prov[f"obs_term_clip.{term}"] = f"[{lo:g}, {hi:g}]"
    stated = sidecar is not None and LAST_ACTION_KEY in sidecar.provenance
    if options.last_action is not None:
        prov[LAST_ACTION_KEY], stated = options.last_action, True
    if prov[LAST_ACTION_KEY] not in LAST_ACTION_CONVENTIONS:
        raise ImportRefused(f"{where}: last_action {prov[LAST_ACTION_KEY]!r} is unknown; use raw or action")
    reads_it = any("last_action" in n for n in obs_names)
    if not stated and kind in ("onnx", "torchscript") and reads_it:
        notes.append(f"observation last_action: fed back as the executed action ('{last_action}', the default for a "
                     "plain network); Isaac Lab, rsl_rl and rl_sar feed back the raw network output: pass "
                     "--last-action raw if this policy was trained there")
    elif reads_it or stated:
        notes.append(f"last_action convention: {prov[LAST_ACTION_KEY]} ("
                     + ("the network's raw output y" if prov[LAST_ACTION_KEY] == "raw" else "the executed action")
                     + ", recorded in the contract)")
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
