"""Guard: the on-robot runtime never imports torch (~230 MB resident on its own)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_MODULES = [
    "lowrl_ros.core.artifact",
    "lowrl_ros.core.engines",
    "lowrl_ros.core.bundle",
    "lowrl_ros.core.onnx_graph",
]


def _imports_torch(modules: list[str], extra: str = "") -> tuple[bool, str]:
    code = "import sys\n" + "".join(f"import {m}\n" for m in modules) + extra + (
        "print('TORCH' if 'torch' in sys.modules else 'CLEAN')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().endswith("TORCH"), proc.stdout


def test_runtime_does_not_import_torch(tmp_path):
    # Also load and run a real artifact, so lazily imported engine code is covered.
    extra = (
        "import numpy as np\n"
        "from lowrl_ros.core.artifact import MlpWeights, PolicyContract, save_artifact, load_artifact\n"
        "w = MlpWeights([(np.ones((4, 3), np.float32), np.zeros(4, np.float32)),"
        " (np.ones((1, 4), np.float32), np.zeros(1, np.float32))])\n"
        "c = PolicyContract(['a', 'b', 'c'], ['u'], [-1], [1])\n"
        f"p = save_artifact({str(tmp_path / 'g.onnx')!r}, w, c, int8=True)\n"
        "load_artifact(p, 'auto').act(np.zeros(3))\n"
    )
    dirty, out = _imports_torch(RUNTIME_MODULES, extra)
    assert not dirty, f"the runtime imported torch: {out}"


def test_policy_node_does_not_import_torch():
    if not (ROOT / "lowrl_ros" / "ros" / "policy_node.py").exists():
        pytest.skip("lowrl_ros/ros/policy_node.py does not exist yet")
    dirty, out = _imports_torch(["lowrl_ros.ros.policy_node"])
    assert not dirty, f"the policy node imported torch: {out}"


def test_guard_can_fail():
    """The check itself detects torch when something imports it."""
    dirty, _ = _imports_torch(["torch"])
    assert dirty
