"""Distillation (lowrl_ros.core.compress.distill): a sparse int8 student, evaluated deployed, keeps the teacher's
return.

Teacher: the shipped models/pendulum_sac_int8.onnx (SB3 SAC 256x256; its weights dequantised to
fp32 are the teacher). The student is scored through load_artifact of its int8 file in Pendulum-v1.
"""
from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

from lowrl_ros.core.compress import distill as d
from lowrl_ros.core.runtime.artifact import parse_artifact, read_artifact_bytes
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.sim.evaluate import evaluate
from lowrl_ros.core.compress.quantize import dequantize, quantize_per_channel

TEACHER = "models/pendulum_sac_int8.onnx"


@pytest.fixture(scope="module")
def distilled(tmp_path_factory):
    out = tmp_path_factory.mktemp("distill")
    cfg = d.DistillConfig(students=("lite:32x2@0.8",), teacher_episodes=10, bc_steps=1500, dagger_rounds=2,
                          dagger_episodes=3, dagger_steps=500, eval_episodes=5, progress=False)
    return d.distill(d.load_teacher(TEACHER), cfg, out), cfg


def test_deployed_int8_sparse_student_keeps_97_percent_of_the_teacher_return(distilled):
    result, cfg = distilled
    (s,) = result.students
    assert s.kept >= 0.97, f"student {s.deployed} vs teacher {result.teacher_eval}"
    # What was scored is the deployed file: re-running it through the robot's runtime gives the same returns.
    again = evaluate(load_artifact(s.int8_path).act, "Pendulum-v1", cfg.eval_episodes, cfg.eval_seed)
    assert again.returns == pytest.approx(s.deployed.returns, abs=1e-6)
    parsed = parse_artifact(read_artifact_bytes(s.int8_path), str(s.int8_path))
    assert all(layer.dtype == "int8" for layer in parsed.layers)
    assert parsed.layers[1].storage == "sparse"  # the 32x32 hidden layer is stored compactly
    assert s.weights.sparsity == pytest.approx(0.8, abs=0.01)  # Erdős–Rényi over the layers hits the target
    assert s.artifact_bytes * 40 <= result.teacher.state_dict_bytes
    # Held-out states: int8 rounding alone moves actions by well under the release gate's 5% budget.
    assert s.action_error["states"] > 100 and s.action_error["int8_vs_fp32_max"] < 0.05
    assert s.action_error["vs_teacher_mean"] < 0.1


def test_dagger_aggregates_student_states_and_writes_its_report(distilled):
    result, cfg = distilled
    teacher_states = sum(1 for _ in range(cfg.teacher_episodes)) * 200  # Pendulum episodes are 200 steps
    assert result.dataset_size == teacher_states + cfg.dagger_rounds * cfg.dagger_episodes * 200
    doc = json.loads(result.report_path.read_text())
    assert doc["students"][0]["kept_fraction"] == pytest.approx(result.students[0].kept)
    assert doc["teacher"]["state_dict_bytes"] == result.teacher.state_dict_bytes
    assert result.plot_path.stat().st_size > 1000 and result.plot_path.read_bytes()[:4] == b"\x89PNG"
    # The saved torch student computes what its fp32 artifact computes (what compress's parity gate checks).
    s = result.students[0]
    state = torch.load(result.out_dir / "lite.pt", weights_only=False)
    obs = np.random.default_rng(0).uniform([-1, -1, -8], [1, 1, 8], (64, 3))
    fp32 = load_artifact(s.fp32_path, engine="ort")
    ref = np.stack([fp32.act(o) for o in obs])
    assert np.abs(d.torch_action_fn(state, fp32.contract)(obs) - ref).max() < 1e-5


