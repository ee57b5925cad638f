"""The retraining's critic and exploration std from the policy's own training checkpoint (core/retrain/source.py).

The critics are real: an rsl_rl PPO run on Pendulum-v1 (rsl-rl-lib 5.5.1, its empirical normaliser on; a few
seconds, test/rsl_vecenv.py) and an SB3 PPO trained on Pendulum-v1 under VecNormalize. Each critic, as the
retraining builds it (core/train/ppo.py ``Critic.from_weights``), must give the library's own state values.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml
from rsl_vecenv import train_pendulum
from tensordict import TensorDict

from lowrl_ros.core.importers.registry import ImportOptions, load_source
from lowrl_ros.core.retrain.retrain import RetrainRefused, RetrainSettings, retrain
from lowrl_ros.core.retrain.source import SourceRefused, load_source_critic
from lowrl_ros.core.runtime.artifact import parse_artifact, read_artifact_bytes
from lowrl_ros.core.sim.robot_sim import load_gap_file
from lowrl_ros.core.train.ppo import Critic
from test_retrain import GAP, QUAD, TINY, rsl_rl_artifact

PENDULUM_SIDECAR = {"observations": ["cos_theta", "sin_theta", "theta_dot"],
                    "actions": {"names": ["torque"], "low": -2.0, "high": 2.0}, "control_period_s": 0.05}


def pendulum_obs(n: int = 500, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    th = rng.uniform(-np.pi, np.pi, n)
    return np.stack([np.cos(th), np.sin(th), rng.uniform(-8, 8, n)], axis=1).astype(np.float32)


def critic_values(path, contract, output_activation="none") -> tuple[np.ndarray, object]:
    src = load_source_critic(path, contract, output_activation)
    critic = Critic.from_weights(src.weights, src.norm_a, src.norm_b, src.norm_clip)
    with torch.no_grad():
        return critic(torch.from_numpy(pendulum_obs())).numpy().astype(np.float64), src


def test_rsl_rl_critic_gives_rsl_rls_own_values_and_std(tmp_path):
    runner, ckpt = train_pendulum(tmp_path / "pendulum", iterations=3)
    side = tmp_path / "side.yaml"
    side.write_text(yaml.safe_dump(PENDULUM_SIDECAR))
    imported = load_source(ckpt, "rsl_rl", ImportOptions(sidecar=side))
    got, src = critic_values(ckpt, imported.contract)
    with torch.no_grad():
        td = TensorDict({"policy": torch.from_numpy(pendulum_obs())}, batch_size=[500])
        want = runner.alg.critic(td).numpy().reshape(-1).astype(np.float64)
    assert np.abs(got - want).max() <= 1e-4 * max(1.0, np.abs(want).max())
    assert not np.allclose(src.norm_a, 1.0)  # the critic's own normaliser, not the identity
    scale, _ = imported.contract.action_transform("none")
    rsl_std = runner.alg.actor.distribution.std_param.detach().numpy()  # GaussianDistribution's std
    np.testing.assert_allclose(src.action_std, np.abs(rsl_std) * np.abs(scale), rtol=1e-6)
    assert src.kind == "rsl_rl" and "rsl_rl critic" in src.describe()


def test_sb3_critic_gives_sb3s_own_values_under_vecnormalize(tmp_path):
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    env = VecNormalize(make_vec_env("Pendulum-v1", n_envs=2, seed=0), norm_obs=True, norm_reward=True)
    model = PPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=1, seed=0, device="cpu",
                policy_kwargs=dict(net_arch=dict(pi=[16], vf=[24, 24]), log_std_init=-0.5))
    model.learn(512)
    model.save(tmp_path / "ppo.zip")
    env.save(str(tmp_path / "vecnormalize.pkl"))
    imported = load_source(tmp_path / "ppo.zip", "sb3", ImportOptions(vecnormalize=tmp_path / "vecnormalize.pkl"))
    got, src = critic_values(tmp_path / "ppo.zip", imported.contract)
    with torch.no_grad():
        normed = env.normalize_obs(pendulum_obs())
        want = model.policy.predict_values(torch.from_numpy(np.asarray(normed, np.float32))).numpy().reshape(-1)
    assert np.abs(got - want).max() <= 1e-4 * max(1.0, np.abs(want).max())
    np.testing.assert_allclose(src.action_std, model.policy.log_std.exp().detach().numpy(), rtol=1e-6)
    assert [w.shape for w, _ in src.weights.layers] == [(24, 3), (24, 24), (1, 24)]


def test_refusals_name_the_problem(tmp_path):
    from stable_baselines3 import SAC

    base = rsl_rl_artifact(tmp_path / "quad")
    contract = parse_artifact(read_artifact_bytes(base), str(base)).contract
    with pytest.raises(SourceRefused, match="no such file"):
        load_source_critic(tmp_path / "missing.pt", contract, "none")
    (tmp_path / "x.npz").write_bytes(b"0")
    with pytest.raises(SourceRefused, match="not an SB3 .zip or an rsl_rl .pt"):
        load_source_critic(tmp_path / "x.npz", contract, "none")
    # a critic on more observations than the policy (privileged): refused, its inputs are not on the robot's log
    n = contract.obs_dim
    priv = {"actor_state_dict": {"distribution.std_param": torch.ones(contract.action_dim)},
            "critic_state_dict": {"mlp.0.weight": torch.zeros(8, n + 5), "mlp.0.bias": torch.zeros(8),
                                  "mlp.2.weight": torch.zeros(1, 8), "mlp.2.bias": torch.zeros(1)}}
    torch.save(priv, tmp_path / "priv.pt")
    with pytest.raises(SourceRefused, match=f"reads {n + 5} observations .* privileged"):
        load_source_critic(tmp_path / "priv.pt", contract, "none")
    sac = SAC("MlpPolicy", "Pendulum-v1", device="cpu", seed=0, policy_kwargs=dict(net_arch=[8]))
    sac.save(tmp_path / "sac.zip")
    with pytest.raises(SourceRefused, match="only PPO and A2C"):
        load_source_critic(tmp_path / "sac.zip", contract, "none")


def test_retraining_starts_from_the_source_critic(tmp_path):
    """A tiny run from an rsl_rl checkpoint holding the actor and its critic: released; a wrong one refused."""
    base = rsl_rl_artifact(tmp_path / "quad")
    ckpt = torch.load(tmp_path / "quad" / "model_0.pt", weights_only=True)
    n = parse_artifact(read_artifact_bytes(base), str(base)).contract.obs_dim
    g = torch.Generator().manual_seed(3)
    ckpt["critic_state_dict"] = {"mlp.0.weight": 0.1 * torch.randn(16, n, generator=g), "mlp.0.bias": torch.zeros(16),
                                 "mlp.2.weight": 0.1 * torch.randn(1, 16, generator=g), "mlp.2.bias": torch.zeros(1)}
    torch.save(ckpt, tmp_path / "quad" / "model_0.pt")
    settings = RetrainSettings(**TINY, source_checkpoint=str(tmp_path / "quad" / "model_0.pt"), return_fraction=0.01)
    result = retrain(base, QUAD, load_gap_file(GAP), {}, settings, tmp_path / "v2.onnx", 2)
    assert result.ok, result.reason
    assert parse_artifact(read_artifact_bytes(tmp_path / "v2.onnx"), "v2").contract.version == 2
    bad = RetrainSettings(**TINY, source_checkpoint=str(tmp_path / "nothing.zip"))
    with pytest.raises(RetrainRefused, match="no such file"):
        retrain(base, QUAD, load_gap_file(GAP), {}, bad, tmp_path / "v3.onnx", 2)
    assert not (tmp_path / "v3.onnx").exists()
