"""SB3 import (core/importers/sb3.py): PPO, A2C, SAC, TD3, DDPG actors made here with real SB3 vs their artifacts.

The reference is SB3 itself: ``model.predict(obs, deterministic=True)`` on 1,000 random observations.
Models are built at test time (random weights, widened so the actions reach and pass the limits);
two are trained for a few seconds on Pendulum-v1 for the return check. Nothing is downloaded.
"""
from __future__ import annotations

import functools
import pickle

import gymnasium as gym
import numpy as np
import pytest
import stable_baselines3 as sb3
import torch
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from lowrl_ros.cli import main as lowrl_main
from lowrl_ros.core.importers.registry import ImportOptions, ImportRefused, load_source, write_imported
from lowrl_ros.core.importers.sb3 import detect_algo, import_sb3, load_sb3
from lowrl_ros.core.runtime.artifact import load_weights, reference_action
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.sim.evaluate import evaluate

N_OBS = 1000
FP32_TOL = 1e-5  # of the action range (issue 17 §4)
INT8_TOL = 0.05  # of the action range: the documented int8 budget (docs/runtime.md, docs/import.md)

ACTIVATIONS = {
    "relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "elu": torch.nn.ELU, "leaky_relu": torch.nn.LeakyReLU,
    "silu": torch.nn.SiLU, "gelu_tanh": functools.partial(torch.nn.GELU, approximate="tanh"),
    "softsign": torch.nn.Softsign,
}


class BoxEnv(gym.Env):
    """A tiny env with asymmetric action limits, so the rescale (or clip) to [low, high] is really checked."""

    observation_space = gym.spaces.Box(-10, 10, (5,), np.float32)
    action_space = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([1.0, 3.0], np.float32))

    def reset(self, *, seed=None, options=None):
        return np.zeros(5, np.float32), {}

    def step(self, action):
        return np.zeros(5, np.float32), 0.0, False, False, {}


SPAN = BoxEnv.action_space.high - BoxEnv.action_space.low  # per action


def _model(algo: str, activation: str | None = None, *, env=None, seed: int = 0, widen: tuple | None = (3.0, 400.0),
           policy_kwargs: dict | None = None, **kwargs):
    """An SB3 model on ``env`` (BoxEnv); ``widen`` = (factor of the hidden weights, of PPO/A2C's action_net)."""
    pk = {"net_arch": [64, 64], **(policy_kwargs or {})}
    if activation:
        pk["activation_fn"] = ACTIVATIONS[activation]
    per_algo = {"ppo": {"n_steps": 64, "batch_size": 64}, "a2c": {"n_steps": 8}}.get(algo, {"buffer_size": 1000})
    model = getattr(sb3, algo.upper())("MlpPolicy", env or BoxEnv(), policy_kwargs=pk, device="cpu", seed=seed,
                                       **{**per_algo, **kwargs})
    if widen:
        # SB3's init gives near-zero actions (PPO's action_net has gain 0.01); widen the weights so the
        # actions span the whole range, saturate the tanh, and (PPO/A2C) pass the limits to be clipped.
        hidden, head = widen
        with torch.no_grad():
            if algo in ("ppo", "a2c"):
                for p in model.policy.mlp_extractor.policy_net.parameters():
                    p.mul_(hidden)
                model.policy.action_net.weight.mul_(head)
            else:
                for p in model.policy.actor.parameters():
                    p.mul_(hidden)
    return model


def _obs(n: int = N_OBS, dim: int = 5, scale: float = 3.0) -> np.ndarray:
    return np.random.default_rng(0).uniform(-scale, scale, (n, dim)).astype(np.float32)


def _import(model, tmp_path, name="m", **options):
    model.save(tmp_path / f"{name}.zip")
    return load_sb3(tmp_path / f"{name}.zip", ImportOptions(**options))


CASES = [  # (id, algo, activation, extra constructor kwargs)
    ("ppo", "ppo", None, {}),  # SB3's default for PPO: Tanh
    ("ppo-relu-separate-pi-vf", "ppo", "relu",
     {"policy_kwargs": {"net_arch": {"pi": [64, 64], "vf": [16]}, "share_features_extractor": False}}),
    ("a2c-elu", "a2c", "elu", {}),
    ("sac", "sac", None, {}),  # SB3's default for SAC: ReLU
    ("sac-silu", "sac", "silu", {}),
    ("td3-tanh", "td3", "tanh", {}),
    ("td3-gelu_tanh", "td3", "gelu_tanh", {}),
    ("ddpg-softsign", "ddpg", "softsign", {}),
    ("a2c-leaky_relu-gsde-squash", "a2c", "leaky_relu", {"use_sde": True, "policy_kwargs": {"squash_output": True}}),
    ("sac-gsde", "sac", "relu", {"use_sde": True}),  # Hardtanh(±clip_mean) before tanh: narrowed limits
]


