"""`lowrl import` on SB3 zips it must refuse, and on broken inputs: one line on stderr, exit 2, no file left.

Every source is made here with real SB3 (DQN, PPO on discrete, Dict, image and 2-D observations,
NaN weights, exact GELU, unbounded actions) except the sb3-contrib ones: sb3-contrib is not installed
here, so a RecurrentPPO zip is a real PPO zip whose recorded policy class is rewritten to the one
RecurrentPPO records (the importer refuses from that record, before anything is loaded).
"""
from __future__ import annotations

import json
import pickle
import zipfile

import gymnasium as gym
import numpy as np
import stable_baselines3 as sb3
import torch
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from lowrl_ros.cli import main as lowrl_main


class SpacesEnv(gym.Env):
    """A do-nothing env with the spaces a test asks for."""

    def __init__(self, obs_space=None, act_space=None):
        self.observation_space = obs_space or gym.spaces.Box(-10, 10, (5,), np.float32)
        self.action_space = act_space or gym.spaces.Box(-1, 1, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def _ppo(env=None, policy="MlpPolicy", **policy_kwargs):
    return sb3.PPO(policy, env or SpacesEnv(), n_steps=64, batch_size=64, device="cpu", seed=0,
                   policy_kwargs=policy_kwargs or None)


def _refused(tmp_path, capsys, source, *extra) -> str:
    """Run `lowrl import`; assert exit 2, one line on stderr, no artifact; return that line."""
    out = tmp_path / "out.onnx"
    rc = lowrl_main(["import", str(source), "-o", str(out), *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1, err
    assert not out.exists()
    return err


def _rewrite_data(src, dst, **changes):
    """Copy an SB3 zip, changing entries of its `data` JSON (how another library's zip would record them)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            raw = zin.read(name)
            if name == "data":
                data = json.loads(raw)
                for key, value in changes.items():
                    data[key] = {**data[key], **value}
                raw = json.dumps(data).encode()
            zout.writestr(name, raw)


def test_discrete_actions_refused(tmp_path, capsys):
    sb3.DQN("MlpPolicy", "CartPole-v1", device="cpu", buffer_size=100).save(tmp_path / "dqn.zip")
    assert "DQN policy (discrete actions)" in _refused(tmp_path, capsys, tmp_path / "dqn.zip")
    sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, device="cpu").save(tmp_path / "ppo_d.zip")
    err = _refused(tmp_path, capsys, tmp_path / "ppo_d.zip")
    assert "with Discrete actions; only continuous Box actions" in err and "ActorCriticPolicy" in err
    _ppo(SpacesEnv(act_space=gym.spaces.MultiDiscrete([3, 3]))).save(tmp_path / "ppo_md.zip")
    assert "with MultiDiscrete actions" in _refused(tmp_path, capsys, tmp_path / "ppo_md.zip")


def test_dict_image_and_2d_observations_refused(tmp_path, capsys):
    box = gym.spaces.Box(-1, 1, (3,))
    dict_env = SpacesEnv(obs_space=gym.spaces.Dict({"a": box, "b": box}))
    _ppo(dict_env, "MultiInputPolicy").save(tmp_path / "dict.zip")
    err = _refused(tmp_path, capsys, tmp_path / "dict.zip")
    assert "with Dict observations" in err and "FlattenObservation" in err
    image_env = SpacesEnv(obs_space=gym.spaces.Box(0, 255, (36, 36, 1), np.uint8))
    _ppo(image_env, "CnnPolicy").save(tmp_path / "cnn.zip")
    assert "a CNN policy (image observations)" in _refused(tmp_path, capsys, tmp_path / "cnn.zip")
    _ppo(SpacesEnv(obs_space=gym.spaces.Box(-1, 1, (3, 4), np.float32))).save(tmp_path / "2d.zip")
    assert "is not a flat (1-D) Box" in _refused(tmp_path, capsys, tmp_path / "2d.zip")


def test_recurrent_and_unknown_algorithms_refused(tmp_path, capsys):
    _ppo().save(tmp_path / "ppo.zip")
    # Test double: what sb3-contrib's RecurrentPPO records (sb3-contrib is not installed here).
    _rewrite_data(tmp_path / "ppo.zip", tmp_path / "lstm.zip", policy_class={
        "__module__": "sb3_contrib.common.recurrent.policies",
        "__init__": "<function RecurrentActorCriticPolicy.__init__ at 0x0>"})
    err = _refused(tmp_path, capsys, tmp_path / "lstm.zip")
    assert "RecurrentActorCriticPolicy" in err and "recurrent (LSTM)" in err and "feed-forward" in err
    _rewrite_data(tmp_path / "ppo.zip", tmp_path / "mine.zip", policy_class={
        "__module__": "my_lab.policies", "__init__": "<function MyPolicy.__init__ at 0x0>"})
    err = _refused(tmp_path, capsys, tmp_path / "mine.zip")
    assert "MyPolicy (my_lab.policies), an unknown policy class; supported: PPO, A2C, SAC, TD3, DDPG" in err


def test_unrepresentable_networks_refused(tmp_path, capsys):
    _ppo(activation_fn=torch.nn.GELU).save(tmp_path / "gelu.zip")  # exact (erf) GELU, not the tanh one
    err = _refused(tmp_path, capsys, tmp_path / "gelu.zip")
    assert "layer GELU(approximate='none') cannot be represented" in err and "GELU(approximate='tanh')" in err
    model = _ppo()
    # SB3 refuses to train with an unbounded Box, but a zip can still record one (set before saving).
    model.action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    model.save(tmp_path / "inf.zip")
    assert "has infinite limits" in _refused(tmp_path, capsys, tmp_path / "inf.zip")


def test_broken_models_give_one_line(tmp_path, capsys):
    model = _ppo()
    model.save(tmp_path / "ppo.zip")
    data = (tmp_path / "ppo.zip").read_bytes()
    (tmp_path / "cut.zip").write_bytes(data[: len(data) // 2])
    # The torch zip inside (policy.pth) survives the cut; the .zip name still sends it to the SB3 importer.
    for extra in ((), ("--from", "sb3")):
        err = _refused(tmp_path, capsys, tmp_path / "cut.zip", *extra)
        assert "cut.zip: not a Stable-Baselines3 model zip" in err and "truncated" in err, err
    with zipfile.ZipFile(tmp_path / "ppo.zip") as zin, zipfile.ZipFile(tmp_path / "bad_pth.zip", "w") as zout:
        for name in zin.namelist():
            zout.writestr(name, b"garbage" if name == "policy.pth" else zin.read(name))
    assert "SB3 could not load this PPO zip" in _refused(tmp_path, capsys, tmp_path / "bad_pth.zip")
    with torch.no_grad():
        model.policy.mlp_extractor.policy_net[0].weight[0, 0] = float("nan")
    model.save(tmp_path / "nan.zip")
    assert "has NaN or Inf weights" in _refused(tmp_path, capsys, tmp_path / "nan.zip")


def test_broken_vecnormalize_gives_one_line(tmp_path, capsys):
    _ppo().save(tmp_path / "ppo.zip")
    with open(tmp_path / "dict.pkl", "wb") as f:
        pickle.dump({"obs_rms": None}, f)
    err = _refused(tmp_path, capsys, tmp_path / "ppo.zip", "--vecnormalize", str(tmp_path / "dict.pkl"))
    assert "holds a builtins.dict, not a VecNormalize" in err
    err = _refused(tmp_path, capsys, tmp_path / "ppo.zip", "--vecnormalize", str(tmp_path / "ppo.zip"))
    assert "not a readable pickle" in err
    err = _refused(tmp_path, capsys, tmp_path / "ppo.zip", "--vecnormalize", str(tmp_path / "missing.pkl"))
    assert "missing.pkl: no such file" in err
    # A real VecNormalize of another environment: Pendulum has 3 observations, the model reads 5.
    venv = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]))
    venv.save(tmp_path / "pendulum_vn.pkl")
    err = _refused(tmp_path, capsys, tmp_path / "ppo.zip", "--vecnormalize", str(tmp_path / "pendulum_vn.pkl"))
    assert "has statistics for 3 observations but the model reads 5" in err


def test_import_succeeds_with_vecnormalize(tmp_path, capsys):
    """The happy path through the CLI, for contrast: notes, the folded statistics, exit 0."""
    venv = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]))
    venv.reset()
    for _ in range(50):
        venv.step(np.zeros((1, 1), np.float32))
    venv.save(tmp_path / "vn.pkl")
    _ppo(venv).save(tmp_path / "ppo.zip")
    rc = lowrl_main(["import", str(tmp_path / "ppo.zip"), "-o", str(tmp_path / "p.onnx"),
                     "--vecnormalize", str(tmp_path / "vn.pkl"), "--env-id", "Pendulum-v1"])
    out = capsys.readouterr().out
    assert rc == 0 and (tmp_path / "p.onnx").is_file()
    assert "VecNormalize vn.pkl folded in" in out and "clip_obs 10" in out and "control period 0.05 s" in out
