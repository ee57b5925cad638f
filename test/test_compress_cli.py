"""`lowrl distill`, `lowrl compress`, `lowrl eval` as a user runs them (real processes), and the shipped presets."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lowrl_ros.commands.distill import config_from
from lowrl_ros.core.runtime.bundle import load_bundle
from lowrl_ros.core.compress.distill import DistillConfig
from lowrl_ros.core.sim.evaluate import evaluate
from lowrl_ros.core.compress.release import ReleaseConfig

ROOT = Path(__file__).resolve().parents[1]
LOWRL = [sys.executable, "-m", "lowrl_ros.cli"]


def lowrl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*LOWRL, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def students(tmp_path_factory):
    out = tmp_path_factory.mktemp("students")
    r = lowrl("distill", "models/pendulum_sac_int8.onnx", "-o", out, "--students", "lite:32x2@0.8",
              "--teacher-episodes", 8, "--bc-steps", 1200, "--dagger-rounds", 1, "--dagger-episodes", 3,
              "--dagger-steps", 400, "--eval-episodes", 3, "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "keeps" in r.stdout and (out / "lite_int8.onnx").is_file() and (out / "distill.png").is_file()
    return out


def test_compress_releases_a_bundle_whose_metadata_round_trips(students, tmp_path):
    out = tmp_path / "pendulum.lowrl"
    r = lowrl("compress", students, "-o", out, "--version", 3, "--parent-version", 2, "--eval-episodes", 3,
              "--config", "config/compress_pendulum.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[PASS] lite: deployed return vs teacher" in r.stdout
    bundle = load_bundle(out)
    (policy,) = bundle.policies.values()
    c = policy.contract
    assert (bundle.version, c.version, c.parent_version, c.tier) == (3, 3, 2, "lite")
    assert c.provenance["tool"] == "lowrl compress" and c.provenance["student"] == "lite:32x2@0.8"
    assert c.provenance["teacher"] == "pendulum_sac_int8.onnx"
    report = json.loads((tmp_path / "pendulum.lowrl.release.json").read_text())
    assert report["released"] and report["tiers"]["lite"]["bytes"] == policy.nbytes

    # `lowrl eval` of the released bundle = the shared evaluate() on the deployed tier.
    res_json = tmp_path / "eval.json"
    r = lowrl("eval", out, "--episodes", 2, "--json", res_json)
    assert r.returncode == 0, r.stderr
    got = json.loads(res_json.read_text())["tiers"]["lite"]["returns"]
    assert got == pytest.approx(list(evaluate(policy.act, "Pendulum-v1", 2).returns), abs=1e-6)


def test_compress_stops_with_exit_1_and_writes_no_bundle_when_a_gate_fails(students, tmp_path):
    out = tmp_path / "pendulum.lowrl"
    r = lowrl("compress", students, "-o", out, "--version", 1, "--int8-mean-error", "1e-7", "--int8-max-error", "1e-6",
              "--eval-episodes", 2)
    assert r.returncode == 1
    assert "[FAIL] lite: int8 vs fp32 action error" in r.stdout and "STOPPED" in r.stderr
    assert not out.exists()
    assert "fix:" in r.stdout and "--clip-percentile" in r.stdout
    assert json.loads((tmp_path / "pendulum.lowrl.release.json").read_text())["released"] is False


@pytest.mark.parametrize("args, words", [
    (["compress", "nope.onnx", "-o", "x.lowrl", "--version", "1"], "no such file"),
    (["compress", "models/pendulum_sac_int8.onnx", "-o", "x.lowrl", "--version", "2", "--parent-version", "5"],
     "versions only go up"),
    (["distill", "models/pendulum_sac_int8.onnx", "-o", "x", "--students", "big"], "NAME:WIDTHxDEPTH"),
    (["eval", "nope.onnx"], "no such file"),
    (["eval", "models/pendulum_sac.lowrl", "--tier", "huge"], "pick one of them"),
])
def test_bad_input_exits_2_with_a_message(args, words, capsys):
    from lowrl_ros.cli import main

    assert main(args) == 2  # in-process: the same entry point as the `lowrl` script, without the start-up cost
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("preset", sorted((ROOT / "config").glob("compress_*.yaml")), ids=lambda p: p.name)
def test_shipped_presets_load_into_the_config_dataclasses(preset):
    doc = yaml.safe_load(preset.read_text())
    assert set(doc) == {"distill", "release"}
    empty = type("Args", (), {})()
    dcfg = config_from(DistillConfig, empty, doc["distill"])
    rcfg = config_from(ReleaseConfig, empty, doc["release"])
    assert rcfg.parity_tol <= 1e-5 and rcfg.return_fraction >= 0.97 and rcfg.env_id
    assert "lite" in {s.name for s in dcfg.specs} <= {"full", "lite"}  # lite only: `--lite` keeps the teacher


def test_compress_from_a_teacher_distils_then_gates(tmp_path):
    out, work = tmp_path / "p.lowrl", tmp_path / "students"
    r = lowrl("compress", "models/pendulum_sac_int8.onnx", "-o", out, "--version", 1, "--students", "lite:32x2@0.8",
              "--teacher-episodes", 8, "--bc-steps", 1200, "--dagger-rounds", 1, "--dagger-episodes", 3,
              "--dagger-steps", 400, "--eval-episodes", 3, "--work-dir", work, "--no-progress")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (work / "distill.json").is_file() and (work / "lite_int8.onnx").is_file()
    assert set(load_bundle(out).policies) == {"lite"}
