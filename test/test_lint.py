"""Ruff over the package, the tests, the scripts and the benchmarks' own scripts (config: ruff.toml); its findings
are the failure message."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "lowrl_ros", "test", "scripts",
                        "bench_results"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, f"ruff check found problems (exit {r.returncode}):\n{r.stdout}{r.stderr}"


def test_ruff_flags_a_long_line(tmp_path):
    """The twin: the same command under the same config fails on a line over 120 characters."""
    bad = tmp_path / "bad.py"
    bad.write_text(f"X = {'1' * 130}\n")
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config", str(ROOT / "ruff.toml"),
                        str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and "E501" in r.stdout, r.stdout + r.stderr
