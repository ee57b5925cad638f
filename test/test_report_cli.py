"""`lowrl report DIR` picks the right report: a training run's curves or a session's summary."""
from __future__ import annotations

import subprocess
import sys

from lowrl_ros.core.session.files import is_session_dir

LOWRL = [sys.executable, "-m", "lowrl_ros.cli", "report"]


def test_report_of_a_directory_that_is_neither_says_what_to_give(tmp_path):
    out = subprocess.run(LOWRL + [str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "lowrl train" in out.stderr


def test_report_of_a_session_directory_prints_its_summary(tmp_path):
    (tmp_path / "episodes.csv").write_text(
        "time_s,episode,return,length,terminated,version_start,version_end\n"
        "1.0,1,-300.0,200,0,1,1\n2.0,2,-250.0,200,0,1,1\n3.0,3,-180.0,200,0,2,2\n")
    assert is_session_dir(tmp_path)
    out = subprocess.run(LOWRL + [str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "report:" in out.stdout and (tmp_path / "session_report.png").is_file()
    assert "Episodes: 3" in out.stdout and "v2" in out.stdout
