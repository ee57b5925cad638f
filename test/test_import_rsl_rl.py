"""`lowrl import` of rsl_rl (rsl-rl-lib 5.5.1) checkpoints and rsl_rl's own ONNX/JIT exports.

A real rsl_rl PPO run on Pendulum-v1 (a few seconds, through test/rsl_vecenv.py) gives the
checkpoint; the imported contract is compared with rsl_rl's own inference policy on 1,000
observations, and the deployed int8 artifact's return with rsl_rl's over the same seeded episodes.
"""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
import torch
import yaml
from rsl_vecenv import train_pendulum
from tensordict import TensorDict

from lowrl_ros.cli import main as lowrl_main
from lowrl_ros.core.importers.registry import ImportOptions, ImportRefused, detect_kind, load_source
from lowrl_ros.core.runtime.artifact import reference_action
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.sim.evaluate import evaluate


PENDULUM_SIDECAR = {"observations": ["cos_theta", "sin_theta", "theta_dot"],
                    "actions": {"names": ["torque"], "low": -2.0, "high": 2.0}, "control_period_s": 0.05}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(runner, checkpoint) of a real rsl_rl PPO run on Pendulum-v1 (ELU, empirical normaliser on)."""
    run = tmp_path_factory.mktemp("rsl") / "pendulum"
    return train_pendulum(run, iterations=12)


def rsl_actions(policy, obs: np.ndarray) -> np.ndarray:
    """rsl_rl's own deterministic inference (MLPModel.forward: normaliser, MLP, Gaussian mean)."""
    with torch.no_grad():
        td = TensorDict({"policy": torch.from_numpy(np.asarray(obs, np.float32))}, batch_size=[len(obs)])
        return policy(td).numpy().astype(np.float64)


