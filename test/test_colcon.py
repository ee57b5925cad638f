"""`colcon build` of the package, as on a robot (issue 18 §6): a real colcon (colcon-common-extensions from
PyPI, pinned in requirements.txt) builds this source tree into a temporary workspace. The console scripts
must land in ``install/lowrl_ros/lib/lowrl_ros`` (where ``ros2 run`` / ``ros2 launch`` look, set by
setup.cfg's [develop]/[install] script dirs) and launch/, config/, models/ and package.xml in
``install/lowrl_ros/share/lowrl_ros`` (setup.py data_files, where ``$(find-pkg-share lowrl_ros)`` looks).
Then the installed copy runs: ``lowrl --help`` from lib/, and the launcher resolves the installed share.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent


def colcon() -> str:
    """The colcon of this environment (the .venv), else one on PATH."""
    found = shutil.which("colcon", path=str(Path(sys.executable).parent)) or shutil.which("colcon")
    if not found:
        pytest.fail("colcon not found: `pip install -r requirements.txt` installs colcon-common-extensions "
                    "(make test does)")
    return found


def console_scripts() -> set[str]:
    text = (ROOT / "setup.py").read_text()
    return set(re.findall(r'"(\w+) = lowrl_ros[\w.]*:main"', text))


def shipped(top: str) -> set[str]:
    return {str(p.relative_to(ROOT)) for p in (ROOT / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_colcon_build_installs_scripts_in_lib_and_data_in_share(tmp_path):
    before = set(os.listdir(ROOT))
    out = subprocess.run([colcon(), "--log-base", str(tmp_path / "log"), "build", "--base-paths", str(ROOT),
                          "--build-base", str(tmp_path / "build"), "--install-base", str(tmp_path / "install"),
                          "--packages-select", "lowrl_ros", "--event-handlers", "console_direct-"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    prefix = tmp_path / "install" / "lowrl_ros"
    lib, share = prefix / "lib" / "lowrl_ros", prefix / "share" / "lowrl_ros"
    scripts = console_scripts()
    assert {"lowrl", "policy_node", "budget_monitor_node", "finetune_node", "trainer_node"} <= scripts
    assert scripts <= {p.name for p in lib.iterdir()}, sorted(p.name for p in lib.iterdir())
    assert all(os.access(lib / s, os.X_OK) for s in scripts)
    assert not (prefix / "bin").exists()  # ros2 run finds nothing in bin/
    installed = {str(p.relative_to(share)) for p in share.rglob("*") if p.is_file()}
    for top in ("launch", "config", "models"):
        missing = shipped(top) - installed
        assert not missing, f"not installed under share/lowrl_ros: {sorted(missing)}"
    assert "package.xml" in installed
    assert (prefix / "share" / "ament_index" / "resource_index" / "packages" / "lowrl_ros").is_file()
    assert set(os.listdir(ROOT)) == before  # nothing written into the source tree (build/, *.egg-info)

    # The installed copy runs: its own lowrl_ros package, its share dir for $(find-pkg-share lowrl_ros).
    (site,) = prefix.glob("lib/python3*/site-packages")
    env = dict(os.environ, PYTHONPATH=str(site), AMENT_PREFIX_PATH=str(prefix))
    probe = subprocess.run([sys.executable, "-c", "import lowrl_ros; from lowrl_ros.launcher import package_share; "
                            "print(lowrl_ros.__file__); print(package_share('lowrl_ros'))"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    module, share_found = probe.stdout.split()
    assert Path(module).is_relative_to(site) and Path(share_found) == share
    help_out = subprocess.run([sys.executable, str(lib / "lowrl"), "launch", "--help"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
    assert help_out.returncode == 0 and "robot.launch.yaml" in help_out.stdout, help_out.stderr


def test_package_xml_names_the_rosdep_keys_the_readme_installs():
    """The README's install says rosdep installs numpy, psutil, yaml and onnxruntime (its pip key): the
    package.xml keys must be those (rosdep key names from rosdistro's rosdep/{base,python}.yaml)."""
    import xml.etree.ElementTree as ET

    deps = {e.text for e in ET.parse(ROOT / "package.xml").getroot().iter("exec_depend")}
    assert {"rclpy", "std_msgs", "sensor_msgs", "diagnostic_msgs", "lifecycle_msgs", "launch_ros",
            "python3-numpy", "python3-psutil", "python3-yaml", "python3-onnxruntime-pip"} <= deps
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## On a robot with ROS 2")
    section = readme[start:readme.index("\n## ", start)]  # up to the next section
    for key in ("python3-numpy", "python3-psutil", "python3-yaml", "python3-onnxruntime-pip", "PIP_CONSTRAINT"):
        assert key in section, key
