"""Retraining a deployed policy with PPO in the identified simulator (core/retrain, core/train/ppo.py).

The deployed policy is a small randomly initialised rsl_rl actor (rsl-rl-lib 5.x checkpoint layout, ELU, the
empirical normaliser) imported with `lowrl import`'s rsl_rl importer as an int8 artifact of the quadruped
(config/robots/quadruped.yaml); the identified gap is config/gaps/quadruped_example.yaml. Ray runs (a local
cluster started here, on 127.0.0.1) are in the integration tier (test/tiers.py): a Ray start alone takes ~10 s.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
import yaml

from lowrl_ros.cli import main as lowrl_main
from lowrl_ros.core.importers.registry import ImportOptions, load_source, write_imported
from lowrl_ros.core.retrain.pool import gap_around
from lowrl_ros.core.retrain.retrain import RetrainRefused, RetrainSettings, retrain
from lowrl_ros.core.runtime.artifact import (PolicyContract, MlpWeights, parse_artifact, read_artifact_bytes,
                                             save_artifact)
from lowrl_ros.core.runtime.engines import load_artifact, probe_observations
from lowrl_ros.core.runtime.observation import ObservationSpec
from lowrl_ros.core.runtime.robot_file import load_robot_file
from lowrl_ros.core.finetune.sim_env import make_robot_env
from lowrl_ros.core.sim.robot_sim import Gap, load_gap_file, parse_sim
from lowrl_ros.core.train.ppo import ArtifactActor, next_values

ROOT = Path(__file__).resolve().parents[1]
QUAD = ROOT / "config/robots/quadruped.yaml"
GAP = ROOT / "config/gaps/quadruped_example.yaml"
TINY = dict(total_steps=128, n_envs=2, workers=1, n_steps=32, warmup_iterations=1, episode_steps=60,
            eval_episodes=1)


def rsl_rl_artifact(directory: Path, hidden: int = 32) -> Path:
    """A random rsl_rl actor (actor_state_dict: mlp.*, obs_normalizer, distribution.std_param) imported int8."""
    directory.mkdir(parents=True, exist_ok=True)
    robot = load_robot_file(QUAD)
    names = ObservationSpec.from_robot_file(robot, 0.02).entry_names()
    g = torch.Generator().manual_seed(0)
    sizes = [len(names), hidden, hidden, len(robot.joints)]
    sd = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        sd[f"mlp.{2 * i}.weight"] = torch.randn(b, a, generator=g) * (0.3 / np.sqrt(a))
        sd[f"mlp.{2 * i}.bias"] = 0.05 * torch.randn(b, generator=g)
    sd["distribution.std_param"] = torch.ones(len(robot.joints))
    sd["obs_normalizer._mean"] = 0.1 * torch.randn(len(names), generator=g)
    sd["obs_normalizer._std"] = 1.0 + torch.rand(len(names), generator=g)
    torch.save({"actor_state_dict": sd, "iter": 0}, directory / "model_0.pt")
    sidecar = directory / "sidecar.yaml"
    sidecar.write_text(yaml.safe_dump({"observations": names, "actions": {"names": list(robot.joints), "low": -1.0,
                                                                          "high": 1.0}, "control_period_s": 0.02}))
    imported = load_source(directory / "model_0.pt", "rsl_rl", ImportOptions(sidecar=sidecar, activation="elu"))
    return write_imported(imported, directory / "base_int8.onnx", int8=True)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return rsl_rl_artifact(tmp_path_factory.mktemp("retrain"))


def env_observations(n: int = 64) -> np.ndarray:
    env = make_robot_env(QUAD, gap=load_gap_file(GAP))
    obs, _ = env.reset(seed=1)
    rng = np.random.default_rng(1)
    out = []
    for _ in range(n):
        out.append(obs)
        obs, *_ = env.step(rng.uniform(-0.3, 0.3, 12))
    return np.asarray(out, np.float64)


def tanh_artifact(path: Path) -> Path:
    """An SB3-like artifact: tanh output mapped by an explicit action scale/offset, obs clip, relu."""
    robot = load_robot_file(QUAD)
    names = ObservationSpec.from_robot_file(robot, 0.02).entry_names()
    rng = np.random.default_rng(3)
    w = MlpWeights([(0.2 * rng.normal(size=(24, len(names))), np.zeros(24)), (0.2 * rng.normal(size=(12, 24)),
                                                                              np.zeros(12))], "relu", "tanh")
    c = PolicyContract(names, robot.joints, [-1.0] * 12, [1.0] * 12, obs_offset=rng.normal(0, 0.1, len(names)),
                       obs_scale=1.0 + rng.random(len(names)), obs_clip=5.0, action_scale=[0.8] * 12,
                       action_offset=[0.05] * 12, control_period_s=0.02)
    return save_artifact(path, w, c)


@pytest.mark.parametrize("kind", ["rsl_rl int8", "tanh fp32"])
def test_iteration_zero_actor_acts_as_the_deployed_artifact(base, tmp_path, kind):
    path = base if kind == "rsl_rl int8" else tanh_artifact(tmp_path / "tanh.onnx")
    parsed = parse_artifact(path.read_bytes(), str(path))
    actor = ArtifactActor(parsed.base_weights(), parsed.contract, np.full(12, 0.1))
    obs = np.concatenate([env_observations(), probe_observations(parsed.contract, 64)])
    with torch.no_grad():
        mean = actor.mean(torch.from_numpy(obs.astype(np.float32))).numpy()
    mine = np.clip(mean, parsed.contract.action_low, parsed.contract.action_high)
    numpy_engine = load_artifact(path, engine="numpy").act_batch(obs)
    np.testing.assert_allclose(mine, numpy_engine, atol=1e-5)  # the same dequantised weights
    ort = load_artifact(path, engine="ort").act_batch(obs)  # int8 activations too: int8 tolerance
    assert np.abs(mine - ort).max() <= 0.05 * 2.0
    assert np.abs(mine).max() > 0.05  # the probes do move the actions


def test_tiny_run_writes_a_valid_int8_artifact_the_robot_runs(base, tmp_path, capsys):
    out = tmp_path / "v2.onnx"
    seen = []
    r = retrain(base, QUAD, load_gap_file(GAP), {"friction": 0.3}, RetrainSettings(**{**TINY, "workers": 2}), out, 2,
                progress=seen.append)
    assert r.ok, r.reason
    assert r.path == out and out.is_file() and r.steps == 128 and r.sim_return_after is not None
    assert [g.passed for g in r.gates] == [True, True, True]
    assert [p["stage"] for p in seen] == ["warmup", "ppo", "best", "quantize", "gates"]
    assert all(set(p) == {"stage", "steps", "total_steps", "sim_return", "eta_s", "eval_return", "best_return",
                          "best_steps", "base_return", "beyond_reach"} for p in seen)
    assert [p["steps"] for p in seen] == [64, 128, 128, 128, 128] and seen[0]["eta_s"] > 0 == seen[1]["eta_s"]
    assert seen[1]["eval_return"] is None and seen[2]["eval_return"] == seen[2]["best_return"]  # evaluated at the end
    assert seen[2]["best_steps"] == 128 and seen[2]["base_return"] is not None
    parsed = parse_artifact(out.read_bytes(), str(out))
    deployed = parse_artifact(base.read_bytes(), str(base))
    assert parsed.contract.version == 2 and parsed.contract.parent_version == 1
    assert parsed.contract.same_io(deployed.contract) and parsed.contract.obs_offset == deployed.contract.obs_offset
    assert all(layer.dtype == "int8" for layer in parsed.layers)
    assert parsed.hidden_activation == "elu" and parsed.output_activation == "none"
    assert parsed.contract.provenance["last_action"] == "raw"
    assert lowrl_main(["inspect", str(out)]) == 0
    assert "version 2" in capsys.readouterr().out
    obs = env_observations(8)
    for engine in ("numpy", "ort"):
        policy = load_artifact(out, engine=engine)
        acts = np.stack([policy.act(o) for o in obs])
        assert acts.shape == (8, 12) and np.isfinite(acts).all()
    assert not np.array_equal(parsed.base_weights().layers[0][0], deployed.base_weights().layers[0][0])


def test_a_wall_clock_budget_ends_training_in_time_and_releases(base, tmp_path):
    """budget_s (what retrain.release_within_s leaves the retraining): training stops at it, the actor goes through
    the gates and is released; the ETA never promises more than the budget."""
    out, seen = tmp_path / "v2.onnx", []
    t0 = time.monotonic()
    r = retrain(base, QUAD, load_gap_file(GAP), {}, RetrainSettings(**{**TINY, "total_steps": 10**7, "budget_s": 3.0}),
                out, 2, progress=seen.append)
    assert r.ok and out.is_file() and 0 < r.steps < 10**7, r.reason
    assert r.reason.startswith("the wall-clock budget of 3 s ended training at step ")
    assert time.monotonic() - t0 < 60.0
    assert all(p["eta_s"] <= 3.0 for p in seen) and seen[-1]["stage"] == "gates"


def test_should_stop_ends_the_run_cleanly_and_writes_nothing(base, tmp_path):
    out = tmp_path / "v2.onnx"
    calls = []
    r = retrain(base, QUAD, load_gap_file(GAP), {}, RetrainSettings(**TINY), out, 2,
                should_stop=lambda: calls.append(1) or True)
    assert not r.ok and r.stopped and r.reason == "stopped on request at step 64 of 128; nothing written"
    assert calls == [1] and [h["stage"] for h in r.history] == ["warmup"]
    assert not out.exists() and r.steps == 64 and r.gates == []


def _poison_at(monkeypatch, n_update: int) -> None:
    """The n-th PPO (not warm-up) update leaves a NaN in the actor."""
    from lowrl_ros.core.train import ppo

    real, calls = ppo.ppo_update, []

    def poisoned(actor, critic, actor_opt, *args, **kwargs):
        stats = real(actor, critic, actor_opt, *args, **kwargs)
        if actor_opt is not None:
            calls.append(1)
            if len(calls) == n_update:
                with torch.no_grad():
                    actor.layers[0].weight[0, 0] = float("nan")
                stats.finite = actor.finite()
        return stats

    monkeypatch.setattr(ppo, "ppo_update", poisoned)


def test_a_nan_actor_is_a_divergence_and_writes_nothing(base, tmp_path, monkeypatch):
    _poison_at(monkeypatch, 1)
    out = tmp_path / "v2.onnx"
    r = retrain(base, QUAD, load_gap_file(GAP), {}, RetrainSettings(**TINY), out, 2)
    assert not r.ok and r.reason.startswith("diverged at step 128 (PPO iteration 2): NaN or Inf (value loss ")
    assert "the actor not finite" in r.reason and not out.exists() and r.sim_return_before is not None


def test_a_nan_after_an_evaluation_releases_the_best_evaluated_actor_through_the_gates(base, tmp_path, monkeypatch):
    """A quadruped retraining went NaN at PPO iteration 140 after its actor had evaluated 617 against the base's
    579: that actor, evaluated as int8 before the NaN, is what goes to the gates, not nothing."""
    _poison_at(monkeypatch, 3)  # after the evaluations at 64 and 128 steps of PPO
    out = tmp_path / "v2.onnx"
    settings = RetrainSettings(**{**TINY, "total_steps": 512, "eval_every": 64, "return_fraction": 0.01})
    r = retrain(base, QUAD, load_gap_file(GAP), {}, settings, out, 2)
    assert r.ok, r.reason
    assert r.reason.startswith("diverged at step 256 (PPO iteration 4)") and "goes to the gates" in r.reason
    layers = parse_artifact(out.read_bytes(), "v2").base_weights().layers
    assert out.exists() and all(np.isfinite(w).all() and np.isfinite(b).all() for w, b in layers)


def _wreck_after(monkeypatch, n_updates: int) -> None:
    """From the n-th PPO update on, the actor's output saturates (finite, but it drives every joint to its limit)."""
    from lowrl_ros.core.train import ppo

    real, calls = ppo.ppo_update, []

    def wrecking(actor, critic, actor_opt, *args, **kwargs):
        stats = real(actor, critic, actor_opt, *args, **kwargs)
        if actor_opt is not None:
            calls.append(1)
            if len(calls) >= n_updates:
                with torch.no_grad():
                    actor.layers[-1].bias.fill_(50.0)
        return stats

    monkeypatch.setattr(ppo, "ppo_update", wrecking)


