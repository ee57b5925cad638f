"""Bundles: several tiers of one policy in one file, validated together."""
from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from lowrl_ros.core.runtime.artifact import ArtifactError, prune_by_magnitude, save_artifact
from lowrl_ros.core.runtime.bundle import load_bundle, save_bundle
from test_artifact import make_contract, make_weights


@pytest.fixture
def tiers(tmp_path):
    full = save_artifact(tmp_path / "full.onnx", make_weights((5, 64, 64, 2)), make_contract(), int8=True)
    lite_w = prune_by_magnitude(make_weights((5, 16, 2), seed=1), 0.5)
    lite = save_artifact(tmp_path / "lite.onnx", lite_w, make_contract(tier="lite"), int8=True)
    return {"full": full, "lite": lite}


def test_round_trip_and_smallest(tmp_path, tiers):
    path = save_bundle(tmp_path / "p.lowrl", tiers)
    bundle = load_bundle(path, engine="numpy")
    assert set(bundle.policies) == {"full", "lite"}
    assert bundle.version == 3
    assert bundle.smallest() is bundle.policies["lite"]
    assert bundle.policies["full"].macs > bundle.policies["lite"].macs
    obs = np.zeros(5)
    for p in bundle.policies.values():
        a = p.act(obs)
        assert a.shape == (2,) and np.all(a >= -2) and np.all(a <= 1)


def test_plain_onnx_is_one_tier(tiers):
    bundle = load_bundle(tiers["full"], engine="ort")
    assert list(bundle.policies) == ["full"]
    assert bundle.smallest() is bundle.policies["full"]


def test_mismatched_io_rejected(tmp_path, tiers):
    other = save_artifact(tmp_path / "o.onnx", make_weights((5, 8, 2)),
                          make_contract(tier="lite", action_high=[2.0, 2.0]))
    with pytest.raises(ArtifactError, match="same I/O contract"):
        save_bundle(tmp_path / "b.lowrl", {"full": tiers["full"], "lite": other})


def test_mismatched_version_and_tier_name_rejected(tmp_path, tiers):
    v4 = save_artifact(tmp_path / "v4.onnx", make_weights((5, 8, 2)), make_contract(tier="lite", version=4))
    with pytest.raises(ArtifactError, match="version 4"):
        save_bundle(tmp_path / "b.lowrl", {"full": tiers["full"], "lite": v4})
    with pytest.raises(ArtifactError, match="contract says tier 'lite'"):
        save_bundle(tmp_path / "b.lowrl", {"full": tiers["lite"]})


def test_corrupt_tier_and_zip(tmp_path, tiers):
    path = save_bundle(tmp_path / "p.lowrl", tiers)
    with zipfile.ZipFile(path) as zf:
        files = {n: zf.read(n) for n in zf.namelist()}
    blob = bytearray(files["lite.onnx"])
    blob[len(blob) // 2] ^= 0xFF
    files["lite.onnx"] = bytes(blob)
    bad = tmp_path / "bad.lowrl"
    with zipfile.ZipFile(bad, "w") as zf:
        for n, d in files.items():
            zf.writestr(n, d)
    with pytest.raises(ArtifactError, match="sha256 does not match"):
        load_bundle(bad)
    bad.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ArtifactError, match="not a readable bundle"):
        load_bundle(bad)


def test_manifest_version_checked(tmp_path, tiers):
    path = save_bundle(tmp_path / "p.lowrl", tiers)
    with zipfile.ZipFile(path) as zf:
        files = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(files["manifest.json"])
    manifest["version"] = 9
    files["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for n, d in files.items():
            zf.writestr(n, d)
    with pytest.raises(ArtifactError, match="manifest version 9"):
        load_bundle(path)


def test_inspect_cli(tmp_path, tiers, capsys):
    from lowrl_ros.cli import main as lowrl_main

    path = save_bundle(tmp_path / "p.lowrl", tiers)
    assert lowrl_main(["inspect", str(path), "--engine", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "OK, version 3" in out and "[lite]" in out and "o0, o1" in out and "engine: numpy" in out
    assert lowrl_main(["inspect", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["smallest_tier"] == "lite"
    assert info["tiers"]["lite"]["layers"][0]["sparsity"] >= 0.5
    (tmp_path / "bad.onnx").write_bytes(b"junk")
    assert lowrl_main(["inspect", str(tmp_path / "bad.onnx")]) == 2
    assert "INVALID" in capsys.readouterr().err


MODELS = __import__("pathlib").Path(__file__).resolve().parents[1] / "models"


def test_shipped_demo_models_load_and_balance():
    """The shipped models (committed: a missing one is a failure) validate, agree on their contract, and the
    DEPLOYED int8 policies swing up Pendulum."""
    import gymnasium as gym

    from lowrl_ros.core.runtime.engines import load_artifact

    single = load_artifact(MODELS / "pendulum_sac_int8.onnx")
    bundle = load_bundle(MODELS / "pendulum_sac.lowrl")
    assert set(bundle.policies) == {"full", "lite"} and bundle.smallest() is bundle.policies["lite"]
    assert single.contract.env_id == "Pendulum-v1" and single.contract.same_io(bundle.contract)
    assert single.int8 and all(p.int8 for p in bundle.policies.values())
    env = gym.make("Pendulum-v1")
    for policy in (single, bundle.policies["lite"]):
        returns = []
        for seed in (10_000, 10_001, 10_002):
            obs, _ = env.reset(seed=seed)
            total, done = 0.0, False
            while not done:
                obs, r, term, trunc, _ = env.step(policy.act(obs))
                total, done = total + r, term or trunc
            returns.append(total)
        # A random policy scores about -1200 here; the trained one about -125 (models/pendulum_sac.json).
        assert np.mean(returns) > -300, (policy, returns)