@pytest.mark.parametrize("algo, activation, kwargs", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_fp32_parity_with_predict(tmp_path, algo, activation, kwargs):
    model = _model(algo, activation, **kwargs)
    imported = _import(model, tmp_path)
    w = imported.weights
    assert imported.kind == "sb3" and imported.contract.provenance["algo"] == algo
    assert w.hidden_activation == (activation or {"ppo": "tanh", "a2c": "tanh"}.get(algo, "relu"))
    assert [wb[0].shape[0] for wb in w.layers] == [64, 64, 2]  # net_arch read from the model
    squashed = algo in ("sac", "td3", "ddpg") or kwargs.get("policy_kwargs", {}).get("squash_output")
    assert w.output_activation == ("tanh" if squashed else "none")

    obs = _obs()
    want, _ = model.predict(obs, deterministic=True)
    got = reference_action(w, imported.contract, obs)
    assert np.abs(got - want).max() <= FP32_TOL * SPAN.min(), np.abs(got - want).max()
    # The actions really cover the limits: near both ends, and for PPO/A2C clipped exactly at them.
    assert got[:, 0].min() < -1.5 and got[:, 1].max() > 2.5
    if not squashed:
        assert (got == BoxEnv.action_space.low).any(0).all() and (got == BoxEnv.action_space.high).any(0).all()

    out = write_imported(imported, tmp_path / "m.onnx")
    for engine in ("ort", "numpy"):
        policy = load_artifact(out, engine=engine)
        acts = np.stack([policy.act(o) for o in obs])
        assert np.abs(acts - want).max() <= FP32_TOL * SPAN.min(), (engine, np.abs(acts - want).max())


@pytest.mark.parametrize("algo, activation", [("ppo", None), ("a2c", "elu"), ("sac", None), ("td3", "tanh"),
                                              ("ddpg", "relu")])
def test_int8_within_budget(tmp_path, algo, activation):
    # Widened less than above: actions still span the limits, but the hidden layers are not driven deep
    # into saturation by weights 27x their init (where int8's relative error is amplified; measured there:
    # up to 15 % of the range for A2C/ELU, whose output spans 10x the action range before the clip).
    model = _model(algo, activation, widen=(2.0, 100.0))
    imported = _import(model, tmp_path)
    obs = _obs()
    want, _ = model.predict(obs, deterministic=True)
    out = write_imported(imported, tmp_path / "q.onnx", int8=True)
    weights, contract = load_weights(out)  # the int8 weights as stored, dequantised
    err = np.abs(reference_action(weights, contract, obs) - want).max(axis=0) / SPAN
    assert err.max() < INT8_TOL, err
    assert err.max() > 0  # int8 really changed something (the test can fail)
    for engine in ("ort", "numpy"):
        policy = load_artifact(out, engine=engine)
        err = np.abs(np.stack([policy.act(o) for o in obs]) - want).max(axis=0) / SPAN
        assert err.max() < INT8_TOL, (engine, err)


def _pendulum_vecnormalize(tmp_path, *, norm_obs=True, steps=400):
    """A real VecNormalize on Pendulum-v1 with statistics collected from random actions, saved as a user does."""
    venv = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]), norm_obs=norm_obs, clip_obs=5.0)
    venv.seed(0)
    venv.reset()
    rng = np.random.default_rng(0)
    for _ in range(steps):
        venv.step(rng.uniform(-2, 2, (1, 1)).astype(np.float32))
    venv.save(tmp_path / "vecnormalize.pkl")
    return venv


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_vecnormalize_folded_in(tmp_path, algo):
    venv = _pendulum_vecnormalize(tmp_path)
    model = _model(algo, env=venv)
    imported = _import(model, tmp_path, vecnormalize=tmp_path / "vecnormalize.pkl", env_id="Pendulum-v1")
    c = imported.contract
    assert c.obs_offset == pytest.approx(tuple(venv.obs_rms.mean))
    assert c.obs_scale == pytest.approx(tuple(1 / np.sqrt(venv.obs_rms.var + venv.epsilon)))
    assert c.obs_clip == 5.0 and c.provenance["vecnormalize"] == "vecnormalize.pkl"
    assert any("VecNormalize vecnormalize.pkl folded in" in n for n in imported.notes)
    # Raw observations well beyond the statistics, so the clip at ±clip_obs is exercised.
    obs = _obs(dim=3, scale=40.0)
    venv.training = False
    normalised = venv.normalize_obs(obs)
    assert (np.abs(normalised) == 5.0).any()
    want, _ = model.predict(normalised, deterministic=True)
    got = reference_action(imported.weights, c, obs)
    assert np.abs(got - want).max() <= FP32_TOL * 4.0, np.abs(got - want).max()  # Pendulum's range is 4
    out = write_imported(imported, tmp_path / "m.onnx")
    for engine in ("ort", "numpy"):
        policy = load_artifact(out, engine=engine)
        acts = np.stack([policy.act(o) for o in obs])
        assert np.abs(acts - want).max() <= FP32_TOL * 4.0, (engine, np.abs(acts - want).max())