def _leaping_quadruped(tmp_path: Path) -> Path:
    """The quadruped reset as its MJCF places it (the feet in the floor, the joints jittered): it leaps at each start,
    and an actor that drives every joint to its limit lands on its back within the test's 60-step episodes. From
    the shipped file's calm start the robot stands whatever such an actor does: no return tells them apart."""
    data = yaml.safe_load(QUAD.read_text())
    data["sim"]["reset"] = {"joint_noise": 0.05, "velocity_noise": 0.1}
    path = tmp_path / "quadruped_leaping.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_best_evaluated_actor_is_released_not_the_last(base, tmp_path, monkeypatch):
    _wreck_after(monkeypatch, 3)  # PPO updates at 128, 192 (evaluated: fine), 256 (wrecked, evaluated at the end)
    out = tmp_path / "v2.onnx"
    settings = RetrainSettings(**{**TINY, "total_steps": 256, "eval_every": 64, "collapse_fraction": 10.0,
                                  "return_fraction": 0.01})
    r = retrain(base, _leaping_quadruped(tmp_path), load_gap_file(GAP), {}, settings, out, 2)
    assert r.ok, r.reason
    last = r.history[-3]  # the "best" report, before quantize and gates
    assert last["stage"] == "best" and last["best_steps"] in (128, 192) and last["eval_return"] < last["best_return"]
    released = parse_artifact(out.read_bytes(), str(out))
    assert np.abs(released.base_weights().layers[-1][1]).max() < 10.0  # not the wrecked actor
    assert released.contract.provenance["retrain.released_steps"] == str(last["best_steps"])


