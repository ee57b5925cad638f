"""`lowrl profile ARTIFACT --budget config/budget_monitor.yaml [--json OUT]`.

Latency p50/p99 in the deployment engine, peak RSS of a process that only loads and runs the
policy (beside a bare interpreter's and the runtime imports', measured the same way), bytes on
disk and multiply-adds, judged against the budget monitor's limits with its headroom. Exit status:
0 PASS, 1 WARN, 3 FAIL, 2 bad input (so scripts and CI can gate on it).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from lowrl_ros.core.budget.profile import ProfileConfig, ProfileReport, load_budget, profile

EXIT = {"PASS": 0, "WARN": 1, "FAIL": 3}
_HELP = {
    "calls": "timed act() calls per tier for the latency percentiles",
    "warmup": "untimed act() calls before timing",
    "engine": "engine to load with ('auto' is what the policy node runs)",
    "memory_calls": "act() calls per tier in the memory-measuring process",
    "max_artifact_bytes": "hard limit on the file size in bytes (0: off)",
    "max_macs": "hard limit on multiply-adds per call of any tier (0: off)",
    "timeout_s": "limit in seconds for each measuring subprocess",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("artifact", type=Path, help="artifact (.onnx) or bundle (.lowrl)")
    parser.add_argument("--budget", type=Path, default=Path("config/budget_monitor.yaml"),
                        help="budget monitor parameters (YAML with budget_monitor: ros__parameters:)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    parser.add_argument("--latency-limit-us", type=float, default=None,
                        help="override the budget's latency_p99_limit_us (0: the policy's control period)")
    parser.add_argument("--rss-limit-mb", type=float, default=None,
                        help="override the budget's policy_rss_limit_mb (0: off)")
    defaults = ProfileConfig()
    for f in fields(ProfileConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = type(getattr(defaults, f.name))
        kw = {"choices": ["auto", "ort", "numpy"]} if f.name == "engine" else {}
        parser.add_argument(flag, type=kind, default=getattr(defaults, f.name), help=_HELP[f.name], **kw)


def format_report(report: ProfileReport) -> str:
    """The human-readable report `lowrl profile` prints."""
    m = report.memory
    lines = [f"{report.path}: version {report.version}, {report.file_bytes} bytes, sha256 {report.sha256[:16]}…",
             f"budget: {report.budget_source} (headroom {report.headroom:.0%})"]
    for t in report.tiers:
        lat = t.latency_us
        lines.append(f"  tier {t.tier}: engine {t.engine}, {'int8' if t.int8 else 'fp32'}, {t.bytes} bytes, "
                     f"{t.macs} MACs (dense {t.dense_macs}, non-zero {t.nnz_macs}), latency p50 {lat['p50']:.1f} "
                     f"us p99 {lat['p99']:.1f} us over {lat['calls']} calls")
    lines.append(f"  memory: process peak {m['process_peak_rss_mb']:.1f} MB (bare interpreter "
                 f"{m['bare_interpreter_peak_rss_mb']:.1f} MB, "
                 f"runtime imports {m['runtime_imports_peak_rss_mb']:.1f} MB, "
                 f"policy over runtime {m['policy_over_runtime_mb']:.1f} MB)")
    for c in report.checks + [c for t in report.tiers for c in t.checks]:
        lines.append(f"  [{c.verdict}] {c.reason}")
    lines.append(f"verdict: {report.verdict}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = ProfileConfig(**{f.name: getattr(args, f.name) for f in fields(ProfileConfig)})
        budget = load_budget(args.budget)
        overrides = {}
        if args.latency_limit_us is not None:
            overrides["latency_p99_limit_us"] = args.latency_limit_us
        if args.rss_limit_mb is not None:
            overrides["policy_rss_limit_mb"] = args.rss_limit_mb
        if overrides:
            from lowrl_ros.core.budget.monitor import BudgetConfig

            budget = BudgetConfig.from_mapping({**{f.name: getattr(budget, f.name) for f in fields(budget)},
                                                **overrides})
    except ValueError as exc:
        print(f"lowrl profile: {exc}", file=sys.stderr)
        return 2
    source = str(args.budget) + (f" with overrides {overrides}" if overrides else "")
    print(f"lowrl profile: timing {cfg.calls} calls per tier, then 3 memory probes in fresh processes…",
          file=sys.stderr)
    try:
        report = profile(args.artifact, budget, cfg, budget_source=source)
    except (ValueError, RuntimeError) as exc:  # ArtifactError is a ValueError
        print(f"lowrl profile: {exc}", file=sys.stderr)
        return 2
    print(format_report(report))
    if args.json:
        print(f"wrote {report.write_json(args.json)}")
    return EXIT[report.verdict]