def test_fake_quantization_is_the_artifact_quantizer_with_straight_through_gradients():
    w = torch.randn(20, 6, requires_grad=True)  # [in, out]: one channel per column
    fq = d._fake_quant_weight(w)
    expected = dequantize(quantize_per_channel(w.detach().numpy().T)).T
    np.testing.assert_allclose(fq.detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    fq.sum().backward()
    assert torch.equal(w.grad, torch.ones_like(w))
    x = torch.randn(4, 9, requires_grad=True)
    xq = d._fake_quant_act(x)
    step = ((x.detach().amax(1).clamp(min=0) - x.detach().amin(1).clamp(max=0)) / 255)[:, None]
    assert torch.all((xq - x).abs() <= step / 2 + 1e-6)


def test_qat_steps_train_a_student_that_exports(tmp_path):
    teacher = d.load_teacher(TEACHER)
    cfg = d.DistillConfig(students=("tiny:8x1@0",), teacher_episodes=2, bc_steps=50, dagger_rounds=0, qat_steps=50,
                          eval_episodes=1, progress=False)
    result = d.distill(teacher, cfg, tmp_path)
    assert len(result.students[0].losses) == 100
    assert load_artifact(result.students[0].int8_path).contract.provenance["qat_steps"] == "50"


def test_teacher_sources_run_dir_sb3_zip_and_clear_errors(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(ValueError, match="actor.onnx"):
        d.load_teacher(run)
    shutil.copy(TEACHER, run / "actor.onnx")
    t = d.load_teacher(run)
    assert t.kind == "run" and t.contract.obs_dim == 3
    with pytest.raises(ValueError, match="no such file"):
        d.load_teacher(tmp_path / "missing.onnx")
    import stable_baselines3 as sb3
    model = sb3.SAC("MlpPolicy", "Pendulum-v1", policy_kwargs={"net_arch": [16, 16]}, device="cpu", seed=0)
    model.save(tmp_path / "sac.zip")
    t = d.load_teacher(tmp_path / "sac.zip", env_id="Pendulum-v1")
    assert t.kind == "sb3" and t.contract.env_id == "Pendulum-v1"
    obs = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, -2.0]], np.float32)
    np.testing.assert_allclose(t.actions(obs), model.predict(obs, deterministic=True)[0], atol=1e-5)


@pytest.mark.parametrize("text, words", [("lite", "NAME:WIDTHxDEPTH"), ("lite:0x2", "must be >= 1"),
                                         ("lite:8x2@1.0", "NAME:WIDTHxDEPTH")])
def test_student_specs_and_config_reject_bad_values(text, words):
    with pytest.raises(ValueError, match=words):
        d.StudentSpec.parse(text)


def test_distill_config_validation():
    with pytest.raises(ValueError, match="repeat"):
        d.DistillConfig(students=("a:8x1", "a:16x1"))
    with pytest.raises(ValueError, match="mask_method"):
        d.DistillConfig(mask_method="magic")
    with pytest.raises(ValueError, match="never train"):
        d.DistillConfig(bc_steps=0, dagger_steps=0)
    assert d.DistillConfig(students=("lite:64x2@0.8",)).specs[0] == d.StudentSpec("lite", 64, 2, 0.8)


# --- an imported (rsl_rl / Isaac Lab PPO style) teacher --------------------------------------------

def ppo_style_teacher(path):
    """The shipped SAC actor rewritten the way an rsl_rl import describes a PPO actor, acting the same.

    ELU hidden layers, a linear output, action_offset + action_scale * y, a clipped normalised
    observation, no env_id (as an import knows none). ELU(k z) / k = relu(z) + O(1/k): the first
    layer (and the second bias) are scaled by k = 1000 and the output layer by 1/k. The velocity is
    normalised by 0.5 (so obs_clip 5 never bites inside Pendulum's +-8, but probes past it do), and
    the offset 0.1 is taken back out of the output bias: action = 0.1 + 2 * (z - 0.05) = 2 z, which
    clamped to [-2, 2] is close to SAC's 2 tanh(z).
    """
    from lowrl_ros.core.runtime.artifact import MlpWeights, load_weights, save_artifact

    w, c = load_weights(TEACHER)
    k = 1000.0
    (w1, b1), (w2, b2), (w3, b3) = w.layers
    w1 = w1 * np.array([1.0, 1.0, 2.0], np.float32)  # reads the velocity normalised by 0.5
    layers = [(k * w1, k * b1), (w2, k * b2), (w3 / k, b3 / k - 0.05)]
    contract = dataclasses.replace(c, obs_scale=(1.0, 1.0, 0.5), obs_clip=5.0, action_scale=(2.0,),
                                   action_offset=(0.1,), env_id=None, provenance={"tool": "test: PPO-style"})
    return save_artifact(path, MlpWeights(layers, "elu", "none"), contract)