def test_an_evaluation_far_below_the_base_is_a_divergence_not_a_rollouts_reward(base, tmp_path, monkeypatch):
    _wreck_after(monkeypatch, 1)
    out = tmp_path / "v2.onnx"
    settings = RetrainSettings(**{**TINY, "total_steps": 256, "eval_every": 64, "collapse_fraction": 0.01})
    r = retrain(base, _leaping_quadruped(tmp_path), load_gap_file(GAP), {}, settings, out, 2)
    assert not r.ok and r.reason.startswith("diverged at step 128: the actor's evaluation return"), r.reason
    assert not out.exists()


def test_progress_says_how_saturated_the_policy_is(base, tmp_path, monkeypatch):
    """beyond_reach: the share of action entries whose mean lies more than 2 std past the clip."""
    _wreck_after(monkeypatch, 1)  # from the first PPO update on (at 128 steps) every mean is past the clip
    settings = RetrainSettings(**{**TINY, "total_steps": 256, "eval_every": 0})
    r = retrain(base, QUAD, load_gap_file(GAP), {}, settings, tmp_path / "v2.onnx", 2)
    reach = [h["beyond_reach"] for h in r.history if h["stage"] in ("warmup", "ppo")]
    assert reach[0] < 0.2 and reach[-1] > 0.99, reach  # the random base: within reach; wrecked: none of it


