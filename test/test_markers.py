"""The `ros` marker keeps the core run free of rclpy: `pytest -m "not ros"` imports no rclpy at all.

conftest.py leaves a module marked `ros` at its top unimported when `-m` deselects it; a module that
imports rclpy at its top without that mark would break the core run on a machine without a working
rclpy, and the first test here says which.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

TEST_DIR = Path(__file__).resolve().parent

# Collect with `-m "not ros"` in a fresh interpreter, then name what came into sys.modules from ROS.
COLLECT = """
import json, sys
import pytest
rc = pytest.main(["-q", "--co", "-p", "no:cacheprovider", "-m", "not ros", *sys.argv[1:]])
ros = sorted(m for m in sys.modules
             if m.split(".")[0] in ("rclpy", "rosutil", "fakes") or m.startswith("lowrl_ros.ros"))
print("\\nRESULT " + json.dumps({"rc": int(rc), "ros": ros}))
"""


def collect_without_ros(*args: str, cwd: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", COLLECT, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, r.stdout + r.stderr
    return json.loads(lines[-1][len("RESULT "):])


def test_the_core_selection_imports_no_rclpy():
    result = collect_without_ros(str(TEST_DIR), cwd=TEST_DIR.parent)
    assert result["rc"] == 0
    assert result["ros"] == [], f"collected with -m 'not ros', these came in: {result['ros']} (mark the module " \
                                "importing them `pytestmark = pytest.mark.ros`)"


def test_an_unmarked_module_importing_rclpy_is_caught(tmp_path):
    """The twin: the same check on a copy of conftest.py, with one rclpy module marked and one not."""
    for name in ("conftest.py", "tiers.py"):
        shutil.copy(TEST_DIR / name, tmp_path / name)
    (tmp_path / "setup.cfg").write_text(
        "[tool:pytest]\naddopts = --strict-markers\nmarkers =\n    ros: r\n    integration: i\n    realtime: t\n")
    node_test = "import pytest\nimport rclpy.node\n{mark}\n\ndef test_node():\n    assert rclpy.node\n"
    (tmp_path / "test_marked.py").write_text(node_test.format(mark="pytestmark = pytest.mark.ros"))
    assert collect_without_ros(str(tmp_path), cwd=tmp_path)["ros"] == []
    (tmp_path / "test_unmarked.py").write_text(node_test.format(mark=""))
    assert "rclpy" in collect_without_ros(str(tmp_path), cwd=tmp_path)["ros"]


def test_every_tier_entry_names_a_test_that_exists():
    """test/tiers.py names tests by node id: a renamed or deleted test would silently fall back to the default
    tier (and its time limit), so each entry must name an existing module and, if given, a test in it."""
    from tiers import INTEGRATION, REALTIME

    root = TEST_DIR.parent
    for entry in REALTIME + INTEGRATION:
        module, _, name = entry.partition("::")
        path = root / module
        assert path.is_file(), f"test/tiers.py: {entry!r}: no module {module}"
        if name:
            assert f"def {name}(" in path.read_text(), f"test/tiers.py: {entry!r}: no test {name} in {module}"
