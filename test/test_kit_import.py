"""A fine-tune kit from any artifact (issue 17 §3): the torch actor is the artifact exactly, the critics
learn first from an environment or a robot log, the fine-tuner's versions keep the imported actor's
shape and contract, and what cannot work is refused in one line (exit 2, nothing on disk).

Real torch, gymnasium (Pendulum-v1) and the real transition log throughout; kits are kept small
(a few hundred rollout steps and critic updates) so the whole file runs in seconds.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lowrl_ros.cli import main
from lowrl_ros.core.finetune.config import FineTuneConfig
from lowrl_ros.core.finetune.kit import (KitRefused, artifact_actor, load_kit, write_kit_from_agent,
                                         write_kit_from_artifact)
from lowrl_ros.core.finetune.learner import FineTuner
from lowrl_ros.core.finetune.transition_log import Transition, TransitionLogWriter
from lowrl_ros.core.runtime import activations
from lowrl_ros.core.runtime.artifact import (MlpWeights, PolicyContract, load_weights, parse_artifact,
                                             prune_by_magnitude, read_artifact_bytes, reference_action, save_artifact)
from lowrl_ros.core.train.config import TrainConfig
from lowrl_ros.core.train.trainer import make_agent

PENDULUM = dict(obs_names=("cos", "sin", "thdot"), action_names=("torque",), action_low=(-2.0,), action_high=(2.0,),
                control_period_s=0.05, env_id="Pendulum-v1")
# SB3 PPO with VecNormalize: normalised, clipped observations, an unsquashed output clipped to the Box
# (action_scale 1, offset 0 written out, as an importer may).
SB3_PPO = dict(obs_offset=(0.1, -0.2, 0.5), obs_scale=(1.5, 2.0, 0.25), obs_clip=1.2, action_scale=(1.0,),
               action_offset=(0.0,))
# rsl_rl / Isaac Lab: no clip, an action scale and offset (the default joint position).
ISAAC = dict(obs_offset=(0.0, 0.1, -0.3), obs_scale=(1 / 1.01, 1 / 0.51, 1 / 2.01), action_scale=(0.5,),
             action_offset=(0.3,))


def mlp(sizes, hidden, output, seed=0, out_gain=1.0) -> MlpWeights:
    rng = np.random.default_rng(seed)
    layers = [(rng.normal(0, 1.5 / np.sqrt(i), (o, i)), rng.normal(0, 0.3, o)) for i, o in zip(sizes[:-1], sizes[1:])]
    layers[-1] = (layers[-1][0] * out_gain, layers[-1][1])
    return MlpWeights(layers, hidden, output)


def spec_of(w: MlpWeights, masked=()) -> dict:
    return {"sizes": [w.input_dim] + [a.shape[0] for a, _ in w.layers], "hidden_activation": w.hidden_activation,
            "output_activation": w.output_activation, "masked_layers": list(masked)}


@pytest.mark.parametrize("hidden", activations.HIDDEN)
@pytest.mark.parametrize("output,extra", [("none", SB3_PPO), ("none", ISAAC), ("tanh", {}),
                                          ("tanh", dict(obs_clip=0.8, action_scale=(2.5,), action_offset=(-0.4,)))])
def test_the_torch_actor_is_the_artifact(hidden, output, extra):
    w = mlp([3, 64, 64, 1], hidden, output, out_gain=4.0)
    contract = PolicyContract(**PENDULUM, **extra)
    actor = artifact_actor(contract, spec_of(w))
    actor.load_layers(w.layers)
    obs = np.random.default_rng(1).normal(0.0, 3.0, (2000, 3))  # far enough out to hit the clip and the limits
    want = reference_action(w, contract, obs)
    assert np.max(np.abs(actor.act(obs) - want)) < 1e-5
    if extra:  # the limits were reached: the clamp is exercised (a tanh output on [low, high] never passes them)
        assert np.abs(want).max() == pytest.approx(2.0)
    # Inside the learner: the same action on [-1, 1], from the contract's normalised observation (float32).
    x = actor.normalize(torch.as_tensor(obs, dtype=torch.float32))
    with torch.no_grad():
        assert np.max(np.abs(actor.deterministic(x).numpy() * 2.0 - want)) < 1e-4
    assert np.allclose(actor.act(obs[0]), want[0], atol=1e-5)  # one observation too
    # Only the MLP trains: the normaliser and the transform are buffers, not parameters.
    assert {n for n, _ in actor.named_parameters()} == {"net.weights.0", "net.weights.1", "net.weights.2",
                                                          "net.biases.0", "net.biases.1", "net.biases.2"}


def test_a_saturated_action_gets_the_gradient_back_inside_only():
    w = mlp([3, 8, 1], "tanh", "none")
    actor = artifact_actor(PolicyContract(**PENDULUM), spec_of(w))
    actor.load_layers([(w.layers[0][0], w.layers[0][1]), (w.layers[1][0], np.array([50.0]))])  # far above +2
    x = torch.zeros(1, 3)
    for sign, moves in ((1.0, True), (-1.0, False)):  # loss = sign * a: descent lowers a (inward) for +1
        actor.zero_grad()
        (sign * actor(x)).sum().backward()
        grad = actor.net.biases[1].grad
        assert (grad.abs().sum() > 0) == moves
    with torch.no_grad():
        assert actor(x).item() == 1.0  # the forward pass is the exact clamp


@pytest.fixture(scope="module")
def ppo_like(tmp_path_factory):
    """An SB3-PPO-shaped artifact (tanh hidden, output none, normaliser + clip), its second layer stored sparse."""
    d = tmp_path_factory.mktemp("ppo")
    w = mlp([3, 64, 64, 1], "tanh", "none", seed=3)
    w = MlpWeights([w.layers[0], prune_by_magnitude(w, 0.8).layers[1], w.layers[2]], "tanh", "none")
    contract = PolicyContract(**PENDULUM, **SB3_PPO, version=4, provenance={"tool": "lowrl import", "algo": "PPO"})
    path = save_artifact(d / "ppo.onnx", w, contract)
    assert [layer.storage for layer in parse_artifact(read_artifact_bytes(path), "p").layers][1] != "dense"
    return path, w, contract


@pytest.fixture(scope="module")
def env_kit(ppo_like, tmp_path_factory):
    path, _, _ = ppo_like
    kit_dir, report = write_kit_from_artifact(path, tmp_path_factory.mktemp("k") / "kit", env_id="Pendulum-v1",
                                              warmup_steps=400, critic_updates=150, hidden=64, batch_size=64)
    return kit_dir, report


def test_a_kit_from_rollouts_warms_the_critics_and_keeps_the_actor(env_kit, ppo_like):
    kit_dir, report = env_kit
    _, w, contract = ppo_like
    meta = json.loads((kit_dir / "kit.json").read_text())
    assert meta["format_version"] == 2 and meta["actor"]["masked_layers"] == [1]
    assert meta["actor"]["hidden_activation"] == "tanh" and meta["actor"]["output_activation"] == "none"
    assert report.transitions == 400 and report.critic_updates == 150
    assert report.td_error_after < 0.5 * report.td_error_before  # the critics learned the env's returns
    assert report.mean_reward < 0  # Pendulum's reward, not a placeholder
    kit = load_kit(kit_dir)
    assert kit.contract == contract and kit.actor_spec["sizes"] == [3, 64, 64, 1] and not kit.int8
    actor = artifact_actor(kit.contract, kit.actor_spec)
    actor.load_state_dict(kit.agent_state["actor"])
    obs = np.random.default_rng(5).normal(0, 2, (300, 3))
    assert np.max(np.abs(actor.act(obs) - reference_action(w, contract, obs))) < 1e-5  # warm-up left it alone


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_the_fine_tuner_trains_the_imported_actor_and_keeps_its_shape(algo, ppo_like, tmp_path):
    path, w, contract = ppo_like
    kit_dir, _ = write_kit_from_artifact(path, tmp_path / "kit", env_id="Pendulum-v1", algo=algo, warmup_steps=300,
                                         critic_updates=20, hidden=32, batch_size=32)
    cfg = FineTuneConfig(min_transitions=64, batch_size=32, version_every_updates=30, critic_warmup_updates=0)
    tuner = FineTuner(load_kit(kit_dir), cfg, tmp_path / "work", base_path=str(path))
    assert tuner.tracker.current == 4  # the imported artifact's version is the base
    rng = np.random.default_rng(0)
    for _ in range(120):
        tuner.add(rng.normal(0, 1, 3), rng.uniform(-2, 2, 1), float(rng.normal(-3, 1)), rng.normal(0, 1, 3),
                  False, False)
    assert tuner.update(40) == 40
    record = tuner.make_version()
    assert (record.version, record.parent_version) == (5, 4)
    parsed = parse_artifact(read_artifact_bytes(record.path), record.path)
    new = parsed.contract
    for key in ("obs_names", "action_names", "action_low", "action_high", "obs_offset", "obs_scale", "obs_clip",
                "action_scale", "action_offset", "control_period_s", "env_id", "tier"):
        assert getattr(new, key) == getattr(contract, key), key
    assert new.provenance["algo"] == "PPO" and new.provenance["tool"] == "lowrl finetune"
    assert (parsed.hidden_activation, parsed.output_activation) == ("tanh", "none")
    assert [(layer.in_dim, layer.out_dim) for layer in parsed.layers] == [(3, 64), (64, 64), (64, 1)]
    assert all(layer.dtype == "fp32" for layer in parsed.layers)  # stored as the imported artifact was
    w2 = parsed.weights()
    assert not np.allclose(w2.layers[0][0], w.layers[0][0])  # the weights moved
    zeros = w.layers[1][0] == 0
    assert np.all(w2.layers[1][0][zeros] == 0)  # the sparse layer kept its zeros
    # The version computes what the learner's actor computes (fp32: exactly the weights it holds).
    obs = rng.normal(0, 2, (200, 3))
    assert np.max(np.abs(tuner.agent.actor.act(obs) - reference_action(w2, new, obs))) < 1e-5
    if algo == "sac":
        assert "log_std" not in str(parsed.layers) and tuner.agent.actor.log_std is not None


def test_a_kit_from_the_robots_transition_log(ppo_like, tmp_path):
    path, _, contract = ppo_like
    writer = TransitionLogWriter(tmp_path / "transitions")
    rng = np.random.default_rng(2)
    for i in range(300):
        writer.append(Transition(rng.normal(0, 1, 3), rng.uniform(-2, 2, 1), -float(i % 7), rng.normal(0, 1, 3),
                                 False, i % 100 == 99, 4, float(i)))
    writer.close()
    kit_dir, report = write_kit_from_artifact(path, tmp_path / "kit", transitions=tmp_path / "transitions",
                                              critic_updates=50, hidden=32, batch_size=32)
    assert report.transitions == 297  # the three truncated steps are not trained on
    assert "transitions" in report.source and report.mean_reward == pytest.approx(-3.0, abs=0.1)
    assert load_kit(kit_dir).train_config.env_id == "Pendulum-v1"  # taken from the contract


def test_lowrl_kit_command(ppo_like, tmp_path, capsys):
    path, _, _ = ppo_like
    out = tmp_path / "kit"
    assert main(["kit", str(path), "-o", str(out), "--env", "Pendulum-v1", "--warmup-steps", "300",
                 "--critic-updates", "30", "--hidden", "32"]) == 0
    assert "wrote" in capsys.readouterr().out and (out / "kit.json").is_file()
    assert main(["kit", str(path), "-o", str(out), "--env", "Pendulum-v1"]) == 2  # never over an existing kit


@pytest.mark.parametrize("argv,says", [
    ([], "--env ENV_ID"),
    (["--env", "InvertedPendulum-v5"], "observes (4,)"),
    (["--env", "NoSuchEnv-v0"], "cannot make environment"),
    (["--transitions", "{tmp}/nothing"], "no such directory"),
    (["--transitions", "{tmp}/empty"], "no transitions"),
    (["--env", "Pendulum-v1", "--warmup-steps", "0"], "--warmup-steps must be >= 1"),
    (["--transitions", "{tmp}/empty", "--gap-file", "{tmp}/gap.yaml"], "--gap-file changes the simulator of --env"),
    (["--env", "Pendulum-v1", "--gap-file", "{tmp}/bad_gap.yaml"], "unknown gap field(s) mass"),
])
def test_refusals_are_one_line_exit_2_and_leave_nothing(argv, says, ppo_like, tmp_path, capsys):
    path, _, _ = ppo_like
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad_gap.yaml").write_text("sim_robot:\n  ros__parameters:\n    gap.mass: 1.3\n")
    out = tmp_path / "kit"
    code = main(["kit", str(path), "-o", str(out), "--critic-updates", "5"]
                + [a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and says in err and len(err.splitlines()) == 1 and err.startswith("lowrl kit: ")
    assert not out.exists()


def test_a_transition_log_of_another_robot_is_refused(ppo_like, tmp_path):
    path, _, _ = ppo_like
    writer = TransitionLogWriter(tmp_path / "log")
    writer.append(Transition(np.zeros(4), np.zeros(2), 0.0, np.zeros(4), False, False, 1, 0.0))
    writer.close()
    with pytest.raises(KitRefused, match="4 observations and 2 actions"):
        write_kit_from_artifact(path, tmp_path / "kit", transitions=tmp_path / "log")


def test_train_kits_keep_format_1_and_a_v2_kit_needs_its_actor(env_kit, tmp_path):
    cfg = TrainConfig(algo="td3", variant="dense", hidden=16, progress=False)
    agent = make_agent(cfg, 3, 1)
    kit_dir = write_kit_from_agent(agent, PolicyContract(**PENDULUM), tmp_path / "train_kit")
    assert json.loads((kit_dir / "kit.json").read_text())["format_version"] == 1
    assert load_kit(kit_dir).actor_spec is None
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "agent.pt").write_bytes((env_kit[0] / "agent.pt").read_bytes())
    meta = json.loads((env_kit[0] / "kit.json").read_text())
    (bad / "kit.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "actor"}))
    with pytest.raises(ValueError, match="'actor' entry is missing"):
        load_kit(bad)


def test_the_new_version_loads_like_the_artifact_it_came_from(ppo_like, env_kit, tmp_path):
    """The weights read back from a version are what the reference computes with the kit's contract."""
    path, _, contract = ppo_like
    tuner = FineTuner(load_kit(env_kit[0]), FineTuneConfig(min_transitions=1, batch_size=8), tmp_path / "w",
                      base_path=str(path))
    record = tuner.make_version()  # no update yet: the version is the imported policy, re-stored
    w2, c2 = load_weights(record.path)
    w1, _ = load_weights(path)
    obs = np.random.default_rng(9).normal(0, 2, (100, 3))
    assert np.max(np.abs(reference_action(w2, c2, obs) - reference_action(w1, contract, obs))) < 1e-6