def test_a_failed_gate_returns_its_reason_and_writes_nothing(base, tmp_path):
    out = tmp_path / "v2.onnx"
    settings = RetrainSettings(**{**TINY, "int8_max_error": 1e-9, "int8_mean_error": 1e-9})
    r = retrain(base, QUAD, load_gap_file(GAP), {}, settings, out, 2)
    assert not r.ok and r.reason.startswith("gate failed: int8 vs fp32 action error")
    assert [g.passed for g in r.gates] == [True, False] and not out.exists()
    assert not list(tmp_path.iterdir())


def test_a_killed_local_worker_is_a_clear_result_not_a_hang(base, tmp_path):
    me = psutil.Process()

    def kill_a_worker(info: dict) -> None:
        if info["stage"] == "warmup":
            workers = [p for p in me.children() if "spawn_main" in " ".join(p.cmdline())]
            os.kill(workers[0].pid, signal.SIGKILL)

    out = tmp_path / "v2.onnx"
    r = retrain(base, QUAD, load_gap_file(GAP), {}, RetrainSettings(**TINY), out, 2, progress=kill_a_worker)
    assert not r.ok and "env worker 0" in r.reason and "died" in r.reason and not out.exists()


@pytest.mark.parametrize("change, field", [({"n_envs": 0}, "n_envs"), ({"workers": 3}, "workers"),
                                           ({"lr": -1.0}, "lr"), ({"spread": 2.0}, "spread"),
                                           ({"minibatches": 1000}, "minibatches"),
                                           ({"int8_mean_error": 0.5}, "int8_mean_error"),
                                           ({"episode_steps": -1}, "episode_steps")])
