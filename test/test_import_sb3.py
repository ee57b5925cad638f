"""`lowrl import-sb3`: SB3 SAC/TD3 actors (random weights, no training) vs their artifacts."""
from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
sb3 = pytest.importorskip("stable_baselines3")

from lowrl_ros.cli import main as lowrl_main  # noqa: E402
from lowrl_ros.core.compress.sb3 import import_sb3  # noqa: E402
from lowrl_ros.core.runtime.artifact import load_weights  # noqa: E402
from lowrl_ros.core.runtime.engines import load_artifact  # noqa: E402


class BoxEnv(gym.Env):
    """A tiny env with asymmetric action limits, so the rescale to [low, high] is really checked."""

    observation_space = gym.spaces.Box(-10, 10, (5,), np.float32)
    action_space = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([1.0, 3.0], np.float32))

    def reset(self, *, seed=None, options=None):
        return np.zeros(5, np.float32), {}

    def step(self, action):
        return np.zeros(5, np.float32), 0.0, False, False, {}


def _model(algo: str, activation="relu", seed=0):
    import torch

    act_fn = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[activation]
    cls = {"sac": sb3.SAC, "td3": sb3.TD3}[algo]
    model = cls("MlpPolicy", BoxEnv(), policy_kwargs=dict(net_arch=[64, 64], activation_fn=act_fn),
                device="cpu", seed=seed)
    # Default init gives near-zero actions; widen the weights so actions span the whole range and saturate.
    with torch.no_grad():
        for p in model.policy.actor.parameters():
            p.mul_(3.0)
    return model


def _obs(n=64):
    return np.random.default_rng(0).uniform(-3, 3, (n, 5)).astype(np.float32)


def _max_err(model, path, engine):
    policy = load_artifact(path, engine=engine)
    obs = _obs()
    want, _ = model.predict(obs, deterministic=True)
    got = np.stack([policy.act(o) for o in obs])
    return np.abs(got - want).max(), got


@pytest.mark.parametrize("algo, activation", [("sac", "relu"), ("td3", "tanh")])
def test_fp32_parity(tmp_path, algo, activation):
    model = _model(algo, activation)
    model.save(tmp_path / "m.zip")
    out = import_sb3(tmp_path / "m.zip", tmp_path / "m.onnx", env_id=None, version=2)
    for engine in ("ort", "numpy"):
        err, got = _max_err(model, out, engine)
        assert err < 1e-4, (engine, err)
    assert got[:, 0].min() < -1.0 and got[:, 1].max() > 2.0  # the actions really span the limits
    _, contract = load_weights(out)
    assert contract.obs_names == tuple(f"obs_{i}" for i in range(5))
    assert contract.action_low == (-2.0, 0.0) and contract.action_high == (1.0, 3.0)
    assert contract.version == 2 and contract.provenance["algo"] == algo


def test_int8_and_sparse_within_budget(tmp_path):
    model = _model("sac")
    model.save(tmp_path / "m.zip")
    span = 3.0  # both actions span 3
    q = import_sb3(tmp_path / "m.zip", tmp_path / "q.onnx", int8=True)
    for engine in ("ort", "numpy"):
        err, _ = _max_err(model, q, engine)
        # Budget: per-channel int8 weights (+ uint8 dynamic activations in ORT) over 3 layers.
        assert err < 0.05 * span, (engine, err)
    s = import_sb3(tmp_path / "m.zip", tmp_path / "s.onnx", int8=True, sparsity=0.5)
    weights, contract = load_weights(s)
    hidden_density = [np.count_nonzero(w) / w.size for w, _ in weights.layers[:-1]]
    assert all(d <= 0.5 for d in hidden_density)
    assert np.count_nonzero(weights.layers[-1][0]) > 0.9 * weights.layers[-1][0].size  # output kept dense
    assert contract.provenance["sparsity"] != "0.000"


def test_cli(tmp_path, capsys):
    model = _model("td3")
    model.save(tmp_path / "m.zip")
    rc = lowrl_main(["import-sb3", str(tmp_path / "m.zip"), "-o", str(tmp_path / "m.onnx"), "--int8",
                     "--version", "4", "--env-id", "Pendulum-v1"])
    assert rc == 0
    assert "wrote" in capsys.readouterr().out
    _, contract = load_weights(tmp_path / "m.onnx")
    assert contract.version == 4 and contract.env_id == "Pendulum-v1"
    assert contract.control_period_s == pytest.approx(0.05)  # Pendulum's dt


def test_cli_rejects_bad_inputs(tmp_path, capsys):
    (tmp_path / "x.zip").write_bytes(b"not a zip")
    assert lowrl_main(["import-sb3", str(tmp_path / "x.zip"), "-o", str(tmp_path / "o.onnx")]) == 2
    assert "not a Stable-Baselines3 model zip" in capsys.readouterr().err
    ppo = sb3.PPO("MlpPolicy", BoxEnv(), device="cpu", n_steps=64, batch_size=64)
    ppo.save(tmp_path / "ppo.zip")
    assert lowrl_main(["import-sb3", str(tmp_path / "ppo.zip"), "-o", str(tmp_path / "o.onnx")]) == 2
    assert "only SAC and TD3" in capsys.readouterr().err
    assert not (tmp_path / "o.onnx").exists()
