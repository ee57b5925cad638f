"""The fine-tuner's learners (FineTuneConfig.algorithm): CrossQ's BatchRenorm critics without target
networks, RLPD-style prior data in half of every batch with LayerNorm critics, and a short
FineTuneSession with each learner that makes a version. No ROS; real torch and gymnasium."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from lowrl_ros.core.finetune import learner as learner_module
from lowrl_ros.core.finetune.config import ALGORITHMS, FineTuneConfig
from lowrl_ros.core.finetune.kit import load_kit
from lowrl_ros.core.finetune.learner import FineTuner
from lowrl_ros.core.finetune.prior import PRIOR_FILE, load_prior, mixed_batch
from lowrl_ros.core.finetune.session import FineTuneSession, VersionMade
from lowrl_ros.core.finetune.status import FineTuneFacts, finetune_status
from lowrl_ros.core.train.config import TrainConfig
from lowrl_ros.core.train.crossq import BatchRenorm, BRNTwinCritic, make_learner_agent
from lowrl_ros.core.train.replay import Batch, ReplayBuffer

from test_finetune_session import SMALL, episode, feed


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread, as the fine-tuner runs (FineTuneConfig.threads); two are ~5x slower on a loaded 2-core box."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _cfg(algo: str = "sac", **kw) -> TrainConfig:
    return TrainConfig(algo=algo, hidden=32, depth=2, variant="dense", batch_size=32, progress=False, **kw)


def _batch(n: int = 64, obs_dim: int = 3, act_dim: int = 1, seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed)
    return Batch(rng.standard_normal((n, obs_dim)).astype(np.float32),
                 rng.uniform(-1, 1, (n, act_dim)).astype(np.float32), rng.standard_normal(n).astype(np.float32),
                 rng.standard_normal((n, obs_dim)).astype(np.float32), np.full(n, 0.99, np.float32))


# ---- BatchRenorm ------------------------------------------------------------------------------
def test_batchrenorm_normalises_by_the_batch_in_train_mode_and_by_running_stats_in_eval_mode():
    torch.manual_seed(0)
    brn = BatchRenorm(2, 4, momentum=0.1, warmup=1000)
    x = torch.randn(2, 256, 4) * 3.0 + 5.0
    y = brn(x)
    assert torch.allclose(y.mean(1), torch.zeros(2, 4), atol=1e-4)
    assert torch.allclose(y.std(1, unbiased=False), torch.ones(2, 4), atol=1e-2)
    # The running statistics moved by the momentum from (0, 1) towards the batch's.
    assert torch.allclose(brn.running_mean, 0.1 * x.mean(1, keepdim=True), atol=1e-5)
    assert torch.allclose(brn.running_var, 0.9 + 0.1 * x.var(1, unbiased=False, keepdim=True), atol=1e-4)
    assert int(brn.steps) == 1
    # Eval: the running statistics normalise, the stats do not move, and a sample's output does not
    # depend on the rest of the batch (what an acting copy needs).
    brn.eval()
    before = brn.running_mean.clone()
    alone, together = brn(x[:, :1]), brn(x)[:, :1]
    assert torch.allclose(alone, together) and torch.equal(brn.running_mean, before)
    expected = (x - brn.running_mean) / torch.sqrt(brn.running_var + brn.eps)
    assert torch.allclose(brn(x), expected, atol=1e-5)
    # Train mode again: the output of a sample depends on its batch.
    brn.train()
    assert not torch.allclose(brn(x[:, :8])[:, :1], brn(x)[:, :1])


def test_batchrenorm_after_warmup_corrects_the_batch_towards_the_running_statistics():
    brn = BatchRenorm(1, 2, momentum=0.0, warmup=0, r_max=3.0, d_max=5.0)  # momentum 0: stats stay (0, 1)
    x = torch.randn(1, 512, 2) * 2.0 + 1.0
    y = brn(x)
    # r = sigma_B / sigma, d = (mu_B - mu) / sigma (within the clips): the output is the running statistics' view
    # of x, (x - 0) / sqrt(1 + eps), not the batch's.
    assert torch.allclose(y, x / np.sqrt(1.0 + brn.eps), atol=1e-4)
    far = torch.randn(1, 512, 2) * 10.0 + 50.0  # r and d clip at r_max and d_max
    z = brn(far)
    assert torch.allclose(z.mean(1), torch.full((1, 2), 5.0), atol=1e-3)
    assert torch.allclose(z.std(1, unbiased=False), torch.full((1, 2), 3.0), atol=1e-2)


# ---- CrossQ -----------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_crossq_has_no_target_networks_and_lowers_the_td_error_on_a_fixed_batch(algo):
    # A fixed temperature near 0 (SAC) and no target smoothing noise (TD3): the target is the
    # deterministic next action's value, which td_error() below measures.
    cfg = _cfg(algo, alpha=1e-6, policy_noise=0.0)
    agent = make_learner_agent("crossq", cfg, 3, 1)
    if algo == "sac":
        with torch.no_grad():  # a near-deterministic policy: the sampled next action is the mean's
            agent.actor.net.biases[-1][..., 1:].fill_(-15.0)
    assert agent.critic_target is None and getattr(agent, "actor_target", None) is None
    assert isinstance(agent.critic, BRNTwinCritic) and agent.target_pairs == []
    assert "critic_target" not in agent.state_dict()
    batch = _batch()

    def td_error() -> float:  # the loss CrossQ minimises: the joint pass, the second half as the target
        obs, act, rew, nxt, disc = (torch.from_numpy(v) for v in (batch.obs, batch.action, batch.reward,
                                                                  batch.next_obs, batch.discount))
        with torch.no_grad():
            next_a = agent.actor.deterministic(nxt)
            q = agent.critic(torch.cat([obs, nxt]), torch.cat([act, next_a]))
            return float((q[:, :64] - (rew + disc * q[:, 64:].min(0).values)).square().mean())

    start = td_error()
    actor_before = [p.detach().clone() for p in agent.actor.parameters()]
    for _ in range(100):
        agent.update(batch, train_actor=False)
    assert td_error() < 0.5 * start
    assert all(torch.equal(a, b) for a, b in zip(actor_before, agent.actor.parameters()))  # critic-only
    assert agent.critic.training  # left in train mode for the next fit
    for _ in range(6):
        agent.update(batch)  # the actor moves every 3rd update (CrossQ's policy delay)
    assert any(not torch.equal(a, b) for a, b in zip(actor_before, agent.actor.parameters()))
    assert agent.critic.training
    restored = make_learner_agent("crossq", cfg, 3, 1)
    restored.load_state_dict(agent.state_dict())  # running statistics travel with the state
    assert torch.equal(restored.critic.net.norms[1].running_var, agent.critic.net.norms[1].running_var)


# ---- RLPD -------------------------------------------------------------------------------------
def test_rlpd_batches_are_half_prior_half_robot_and_its_critics_have_layernorm():
    online, prior = ReplayBuffer(3, 1, 100), ReplayBuffer(3, 1, 100)
    for i in range(100):
        online.add(np.zeros(3), np.zeros(1), -1.0, np.zeros(3), False, False, np.zeros(1))
        prior.add(np.ones(3), np.ones(1), 1.0, np.ones(3), False, False, np.ones(1))
    b = mixed_batch(online, prior, 128, np.random.default_rng(0))
    assert b.obs.shape == (128, 3) and int((b.reward > 0).sum()) == 64 and int((b.reward < 0).sum()) == 64
    assert (mixed_batch(online, None, 32, np.random.default_rng(0)).reward < 0).all()  # no prior: robot only
    agent = make_learner_agent("rlpd", _cfg(), 3, 1)
    assert agent.critic.net.layer_norm and agent.critic_target.net.layer_norm
    plain = make_learner_agent("kit", _cfg(), 3, 1)
    assert not plain.critic.net.layer_norm
    # LayerNorm makes the first hidden layer's output invariant to scaling its weights and biases.
    x = torch.randn(5, 4)
    q = agent.critic.net(x)
    with torch.no_grad():
        agent.critic.net.weights[0].mul_(7.0)
        agent.critic.net.biases[0].mul_(7.0)
    assert torch.allclose(agent.critic.net(x), q, atol=1e-4)


def test_rlpd_fine_tuner_loads_the_kits_prior_data_and_old_kits_without_it(tiny_kit, tmp_path):
    kit = load_kit(tiny_kit[0])
    assert (tiny_kit[0] / PRIOR_FILE).is_file()  # write_kit kept the training run's replay
    tuner = FineTuner(kit, FineTuneConfig(algorithm="rlpd", **SMALL), tmp_path / "a")
    assert tuner.learner == "rlpd" and tuner.prior is not None and len(tuner.prior) > 0
    assert tuner.utd == FineTuneConfig.rlpd_updates_per_transition
    capped = FineTuner(kit, FineTuneConfig(algorithm="rlpd", prior_size=50, **SMALL), tmp_path / "b")
    assert len(capped.prior) == 50
    old = tmp_path / "old_kit"
    shutil.copytree(tiny_kit[0], old)
    (old / PRIOR_FILE).unlink()
    bare = FineTuner(load_kit(old), FineTuneConfig(algorithm="rlpd", **SMALL), tmp_path / "c")
    assert bare.prior is None and "no prior data" in bare.notes[0]
    assert load_prior(old, kit.obs_dim, kit.action_dim, 100) is None
    with pytest.raises(ValueError, match="re-write the kit"):
        load_prior(tiny_kit[0], kit.obs_dim + 1, kit.action_dim, 100)


# ---- config -----------------------------------------------------------------------------------
def test_learner_config_is_validated_with_a_clear_message(tiny_kit, tmp_path):
    assert FineTuneConfig().algorithm == "kit"
    assert set(ALGORITHMS) == {"kit", "sac", "td3", "crossq", "rlpd", "residual"}
    with pytest.raises(ValueError, match="algorithm='ppo' is not one of kit, sac, td3, crossq, rlpd"):
        FineTuneConfig(algorithm="ppo")
    with pytest.raises(ValueError, match="rlpd_updates_per_transition"):
        FineTuneConfig(rlpd_updates_per_transition=0.0)
    with pytest.raises(ValueError, match="prior_size"):
        FineTuneConfig(prior_size=-1)
    kit = load_kit(tiny_kit[0])
    other = "td3" if kit.train_config.algo == "sac" else "sac"
    with pytest.raises(ValueError, match=f"needs a {other.upper()} kit"):
        FineTuner(kit, FineTuneConfig(algorithm=other, **SMALL), tmp_path)
    # The kit's own algorithm named is the same learner as "kit" (and resumes its learner.pt).
    assert FineTuner(kit, FineTuneConfig(algorithm=kit.train_config.algo, **SMALL), tmp_path / "own").learner == "kit"


# ---- a short session per learner ------------------------------------------------------------------
@pytest.mark.parametrize("name", ["kit", "crossq", "rlpd"])
def test_a_short_session_with_each_learner_makes_a_version(name, tiny_kit, tmp_path, monkeypatch):
    monkeypatch.setattr(learner_module, "FRESH_CRITIC_WARMUP", 10)  # seconds, not a real warm-up
    session = FineTuneSession(load_kit(tiny_kit[0]), FineTuneConfig(algorithm=name, **SMALL), tmp_path,
                              base_path=str(tiny_kit[1]))
    tuner = session.tuner
    assert tuner.critic_warmup == (10 if name != "kit" else 0)
    feed(session, episode(1, 100))
    session.episode_ended(1, -300.0)
    made: list = []
    for _ in range(200):
        made += [e for e in session.step(8) if isinstance(e, VersionMade)]
        if made:
            break
    assert made and made[0].record.version == 2 and tuner.weights_finite()
    assert tuner.updates_per_s > 0 and tuner.updates <= tuner.utd * tuner.transitions_seen
    facts = FineTuneFacts(learner=tuner.learner, updates_per_s=tuner.updates_per_s,
                          prior=len(tuner.prior) if tuner.prior is not None else 0)
    values = finetune_status(facts)[1].values
    assert values["learner"] == name and values["updates_per_s"] > 0 and (values["prior"] > 0) == (name == "rlpd")
    # The version's weights resume: a new session on the same directory gets the same learner back.
    session.close()
    again = FineTuneSession(load_kit(tiny_kit[0]), FineTuneConfig(algorithm=name, **SMALL), tmp_path,
                            base_path=str(tiny_kit[1]))
    assert again.tuner.updates == tuner.updates
    if name != "kit":
        with pytest.raises(ValueError, match="another kit"):
            FineTuneSession(load_kit(tiny_kit[0]), FineTuneConfig(algorithm="kit", **SMALL), tmp_path)


# ---- the benchmark's per-method figures ---------------------------------------------------------
def test_bench_sim2real_compares_every_method_and_counts_steps_to_half_the_gap():
    import argparse

    from lowrl_ros.bench.sim2real import _steps_to_half_gap, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args([]).methods == ["kit", "crossq", "rlpd"]
    assert parser.parse_args(["--methods", "rlpd"]).methods == ["rlpd"]
    with pytest.raises(SystemExit):
        parser.parse_args(["--methods", "ppo"])
    # before -1000, sim -200: half the gap is -600, reached by the mean of the last 2 episodes at step 800.
    episodes = [(200, 1, -1000.0), (400, 1, -900.0), (600, 2, -700.0), (800, 2, -450.0), (1000, 2, -300.0)]
    assert _steps_to_half_gap(episodes, -1000.0, -200.0, 2) == 800
    assert _steps_to_half_gap(episodes, -1000.0, -200.0, 5) is None  # the 5-episode mean never gets there
    assert _steps_to_half_gap(episodes, -200.0, -200.0, 1) is None  # no gap


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_crossq_and_rlpd_fine_tune_an_imported_actor(algo, tmp_path, monkeypatch):
    """A kit from an imported artifact (`lowrl kit`): the learners wrap its agent; the actor stays the artifact's."""
    from lowrl_ros.core.finetune.kit import write_kit_from_artifact
    from lowrl_ros.core.runtime.artifact import PolicyContract, save_artifact

    from test_kit_import import PENDULUM, SB3_PPO, mlp

    monkeypatch.setattr(learner_module, "FRESH_CRITIC_WARMUP", 5)
    contract = PolicyContract(**PENDULUM, **SB3_PPO, version=4, provenance={"tool": "lowrl import", "algo": "PPO"})
    path = save_artifact(tmp_path / "ppo.onnx", mlp([3, 32, 32, 1], "tanh", "none", seed=3), contract)
    kit_dir, _ = write_kit_from_artifact(path, tmp_path / "kit", env_id="Pendulum-v1", algo=algo, warmup_steps=100,
                                         critic_updates=5, hidden=32, batch_size=32)
    rng = np.random.default_rng(0)
    for name in ("crossq", "rlpd"):
        cfg = FineTuneConfig(min_transitions=64, batch_size=32, version_every_updates=20, algorithm=name)
        tuner = FineTuner(load_kit(kit_dir), cfg, tmp_path / name, base_path=str(path))
        assert type(tuner.agent).__name__.startswith(name.capitalize() + "Artifact")
        for _ in range(100):
            tuner.add(rng.normal(0, 1, 3), rng.uniform(-2, 2, 1), float(rng.normal(-3, 1)), rng.normal(0, 1, 3),
                      False, False)
        assert tuner.update(30) == 30 and tuner.weights_finite()
        record = tuner.make_version()
        # `lowrl kit --env` keeps its 100 warm-up transitions as the kit's prior data (RLPD's sim data)
        assert record.version == 5 and (name != "rlpd" or "100 prior transitions" in tuner.notes[0])