def test_bad_settings_are_refused_with_the_field_named(change, field):
    with pytest.raises(ValueError, match=rf"^{field}="):
        RetrainSettings(**{**TINY, **change})


def test_bad_inputs_are_refused_before_any_environment_starts(base, tmp_path):
    gap = load_gap_file(GAP)
    with pytest.raises(RetrainRefused, match="spread names damping, which the robot file's sim.gap_priors"):
        retrain(base, QUAD, gap, {"damping": 0.1}, RetrainSettings(**TINY), tmp_path / "o.onnx", 2)
    with pytest.raises(RetrainRefused, match="version=1 must be an integer above the deployed artifact's version 1"):
        retrain(base, QUAD, gap, {}, RetrainSettings(**TINY), tmp_path / "o.onnx", 1)
    robot = load_robot_file(QUAD)
    names = ObservationSpec.from_robot_file(robot, 0.02).entry_names()
    other = save_artifact(tmp_path / "other.onnx", MlpWeights([(np.zeros((12, len(names) - 1)), np.zeros(12))]),
                          PolicyContract(names[:-1], robot.joints, [-1.0] * 12, [1.0] * 12))
    with pytest.raises(RetrainRefused, match="maps 44 observations -> 12 actions but .* builds 45 -> 12"):
        retrain(other, QUAD, gap, {}, RetrainSettings(**TINY), tmp_path / "o.onnx", 2)
    assert not (tmp_path / "o.onnx").exists()


def test_a_draw_whose_density_rose_beyond_float_range_does_not_turn_the_update_to_nan(base):
    """A log-ratio past 88 overflows exp to inf, and inf times a negative advantage made the loss -inf and the
    actor NaN: a 2-M-step quadruped retraining ended "diverged" at iteration 174 that way."""
    from lowrl_ros.core.train.ppo import Critic, ppo_update

    parsed = parse_artifact(base.read_bytes(), "base")
    actor = ArtifactActor(parsed.base_weights(), parsed.contract, np.full(12, 0.2))
    critic = Critic.fresh(actor, 32)
    obs = torch.from_numpy(env_observations(64).astype(np.float32))
    with torch.no_grad():
        act = actor.mean(obs)
    batch = {"obs": obs, "act": act, "logp": torch.full((64,), -1000.0),  # stored densities e^1000 below today's
             "adv": torch.linspace(-1.0, 1.0, 64), "ret": torch.zeros(64)}
    stats = ppo_update(actor, critic, torch.optim.Adam(actor.parameters(), 1e-4),
                       torch.optim.Adam(critic.parameters(), 1e-3), batch, epochs=2, minibatches=2, clip=0.2,
                       ent_coef=0.0, generator=torch.Generator().manual_seed(0))
    assert stats.finite and actor.finite() and np.isfinite(stats.policy_loss)


def test_next_values_bootstrap_from_the_next_step_the_final_observation_or_nothing():
    # 3 steps, 3 envs: env 0 goes on, env 1 is truncated at step 1 (final V 7), env 2 terminates at step 0.
    values = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], np.float32)
    done = np.array([[0, 0, 1], [0, 1, 0], [0, 0, 0]], bool)
    truncated = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], bool)
    final = np.zeros_like(values)
    final[1, 1] = 70.0
    got = next_values(values, np.array([10.0, 11.0, 12.0]), final, done, truncated)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [[4.0, 5.0, 0.0], [7.0, 70.0, 9.0], [10.0, 11.0, 12.0]])


