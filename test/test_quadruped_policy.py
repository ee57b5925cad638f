"""The quadruped's walking policy path (docs/quadruped.md): the parallel simulator pool and its rsl_rl VecEnv,
a one-iteration training run through `lowrl import`, and the shipped checkpoint and artifact against the
robot file."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from rsl_rl.models import MLPModel
from tensordict import TensorDict

from lowrl_ros.cli import main as lowrl_main
from lowrl_ros.core.finetune.env_pool import RobotEnvPool, shrunk_priors
from lowrl_ros.core.finetune.sim_env import make_robot_env
from lowrl_ros.core.runtime.actions import ActionProcessor
from lowrl_ros.core.runtime.artifact import last_action_convention
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.runtime.observation import ObservationSpec
from lowrl_ros.core.runtime.robot_file import load_robot_file

ROOT = Path(__file__).resolve().parents[1]
ROBOT = ROOT / "config" / "robots" / "quadruped.yaml"
SHIPPED = ROOT / "models" / "quadruped_rsl_rl"
ARTIFACT = ROOT / "models" / "quadruped.lowrl"
sys.path.insert(0, str(ROOT / "scripts"))  # spawn workers import the script's modules by name
import train_quadruped  # noqa: E402


@pytest.fixture(scope="module")
def short_robot(tmp_path_factory) -> Path:
    """The quadruped with 5-step episodes, so auto-reset happens within a test."""
    doc = yaml.safe_load(ROBOT.read_text())
    doc["episode"] = {"fall_tilt_deg": 60, "time_limit_s": 0.1}
    path = tmp_path_factory.mktemp("quad") / "quadruped_short.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_pool_steps_like_robot_sim_env_with_auto_reset_and_closes(short_robot):
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (7, 3, 12))
    with RobotEnvPool(short_robot, num_envs=3, workers=2, seed=5) as pool:
        obs0 = pool.reset()
        steps = [pool.step(a) for a in actions]
    assert pool.exitcodes == [0, 0]  # both workers ended when asked
    assert obs0.shape == (3, 45) and obs0.dtype == np.float32
    assert all(s.obs.shape == (3, 45) and s.reward.shape == (3,) for s in steps)
    # the same envs stepped by hand: env i seeded seed + i, reset when its 5-step episode ends
    for i in range(3):
        env = make_robot_env(short_robot)
        obs, _ = env.reset(seed=5 + i)
        np.testing.assert_array_equal(obs, obs0[i])
        ret = 0.0
        for k, s in enumerate(steps):
            obs, r, term, trunc, _ = env.step(actions[k, i])
            ret += r
            assert s.reward[i] == pytest.approx(r, rel=1e-6) and (s.truncated[i], s.terminated[i]) == (trunc, term)
            if term or trunc:
                assert (i, pytest.approx(ret), k + 1, False) in [f[:3] + (f[3],) for f in s.finished]
                obs, _ = env.reset()
                ret = 0.0
            np.testing.assert_allclose(s.obs[i], obs, rtol=1e-6)
    assert sum(len(s.finished) for s in steps) == 3  # one 5-step episode per env in 7 steps


def test_pool_is_the_same_whatever_the_worker_count_and_randomizes_within_the_priors(short_robot):
    actions = np.random.default_rng(1).uniform(-1, 1, (3, 2, 12))
    runs = []
    for workers in (1, 2):
        with RobotEnvPool(short_robot, num_envs=2, workers=workers, seed=3, randomize=0.5) as pool:
            runs.append([pool.reset()] + [pool.step(a).obs for a in actions])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
    priors = {"mass_scale": (0.7, 1.3), "latency_steps": (0.0, 4.0), "gyro_bias": (-0.05, 0.05),
              "joint_velocity_noise": (0.0, 0.2)}
    assert shrunk_priors(priors, 0.5) == {"mass_scale": pytest.approx((0.85, 1.15)), "latency_steps": (0.0, 2.0),
                                          "gyro_bias": pytest.approx((-0.025, 0.025)),
                                          "joint_velocity_noise": pytest.approx((0.0, 0.1))}
    with pytest.raises(ValueError, match="randomize"):
        RobotEnvPool(short_robot, 1, randomize=1.5)


def test_vec_env_gives_rsl_rl_its_tensors_and_time_outs(short_robot):
    with RobotEnvPool(short_robot, num_envs=2, workers=1, seed=0) as pool:
        env = train_quadruped.RobotVecEnv(pool, max_episode_steps=5)
        td = env.get_observations()
        assert td["policy"].shape == (2, 45) and env.num_actions == 12
        for n in range(1, 10):  # standing still: both end at the 0.1 s time limit, together
            td, rew, dones, extras = env.step(torch.zeros(2, 12))
            if dones.any():
                break
        assert rew.shape == (2,) and td["policy"].shape == (2, 45)
        assert dones.tolist() == [1.0, 1.0] and extras["time_outs"].tolist() == [1.0, 1.0]
        finished = env.take_finished()
        assert env.episode_length_buf.tolist() == [0, 0] and [f[2] for f in finished] == [n, n]
        assert env.take_finished() == []


def test_one_iteration_writes_a_checkpoint_lowrl_import_accepts(short_robot, tmp_path, capsys):
    out = tmp_path / "run"
    assert train_quadruped.main(["--robot", str(short_robot), "--envs", "2", "--workers", "1", "--iterations", "1",
                                 "--steps-per-env", "4", "--out", str(out)]) == 0
    ckpt = out / "model_0.pt"
    agent = yaml.safe_load((out / "params" / "agent.yaml").read_text())
    assert ckpt.is_file() and agent["actor"]["activation"] == "elu"
    artifact = tmp_path / "q.lowrl"
    assert lowrl_main(["import", str(ckpt), "--sidecar", str(out / "contract.yaml"), "-o", str(artifact),
                       "--int8"]) == 0
    assert "activation elu from params/agent.yaml" in capsys.readouterr().out
    assert load_artifact(artifact).contract.action_names == tuple(load_robot_file(short_robot).joints)


def _rsl_actor(ckpt_dir: Path) -> MLPModel:
    """The shipped checkpoint's actor, built by rsl_rl from its own agent.yaml."""
    cfg = yaml.safe_load((ckpt_dir / "params" / "agent.yaml").read_text())["actor"]
    obs = TensorDict({"policy": torch.zeros(1, 45)}, batch_size=[1])
    actor = MLPModel(obs, {"actor": ["policy"]}, "actor", 12, hidden_dims=cfg["hidden_dims"],
                     activation=cfg["activation"], obs_normalization=cfg["obs_normalization"],
                     distribution_cfg=cfg["distribution_cfg"])
    actor.load_state_dict(torch.load(ckpt_dir / "model.pt", map_location="cpu", weights_only=True)["actor_state_dict"])
    return actor.eval()


