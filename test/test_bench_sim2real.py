"""The sim2real benchmark's harness at toy scale: the update-to-data option and the cache key.

The benchmark itself (10k robot steps x 6 runs) is `lowrl bench sim2real`; here its in-process
fine-tuning loop runs a few hundred lockstep steps of the gapped Pendulum-v1 with the session's
tiny kit, so a broken option or an update count that ignores it fails in CI.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from lowrl_ros.bench.sim2real import BENCH_GAP, _config_tag, fine_tune
from lowrl_ros.core.sim.reality_gap import RealityGapConfig
from lowrl_ros.core.train.config import TrainConfig

PRESET = Path(__file__).resolve().parents[1] / "config" / "train_pendulum_sac.yaml"


@pytest.fixture()
def run_dir(tiny_kit, tmp_path):
    kit, int8 = tiny_kit
    run = tmp_path / "run"
    run.mkdir()
    (run / "kit").symlink_to(kit)
    (run / "actor_int8.onnx").symlink_to(int8)
    return run


def test_fine_tune_runs_the_asked_updates_per_robot_step(run_dir):
    steps, first = 800, 400  # the fine-tuner starts once it holds min_transitions = 400
    outs = {per_step: fine_tune(run_dir, "Pendulum-v1", RealityGapConfig(**BENCH_GAP), steps, version_every=150,
                                seed=0, judge_episodes=1, updates_per_step=per_step, min_transitions=first)
            for per_step in (1, 3)}
    # Updates start a few steps after 400 (episode ends are not stored) and then run every step.
    assert steps - first - 5 <= outs[1]["updates"] <= steps - first
    assert outs[1]["out_dir"] != outs[3]["out_dir"]  # a shared directory resumes the first run's learner
    assert outs[3]["updates"] == 3 * outs[1]["updates"]
    for out in outs.values():
        assert out["versions"] >= 2, out["statuses"]  # the base and at least one version it made and ran
        assert all(b > 0 for b in out["version_bytes"])
        assert set(out["version_paths"]) == set(out["statuses"])  # --all-versions evaluates each of them
        assert len(out["episode_returns"]) == steps // 200


def test_cached_sim_policies_are_keyed_by_their_config():
    cfg = TrainConfig.from_yaml(PRESET, seed=0, progress=False)
    assert _config_tag(cfg) == _config_tag(TrainConfig.from_yaml(PRESET, seed=0, progress=False))
    assert _config_tag(cfg) != _config_tag(cfg.replace(lr=cfg.lr / 2))
    assert _config_tag(cfg) != _config_tag(cfg.replace(seed=1))


def test_train_set_overrides_the_sim_policy_config_and_bad_ones_are_refused(capsys):
    import argparse

    from lowrl_ros.bench.sim2real import _train_set, add_arguments, run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--train-set", "batch_size=256"])
    cfg = TrainConfig.from_yaml(PRESET, **_train_set(args), seed=0, progress=False)
    assert cfg.batch_size == 256 and _config_tag(cfg) != _config_tag(TrainConfig.from_yaml(PRESET, seed=0,
                                                                                            progress=False))
    for bad in ("batch_size", "batch_size=many", "no_such_field=1"):
        assert run(parser.parse_args(["--envs", "Pendulum-v1", "--train-set", bad])) == 2  # before any training
        out = capsys.readouterr().out
        assert "--train-set" in out or "TrainConfig" in out, out


def test_each_env_gets_the_example_gap_and_pendulum_the_encoder_offset(capsys):
    import argparse

    from lowrl_ros.bench.sim2real import BENCH_GAP, _gaps, add_arguments, run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    gaps = _gaps(parser.parse_args([]))
    assert gaps["InvertedPendulum-v5"] == RealityGapConfig(**BENCH_GAP)
    assert gaps["Pendulum-v1"] == RealityGapConfig(**BENCH_GAP, joint_offset=0.3)
    plain = _gaps(parser.parse_args(["--gap", "joint_offset=0", "action_delay_steps=2"]))  # the example gap alone
    assert plain["Pendulum-v1"] == RealityGapConfig(**{**BENCH_GAP, "action_delay_steps": 2})
    for bad in ("joint_offset", "no_such_field=1", "joint_offset=9"):
        assert run(parser.parse_args(["--envs", "Pendulum-v1", "--gap", bad])) == 2  # before any training
        assert "joint_offset" in capsys.readouterr().out


def test_the_oracles_buffer_grows_with_its_steps_unless_train_set_says_otherwise():
    import argparse

    from lowrl_ros.bench.sim2real import _oracle_config, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg = _oracle_config("Pendulum-v1", 1, parser.parse_args(["--oracle-steps", "123456"]))
    assert (cfg.total_steps, cfg.buffer_size, cfg.seed) == (123456, 123456, 1)
    cfg = _oracle_config("Pendulum-v1", 1, parser.parse_args(["--oracle-steps", "123456",
                                                             "--train-set", "buffer_size=5000"]))
    assert (cfg.total_steps, cfg.buffer_size) == (123456, 5000)


def test_the_legged_env_gets_the_preset_gap_and_bad_changes_are_refused(capsys):
    import argparse

    from lowrl_ros.bench.sim2real import _gaps, add_arguments, legged_gap_preset, run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    gaps = _gaps(parser.parse_args(["--envs", "LeggedAnt"]))
    assert gaps["LeggedAnt"] == RealityGapConfig(**legged_gap_preset())
    changed = _gaps(parser.parse_args(["--envs", "LeggedAnt", "--gap", "latency_physics_steps=0"]))["LeggedAnt"]
    assert changed.latency_physics_steps == 0 and changed.mass_scale == gaps["LeggedAnt"].mass_scale
    for bad, words in (("action_delay_steps=1", "latency_physics_steps"), ("encoder_offset=0.1,0.2", "give 1")):
        assert run(parser.parse_args(["--envs", "LeggedAnt", "--gap", bad])) == 2  # before any fine-tuning
        assert words in capsys.readouterr().out


def test_legged_fine_tuning_runs_on_the_gapped_robot_with_the_shipped_artifact(tmp_path):
    """The legged path end to end at toy scale: the shipped int8 artifact, a kit as `lowrl kit` makes it
    (critics warmed up in the ungapped sim: a few hundred steps here), versions on the gapped robot."""
    from lowrl_ros.bench.sim2real import ENVS, ENV_KWARGS, gap_returns, legged_gap_preset
    from lowrl_ros.core.finetune.kit import write_kit_from_artifact
    from lowrl_ros.core.sim import legged

    run = tmp_path / "run"
    run.mkdir()
    artifact = Path(__file__).resolve().parents[1] / ENVS["LeggedAnt"]
    (run / "actor_int8.onnx").symlink_to(artifact)
    write_kit_from_artifact(run / "actor_int8.onnx", run / "kit", env_id=legged.ENV_ID, algo="td3",
                            warmup_steps=400, critic_updates=20, seed=0)
    assert (run / "kit" / "prior.npz").is_file()  # the warm-up's transitions: RLPD's prior data
    gap = RealityGapConfig(**legged_gap_preset())
    ft = fine_tune(run, "LeggedAnt", gap, steps=800, version_every=150, seed=0, judge_episodes=1,
                   rollback_margin=1e6)  # short episodes below: every version judged, none rolled back
    assert ft["updates"] >= 300 and ft["versions"] >= 2
    assert ENV_KWARGS["LeggedAnt"]["max_episode_steps"] == 250
    ends = [0] + [step for step, _, _ in ft["episode_returns"]]
    assert max(b - a for a, b in zip(ends, ends[1:])) == 250  # the bench's 250-step episodes
    sim = gap_returns(run / "actor_int8.onnx", "LeggedAnt", RealityGapConfig(), 2, 10_000)
    gapped = gap_returns(run / "actor_int8.onnx", "LeggedAnt", gap, 2, 10_000)
    assert sum(gapped) < sum(sim)  # the preset costs the sim policy return


def test_the_evaluation_noise_is_the_base_against_itself_as_a_share_of_the_gap():
    from lowrl_ros.bench.sim2real import _noise, _recovered

    assert _recovered([100.0, 100.0], [50.0, 50.0], [75.0, 75.0]) == 50.0
    assert math.isnan(_recovered([50.0], [50.0], [60.0]))  # no gap: no share of it
    noise = _noise([100.0], [40.0, 60.0], [45.0, 55.0, 65.0])
    assert noise["base_vs_itself_pct"] == 10.0 and noise["before_returns_second_set"] == [45.0, 55.0, 65.0]


def test_finetune_set_sets_other_fine_tuner_fields_and_refuses_flagged_or_bad_ones(capsys):
    import argparse

    from lowrl_ros.bench.sim2real import add_arguments, finetune_set, run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--methods", "residual", "--finetune-set", "residual_scale=0.1",
                              "residual_critic_updates=5e3", "residual_prior=false"])
    assert finetune_set(args) == {"residual_scale": 0.1, "residual_critic_updates": 5000, "residual_prior": False}
    for item, says in (("lr=0.1", "use --lr"), ("nope=1", "no such field"),
                       ("residual_scale=2", "residual_scale=2.0 must be in")):
        assert run(parser.parse_args(["--finetune-set", item, "--out", "/nonexistent/never"])) == 2
        assert says in capsys.readouterr().out


def test_kit_gap_file_is_legged_only_and_a_bad_file_is_refused_before_any_run(capsys, tmp_path):
    import argparse

    from lowrl_ros.bench.sim2real import add_arguments, run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    bad = tmp_path / "gap.yaml"
    bad.write_text("sim_robot:\n  ros__parameters:\n    gap.mass_scale: -1\n")
    for argv, says in ((["--envs", "Pendulum-v1", "--kit-gap-file", "config/gaps/legged_example.yaml"],
                        "--kit-gap-file changes the legged kit's simulator"),
                       (["--envs", "LeggedAnt", "--kit-gap-file", str(bad)], "mass_scale")):
        assert run(parser.parse_args(argv + ["--out", str(tmp_path / "out")])) == 2
        assert says in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_legged_kits_are_cached_per_gap_file_contents(tmp_path):
    import argparse

    from lowrl_ros.bench.sim2real import add_arguments, legged_kit_dir

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    plain = legged_kit_dir(0, parser.parse_args(["--runs-dir", str(tmp_path)]))
    gap = tmp_path / "gap.yaml"
    gap.write_text("sim_robot:\n  ros__parameters:\n    gap.mass_scale: 1.2\n")
    gapped = legged_kit_dir(0, parser.parse_args(["--runs-dir", str(tmp_path), "--kit-gap-file", str(gap)]))
    assert plain == tmp_path / "legged-s0-kit-w5000-u5000-n0.1" and gapped.parent == tmp_path
    assert gapped.name.startswith(plain.name + "-gap")
    gap.write_text("sim_robot:\n  ros__parameters:\n    gap.mass_scale: 1.3\n")
    assert legged_kit_dir(0, parser.parse_args(["--runs-dir", str(tmp_path), "--kit-gap-file", str(gap)])) != gapped


def test_the_bench_makes_its_kit_with_lowrl_kits_own_flags_gap_file_included(tmp_path):
    import argparse
    import json
    import shutil

    from lowrl_ros.bench.sim2real import _make_kit, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    root = Path(__file__).resolve().parent.parent
    gap = root / "config/gaps/legged_example.yaml"
    args = parser.parse_args(["--kit-warmup-steps", "200", "--kit-critic-updates", "10", "--kit-gap-file", str(gap)])
    shutil.copyfile(root / "models/legged_ant_int8.onnx", tmp_path / "actor_int8.onnx")
    _make_kit(tmp_path, "lowrl/LeggedAnt-v0", 0, args, "the legged artifact")
    meta = json.loads((tmp_path / "kit" / "kit.json").read_text())
    assert meta["prior"]["gap_file"] == str(gap) and meta["warmup"]["critic_updates"] == 10