def test_vecnormalize_without_norm_obs_folds_nothing(tmp_path):
    venv = _pendulum_vecnormalize(tmp_path, norm_obs=False, steps=20)
    imported = _import(_model("ppo", env=venv), tmp_path, vecnormalize=tmp_path / "vecnormalize.pkl")
    assert imported.contract.obs_clip is None and not imported.contract.uses_v2
    assert imported.contract.obs_offset == (0.0,) * 3 and imported.contract.obs_scale == (1.0,) * 3
    assert any("norm_obs=False" in n and "nothing folded" in n for n in imported.notes)


def test_control_period_and_contract(tmp_path):
    model = _model("td3", widen=None)
    assert _import(model, tmp_path).contract.control_period_s == 0.02
    assert _import(model, tmp_path, env_id="Pendulum-v1").contract.control_period_s == pytest.approx(0.05)
    c = _import(model, tmp_path, env_id="Pendulum-v1", control_period_s=0.01, version=3, tier="lite").contract
    assert c.control_period_s == 0.01 and c.version == 3 and c.tier == "lite" and c.env_id == "Pendulum-v1"
    assert c.obs_names == tuple(f"obs_{i}" for i in range(5)) and c.action_names == ("action_0", "action_1")
    assert c.action_low == (-2.0, 0.0) and c.action_high == (1.0, 3.0)
    assert c.provenance["source"] == "m.zip" and len(c.provenance["source_sha256"]) == 64


def test_detect_algo_from_the_zip(tmp_path):
    for algo in ("ppo", "a2c", "sac", "td3", "ddpg"):
        _model(algo, widen=None).save(tmp_path / f"{algo}.zip")
        assert detect_algo(tmp_path / f"{algo}.zip") == algo
        assert load_source(tmp_path / f"{algo}.zip", None, ImportOptions()).contract.provenance["algo"] == algo