def test_episode_gaps_stay_around_the_identified_gap_within_the_priors():
    priors = parse_sim(load_robot_file(QUAD))[0].gap_priors
    gap = load_gap_file(GAP)
    rng = np.random.default_rng(0)
    spread = {"mass_scale": 0.5, "latency_steps": 0.5, "gyro_bias": 0.2, "friction": 0.0, "kp_scale": 1.0}
    drawn = [gap_around(gap, priors, spread, rng) for _ in range(200)]
    mass = np.array([d.mass_scale for d in drawn])
    assert 1.15 - 0.15 <= mass.min() < 1.05 and 1.25 < mass.max() <= 1.3  # +-0.15 around 1.15, clipped at 1.3
    assert {d.latency_steps for d in drawn} == {1, 2, 3} and all(d.friction == 0.7 for d in drawn)
    assert all(len(d.gyro_bias) == 3 and abs(d.gyro_bias[0] - 0.02) <= 0.01 + 1e-12 for d in drawn)
    assert all(d.encoder_offset == gap.encoder_offset for d in drawn)  # not in spread: the identified value
    assert gap_around(Gap(), priors, {}, rng) == Gap()


def test_latency_extra_adds_up_to_that_many_steps_in_training_and_alternates_them_in_evaluations():
    """Over ROS 2 the robot's timing adds a physics step of delay or not (the tick phase); latency_extra trains and
    judges across both."""
    from lowrl_ros.core.retrain.pool import EnvGroup

    priors = parse_sim(load_robot_file(QUAD))[0].gap_priors
    gap = load_gap_file(GAP)  # latency 2
    drawn = [gap_around(gap, priors, {}, np.random.default_rng(i), latency_extra=1).latency_steps for i in range(40)]
    assert set(drawn) == {gap.latency_steps, gap.latency_steps + 1}
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)  # the other draws are those without it
    a = gap_around(gap, priors, {"mass_scale": 0.5}, rng_a, latency_extra=1)
    assert a.mass_scale == gap_around(gap, priors, {"mass_scale": 0.5}, rng_b).mass_scale
    group = EnvGroup(str(QUAD), gap.as_dict(), dict(priors), {}, [0], 0, 20, "raw", latency_extra=1)
    seen = []
    group.envs[0].set_gap = lambda g, set_gap=group.envs[0].set_gap: (seen.append(g.latency_steps), set_gap(g))
    group.evaluate((ROOT / "models/quadruped.lowrl").read_bytes(), [30_000, 30_001, 30_002], 5)
    assert seen[:3] == [gap.latency_steps, gap.latency_steps + 1, gap.latency_steps]
    with pytest.raises(ValueError, match="latency_extra"):
        RetrainSettings(latency_extra=-1)


def test_a_share_of_the_episodes_walk_at_the_commands_the_robot_was_given():
    from lowrl_ros.core.retrain.pool import EnvGroup
    from lowrl_ros.core.sim.robot_recording import recorded_commands

    given = np.array([[0.4, 0.0, 0.0], [0.2, 0.1, -0.3]])
    env = make_robot_env(QUAD)
    obs, _ = env.reset(seed=5, options={"command": given[1]})
    np.testing.assert_allclose(recorded_commands(QUAD, np.stack([obs, obs])), given[[1, 1]], atol=1e-6)
    assert recorded_commands(QUAD, np.full((2, obs.size), np.nan)).shape == (0, 3)
    plain = make_robot_env(QUAD)
    for share in (0.0, 1.0):  # share 0: the ranges, exactly as without the commands
        env.use_commands(given, share)
        for seed in range(5):
            env.reset(seed=seed), plain.reset(seed=seed)
            if share == 0.0:
                np.testing.assert_array_equal(env.command, plain.command)
            else:
                assert any(np.array_equal(env.command, g) for g in given)
    env.use_commands(given, 0.5)
    recorded = 0
    for seed in range(200):
        env.reset(seed=seed)
        recorded += any(np.array_equal(env.command, g) for g in given)
    assert 70 < recorded < 130  # about half
    with pytest.raises(RetrainRefused, match="recorded_command_share 0.5 needs the commands the robot was given"):
        retrain(ROOT / "models/quadruped.lowrl", QUAD, Gap(), {}, RetrainSettings(recorded_command_share=0.5),
                ROOT / "never.onnx", 2)
    group = EnvGroup(str(QUAD), Gap().as_dict(), {}, {}, [0, 1], 0, 10, "raw", commands=given.tolist(),
                     command_share=1.0)
    group.reset()
    assert all(any(np.array_equal(e.command, g) for g in given) for e in group.envs)


