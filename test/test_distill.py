"""Distillation (lowrl_ros.core.compress.distill): a sparse int8 student, evaluated deployed, keeps the teacher's
return.

Teacher: the shipped models/pendulum_sac_int8.onnx (SB3 SAC 256x256; its weights dequantised to
fp32 are the teacher). The student is scored through load_artifact of its int8 file in Pendulum-v1.
"""
from __future__ import annotations

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
    sb3 = pytest.importorskip("stable_baselines3")
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
