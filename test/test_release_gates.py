"""Release gates (lowrl_ros.core.compress.release): each stops a deliberately broken model, and nothing is written.

The candidate is the shipped Pendulum teacher itself (models/pendulum_sac_int8.onnx, dequantised):
it passes every gate, so each broken variant fails exactly the gate it was broken for. Real ONNX
Runtime, real Pendulum-v1 episodes, real files.
"""
from __future__ import annotations

import json

import pytest

from lowrl_ros.core.runtime.artifact import MlpWeights
from lowrl_ros.core.runtime.bundle import load_bundle
from lowrl_ros.core.compress.distill import load_teacher, state_from_weights, torch_action_fn
from lowrl_ros.core.compress.release import Candidate, ReleaseConfig, release

TEACHER = "models/pendulum_sac_int8.onnx"
FAST = dict(eval_episodes=3, probe_count=128, probe_episodes=1)


@pytest.fixture(scope="module")
def teacher():
    return load_teacher(TEACHER)


def _cand(tier, weights, contract, torch_weights=None):
    return Candidate(tier, weights, torch_action_fn(state_from_weights(torch_weights or weights), contract))


def _copy(weights: MlpWeights) -> list:
    return [(w.copy(), b.copy()) for w, b in weights.layers]


def _quiet(_line: str) -> None:
    pass


def test_a_good_release_writes_the_bundle_with_its_metadata(teacher, tmp_path):
    out = tmp_path / "p.lowrl"
    cfg = ReleaseConfig(version=3, parent_version=2, **FAST)
    lite = MlpWeights(_copy(teacher.weights))
    report = release([_cand("full", teacher.weights, teacher.contract), _cand("lite", lite, teacher.contract)],
                     teacher.weights, teacher.contract, cfg, out, provenance={"ticket": "t-42"}, log=_quiet)
    assert report.released and not report.failures
    assert [g.gate for g in report.gates if g.tier == "full"] == [
        "fp32 ONNX vs torch parity", "int8 vs fp32 action error", "deployed return vs teacher"]
    bundle = load_bundle(out)
    assert bundle.version == 3 and set(bundle.policies) == {"full", "lite"}
    for name, policy in bundle.policies.items():
        c = policy.contract
        assert (c.version, c.parent_version, c.tier, c.env_id) == (3, 2, name, "Pendulum-v1")
        assert c.provenance["tool"] == "lowrl compress" and c.provenance["ticket"] == "t-42"
        assert c.provenance["int8"] == "true"
        # The teacher's own provenance travels along, prefixed, so it is never mistaken for the student's.
        assert c.provenance["teacher.algo"] == "sac" and "algo" not in c.provenance
        assert c.same_io(teacher.contract)
    doc = json.loads((tmp_path / "p.lowrl.release.json").read_text())
    assert doc["released"] is True and doc["version"] == 3 and len(doc["gates"]) == 6
    assert "RELEASED" in (tmp_path / "p.lowrl.release.md").read_text()


def _assert_stopped(report, out, gate: str) -> None:
    assert not report.released
    assert not out.exists(), "a stopped release must not write the bundle"
    assert [g.gate for g in report.failures] == [gate]
    doc = json.loads(out.with_name(out.name + ".release.json").read_text())
    assert doc["released"] is False and doc["bundle"] is None
    md = out.with_name(out.name + ".release.md").read_text()
    assert "STOPPED" in md and "Fix:" in md


def test_parity_gate_stops_a_torch_onnx_mismatch(teacher, tmp_path):
    out = tmp_path / "p.lowrl"
    layers = _copy(teacher.weights)
    layers[-1] = (layers[-1][0], layers[-1][1] + 1e-3)  # torch model drifted from the exported one
    cand = _cand("full", teacher.weights, teacher.contract, torch_weights=MlpWeights(layers))
    report = release([cand], teacher.weights, teacher.contract, ReleaseConfig(**FAST), out, log=_quiet)
    _assert_stopped(report, out, "fp32 ONNX vs torch parity")
    assert report.failures[0].measured > 1e-4
    assert report.tiers["full"]["deployed_return_mean"] is None  # no return gate after a failed tier


