"""The residual learner (FineTuneConfig.algorithm = residual, core/finetune/residual.py): the base artifact stays
frozen, a zero-initialised head learns a bounded correction after a critic-only phase; versions, rollback and
resume go through FineTuner unchanged. No ROS; no learning claims."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from lowrl_ros.core.finetune.config import FineTuneConfig
from lowrl_ros.core.finetune.kit import load_kit, norm_obs, write_kit_from_artifact
from lowrl_ros.core.finetune.learner import FineTuner
from lowrl_ros.core.finetune.residual import ResidualActor, residual_bound
from lowrl_ros.core.runtime.artifact import (PolicyContract, load_weights, parse_artifact, read_artifact_bytes,
                                             reference_action, save_artifact)

from test_kit_import import ISAAC, PENDULUM, mlp
from test_learners import _one_thread  # noqa: F401  (autouse: one torch thread, as the fine-tuner runs)

CFG = dict(algorithm="residual", min_transitions=64, batch_size=32, version_every_updates=20, eval_episodes=1,
           rollback_margin=10.0, residual_critic_updates=10, judge_baseline=False)


@pytest.fixture(scope="module")
def base_kit(tmp_path_factory):
    """An rsl_rl-style int8 base artifact (action scale and offset, elu) and its kit (`lowrl kit --env`, prior data)."""
    d = tmp_path_factory.mktemp("residual")
    contract = PolicyContract(**PENDULUM, **ISAAC, version=4, provenance={"tool": "lowrl import"})
    path = save_artifact(d / "base.onnx", mlp([3, 32, 32, 1], "elu", "none", seed=3), contract, int8=True)
    kit_dir, _ = write_kit_from_artifact(path, d / "kit", env_id="Pendulum-v1", warmup_steps=100, critic_updates=5,
                                         hidden=32, batch_size=32)
    return path, kit_dir


def _tuner(base_kit, out, **kw) -> FineTuner:
    path, kit_dir = base_kit
    return FineTuner(load_kit(kit_dir), FineTuneConfig(**{**CFG, **kw}), out, base_path=str(path))


def _fill(tuner: FineTuner, n: int = 100, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(n):
        tuner.add(rng.normal(0, 1, 3), rng.uniform(-2, 2, 1), float(rng.normal(-3, 1)), rng.normal(0, 1, 3),
                  False, False)


def _head(tuner: FineTuner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in tuner.agent.actor.parameters()]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_the_first_version_acts_exactly_like_the_base(base_kit, tmp_path):
    path, _ = base_kit
    tuner = _tuner(base_kit, tmp_path)
    base, contract = load_weights(path)  # the int8 weights dequantised: what the robot runs
    obs = np.random.default_rng(1).normal(0.0, 3.0, (500, 3))
    want = reference_action(base, contract, obs)
    assert np.abs(want).max() == pytest.approx(2.0)  # the clip is exercised
    with torch.no_grad():
        got = tuner.agent.actor(torch.as_tensor(norm_obs(contract, obs), dtype=torch.float32)).numpy()
    half, mid = 2.0, 0.0
    assert np.max(np.abs(got * half + mid - want)) < 1e-5
    record = tuner.make_version()
    assert record.version == 5
    # the artifact the robot runs: base + a zero head, the base's actions exactly
    from lowrl_ros.core.runtime.engines import load_artifact

    policy = load_artifact(record.path, engine="numpy")
    base_policy = load_artifact(path, engine="numpy")
    assert np.array_equal(np.stack([policy.act(o) for o in obs[:50]]),
                          np.stack([base_policy.act(o) for o in obs[:50]]))


def test_the_base_stays_frozen_and_only_the_head_learns(base_kit, tmp_path):
    tuner = _tuner(base_kit, tmp_path, residual_critic_updates=0)
    actor = tuner.agent.actor
    base = {k: v.clone() for k, v in actor.named_buffers() if k.startswith("base_")}
    assert {n for n, _ in actor.named_parameters()} == {"net.weights.0", "net.weights.1", "net.weights.2",
                                                          "net.biases.0", "net.biases.1", "net.biases.2"}
    assert tuner.agent.actor_masker is None and tuner.agent.critic_masker is None
    assert tuner.agent.critic.net.layer_norm  # the LayerNorm twin critics (crossq.LayerNormCritic)
    before = _head(tuner)
    _fill(tuner)
    assert tuner.update(40) == 40 and tuner.weights_finite()
    assert not _same(before, _head(tuner))
    assert all(torch.equal(v, base[k]) for k, v in actor.named_buffers() if k in base)
    # A learner state holds the head and the critics, never the base's weights.
    assert not any(k.startswith("base_") for k in tuner._snapshot()["actor"])


def test_the_correction_never_exceeds_its_bound(base_kit, tmp_path):
    path, kit_dir = base_kit
    kit = load_kit(kit_dir)
    bound = residual_bound(kit.contract, "none", 0.2)
    assert np.allclose(bound, 0.2 * 2.0 / 0.5)  # a fifth of the half range (2 N m), in y units (scale 0.5)
    actor = ResidualActor(load_weights(path)[0], kit.contract, 16, 0.2)
    with torch.no_grad():
        for w, b in zip(actor.net.weights, actor.net.biases):
            w.normal_(0.0, 30.0)
            b.normal_(0.0, 30.0)
        x = torch.as_tensor(np.random.default_rng(2).normal(0, 5, (2000, 3)), dtype=torch.float32)
        d = actor.residual(x)
        assert d.abs().max() > 0.99 * bound.max()  # the large head saturates it
        assert bool((d.abs() <= actor.bound + 1e-6).all())
        a, d2 = actor.act_and_residual(x)
        shift = (a - (actor.norm_bias + actor.norm_gain * actor.base_output(x)).clamp(-1.0, 1.0)).abs()
        assert torch.equal(d, d2) and bool((shift <= actor.norm_gain.abs() * actor.bound + 1e-5).all())


def test_the_head_waits_exactly_for_the_critic_only_phase(base_kit, tmp_path):
    tuner = _tuner(base_kit, tmp_path, residual_critic_updates=12, critic_warmup_updates=0)
    assert tuner.critic_warmup == 12
    _fill(tuner)
    head, critic = _head(tuner), [p.detach().clone() for p in tuner.agent.critic.parameters()]
    assert tuner.update(12) == 12
    assert _same(head, _head(tuner))  # twelve updates: the critics moved, the head did not
    assert not _same(critic, [p.detach().clone() for p in tuner.agent.critic.parameters()])
    tuner.update(tuner.agent.cfg.policy_delay)  # the delayed actor's first step after the phase
    assert not _same(head, _head(tuner))
    # Versions count from the phase's end.
    assert not tuner.version_due()


def test_rollback_restores_the_head_and_resume_brings_it_back(base_kit, tmp_path):
    tuner = _tuner(base_kit, tmp_path, residual_critic_updates=0)
    zero = _head(tuner)
    tuner.on_episode(4, -100.0)  # the base is judged
    _fill(tuner)
    tuner.update(30)
    v5 = tuner.make_version()
    learned = _head(tuner)
    assert not _same(zero, learned)
    tuner.update(10)
    decision = tuner.on_episode(v5.version, -1000.0)  # far below the base: rolled back to v4
    assert decision.action == "rollback" and decision.target.version == 4
    assert _same(zero, _head(tuner))
    tuner.update(10)
    tuner.save()
    now, updates = _head(tuner), tuner.updates
    again = _tuner(base_kit, tmp_path, residual_critic_updates=0)
    assert again.updates == updates and _same(now, _head(again))
    with pytest.raises(ValueError, match="another kit"):  # another head width: its own work_dir
        _tuner(base_kit, tmp_path, residual_hidden=32)


def test_the_replay_says_which_data_seeded_it(base_kit, tmp_path):
    seeded = _tuner(base_kit, tmp_path / "a", residual_prior=True)
    assert seeded.prior is not None and len(seeded.prior) == 100
    assert seeded.notes == ["residual: replay seeded with 100 prior transitions, half of every batch (the kit's "
                            "training-simulator transitions, prior.npz; all the kit has, or what fits in 25% of "
                            "memory_cap_mb)"]
    alone = _tuner(base_kit, tmp_path / "b")  # the default: robot data only
    assert alone.prior is None and alone.notes == ["residual: replay seeded with none: robot data only "
                                                   "(residual_prior false)"]


def test_a_residual_base_part_and_a_missing_base_are_handled(base_kit, tmp_path):
    path, kit_dir = base_kit
    with pytest.raises(ValueError, match="base_policy_path"):
        FineTuner(load_kit(kit_dir), FineTuneConfig(**CFG), tmp_path)
    other = PolicyContract(**{**PENDULUM, "action_high": (3.0,)}, **ISAAC)
    wrong = save_artifact(tmp_path / "other.onnx", mlp([3, 8, 1], "elu", "none"), other)
    with pytest.raises(ValueError, match="the kit was made from"):
        FineTuner(load_kit(kit_dir), FineTuneConfig(**CFG), tmp_path / "w", base_path=str(wrong))
    assert parse_artifact(read_artifact_bytes(path), str(path)).contract.same_io(load_kit(kit_dir).contract)


@pytest.mark.parametrize("field,value", [("residual_scale", 0.0), ("residual_scale", 1.5),
                                         ("residual_scale", float("nan")), ("residual_hidden", 0),
                                         ("residual_anchor", -1.0), ("residual_critic_updates", -1)])
def test_residual_settings_are_validated_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"FineTuneConfig: {field}="):
        FineTuneConfig(algorithm="residual", **{field: value})


def test_a_lowrl_train_kit_works_too(tiny_kit, tmp_path):
    """Our own SAC kit: the base is its int8 artifact (tanh output); the yardstick stays the kit's actor and critic."""
    kit_dir, int8 = tiny_kit
    kit = load_kit(kit_dir)
    tuner = FineTuner(kit, FineTuneConfig(**{**CFG, "residual_critic_updates": 0}), tmp_path, base_path=str(int8))
    base, contract = load_weights(int8)
    obs = np.random.default_rng(3).normal(0.0, 2.0, (200, kit.obs_dim))
    with torch.no_grad():
        got = tuner.agent.actor(torch.as_tensor(norm_obs(contract, obs), dtype=torch.float32)).numpy()
    low, high = np.asarray(contract.action_low), np.asarray(contract.action_high)
    assert np.max(np.abs(low + (got + 1.0) * (high - low) / 2.0 - reference_action(base, contract, obs))) < 1e-5
    _fill(tuner)
    assert tuner.update(10) == 10 and tuner.weights_finite()
    assert np.isfinite(tuner.start_value(obs[0]))


