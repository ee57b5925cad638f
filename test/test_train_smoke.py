"""Tiny real runs of every variant (SAC and TD3 on MuJoCo/Pendulum), checkpoints, CLI, report, export."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from lowrl_ros.core.train.config import VARIANTS, TrainConfig
from lowrl_ros.core.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[1]
TINY = dict(total_steps=300, warmup_steps=100, batch_size=32, hidden=32, eval_interval=150, eval_episodes=1,
            mask_interval=20, nstep_delay=50, buffer_check_interval=100, buffer_min=150, buffer_check_size=64,
            checkpoint_interval=0, progress=False)


def tiny(**kw) -> TrainConfig:
    return TrainConfig(**{**TINY, **kw})


@pytest.mark.parametrize("algo", ["sac", "td3"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_runs(tmp_path, algo, variant):
    cfg = tiny(algo=algo, variant=variant, env_id="InvertedPendulum-v5" if algo == "td3" else "Pendulum-v1")
    result = Trainer(cfg, tmp_path).run()
    assert result.env_steps == 300
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["gradient_steps"] == 200
    rows = list(csv.DictReader((tmp_path / "progress.csv").open()))
    assert [int(r["env_steps"]) for r in rows] == [150, 300]
    assert all(math.isfinite(float(r["eval_return"])) for r in rows)
    costs = summary["costs"]
    assert costs["inference_flops_sparse"] > 0 and summary["ms_per_gradient_step"] > 0
    if variant in ("static", "set", "rigl", "rlx2"):
        # Sparse: the networks really hold fewer parameters, and the FLOPs say so.
        assert costs["compression"] > 1.5 and costs["train_flops_reduction"] > 1.5
        assert float(rows[-1]["actor_density"]) < 0.5
    if variant == "small_dense":
        assert summary["costs"]["vs_full_dense"]["compression"] > 1.5
    if variant in ("set", "rigl", "rlx2"):
        assert summary["topology_updates"] > 0
    if variant == "rlx2":
        assert int(rows[-1]["nstep"]) == 3  # the delay (50 gradient steps) has passed


def test_small_dense_matches_sparse_parameter_count(tmp_path):
    sparse = Trainer(tiny(variant="static", total_steps=150, eval_interval=150), tmp_path / "s").agent
    small = Trainer(tiny(variant="small_dense", total_steps=150, eval_interval=150), tmp_path / "d").agent
    count = lambda net: sum(p.numel() for p in net.parameters())  # noqa: E731
    nz = sum(int(m.sum()) for m in sparse.actor_masker.masks) + sum(b.numel() for b in sparse.actor_net.biases)
    assert abs(count(small.actor_net) - nz) / nz < 0.1


def test_same_seed_same_run_and_resume_continues(tmp_path):
    a = Trainer(tiny(seed=3), tmp_path / "a").run()
    b = Trainer(tiny(seed=3), tmp_path / "b").run()
    assert a.last_eval_return == b.last_eval_return
    # Resume: more steps from the checkpoint; counters, masks and optimizer state come back.
    t = Trainer(tiny(seed=3, total_steps=450), tmp_path / "a", resume=True)
    assert t.env_steps == 300 and t.agent.gradient_steps == 200
    saved = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=False)
    assert torch.equal(t.agent.actor_masker.masks[1], saved["agent"]["actor_masker"]["masks"][1])
    assert t.agent.critic_opt.state_dict()["state"][0]["step"] > 0
    r = t.run()
    assert r.env_steps == 450
    rows = list(csv.DictReader((tmp_path / "a" / "progress.csv").open()))
    assert [int(x["env_steps"]) for x in rows] == [150, 300, 450]


def test_tensorboard_scalars_match_progress_csv_across_a_resume(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    Trainer(tiny(variant="rlx2", tensorboard=True), tmp_path).run()
    Trainer(tiny(variant="rlx2", tensorboard=True, total_steps=450), tmp_path, resume=True).run()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    rows = list(csv.DictReader((tmp_path / "progress.csv").open()))
    returns = [(e.step, e.value) for e in events.Scalars("train/eval_return")]
    assert returns == [(int(r["env_steps"]), pytest.approx(float(r["eval_return"]))) for r in rows]
    layer = [r for r in csv.DictReader((tmp_path / "sparsity.csv").open())
             if r["network"] == "actor" and r["layer"] == "1"]
    assert [(e.step, e.value) for e in events.Scalars("density/actor/1")] == \
        [(int(r["env_steps"]), pytest.approx(float(r["density"]))) for r in layer]
    assert len(layer) == 3 and float(layer[-1]["density"]) < 0.2


def test_tensorboard_without_the_package_is_a_clear_error(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if it were not installed
    with pytest.raises(ValueError, match="pip install tensorboard"):
        Trainer(tiny(tensorboard=True), tmp_path)


def test_tensorboard_flag_does_not_change_the_run_a_bench_reuses(tmp_path):
    from lowrl_ros.bench.train import _finished_run

    Trainer(tiny(), tmp_path).run()
    assert _finished_run(tmp_path, tiny(tensorboard=True, progress=True)) is not None
    assert _finished_run(tmp_path, tiny(seed=1)) is None
    # A run recorded before a field existed was trained with its default, and only that matches.
    summary = json.loads((tmp_path / "run.json").read_text())
    del summary["config"]["sparse_init"]
    (tmp_path / "run.json").write_text(json.dumps(summary))
    assert _finished_run(tmp_path, tiny()) is not None
    assert _finished_run(tmp_path, tiny(sparse_init="scaled")) is None


def test_resume_refuses_a_different_network(tmp_path):
    Trainer(tiny(), tmp_path).run()
    with pytest.raises(ValueError, match="hidden"):
        Trainer(tiny(hidden=64), tmp_path, resume=True)
    with pytest.raises(ValueError, match="no checkpoint"):
        Trainer(tiny(), tmp_path / "empty", resume=True)


@pytest.mark.parametrize("bad, match", [
    (dict(algo="ppo"), "algo"), (dict(variant="sparse"), "variant"), (dict(actor_sparsity=1.0), "actor_sparsity"),
    (dict(warmup_steps=500, total_steps=300), "warmup_steps"), (dict(buffer_min=10, buffer_size=5), "buffer_min"),
])
def test_config_errors_say_how_to_fix(bad, match):
    with pytest.raises(ValueError, match=match):
        tiny(**bad)


def test_unknown_env_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="gymnasium id"):
        Trainer(tiny(env_id="NoSuchEnv-v0"), tmp_path)


def test_presets_are_valid_configs():
    presets = sorted((REPO / "config").glob("train_*.yaml"))
    assert len(presets) >= 5
    for p in presets:
        cfg = TrainConfig.from_yaml(p)
        assert cfg.variant == "rlx2" or "dense" in p.name
    with pytest.raises(ValueError, match="unknown field"):
        TrainConfig.from_dict({"learning_rate": 1e-3})


def test_cli_train_report_and_export(tmp_path, capsys):
    from lowrl_ros.cli import main
    from lowrl_ros.core.runtime.engines import load_artifact

    run_dir = tmp_path / "run"
    argv = ["train", "--config", str(REPO / "config" / "train_pendulum_sac.yaml"), "--run-dir", str(run_dir)]
    for k, v in TINY.items():
        if k != "progress":
            argv += ["--" + k.replace("_", "-"), str(v)]
    argv += ["--no-progress", "--actor-sparsity", "0.8"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert str(run_dir / "actor.onnx") in out and str(run_dir / "actor_int8.onnx") in out
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["actor_sparsity"] == 0.8 and cfg["total_steps"] == 300  # flags override the preset
    assert main(["report", str(run_dir)]) == 0
    png = run_dir / "report.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The exported artifact acts like the trained torch actor.
    trainer = Trainer(TrainConfig.from_yaml(run_dir / "config.yaml"), run_dir, resume=True)
    policy = load_artifact(run_dir / "actor.onnx")
    low, high = trainer.low, trainer.high
    for obs in np.random.default_rng(0).uniform(-1, 1, (20, 3)):
        expected = np.clip(trainer.to_env_action(trainer.agent.deterministic(obs)), low, high)
        np.testing.assert_allclose(policy.act(obs), expected, rtol=1e-4, atol=1e-5)
    q = load_artifact(run_dir / "actor_int8.onnx")
    obs = np.full(3, 0.3)
    assert abs(q.act(obs)[0] - policy.act(obs)[0]) < 0.1 * float(high[0] - low[0])  # int8: close, not exact
    assert main(["train", "--algo", "ppo", "--run-dir", str(tmp_path / "x")]) == 2
    assert "algo" in capsys.readouterr().err


def test_report_on_missing_run_is_an_error(tmp_path, capsys):
    from lowrl_ros.cli import main

    assert main(["report", str(tmp_path)]) == 2
    assert "lowrl train" in capsys.readouterr().err
