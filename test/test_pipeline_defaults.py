"""The documented pipeline's defaults (issue 20, part 2) and the LOWRL_SET budget variable (part 1)."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
import yaml

from lowrl_ros.commands._config_flags import ENV_VAR, add_config_flags, config_from, env_overrides
from lowrl_ros.core.compress.distill import DistillConfig, distill, load_teacher
from lowrl_ros.core.compress.quantize import fake_quantize
from lowrl_ros.core.compress.release import Redistill, ReleaseConfig
from lowrl_ros.core.runtime.artifact import load_weights
from lowrl_ros.core.train.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def test_students_get_quantization_aware_training_by_default():
    assert DistillConfig().qat_steps >= 500
    preset = yaml.safe_load((ROOT / "config/compress_pendulum.yaml").read_text())
    assert preset["distill"]["qat_steps"] >= 500  # `lowrl compress TEACHER --config` and `lowrl distill --config`


@pytest.mark.parametrize("qat", [0, 40])
def test_after_qat_the_student_is_its_int8_weights(qat, tmp_path):
    """QAT students are snapped to the int8 grid (fp32 artifact = int8 weights); post-training ones are not."""
    teacher = load_teacher(str(ROOT / "models/pendulum_sac_int8.onnx"))
    cfg = DistillConfig(students=("tiny:8x1@0",), teacher_episodes=2, bc_steps=60, dagger_rounds=0, qat_steps=qat,
                        eval_episodes=1, progress=False)
    (s,) = distill(teacher, cfg, tmp_path).students
    fp32, _ = load_weights(s.fp32_path)
    on_grid = all(np.array_equal(w, q) for (w, _), (q, _) in zip(fp32.layers, fake_quantize(fp32).layers))
    assert on_grid == bool(qat)
    # The torch state (the parity gate's reference) is the same policy as the fp32 artifact.
    net_w = [p[0].numpy().T for p in (v for k, v in s.state["net"].items() if "weight" in k)]
    assert all(np.array_equal(a, w) for a, (w, _) in zip(net_w, fp32.layers))


def _args(cls, argv):
    parser = argparse.ArgumentParser()
    add_config_flags(parser, cls)
    return parser.parse_args(argv)


def test_lowrl_set_sits_between_the_preset_and_the_flags(monkeypatch, capsys):
    monkeypatch.setenv(ENV_VAR, "train.total_steps=3000 train.lr=3e-4 distill.bc_steps=7 release.eval_episodes=4")
    cfg = config_from(TrainConfig, _args(TrainConfig, ["--lr", "1e-3"]), {"total_steps": 10000, "seed": 3})
    assert (cfg.total_steps, cfg.lr, cfg.seed) == (3000, 1e-3, 3)  # env over preset, flag over env
    assert "LOWRL_SET: TrainConfig total_steps=3000 lr=3e-4" in capsys.readouterr().err
    assert config_from(DistillConfig, _args(DistillConfig, []), {}).bc_steps == 7
    assert config_from(ReleaseConfig, _args(ReleaseConfig, []), {}).eval_episodes == 4


@pytest.mark.parametrize("value, words", [
    ("total_steps=3", "SECTION.FIELD=VALUE"),
    ("train.total_steps", "SECTION.FIELD=VALUE"),
    ("trian.total_steps=3", "unknown section 'trian'"),
    ("train.totl_steps=3", "no field 'totl_steps'"),
])
def test_lowrl_set_refuses_what_it_cannot_apply(value, words):
    with pytest.raises(ValueError, match=words):
        env_overrides(TrainConfig, {ENV_VAR: value})
    assert env_overrides(TrainConfig, {}) == {}


def test_redistill_replaces_a_flag_it_changes():
    r = Redistill("lowrl distill runs/p -o runs/s --students a:8x1@0 b:4x1@0 --dagger-rounds 1 --bc-steps 9", 0, 1)
    assert r.with_flags("--dagger-rounds 3") == ("lowrl distill runs/p -o runs/s --students a:8x1@0 b:4x1@0 "
                                                 "--bc-steps 9 --dagger-rounds 3")
    assert r.flags("--qat-steps 500").startswith("re-distil with `lowrl distill runs/p")
    assert Redistill().flags("--qat-steps 500") == "`--qat-steps 500`" and Redistill(qat_steps=500).more_qat == 1000