def pendulum_obs(n: int = 1000, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    th = rng.uniform(-np.pi, np.pi, n)
    return np.stack([np.cos(th), np.sin(th), rng.uniform(-8, 8, n)], axis=1).astype(np.float32)


def sidecar(tmp_path, doc=PENDULUM_SIDECAR):
    path = tmp_path / "pendulum.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_checkpoint_parity_generic_contract(trained):
    runner, ckpt = trained
    assert detect_kind(ckpt) == "rsl_rl"
    imp = load_source(ckpt, None, ImportOptions())
    c = imp.contract
    assert imp.kind == "rsl_rl" and imp.weights.hidden_activation == "elu" and imp.weights.output_activation == "none"
    assert c.obs_names == ("obs_0", "obs_1", "obs_2") and c.action_names == ("action_0",)
    notes = " ".join(imp.notes)
    assert "activation elu from params/agent.yaml" in notes and "normaliser folded in" in notes
    assert "no sidecar" in notes and c.action_high == (1000.0,)
    obs = pendulum_obs()
    want = rsl_actions(runner.get_inference_policy(), obs)
    got = reference_action(imp.weights, c, obs)
    assert np.abs(got - want).max() <= 1e-5 * 2000.0
    assert np.abs(got - want).max() <= 1e-5  # absolutely too: the wide default limits clip nothing
    assert not np.allclose(c.obs_offset, 0.0)  # the normaliser really learnt statistics


def test_checkpoint_with_sidecar(trained, tmp_path):
    runner, ckpt = trained
    imp = load_source(ckpt, None, ImportOptions(sidecar=sidecar(tmp_path), version=2))
    c = imp.contract
    assert c.obs_names[2] == "theta_dot" and c.action_names == ("torque",) and c.control_period_s == 0.05
    obs = pendulum_obs()
    want = np.clip(rsl_actions(runner.get_inference_policy(), obs), -2, 2)
    assert np.abs(reference_action(imp.weights, c, obs) - want).max() <= 1e-5 * 4.0


def _saved_model(tmp_path, activation: str, **kw):
    """A real rsl_rl MLPModel (no training) saved the way PPO.save lays out a checkpoint."""
    from rsl_rl.models import MLPModel

    torch.manual_seed(3)
    obs = TensorDict({"policy": torch.randn(32, 5) * 2}, batch_size=[32])
    model = MLPModel(obs, {"actor": ["policy"]}, "actor", 2, hidden_dims=[16, 16], activation=activation,
                     obs_normalization=True, distribution_cfg=kw.pop("dist", {"class_name": "GaussianDistribution"}))
    model.train()
    model.update_normalization(obs)
    model.eval()
    path = tmp_path / "model_0.pt"
    torch.save({"actor_state_dict": model.state_dict(), "critic_state_dict": {}, "optimizer_state_dict": {},
                "iter": 0, "infos": None}, path)
    return model, path


def test_deployed_int8_return_within_3_percent(trained, tmp_path, capsys):
    """`lowrl import model.pt --int8` deployed vs rsl_rl's own policy, on the same seeded Pendulum episodes."""
    runner, ckpt = trained
    out = tmp_path / "pendulum_int8.onnx"
    assert lowrl_main(["import", str(ckpt), "-o", str(out), "--int8", "--sidecar", str(sidecar(tmp_path))]) == 0
    assert "wrote" in capsys.readouterr().out
    rsl_policy = runner.get_inference_policy()
    obs = pendulum_obs()
    want = np.clip(rsl_actions(rsl_policy, obs), -2, 2)
    for engine in ("ort", "numpy"):  # int8 budget: docs/runtime.md (< 5 % of the range), docs/compression.md (2 %)
        rel = np.abs(load_artifact(out, engine=engine).act_batch(obs.astype(np.float64)) - want) / 4.0
        assert rel.max() <= 0.05 and rel.mean() <= 0.02, (engine, rel.max(), rel.mean())
    deployed = load_artifact(out)
    assert deployed.contract.obs_names == ("cos_theta", "sin_theta", "theta_dot")

    def rsl_act(o):
        return np.clip(rsl_actions(rsl_policy, np.asarray(o)[None])[0], -2, 2)

    source = evaluate(rsl_act, "Pendulum-v1", episodes=5, seed=100)
    ours = evaluate(deployed.act, "Pendulum-v1", episodes=5, seed=100)
    print(f"Pendulum-v1, 5 seeded episodes: rsl_rl {source.mean:.1f}, deployed int8 artifact {ours.mean:.1f}")
    assert abs(ours.mean - source.mean) <= 0.03 * abs(source.mean), (ours.mean, source.mean)


def test_activation_from_option_or_default(tmp_path):
    model, path = _saved_model(tmp_path, "tanh")  # no params/agent.yaml beside it
    imp = load_source(path, None, ImportOptions())
    assert imp.weights.hidden_activation == "elu" and any("default elu assumed" in n for n in imp.notes)
    imp = load_source(path, None, ImportOptions(activation="tanh"))
    assert imp.weights.hidden_activation == "tanh" and any("from --activation" in n for n in imp.notes)
    obs = np.random.default_rng(0).normal(0, 2, (1000, 5)).astype(np.float32)
    with torch.no_grad():
        want = model(TensorDict({"policy": torch.from_numpy(obs)}, batch_size=[1000])).numpy()
    assert np.abs(reference_action(imp.weights, imp.contract, obs) - want).max() <= 1e-5
    imp = load_source(path, None, ImportOptions(activation="swish"))  # rsl_rl's name for SiLU
    assert imp.weights.hidden_activation == "silu"


def test_older_rsl_rl_layout(trained, tmp_path):
    """rsl_rl <= 2 (legged_gym): model_state_dict with actor.<i>.*, std, and obs_norm_state_dict."""
    runner, ckpt = trained
    new = torch.load(ckpt, weights_only=True)["actor_state_dict"]
    old = {k.replace("mlp.", "actor."): v for k, v in new.items() if k.startswith("mlp.")}
    old["std"] = new["distribution.std_param"]
    old.update({f"critic.{i}.weight": torch.zeros(1) for i in range(2)})
    norm = {k.split(".", 1)[1]: v for k, v in new.items() if k.startswith("obs_normalizer.")}
    path = tmp_path / "model_1500.pt"
    torch.save({"model_state_dict": old, "optimizer_state_dict": {}, "iter": 1500, "infos": None,
                "obs_norm_state_dict": norm}, path)
    imp = load_source(path, None, ImportOptions(activation="elu"))
    assert "model_state_dict" in imp.notes[0]
    obs = pendulum_obs()
    want = rsl_actions(runner.get_inference_policy(), obs)
    assert np.abs(reference_action(imp.weights, imp.contract, obs) - want).max() <= 1e-5


def test_rsl_rl_onnx_and_jit_exports(trained, tmp_path):
    """rsl-rl-lib 5.5.1's export_policy_to_onnx (opset 18, weights in policy.onnx.data) and _to_jit."""
    import onnxruntime as ort

    runner, _ = trained
    out = tmp_path / "exported"
    runner.export_policy_to_onnx(str(out))
    runner.export_policy_to_jit(str(out))
    obs = pendulum_obs()
    want = np.clip(rsl_actions(runner.get_inference_policy(), obs), -2, 2)
    sess = ort.InferenceSession(str(out / "policy.onnx"))
    from_ort = np.concatenate([sess.run(None, {"obs": o[None]})[0] for o in obs])
    assert np.abs(np.clip(from_ort, -2, 2) - want).max() <= 1e-5  # the export itself is faithful
    for name in ("policy.onnx", "policy.pt"):
        imp = load_source(out / name, None, ImportOptions(sidecar=sidecar(tmp_path)))
        assert imp.weights.hidden_activation == "elu"
        assert np.abs(reference_action(imp.weights, imp.contract, obs) - want).max() <= 1e-5 * 4.0
    (out / "policy.onnx.data").unlink()
    with pytest.raises(ImportRefused, match="policy.onnx.data beside it, which is missing"):
        load_source(out / "policy.onnx", None, ImportOptions(sidecar=sidecar(tmp_path)))


def test_checkpoint_in_an_isaaclab_run_dir(tmp_path):
    """model_*.pt beside Isaac Lab's params/: the run's env config gives the contract, no play.py export needed."""
    from rsl_rl.models import MLPModel
    from test_import_onnx import DEFAULT_POS, JOINTS, _env_yaml, _io_descriptors

    torch.manual_seed(5)
    obs = TensorDict({"policy": torch.randn(64, 48)}, batch_size=[64])
    model = MLPModel(obs, {"actor": ["policy"]}, "actor", 12, hidden_dims=[32, 16], activation="elu",
                     obs_normalization=True, distribution_cfg={"class_name": "GaussianDistribution"})
    model.train()
    model.update_normalization(obs)
    model.eval()
    run = tmp_path / "2026-11-26_00-00-00"
    (run / "params").mkdir(parents=True)
    torch.save({"actor_state_dict": model.state_dict(), "iter": 99, "infos": None}, run / "model_99.pt")
    (run / "params" / "env.yaml").write_text(yaml.safe_dump(_env_yaml()))
    (run / "params" / "agent.yaml").write_text(yaml.safe_dump({"actor": {"class_name": "MLPModel",
                                                                          "activation": "elu"}}))
    (run / "IO_descriptors.yaml").write_text(yaml.safe_dump(_io_descriptors()))
    imp = load_source(run / "model_99.pt", None, ImportOptions())
    c = imp.contract
    assert c.action_names == tuple(JOINTS) and c.control_period_s == pytest.approx(0.02)
    assert any("contract from the Isaac Lab run directory" in n for n in imp.notes)
    x = np.random.default_rng(2).normal(0, 1.5, (1000, 48)).astype(np.float32)
    scale = np.ones(48)
    scale[3:6], scale[24:36] = 0.25, 0.05
    with torch.no_grad():
        y = model(TensorDict({"policy": torch.from_numpy((x * scale).astype(np.float32))}, batch_size=[1000]))
    want = np.clip(np.array(DEFAULT_POS) + 0.5 * y.numpy(), c.action_low, c.action_high)
    span = np.array(c.action_high) - np.array(c.action_low)
    assert np.all(np.abs(reference_action(imp.weights, c, x) - want).max(axis=0) <= 1e-5 * span)


def _refusal_sources(trained, tmp_path) -> dict:
    from rsl_rl.models import RNNModel

    _, ckpt = trained
    data = ckpt.read_bytes()
    srcs = {}
    (tmp_path / "truncated.pt").write_bytes(data[: len(data) // 2])
    srcs["truncated"] = (tmp_path / "truncated.pt", "not a readable torch checkpoint")
    sd = torch.load(ckpt, weights_only=True)
    sd["actor_state_dict"]["mlp.2.weight"][0, 0] = float("nan")
    torch.save(sd, tmp_path / "nan.pt")
    srcs["nan"] = (tmp_path / "nan.pt", "NaN or Inf")
    obs = TensorDict({"policy": torch.randn(4, 3)}, batch_size=[4])
    rnn = RNNModel(obs, {"actor": ["policy"]}, "actor", 1, hidden_dims=[8], rnn_hidden_dim=8,
                   distribution_cfg={"class_name": "GaussianDistribution"})
    torch.save({"actor_state_dict": rnn.state_dict(), "iter": 0}, tmp_path / "rnn.pt")
    srcs["rnn"] = (tmp_path / "rnn.pt", "recurrent actor")
    beta_dir = tmp_path / "beta"
    beta_dir.mkdir()
    _, beta = _saved_model(beta_dir, "elu", dist={"class_name": "BetaDistribution"})
    srcs["beta"] = (beta, "state-independent Gaussian")
    torch.save(torch.zeros(3), tmp_path / "tensor.pt")
    srcs["tensor"] = (tmp_path / "tensor.pt", "not an rsl_rl checkpoint")
    bad_names = tmp_path / "bad_names"
    bad_names.mkdir()
    shutil.copy(ckpt, bad_names / "model_0.pt")
    srcs["wrong_names"] = (bad_names / "model_0.pt", "names 2 observations but the network reads 3")
    return srcs


def test_refusals_one_line_exit_2_nothing_written(trained, tmp_path, capsys):
    wrong = sidecar(tmp_path, {**PENDULUM_SIDECAR, "observations": ["cos_theta", "sin_theta"]})
    for name, (src, why) in _refusal_sources(trained, tmp_path).items():
        out = tmp_path / f"{name}_out.onnx"
        extra = ["--sidecar", str(wrong)] if name == "wrong_names" else []
        capsys.readouterr()
        assert lowrl_main(["import", str(src), "--from", "rsl_rl", "-o", str(out), *extra]) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("lowrl import: "), (name, err)
        assert re.search(why, err), (name, err)
        assert not out.exists(), name
