"""The shipped launch files (launch/) point at files that exist. The parameter files themselves are
checked against the dataclasses and the nodes in test/test_shipped_config.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from lowrl_ros.launcher import parse_launch

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("launch_file", sorted(p.name for p in (ROOT / "launch").glob("*.launch.yaml")))
def test_launch_files_parse_and_point_at_shipped_files(launch_file):
    for node in parse_launch(ROOT / "launch" / launch_file):
        for f in node.params_files:
            assert Path(f).is_file(), f"{launch_file}: {f} missing"
        path = dict(node.params).get("policy_path")
        if path:
            assert Path(path).is_file(), f"{launch_file}: shipped model {path} missing"
