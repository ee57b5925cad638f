"""Profile a policy artifact (or bundle) against the robot's budget, without ROS and without torch.

What is measured, and how (reference/constrained-rl.md, "Profiling": measure on the target, in the
final deployment format, and keep 20-30 % headroom):

- latency: p50/p99 of ``Policy.act`` timed one call at a time (``perf_counter_ns``) in the engine
  ``load_bundle(..., engine="auto")`` picks, i.e. exactly what the policy node runs;
- memory: the peak resident set (``VmHWM``, see ``_CHILD``) of a *separate* Python process that
  only loads the file and calls ``act``; beside it, measured the same way, the peak of a bare
  interpreter and of one that imports the runtime (numpy, onnxruntime, lowrl_ros.core) but loads no
  policy. Nothing is subtracted silently: the verdict judges the whole process, because that is
  what the robot pays; the differences are reported for reading;
- bytes on disk (of each tier and of the whole file) and multiply-adds per call (the serving
  engine's, plus dense and non-zero counts).

Limits come from the budget monitor's own :class:`lowrl_ros.core.budget.monitor.BudgetConfig` (the same
YAML file the robot uses): latency against ``latency_p99_limit_us`` (0 = the policy's control
period, as on the robot), memory against ``policy_rss_limit_mb``; a value past the hard limit is a
FAIL, a value past the warn level ``BudgetConfig.warn_level`` (the ``headroom`` inside it) a WARN.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lowrl_ros.core.budget.monitor import BudgetConfig

VERDICTS = ("PASS", "WARN", "FAIL")
BUDGET_NODE = "budget_monitor"
ENGINES = ("auto", "ort", "numpy")

# Run in a fresh interpreter (python -c CODE MODE PATH ENGINE CALLS). Prints one JSON line.
# Peak RSS is VmHWM of /proc/self/status: it belongs to the process's own address space, which
# exec replaced. getrusage's ru_maxrss is NOT usable on Linux here: the kernel carries the
# pre-exec high-water mark across execve, so a child of a 500 MB parent "peaks" at 500 MB.
# ru_maxrss is only the fallback where /proc is missing (macOS: bytes; elsewhere kilobytes).
_CHILD = r"""
import json, resource, sys
mode, path, engine, calls = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
out = {"mode": mode}
if mode in ("runtime", "policy"):
    import numpy as np
    import onnxruntime
    from lowrl_ros.core.runtime.bundle import load_bundle
    from lowrl_ros.core.runtime.engines import probe_observations
if mode == "policy":
    bundle = load_bundle(path, engine=engine)
    for name, policy in bundle.policies.items():
        obs = probe_observations(policy.contract, 16)
        for k in range(calls):
            policy.act(obs[k % 16])
    out["tiers"] = sorted(bundle.policies)
    out["torch_loaded"] = "torch" in sys.modules
try:
    status = open("/proc/self/status").read()
    out["peak_rss_bytes"] = int(status.split("VmHWM:")[1].split()[0]) * 1024
    out["source"] = "VmHWM"
except (OSError, IndexError, ValueError):
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out["peak_rss_bytes"] = peak if sys.platform == "darwin" else peak * 1024
    out["source"] = "ru_maxrss"
print(json.dumps(out))
"""


@dataclass(frozen=True)
class ProfileConfig:
    """How to profile (the `lowrl profile` flags mirror these fields).

    Attributes:
        calls: timed ``act`` calls per tier for the latency percentiles.
        warmup: untimed calls before timing (caches, lazily built kernels).
        engine: engine to load with; "auto" is what the policy node uses.
        memory_calls: ``act`` calls the memory-measuring process makes per tier.
        max_artifact_bytes: hard limit on the file's size in bytes; 0 switches it off.
        max_macs: hard limit on multiply-adds per call of any tier; 0 switches it off.
        timeout_s: limit for each measuring subprocess.
    """

    calls: int = 2000
    warmup: int = 200
    engine: str = "auto"
    memory_calls: int = 200
    max_artifact_bytes: int = 0
    max_macs: int = 0
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if not isinstance(self.calls, int) or self.calls < 100:
            raise ValueError(f"profile calls={self.calls!r} must be an integer >= 100 so p99 rests on at "
                             "least one sample; 2000 is a good default")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"profile warmup={self.warmup!r} must be an integer >= 0, e.g. 200")
        if self.engine not in ENGINES:
            raise ValueError(f"profile engine={self.engine!r} is unknown; use one of {ENGINES} "
                             "('auto' is what the robot runs)")
        if not isinstance(self.memory_calls, int) or self.memory_calls < 1:
            raise ValueError(f"profile memory_calls={self.memory_calls!r} must be an integer >= 1")
        for name in ("max_artifact_bytes", "max_macs"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"profile {name}={v!r} must be an integer >= 0 (0 switches the limit off)")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(f"profile timeout_s={self.timeout_s!r} must be > 0 seconds, e.g. 120")


@dataclass
class Check:
    """One measured value judged against one limit."""

    name: str
    value: float
    unit: str
    hard: float | None  # None: no limit configured
    warn: float | None
    verdict: str
    reason: str


@dataclass
class TierProfile:
    """Measurements of one tier."""

    tier: str
    engine: str
    engine_choice_reason: str
    int8: bool
    bytes: int
    macs: int
    dense_macs: int
    nnz_macs: int
    latency_us: dict[str, float]
    control_period_s: float
    checks: list[Check] = field(default_factory=list)


@dataclass
class ProfileReport:
    """Everything `lowrl profile` prints and writes as JSON."""

    path: str
    sha256: str
    file_bytes: int
    version: int
    budget_source: str
    headroom: float
    memory: dict[str, Any]
    tiers: list[TierProfile]
    checks: list[Check]  # whole-file checks (memory, file size)
    verdict: str
    reasons: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write_json(self, path: str | Path) -> Path:
        """Write the report as indented JSON; return the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, default=float) + "\n")
        return path