@pytest.fixture(scope="module")
def ppo_teacher(tmp_path_factory):
    return d.load_teacher(ppo_style_teacher(tmp_path_factory.mktemp("ppo") / "ppo.onnx"))


@pytest.mark.parametrize("student_output", ["auto", "tanh"])
def test_an_imported_ppo_teacher_distils_into_students_with_their_own_contract(tmp_path, ppo_teacher,
                                                                              student_output):
    from lowrl_ros.core.runtime.artifact import reference_action
    from lowrl_ros.core.runtime.engines import probe_observations

    teacher = ppo_teacher
    assert teacher.kind == "artifact" and teacher.contract.env_id is None
    with pytest.raises(ValueError, match="env-id"):
        d.distill(teacher, d.DistillConfig(progress=False), tmp_path / "no_env")
    cfg = d.DistillConfig(students=("lite:32x2@0.5",), env_id="Pendulum-v1", teacher_episodes=4, bc_steps=600,
                          dagger_rounds=1, dagger_episodes=2, dagger_steps=300, qat_steps=100, eval_episodes=2,
                          student_output=student_output, progress=False)
    result = d.distill(teacher, cfg, tmp_path)
    assert result.teacher_eval.mean > -200  # the rewritten teacher still swings up
    (s,) = result.students
    fp32 = load_artifact(s.fp32_path, engine="ort")
    c = fp32.contract
    assert c == s.contract and c.obs_clip == 5.0 and c.obs_scale == (1.0, 1.0, 0.5)  # the teacher's obs side
    if student_output == "auto":  # the teacher's output space: its transform is the student's
        assert s.weights.output_activation == "none" and (c.action_scale, c.action_offset) == ((2.0,), (0.1,))
    else:  # tanh: [-1, 1] onto the limits, not 0.1 + 2 * tanh (which could never reach -2)
        assert s.weights.output_activation == "tanh" and c.action_scale is None and c.action_offset is None
        wrong = dataclasses.replace(c, action_scale=(2.0,), action_offset=(0.1,))
        states = probe_observations(c, 64, seed=1)
        assert np.abs(reference_action(s.weights, wrong, states) - reference_action(s.weights, c, states)).max() > 0.05
    assert s.kept >= 0.9, f"student {s.deployed} vs teacher {result.teacher_eval}"
    assert s.action_error["vs_teacher_mean"] < 0.1
    # The release parity gate's torch side, on probes that reach past the obs clip.
    state = torch.load(result.out_dir / "lite.pt", weights_only=False)
    obs = probe_observations(c, 64, seed=3)
    ref = np.stack([fp32.act(o) for o in obs])
    assert np.abs(d.torch_action_fn(state, s.contract)(obs) - ref).max() < 1e-5
    assert json.loads(result.report_path.read_text())["students"][0]["output_activation"] == s.weights.output_activation
    if student_output == "tanh":  # the release derives the same contract from the teacher's and passes its gates
        from lowrl_ros.core.compress.release import Candidate, ReleaseConfig, release
        from lowrl_ros.core.runtime.bundle import load_bundle

        rcfg = ReleaseConfig(env_id="Pendulum-v1", probe_count=64, probe_episodes=1, eval_episodes=2,
                             return_fraction=0.9)
        report = release([Candidate("lite", s.weights, d.torch_action_fn(state, s.contract))], teacher.weights,
                         teacher.contract, rcfg, tmp_path / "release.lowrl", log=lambda line: None)
        assert report.released, [g.line() for g in report.gates]
        tier = load_bundle(tmp_path / "release.lowrl").policies["lite"].contract
        assert (tier.obs_clip, tier.action_scale, tier.action_offset) == (5.0, None, None)