def test_the_bench_refuses_sb3_ppo_off_pendulum(capsys):
    import argparse

    from lowrl_ros.bench.sim2real import add_arguments, run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--start", "sb3-ppo", "--envs", "InvertedPendulum-v5", "--out", "/nonexistent/x"])
    assert run(args) == 2
    assert "Pendulum-v1 only" in capsys.readouterr().out


@pytest.mark.parametrize("int8", [False, True])
def test_an_isaac_style_version_runs_on_the_robots_engines(int8, tmp_path):
    """ELU, an action scale and offset, an obs clip: a version the fine-tuner made acts, on the ORT and numpy
    engines the policy node uses, as the learner's actor does (int8: within quantization error)."""
    from lowrl_ros.core.runtime.engines import load_artifact

    w = mlp([3, 32, 32, 1], "elu", "none", seed=4)
    contract = PolicyContract(**PENDULUM, **{**ISAAC, "obs_clip": 2.0})
    base = save_artifact(tmp_path / "isaac.onnx", w, contract, int8=int8)
    writer = TransitionLogWriter(tmp_path / "log")
    rng = np.random.default_rng(6)
    for i in range(200):
        writer.append(Transition(rng.normal(0, 1, 3), rng.uniform(-2, 2, 1), -1.0, rng.normal(0, 1, 3), False, False,
                                 1, float(i)))
    writer.close()
    kit_dir, _ = write_kit_from_artifact(base, tmp_path / "kit", transitions=tmp_path / "log", critic_updates=10,
                                         hidden=32, batch_size=32)
    tuner = FineTuner(load_kit(kit_dir), FineTuneConfig(min_transitions=64, batch_size=32), tmp_path / "w",
                      base_path=str(base))
    for i in range(100):
        tuner.add(rng.normal(0, 1, 3), rng.uniform(-2, 2, 1), -1.0, rng.normal(0, 1, 3), False, False)
    assert tuner.update(30) == 30
    record = tuner.make_version()
    obs = rng.normal(0, 2, (64, 3)).astype(np.float32)
    want = tuner.agent.actor.act(obs)
    tol = 0.05 if int8 else 1e-4
    for engine in ("ort", "numpy"):
        policy = load_artifact(record.path, engine=engine)
        got = np.stack([policy.act(o) for o in obs])
        assert np.max(np.abs(got - want)) < tol, engine