def test_residual_critic_kit_starts_from_the_kits_critics_and_the_base_actor_stays_the_base(base_kit, tmp_path):
    path, kit_dir = base_kit
    kit = load_kit(kit_dir)
    tuner = _tuner(base_kit, tmp_path / "kit", residual_critic="kit")
    assert not tuner.fresh_critic
    for name in ("critic", "critic_target"):  # loaded as the kit wrote them (no LayerNorm: the kit's shapes)
        got = getattr(tuner.agent, name).state_dict()
        assert got.keys() == kit.agent_state[name].keys()
        assert all(torch.equal(got[k], kit.agent_state[name][k]) for k in got)
    fresh = _tuner(base_kit, tmp_path / "fresh")
    assert fresh.fresh_critic and not torch.equal(fresh.agent.critic.state_dict()["net.weights.0"],
                                                  kit.agent_state["critic"]["net.weights.0"])
    assert fresh.agent.critic.net.layer_norm and not tuner.agent.critic.net.layer_norm
    assert _same(_head(tuner), _head(fresh))  # the same zero-output head on the same base either way
    with pytest.raises(ValueError, match="residual_critic"):
        FineTuneConfig(algorithm="residual", residual_critic="sim")


def test_a_real_rsl_rl_policy_imported_and_kitted_as_a_user_does_gets_residual_versions(tmp_path):
    """rsl_rl PPO (rsl-rl-lib, a few seconds on Pendulum-v1) -> `lowrl import --int8` -> `lowrl kit --env` ->
    residual versions from gapped-robot steps: each is the imported artifact's base bit for bit plus a head."""
    from rsl_vecenv import train_pendulum
    from test_import_rsl_rl import PENDULUM_SIDECAR, sidecar

    from lowrl_ros.cli import main as lowrl_main
    from lowrl_ros.core.runtime.engines import load_artifact
    from lowrl_ros.core.sim.reality_gap import RealityGapConfig, make_gapped_env

    _, ckpt = train_pendulum(tmp_path / "rsl", iterations=4)
    base = tmp_path / "rsl.onnx"
    assert lowrl_main(["import", str(ckpt), "--sidecar", str(sidecar(tmp_path, PENDULUM_SIDECAR)), "--int8",
                       "--env-id", "Pendulum-v1", "-o", str(base)]) == 0
    assert lowrl_main(["kit", str(base), "-o", str(tmp_path / "kit"), "--env", "Pendulum-v1", "--warmup-steps",
                       "300", "--critic-updates", "20", "--hidden", "32"]) == 0
    tuner = FineTuner(load_kit(tmp_path / "kit"), FineTuneConfig(**{**CFG, "min_transitions": 100}),
                      tmp_path / "ft", base_path=str(base))
    env = make_gapped_env("Pendulum-v1", RealityGapConfig(mass_scale=1.3, actuator_gain=0.8))
    policy, obs = load_artifact(base, engine="numpy"), env.reset(seed=0)[0]
    rng = np.random.default_rng(0)
    for _ in range(300):  # the robot's steps, with the policy node's exploration noise
        action = np.clip(policy.act(obs) + rng.normal(0.0, 0.2, 1), -2.0, 2.0)
        nxt, reward, term, trunc, _ = env.step(action.astype(np.float32))
        tuner.add(obs, action, float(reward), nxt, term, trunc)
        tuner.update(1)
        obs = env.reset()[0] if term or trunc else nxt
    record = tuner.make_version()
    imported, version = parse_artifact(read_artifact_bytes(base), "base"), parse_artifact(
        read_artifact_bytes(record.path), "v")
    assert version.residual is not None and version.contract.same_io(imported.contract)
    assert all(np.array_equal(a.weight_t if a.storage == "dense" else a.values,
                              b.weight_t if b.storage == "dense" else b.values)
               for a, b in zip(imported.layers, version.layers))  # the base, bit for bit
    assert np.isfinite(load_artifact(record.path, engine="ort").act(obs)).all()