def rollout_observations(policy, env, steps: int) -> np.ndarray:
    """Observations the robot meets: a seeded rollout (seed 0, reset at each end) of the deployed policy itself."""
    obs, _ = env.reset(seed=0)
    seen = []
    for _ in range(steps):
        seen.append(obs)
        policy.act(obs)
        obs, _, term, trunc, _ = env.step(policy.raw_output.copy())
        if term or trunc:
            obs, _ = env.reset()
    return np.array(seen, np.float32)


def checkpoint_outputs(obs: np.ndarray) -> np.ndarray:
    """The shipped checkpoint's actor, as rsl_rl builds it, on ``obs``: its pre-clip outputs."""
    with torch.no_grad():
        return _rsl_actor(SHIPPED)(TensorDict({"policy": torch.from_numpy(obs)}, batch_size=[len(obs)])).numpy()


def test_shipped_artifact_fits_the_robot_file_and_matches_its_checkpoint():
    assert ARTIFACT.stat().st_size < 2_000_000 and (SHIPPED / "model.pt").stat().st_size < 2_000_000
    policy = load_artifact(ARTIFACT)
    c = policy.contract
    robot = load_robot_file(ROBOT)
    env = make_robot_env(robot, last_action=last_action_convention(c))
    spec = ObservationSpec.from_robot_file(robot, c.control_period_s)
    spec.check_against(c)  # what the policy node checks at configure: sizes and names
    assert c.obs_names == tuple(spec.entry_names())  # lowrl sim2sim pairs the entries by these names
    ActionProcessor.from_robot_dict(robot.raw, c)  # joints, order, scale/offset applied once
    assert (c.obs_dim, c.action_dim, c.control_period_s) == (45, 12, env.sim.config.period_s)
    assert last_action_convention(c) == "raw" and c.provenance["kind"] == "rsl_rl"
    seen = rollout_observations(policy, env, 150)
    want = np.clip(checkpoint_outputs(seen), -1.0, 1.0)
    # the importer's int8 budget (test_import_rsl_rl.py): worst 5 %, mean 2 % of the action range (2). ORT's int8
    # graph also quantizes each layer's input on the fly (DynamicQuantizeLinear, one scale per vector): the walking
    # policy saturates nearly every output (pre-clip values up to +-38), so its rare unsaturated ones can land a
    # coarse step off (7 of 12,000 entries over 5 % on a 1,000-step rollout): for ORT at most 1 in 500 may.
    for engine in ("numpy", "ort"):
        rel = np.abs(load_artifact(ARTIFACT, engine).act_batch(seen.astype(np.float64)) - want) / 2.0
        worst = rel.max() if engine == "numpy" else np.quantile(rel, 0.998)
        assert worst <= 0.05 and rel.mean() <= 0.02, (engine, rel.max(), worst, rel.mean())


def test_the_shipped_policy_walks_at_a_command_it_was_trained_for():
    """The shipped int8 artifact, on the runtime's own engine, walks in the robot file's simulator: at a 0.4 m/s
    command its forward speed over seconds 6-12, averaged over three seeded episodes, is within 0.1 m/s of it, and
    it does not fall. Three episodes, not one: a gait can settle at another speed (seed 10,002 on numpy: 0.55 m/s;
    bench_results/train/quadruped_2026-11-29_check.log), and another machine's float order could take one episode
    there. A policy that only stands, as the first ones trained here did, fails this."""
    policy = load_artifact(ARTIFACT, "numpy")
    env = make_robot_env(ROBOT, last_action=last_action_convention(policy.contract))
    vx = []
    for seed in (10_000, 10_001, 10_002):
        obs, _ = env.reset(seed=seed, options={"command": [0.4, 0.0, 0.0]})
        for k in range(600):
            policy.act(obs)
            obs, _, term, _, _ = env.step(policy.raw_output.copy())
            assert not term, f"seed {seed}: fell at step {k}"
            if k >= 300:  # the gait takes up to 4 s to start from standing
                vx.append(env.sim.base_velocity()[0][0])
    assert abs(np.mean(vx) - 0.4) < 0.1, np.mean(vx)