def test_a_kit_from_an_identified_simulator_says_so_and_its_data_come_from_that_gap(env_kit, ppo_like, tmp_path):
    """`lowrl kit --env ENV --gap-file GAP`: the critics and the prior data come from the simulator with the gap
    the off-board identifier wrote (here a hand-written one), and the residual learner's notes name it."""
    from lowrl_ros.core.finetune.prior import load_prior

    path, _, _ = ppo_like
    gap = tmp_path / "identified_gap.yaml"
    gap.write_text("sim_robot:\n  ros__parameters:\n    gap.mass_scale: 1.6\n    gap.actuator_gain: 0.5\n")
    kit_dir, _ = write_kit_from_artifact(path, tmp_path / "kit", env_id="Pendulum-v1", warmup_steps=400,
                                         critic_updates=5, hidden=64, batch_size=64, gap_file=gap)
    meta = json.loads((kit_dir / "kit.json").read_text())
    assert meta["prior"] == {"env": "Pendulum-v1", "gap_file": str(gap),
                             "gap": {"mass_scale": 1.6, "actuator_gain": 0.5}}
    kit = load_kit(kit_dir)
    assert str(gap) in kit.prior_source and load_kit(env_kit[0]).prior_source == ""
    # The same policy, seed and steps as env_kit's, another simulator: other next states.
    ours, theirs = load_prior(kit_dir, 3, 1, 400), load_prior(env_kit[0], 3, 1, 400)
    assert np.array_equal(ours.obs[0], theirs.obs[0]) and not np.allclose(ours.next_obs[:50], theirs.next_obs[:50])
    tuner = FineTuner(kit, FineTuneConfig(algorithm="residual", residual_prior=True), tmp_path / "ft",
                      base_path=str(path))
    assert f"simulator transitions of Pendulum-v1 with the gap of {gap}" in tuner.notes[0]