@pytest.mark.parametrize("algo", ["ppo", "ppo-vecnormalize", "sac"])
def test_trained_on_pendulum_int8_return_within_3_percent(tmp_path, algo):
    """Train for seconds (the policy need not be good), deploy as int8, compare returns on the same seeds."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # at batch 64 a second thread only adds contention on a shared 2-core machine
    venv = None
    try:
        if algo.startswith("ppo"):
            if algo == "ppo-vecnormalize":  # as rl-zoo trains PPO on Pendulum: VecNormalize (obs and reward)
                venv = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]))
            model = sb3.PPO("MlpPolicy", venv or "Pendulum-v1", n_steps=256, batch_size=64, n_epochs=4, device="cpu",
                            seed=0, policy_kwargs={"net_arch": [64, 64]})
            model.learn(1024)
        else:
            model = sb3.SAC("MlpPolicy", "Pendulum-v1", learning_starts=100, buffer_size=2000, batch_size=64,
                            train_freq=8, device="cpu", seed=0, policy_kwargs={"net_arch": [64, 64]})
            model.learn(800)
    finally:
        torch.set_num_threads(threads)
    model.save(tmp_path / "m.zip")
    options, normalise = ImportOptions(env_id="Pendulum-v1"), (lambda o: o)
    if venv is not None:
        venv.save(tmp_path / "vecnormalize.pkl")
        venv.training = False
        options = ImportOptions(env_id="Pendulum-v1", vecnormalize=tmp_path / "vecnormalize.pkl")
        normalise = venv.normalize_obs
    imported = load_sb3(tmp_path / "m.zip", options)
    assert (imported.contract.obs_clip == 10.0) == (venv is not None)
    policy = load_artifact(write_imported(imported, tmp_path / "q.onnx", int8=True))
    ours = evaluate(policy.act, "Pendulum-v1", episodes=4, seed=123)
    theirs = evaluate(lambda o: model.predict(normalise(o), deterministic=True)[0], "Pendulum-v1", episodes=4,
                      seed=123)
    assert abs(ours.mean - theirs.mean) <= 0.03 * abs(theirs.mean), (ours, theirs)


# --- the older API: import_sb3() and `lowrl import-sb3` ---------------------------------------------

def test_import_sb3_function_keeps_working(tmp_path):
    model = _model("sac")
    model.save(tmp_path / "m.zip")
    out = import_sb3(tmp_path / "m.zip", tmp_path / "m.onnx", env_id=None, version=2)
    obs = _obs(64)
    want, _ = model.predict(obs, deterministic=True)
    for engine in ("ort", "numpy"):
        policy = load_artifact(out, engine=engine)
        assert np.abs(np.stack([policy.act(o) for o in obs]) - want).max() < 1e-4, engine
    _, contract = load_weights(out)
    assert contract.version == 2 and contract.provenance["algo"] == "sac"
    s = import_sb3(tmp_path / "m.zip", tmp_path / "s.onnx", int8=True, sparsity=0.5)
    weights, contract = load_weights(s)
    assert all(np.count_nonzero(w) / w.size <= 0.5 for w, _ in weights.layers[:-1])
    assert np.count_nonzero(weights.layers[-1][0]) > 0.9 * weights.layers[-1][0].size  # output kept dense
    assert contract.provenance["sparsity"] != "0.000" and contract.provenance["int8"] == "true"
    with pytest.raises(ImportRefused, match="is a SAC model, not TD3"):
        import_sb3(tmp_path / "m.zip", tmp_path / "x.onnx", algo="td3")


def test_import_sb3_cli_alias(tmp_path, capsys):
    _model("ppo").save(tmp_path / "m.zip")
    rc = lowrl_main(["import-sb3", str(tmp_path / "m.zip"), "-o", str(tmp_path / "m.onnx"), "--int8",
                     "--version", "4", "--env-id", "Pendulum-v1"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "wrote" in out and "PPO: the Gaussian mean, clipped" in out
    _, contract = load_weights(tmp_path / "m.onnx")
    assert contract.version == 4 and contract.env_id == "Pendulum-v1"
    assert contract.control_period_s == pytest.approx(0.05)  # Pendulum's dt
    assert lowrl_main(["import-sb3", str(tmp_path / "m.zip"), "-o", str(tmp_path / "n.onnx"), "--algo", "sac"]) == 2
    assert "is a PPO model, not SAC" in capsys.readouterr().err
    assert not (tmp_path / "n.onnx").exists()


def test_import_sb3_cli_rejects_bad_inputs(tmp_path, capsys):
    (tmp_path / "x.zip").write_bytes(b"not a zip")
    assert lowrl_main(["import-sb3", str(tmp_path / "x.zip"), "-o", str(tmp_path / "o.onnx")]) == 2
    assert "not a Stable-Baselines3 model zip" in capsys.readouterr().err
    dqn = sb3.DQN("MlpPolicy", "CartPole-v1", device="cpu", buffer_size=100)
    dqn.save(tmp_path / "dqn.zip")
    assert lowrl_main(["import-sb3", str(tmp_path / "dqn.zip"), "-o", str(tmp_path / "o.onnx")]) == 2
    assert "DQN policy (discrete actions)" in capsys.readouterr().err
    assert not (tmp_path / "o.onnx").exists()


def test_vecnormalize_pickle_is_read_as_a_user_saved_it(tmp_path):
    """The pickle is what VecNormalize.save() writes (the wrapper without its env), nothing hand-made."""
    venv = _pendulum_vecnormalize(tmp_path, steps=10)
    with open(tmp_path / "vecnormalize.pkl", "rb") as f:
        loaded = pickle.load(f)
    assert isinstance(loaded, VecNormalize) and np.array_equal(loaded.obs_rms.mean, venv.obs_rms.mean)


def test_a_ppo_zip_is_a_distillation_teacher(tmp_path):
    """`lowrl distill --teacher ppo.zip` reads the same actor (and only the actor's bytes count as its size)."""
    from lowrl_ros.core.compress.teacher import load_teacher

    model = _model("ppo")
    model.save(tmp_path / "ppo.zip")
    teacher = load_teacher(tmp_path / "ppo.zip")
    assert teacher.kind == "sb3" and teacher.weights.output_activation == "none"
    obs = _obs(200)
    want, _ = model.predict(obs, deterministic=True)
    assert np.abs(teacher.actions(obs) - want).max() <= FP32_TOL * SPAN.min()
    whole = sum(p.numel() for p in model.policy.parameters()) * 4
    assert teacher.state_dict_bytes < 0.8 * whole  # the critic is not part of the teacher