def load_budget(path: str | Path) -> BudgetConfig:
    """The budget monitor's configuration from its ROS parameter YAML (or a flat mapping).

    Accepts ``budget_monitor:`` or ``/**/budget_monitor: {ros__parameters: {...}}`` (the shipped
    config/budget_monitor.yaml)
    or the bare mapping of BudgetConfig fields; validation is BudgetConfig's own.

    Raises:
        ValueError: the file is missing, not YAML, or its values are invalid (message says how to fix).
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"budget file {p} does not exist; pass the robot's config/budget_monitor.yaml")
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"budget file {p} is not valid YAML ({exc}); fix its syntax") from None
    if not isinstance(doc, dict):
        raise ValueError(f"budget file {p} must be a mapping like config/budget_monitor.yaml")
    key = next((k for k in (BUDGET_NODE, f"/**/{BUDGET_NODE}") if k in doc), None)
    if key is not None:
        block = doc[key]
        if not isinstance(block, dict) or not isinstance(block.get("ros__parameters"), dict):
            raise ValueError(f"budget file {p}: '{BUDGET_NODE}' must hold a 'ros__parameters' mapping")
        doc = block["ros__parameters"]
    try:
        return BudgetConfig.from_mapping(doc)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"budget file {p}: {exc}") from None


def judge(name: str, value: float, unit: str, hard: float | None, headroom_warn: float | None) -> Check:
    """PASS below the warn level, WARN between warn and hard, FAIL above hard (upper limits)."""
    if hard is None or hard <= 0:
        return Check(name, value, unit, None, None, "PASS", f"{name} {value:.4g} {unit} (no limit set)")
    warn = headroom_warn if headroom_warn is not None else hard
    if value > hard:
        verdict, why = "FAIL", f"{name} {value:.4g} {unit} exceeds the hard limit {hard:.4g} {unit}"
    elif value > warn:
        verdict, why = "WARN", (f"{name} {value:.4g} {unit} is inside the headroom: above the warn level "
                                f"{warn:.4g} {unit} (hard limit {hard:.4g} {unit})")
    else:
        verdict, why = "PASS", f"{name} {value:.4g} {unit} <= warn level {warn:.4g} {unit} (hard {hard:.4g})"
    return Check(name, float(value), unit, float(hard), float(warn), verdict, why)


def time_policy(policy, calls: int, warmup: int) -> dict[str, float]:
    """Per-call latency of ``policy.act_into`` in µs: p50, p90, p99, max, mean over ``calls`` calls."""
    from lowrl_ros.core.runtime.engines import probe_observations

    obs = probe_observations(policy.contract, 64, seed=1)
    out = np.zeros(policy.contract.action_dim)
    for k in range(warmup):
        policy.act_into(obs[k % 64], out)
    samples = np.empty(calls, np.int64)
    clock = time.perf_counter_ns
    for k in range(calls):
        t0 = clock()
        policy.act_into(obs[k % 64], out)
        samples[k] = clock() - t0
    us = samples / 1e3
    return {"p50": float(np.percentile(us, 50)), "p90": float(np.percentile(us, 90)),
            "p99": float(np.percentile(us, 99)), "max": float(us.max()), "mean": float(us.mean()),
            "calls": int(calls)}


def measure_peak_rss(mode: str, path: str | Path = "-", engine: str = "auto", calls: int = 1,
                     timeout_s: float = 120.0) -> dict[str, Any]:
    """Peak RSS of a fresh interpreter: ``mode`` "bare" (nothing), "runtime" (imports) or "policy".

    Raises:
        RuntimeError: the child failed; its stderr is in the message.
    """
    if mode not in ("bare", "runtime", "policy"):
        raise ValueError(f"mode {mode!r}: use 'bare', 'runtime' or 'policy'")
    cmd = [sys.executable, "-c", _CHILD, mode, str(path), engine, str(calls)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the {mode} memory probe took over {timeout_s} s; raise --timeout-s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"the {mode} memory probe failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def profile(path: str | Path, budget: BudgetConfig, config: ProfileConfig | None = None,
            budget_source: str = "") -> ProfileReport:
    """Profile every tier of an artifact or bundle against ``budget``.

    Args:
        path: a ``.onnx`` artifact or a ``.lowrl`` bundle.
        budget: limits and headroom (see :func:`load_budget`).
        config: how to measure; defaults to ``ProfileConfig()``.
        budget_source: where the budget came from, recorded in the report.

    Raises:
        lowrl_ros.core.runtime.artifact.ArtifactError: the file does not load.
        RuntimeError: a measuring subprocess failed.
    """
    from lowrl_ros.core.runtime.bundle import load_bundle

    cfg = config or ProfileConfig()
    path = Path(path)
    bundle = load_bundle(path, engine=cfg.engine)
    file_bytes = path.stat().st_size
    tiers: list[TierProfile] = []
    for name, policy in bundle.policies.items():
        lat = time_policy(policy, cfg.calls, cfg.warmup)
        c = policy.contract
        tp = TierProfile(name, policy.engine, policy.engine_choice_reason, bool(policy.int8), int(policy.nbytes),
                         int(policy.macs), int(policy.dense_macs), int(policy.nnz_macs), lat, c.control_period_s)
        # 0 means "the policy's own deadline", exactly as budget_monitor_node reads it.
        hard_us = budget.latency_p99_limit_us or c.control_period_s * 1e6
        tp.checks.append(judge(f"{name}: latency p99", lat["p99"], "us", hard_us,
                               budget.warn_level(hard_us, "latency")))
        if cfg.max_macs:
            tp.checks.append(judge(f"{name}: multiply-adds", policy.macs, "MACs", cfg.max_macs,
                                   budget.warn_level(cfg.max_macs, "macs")))
        tiers.append(tp)
    version, sha256 = bundle.version, bundle.sha256
    del bundle  # the parent's memory is not what is judged; free it before the probes run
    bare = measure_peak_rss("bare", timeout_s=cfg.timeout_s)
    runtime = measure_peak_rss("runtime", timeout_s=cfg.timeout_s)
    proc = measure_peak_rss("policy", path, cfg.engine, cfg.memory_calls, cfg.timeout_s)
    mb = 1e6  # BudgetConfig sizes are 10**6 bytes
    memory = {
        "process_peak_rss_mb": proc["peak_rss_bytes"] / mb,
        "bare_interpreter_peak_rss_mb": bare["peak_rss_bytes"] / mb,
        "runtime_imports_peak_rss_mb": runtime["peak_rss_bytes"] / mb,
        "policy_over_runtime_mb": (proc["peak_rss_bytes"] - runtime["peak_rss_bytes"]) / mb,
        "runtime_over_bare_mb": (runtime["peak_rss_bytes"] - bare["peak_rss_bytes"]) / mb,
        "torch_loaded": bool(proc.get("torch_loaded")),
        "source": proc.get("source", ""),
        "method": "peak RSS (VmHWM) of a fresh `python -c` process that loads the file with load_bundle(engine="
                  f"{cfg.engine!r}) and calls act {cfg.memory_calls} times per tier; baselines measured the same way",
    }
    checks = [judge("process peak RSS", memory["process_peak_rss_mb"], "MB", budget.policy_rss_limit_mb,
                    budget.warn_level(budget.policy_rss_limit_mb, "memory"))]
    if cfg.max_artifact_bytes:
        checks.append(judge("file size", file_bytes, "bytes", cfg.max_artifact_bytes,
                            budget.warn_level(cfg.max_artifact_bytes, "bytes")))
    all_checks = checks + [c for t in tiers for c in t.checks]
    verdict = max((c.verdict for c in all_checks), key=VERDICTS.index)
    reasons = [c.reason for c in all_checks if c.verdict != "PASS"] or ["every measured value is inside its "
                                                                        "warn level (headroom kept)"]
    return ProfileReport(str(path), sha256, file_bytes, int(version), budget_source, budget.headroom, memory,
                         tiers, checks, verdict, reasons)