def test_the_retraining_simulator_reads_back_the_network_output_as_the_robot_does():
    """A raw-convention policy (rsl_rl, Isaac Lab) reads its own unclipped output back as last_action, on the
    robot and in its training. The shipped quadruped policy's outputs lie far past the clip: fed back clipped,
    it scored 1,107 for its 1,617 over a full episode, so the retraining judged and trained a different robot."""
    from lowrl_ros.core.retrain.pool import EnvGroup

    art = ROOT / "models/quadruped.lowrl"
    policy = load_artifact(art, "numpy")
    env = make_robot_env(QUAD, last_action="raw")  # the robot's loop: the engine's raw output goes back
    obs, _ = env.reset(seed=7)
    expected, beyond = 0.0, 0
    for _ in range(100):
        policy.act(obs)
        beyond += int((np.abs(policy.raw_output) > 1.0).sum())
        obs, r, *_ = env.step(policy.raw_output.copy())
        expected += r
    assert beyond > 600  # most outputs past the clip: a clipped read-back would differ
    group = EnvGroup(str(QUAD), Gap().as_dict(), {}, {}, [0], 0, 100, "raw")
    assert group.evaluate(read_artifact_bytes(art), [7], 100) == [pytest.approx(expected, rel=1e-9)]
    group.reset()
    raw = np.full((1, 12), 3.0)
    obs = group.step(np.clip(raw, -1, 1), raw)[0][0]
    names = group.envs[0].spec_obs.entry_names()
    np.testing.assert_allclose(obs[[i for i, n in enumerate(names) if n.startswith("last_action")]], 3.0)


# ---- integration tier (test/tiers.py): Ray clusters ----------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_local_and_ray_give_the_same_artifact_for_the_same_seed(base, tmp_path):
    """A cluster started by `ray start --head` on 127.0.0.1 (blocking, so stopping it stops only what it started)."""
    port = _free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}  # 127.0.0.1 only
    ray_bin = str(Path(sys.executable).with_name("ray"))
    temp = tempfile.mkdtemp(prefix="lrray", dir="/tmp")  # short: Ray's Unix sockets live under it (107 chars)
    head = subprocess.Popen([ray_bin, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
                             "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
                             f"--temp-dir={temp}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # its own process group: stopped below, nothing else
    try:
        deadline = time.monotonic() + 90
        while True:
            assert head.poll() is None, "ray start --head exited"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the Ray head did not open its port within 90 s"
            time.sleep(0.2)
        settings = dict(TINY, workers=2)
        local = retrain(base, QUAD, load_gap_file(GAP), {}, RetrainSettings(**settings), tmp_path / "local.onnx", 2)
        on_ray = retrain(base, QUAD, load_gap_file(GAP), {},
                         RetrainSettings(**settings, ray_address=f"127.0.0.1:{port}"), tmp_path / "ray.onnx", 2)
    finally:
        os.killpg(head.pid, signal.SIGKILL)  # the group `ray start` made: its GCS, raylet and workers
        head.wait(30)
        shutil.rmtree(temp, ignore_errors=True)
    assert local.ok and on_ray.ok, (local.reason, on_ray.reason)
    assert (tmp_path / "local.onnx").read_bytes() == (tmp_path / "ray.onnx").read_bytes()
    no_eta = lambda hist: [{k: v for k, v in h.items() if k != "eta_s"} for h in hist]  # noqa: E731
    assert no_eta(local.history) == no_eta(on_ray.history)
    assert local.sim_return_after == on_ray.sim_return_after


def test_a_dead_ray_worker_mid_rollout_is_a_clear_result(base, tmp_path):
    import ray

    def kill_a_worker(info: dict) -> None:
        if info["stage"] == "warmup":
            names = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("env-")]
            ray.kill(ray.get_actor(names[0]["name"], namespace=names[0]["namespace"]))

    out = tmp_path / "v2.onnx"
    r = retrain(base, QUAD, load_gap_file(GAP), {}, RetrainSettings(**dict(TINY, ray_address="local")), out, 2,
                progress=kill_a_worker)
    assert not r.ok and "Ray env worker 0 died" in r.reason and not out.exists()
    assert not ray.is_initialized()  # the run shut down the instance it started
