"""`lowrl profile`: real artifacts, real subprocesses, the shipped budget YAML format."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from lowrl_ros.cli import main as lowrl
from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, save_artifact
from lowrl_ros.core.budget.monitor import BudgetConfig
from lowrl_ros.core.budget.profile import ProfileConfig, judge, load_budget, profile

ROOT = Path(__file__).resolve().parents[1]


def _artifact(path: Path, sizes: list[int], int8: bool = True, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    layers = [(rng.normal(0, 1 / np.sqrt(i), (o, i)).astype(np.float32), rng.normal(0, 0.1, o).astype(np.float32))
              for i, o in zip(sizes[:-1], sizes[1:])]
    contract = PolicyContract([f"o{i}" for i in range(sizes[0])], [f"a{i}" for i in range(sizes[-1])],
                              [-1.0] * sizes[-1], [1.0] * sizes[-1], control_period_s=0.02)
    return save_artifact(path, MlpWeights(layers), contract, int8=int8)


def _budget_yaml(path: Path, **params) -> Path:
    """A budget file in the shipped format (node name + ros__parameters), edited."""
    doc = yaml.safe_load((ROOT / "config" / "budget_monitor.yaml").read_text())
    doc["/**/budget_monitor"]["ros__parameters"].update(params)
    path.write_text(yaml.safe_dump(doc))
    return path


FAST = ProfileConfig(calls=200, warmup=20, memory_calls=20)


def test_tiny_artifact_under_generous_budget_passes(tmp_path):
    art = _artifact(tmp_path / "tiny.onnx", [3, 16, 1])
    budget = load_budget(_budget_yaml(tmp_path / "b.yaml", latency_p99_limit_us=1e6, policy_rss_limit_mb=4000.0))
    report = profile(art, budget, FAST)
    assert report.verdict == "PASS", report.reasons
    assert [t.tier for t in report.tiers] == ["full"]
    t = report.tiers[0]
    assert t.engine in ("ort", "numpy") and t.bytes == art.stat().st_size
    assert t.macs == 3 * 16 + 16 * 1
    assert 0 < t.latency_us["p50"] <= t.latency_us["p99"] <= t.latency_us["max"]
    m = report.memory
    # three separately measured processes: bare < runtime imports <= runtime + policy
    assert 0 < m["bare_interpreter_peak_rss_mb"] < m["runtime_imports_peak_rss_mb"] <= m["process_peak_rss_mb"]
    assert not m["torch_loaded"]


def test_large_artifact_under_tight_budget_fails_with_reasons_and_writes_json(tmp_path):
    art = _artifact(tmp_path / "big.onnx", [17, 1024, 1024, 1024, 6])
    budget_file = _budget_yaml(tmp_path / "tight.yaml", latency_p99_limit_us=1.0, policy_rss_limit_mb=30.0)
    out = tmp_path / "report.json"
    # engine ort: "auto" would also build and time the numpy engine (~15 s at 3x1024 on a busy CPU)
    rc = lowrl(["profile", str(art), "--budget", str(budget_file), "--json", str(out), "--engine", "ort",
                "--calls", "200", "--warmup", "20", "--memory-calls", "20"])
    assert rc == 3  # FAIL
    report = json.loads(out.read_text())
    assert report["verdict"] == "FAIL"
    reasons = " ".join(report["reasons"])
    assert "process peak RSS" in reasons and "latency p99" in reasons and "exceeds the hard limit" in reasons
    m = report["memory"]
    # ~2.1M int8 weights, dequantised by the numpy engine: the policy process must be visibly bigger
    # than the runtime-only one (this fails if the probe measured the wrong process).
    assert m["policy_over_runtime_mb"] > 4.0
    assert report["tiers"][0]["macs"] == 17 * 1024 + 2 * 1024 * 1024 + 1024 * 6


def test_bundle_profiles_every_tier():
    report = profile(ROOT / "models" / "pendulum_sac.lowrl",
                     BudgetConfig(latency_p99_limit_us=1e6, policy_rss_limit_mb=4000.0), FAST)
    assert {t.tier for t in report.tiers} == {"full", "lite"}
    assert len([c for t in report.tiers for c in t.checks]) == 2


def test_headroom_makes_a_warning():
    budget = BudgetConfig(headroom=0.25)
    assert judge("x", 70, "MB", 100, budget.warn_level(100, "memory")).verdict == "PASS"
    assert judge("x", 80, "MB", 100, budget.warn_level(100, "memory")).verdict == "WARN"
    assert judge("x", 101, "MB", 100, budget.warn_level(100, "memory")).verdict == "FAIL"
    assert judge("x", 1e9, "MB", 0, None).verdict == "PASS"  # 0 = limit off


def test_bad_inputs_have_clear_messages(tmp_path, capsys):
    with pytest.raises(ValueError, match="does not exist"):
        load_budget(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("budget_monitor:\n  ros__parameters:\n    headroom: 2.0\n")
    with pytest.raises(ValueError, match="headroom"):
        load_budget(bad)
    with pytest.raises(ValueError, match="calls"):
        ProfileConfig(calls=5)
    assert lowrl(["profile", str(tmp_path / "missing.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err