def _outlier_weights(teacher) -> MlpWeights:
    """A dead hidden unit whose outgoing weights are huge: fp32 unaffected, per-channel int8 wrecked."""
    layers = _copy(teacher.weights)
    (w0, b0), (w1, _) = layers[0], layers[1]
    w0[7] = 0.0
    b0[7] = -1.0  # ReLU(-1) = 0: unit 7 never fires
    w1[:, 7] = 60.0  # every row of layer 1 now has a 60 in it, so its int8 step is 60/127
    return MlpWeights(layers)


def test_int8_gate_stops_outlier_weights_and_percentile_clipping_rescues_them(teacher, tmp_path):
    weights = _outlier_weights(teacher)
    out = tmp_path / "p.lowrl"
    report = release([_cand("full", weights, teacher.contract)], teacher.weights, teacher.contract,
                     ReleaseConfig(**FAST), out, log=_quiet)
    _assert_stopped(report, out, "int8 vs fp32 action error")
    assert report.failures[0].measured > 0.05
    fixed = release([_cand("full", weights, teacher.contract)], teacher.weights, teacher.contract,
                    ReleaseConfig(clip_percentile=99.0, **FAST), out, log=_quiet)
    assert fixed.released, [g.line() for g in fixed.gates]
    assert out.exists()


def test_int8_gate_checks_the_mean_error_as_well_as_the_worst_probe(teacher, tmp_path):
    out = tmp_path / "p.lowrl"
    cfg = ReleaseConfig(int8_mean_error=1e-6, int8_max_error=1.0, **FAST)  # any worst case is fine, the mean is not
    report = release([_cand("full", teacher.weights, teacher.contract)], teacher.weights, teacher.contract, cfg, out,
                     log=_quiet)
    _assert_stopped(report, out, "int8 vs fp32 action error")
    assert "mean" in report.failures[0].detail and report.failures[0].measured <= 1.0


def test_return_gate_stops_a_policy_that_lost_its_return(teacher, tmp_path):
    layers = _copy(teacher.weights)
    layers[-1] = (-layers[-1][0], -layers[-1][1])  # pushes the pendulum the wrong way
    out = tmp_path / "p.lowrl"
    report = release([_cand("full", MlpWeights(layers), teacher.contract)], teacher.weights, teacher.contract,
                     ReleaseConfig(**FAST), out, log=_quiet)
    _assert_stopped(report, out, "deployed return vs teacher")
    assert report.failures[0].measured < 0.97


def test_a_failed_release_leaves_the_previous_bundle_untouched_and_versions_only_go_up(teacher, tmp_path):
    out = tmp_path / "p.lowrl"
    good = release([_cand("full", teacher.weights, teacher.contract)], teacher.weights, teacher.contract,
                   ReleaseConfig(version=1, **FAST), out, log=_quiet)
    assert good.released
    before = out.read_bytes()
    with pytest.raises(ValueError, match="--version 2"):
        release([_cand("full", teacher.weights, teacher.contract)], teacher.weights, teacher.contract,
                ReleaseConfig(version=1, **FAST), out, log=_quiet)
    bad = release([_cand("full", _outlier_weights(teacher), teacher.contract)], teacher.weights, teacher.contract,
                  ReleaseConfig(version=2, parent_version=1, **FAST), out, log=_quiet)
    assert not bad.released and out.read_bytes() == before


@pytest.mark.parametrize("kwargs, words", [
    (dict(version=0), "version"), (dict(version=2, parent_version=2), "versions only go up"),
    (dict(parity_tol=0), "parity_tol"), (dict(int8_max_error=2), "int8_max_error"),
    (dict(int8_mean_error=0.2, int8_max_error=0.1), "cannot exceed"),
    (dict(return_fraction=0), "return_fraction"), (dict(clip_percentile=20), "clip_percentile"),
])
def test_release_config_rejects_bad_values(kwargs, words):
    with pytest.raises(ValueError, match=words):
        ReleaseConfig(**kwargs)
