"""Fine-tuning core: kit round trip, masks kept, versions every N updates (int8, parent set), rollback rule."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from lowrl_ros.core.runtime.artifact import parse_artifact, read_artifact_bytes
from lowrl_ros.core.runtime.engines import load_artifact
from lowrl_ros.core.finetune.kit import load_kit, write_kit
from lowrl_ros.core.finetune.learner import FineTuner
from lowrl_ros.core.finetune.config import FineTuneConfig
from lowrl_ros.core.finetune.versions import VersionRecord, VersionTracker
from lowrl_ros.core.train.checkpoint import load_checkpoint
from lowrl_ros.core.train.config import TrainConfig
from lowrl_ros.core.train.export import export_actor
from lowrl_ros.core.train.trainer import Trainer
from lowrl_ros.core.finetune.transition_log import Transition, TransitionLogWriter, read_log

TINY = dict(total_steps=300, warmup_steps=100, batch_size=32, hidden=32, eval_interval=300, eval_episodes=1,
            mask_interval=20, buffer_min=150, buffer_check_size=64, buffer_check_interval=100, checkpoint_interval=0,
            progress=False, variant="rlx2", actor_sparsity=0.8, critic_sparsity=0.7)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A real (tiny) `lowrl train` run: checkpoint.pt + actor.onnx, as the CLI leaves them."""
    d = tmp_path_factory.mktemp("run")
    trainer = Trainer(TrainConfig(**TINY), d)
    result = trainer.run()
    export_actor(trainer.agent, trainer.env, d, result.env_steps)
    return d


@pytest.fixture(scope="module")
def kit_dir(run_dir, tmp_path_factory) -> Path:
    return write_kit(run_dir, tmp_path_factory.mktemp("kit"))


def pendulum_transitions(n: int, seed: int = 0):
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a = rng.uniform(-2, 2, 1)
        nxt, r, term, trunc, _ = env.step(a)
        out.append((obs, a, float(r), nxt, term, trunc))
        obs = env.reset()[0] if term or trunc else nxt
    return out


def tuner(kit_dir, out_dir, **kw) -> FineTuner:
    cfg = FineTuneConfig(**{**dict(min_transitions=64, batch_size=32, version_every_updates=25, eval_episodes=2,
                                   rollback_margin=50.0), **kw})
    return FineTuner(load_kit(kit_dir), cfg, out_dir, base_path="base.onnx")


def test_kit_round_trip(run_dir, kit_dir):
    kit = load_kit(kit_dir)
    state = load_checkpoint(run_dir)
    assert kit.train_config.to_dict().keys() == state["config"].keys()
    assert str(kit.train_config.to_dict()) == str(TrainConfig.from_dict(state["config"]).to_dict())  # nan != nan
    assert kit.contract.obs_dim == 3 and kit.contract.action_dim == 1 and kit.contract.version == 1
    for key in ("actor", "critic", "critic_target"):
        for name, tensor in state["agent"][key].items():
            assert torch.equal(kit.agent_state[key][name], tensor), (key, name)
    for key in ("actor_masker", "critic_masker"):
        for a, b in zip(kit.agent_state[key]["masks"], state["agent"][key]["masks"]):
            assert torch.equal(a, b)
    assert "actor_opt" not in kit.agent_state  # the kit carries weights and masks, not optimizer state
    # The learner rebuilt from the kit acts exactly like the deployed fp32 artifact.
    ft = FineTuner(kit, FineTuneConfig(), kit_dir.parent / "ft_roundtrip")
    policy = load_artifact(run_dir / "actor.onnx", engine="numpy")
    obs = np.array([0.3, -0.9, 1.2])
    expected = policy.act(obs)
    got = -2.0 + (ft.agent.deterministic(obs) + 1.0) * 2.0  # normalised [-1, 1] -> [-2, 2]
    assert np.allclose(got, expected, atol=1e-4)


def test_bad_kits_are_rejected_with_the_fix(kit_dir, tmp_path):
    with pytest.raises(ValueError, match="not a fine-tune kit"):
        load_kit(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "agent.pt").write_bytes((kit_dir / "agent.pt").read_bytes())
    meta = json.loads((kit_dir / "kit.json").read_text())
    (bad / "kit.json").write_text(json.dumps({**meta, "format_version": 99}))
    with pytest.raises(ValueError, match="re-write the kit"):
        load_kit(bad)
    with pytest.raises(ValueError, match="does not exist"):
        write_kit(tmp_path, tmp_path / "k")


def test_updates_keep_masked_weights_at_zero(kit_dir, tmp_path):
    kit = load_kit(kit_dir)
    ft = tuner(kit_dir, tmp_path)
    for t in pendulum_transitions(300):
        ft.add(*t)
    before = [w.detach().clone() for w in ft.agent.actor_net.weights]
    assert ft.update(150) == 150
    for net, key in ((ft.agent.actor_net, "actor_masker"), (ft.agent.critic_net, "critic_masker")):
        for w, mask in zip(net.weights, kit.agent_state[key]["masks"]):
            assert torch.all(w[mask == 0] == 0)  # masked: exactly zero
    masks = ft.agent.actor_masker.masks
    assert all(torch.equal(a, b) for a, b in zip(masks, kit.agent_state["actor_masker"]["masks"]))  # no drop/grow
    moved = sum(int((w != b).sum()) for w, b in zip(ft.agent.actor_net.weights, before))
    assert moved > 0  # and the active weights did learn
    assert ft.weights_finite()


def test_critic_warmup_moves_the_critics_only_and_versions_count_from_its_end(kit_dir, tmp_path):
    ft = tuner(kit_dir, tmp_path, critic_warmup_updates=40)
    for t in pendulum_transitions(300):
        ft.add(*t)
    actor0 = [w.detach().clone() for w in ft.agent.actor_net.weights]
    critic0 = [w.detach().clone() for w in ft.agent.critic_net.weights]
    ft.on_episode(1, -300.0)
    ft.on_episode(1, -320.0)  # the base is judged: only the update count can hold a version back
    assert ft.update(40) == 40
    assert all(torch.equal(w, b) for w, b in zip(ft.agent.actor_net.weights, actor0))
    assert any(not torch.equal(w, b) for w, b in zip(ft.agent.critic_net.weights, critic0))
    assert not ft.version_due()  # 40 updates, none of them the actor's
    ft.update(24)
    assert not ft.version_due()
    ft.update(1)  # N = 25 actor updates after the warm-up
    assert ft.version_due()
    assert any(not torch.equal(w, b) for w, b in zip(ft.agent.actor_net.weights, actor0))


def _distance_to_recorded(ft, recorded: float) -> float:
    obs = torch.as_tensor(ft.buffer.obs[:len(ft.buffer)], dtype=torch.float32)
    with torch.no_grad():
        return float((ft.agent.actor.deterministic(obs) - recorded).abs().mean())


def test_bc_weight_pulls_the_actor_toward_the_recorded_actions(kit_dir, tmp_path):
    """bc_weight > 0 (TD3+BC): the mean action moves toward what the robot did; 0 leaves the plain SAC loss."""
    recorded = 1.5  # robot units: every transition records +1.5 N·m, i.e. 0.75 normalised
    data = [(o, np.array([recorded]), r, n, te, tr) for o, _, r, n, te, tr in pendulum_transitions(300)]
    dist = {}
    for w in (0.0, 5.0):
        ft = tuner(kit_dir, tmp_path / f"bc{w}", bc_weight=w, lr=1e-3)
        for t in data:
            ft.add(*t)
        start = _distance_to_recorded(ft, 0.75)
        assert ft.update(150) == 150
        dist[w] = _distance_to_recorded(ft, 0.75)
        for net, key in ((ft.agent.actor_net, "actor_masker"),):
            for wt, mask in zip(net.weights, load_kit(kit_dir).agent_state[key]["masks"]):
                assert torch.all(wt[mask == 0] == 0)  # the BC term keeps the masks too
    assert dist[5.0] < 0.5 * start  # pulled most of the way to the recorded action
    assert dist[5.0] < 0.5 * dist[0.0]


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_agents_bc_term_moves_the_action_toward_the_batch_action(algo):
    from lowrl_ros.core.train.trainer import make_agent
    from lowrl_ros.core.train.replay import Batch

    cfg = TrainConfig(**{**TINY, "algo": algo, "variant": "dense", "lr": 1e-3,
                         **({"policy_delay": 1} if algo == "td3" else {})})
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(64, 3)).astype(np.float32)
    batch = Batch(obs, np.full((64, 1), -0.5, np.float32), rng.normal(size=64).astype(np.float32),
                  obs.copy(), np.full(64, 0.99, np.float32))
    dist = {}
    for w in (0.0, 10.0):
        agent = make_agent(cfg, 3, 1)
        for _ in range(100):
            agent.update(batch, bc_weight=w)
        dist[w] = float(np.abs(agent.deterministic(obs) + 0.5).mean())
    assert dist[10.0] < 0.5 * dist[0.0]


def test_update_to_data_cap_and_truncated_not_trained(kit_dir, tmp_path):
    ft = tuner(kit_dir, tmp_path, updates_per_transition=0.5)
    data = pendulum_transitions(400)  # Pendulum episodes are 200 steps: 2 truncated transitions
    used = sum(ft.add(*t) for t in data)
    assert used == 398 and len(ft.buffer) == 398
    assert ft.update(10_000) == 200  # 0.5 updates per transition recorded
    assert not ft.can_update()


def test_a_version_every_n_updates_is_an_int8_artifact_with_parent(kit_dir, tmp_path):
    ft = tuner(kit_dir, tmp_path)
    for t in pendulum_transitions(300):
        ft.add(*t)
    ft.update(30)
    assert not ft.version_due()  # 30 updates, but the running base version has not been judged yet
    ft.on_episode(1, -300.0)
    ft.on_episode(1, -320.0)
    assert ft.tracker.best == 1 and ft.version_due()
    v2 = ft.make_version()
    assert (v2.version, v2.parent_version) == (2, 1) and not ft.version_due()
    ft.update(24)
    ft.on_episode(2, -250.0)
    ft.on_episode(2, -260.0)
    assert not ft.version_due()  # 24 < N = 25 updates since v2
    ft.update(1)
    assert ft.version_due()
    v3 = ft.make_version()
    assert (v3.version, v3.parent_version) == (3, 2)
    parsed = parse_artifact(read_artifact_bytes(v3.path), v3.path)
    assert parsed.contract.version == 3 and parsed.contract.parent_version == 2
    assert all(layer.dtype == "int8" for layer in parsed.layers)
    assert parsed.contract.provenance["tool"] == "lowrl finetune"
    policy = load_artifact(v3.path)  # validates and warms up, as the policy node will
    assert np.all(np.abs(policy.act(np.array([1.0, 0.0, 0.0]))) <= 2.0)
    # Masked actor weights are zero in the artifact too (int8 keeps exact zeros).
    mask0 = ft.agent.actor_masker.masks[0][0].T.numpy()
    assert np.all(parsed.weights().layers[0][0][mask0 == 0] == 0)
    assert json.loads((tmp_path / "versions.json").read_text())["current"] == 3


def test_rollback_rule_with_scripted_returns():
    tr = VersionTracker(eval_episodes=2, rollback_margin=50.0, min_return=-1000.0)
    tr.add(VersionRecord(1, None, "base.onnx"))
    assert tr.on_episode(1, -200.0).action == "none" and tr.best is None  # one episode: not judged
    tr.on_episode(1, -220.0)
    assert tr.best == 1 and tr.judged()
    tr.add(VersionRecord(2, 1, "v2.onnx"))
    tr.on_episode(2, -150.0)
    tr.on_episode(2, -170.0)
    assert tr.best == 2  # -160 beats -210
    tr.add(VersionRecord(3, 2, "v3.onnx"))
    tr.on_episode(3, -190.0)
    d = tr.on_episode(3, -200.0)  # -195: worse than -160 but within the margin of 50
    assert d.action == "none" and tr.current == 3 and tr.best == 2 and tr.versions[3].status == "good"
    tr.add(VersionRecord(4, 3, "v4.onnx"))
    tr.on_episode(4, -230.0)
    d = tr.on_episode(4, -250.0)  # -240 < -160 - 50: roll back to the best
    assert d.action == "rollback" and d.target.version == 2 and d.target.path == "v2.onnx"
    assert tr.current == 2 and tr.versions[4].status == "rejected"
    assert tr.on_episode(4, -100.0).action == "none" and tr.versions[4].returns == [-230.0, -250.0]  # stale
    tr.add(VersionRecord(5, 2, "v5.onnx"))
    d = tr.on_episode(5, -5000.0)  # a safety floor trips at once
    assert d.action == "rollback" and d.target.version == 2 and "min_return" in d.reason
    d = tr.on_safety_trip("NaN weights")  # the best itself is running: nothing better, pause
    assert d.action == "pause" and tr.current == 2
    assert tr.next_version == 6
    copy = VersionTracker(2, 50.0)
    copy.load_dict(json.loads(json.dumps(tr.to_dict())))
    assert copy.best == 2 and copy.current == 2 and copy.versions[4].status == "rejected"


def _two_versions(adjust: bool) -> VersionTracker:
    """v1 runs from middling start states; v2, truly 50 better, draws three bad ones.

    Returns follow R = b + quality exactly (slope 1), b being the start state's baseline value."""
    tr = VersionTracker(eval_episodes=3, rollback_margin=100.0)
    tr.add(VersionRecord(1, None, "base.onnx"))
    for b in (-100.0, -300.0, -200.0, -150.0, -250.0, -200.0):
        tr.on_episode(1, b, b if adjust else math.nan)
    tr.add(VersionRecord(2, 1, "v2.onnx"))
    for b in (-400.0, -380.0, -420.0):
        decision = tr.on_episode(2, b + 50.0, b if adjust else math.nan)
    tr.last = decision
    return tr


def test_versions_are_scored_against_where_their_episodes_started():
    plain = _two_versions(adjust=False)  # -350 against -200: rolled back although v2 is better
    assert plain.last.action == "rollback" and plain.best == 1 and plain.versions[2].status == "rejected"
    adjusted = _two_versions(adjust=True)
    slope, mean_b = adjusted.baseline_fit()
    assert slope == pytest.approx(1.0) and mean_b == pytest.approx(-2400.0 / 9)
    assert adjusted.best == 2 and adjusted.current == 2 and adjusted.last.action == "none"
    assert adjusted.score(adjusted.versions[2]) - adjusted.score(adjusted.versions[1]) == pytest.approx(50.0)


def test_the_score_adjustment_needs_enough_episodes_and_is_never_negative():
    tr = VersionTracker(eval_episodes=2, rollback_margin=100.0)
    tr.add(VersionRecord(1, None, "base.onnx"))
    for r, b in ((-100.0, -100.0), (-300.0, -300.0), (-200.0, -200.0), (-150.0, -150.0), (-250.0, -250.0)):
        tr.on_episode(1, r, b)
    assert tr.baseline_fit()[0] == 0.0  # 5 episodes with a baseline: plain means still
    tr.on_episode(1, -120.0, -120.0)
    assert tr.baseline_fit()[0] == pytest.approx(1.0)
    anti = VersionTracker(eval_episodes=2, rollback_margin=100.0)
    anti.add(VersionRecord(1, None, "base.onnx"))
    for b in range(6):
        anti.on_episode(1, -10.0 * b, 10.0 * b)  # returns fall as the baseline rises: no adjustment
    assert anti.baseline_fit()[0] == 0.0
    # A record from before baselines existed (versions.json of an older session) keeps working.
    old = VersionTracker(eval_episodes=2, rollback_margin=100.0)
    old.load_dict({"current": 1, "best": None, "versions": [
        {"version": 1, "parent_version": None, "path": "base.onnx", "returns": [-200.0], "status": "candidate"}]})
    old.on_episode(1, -220.0, -50.0)
    assert old.versions[1].returns == [-200.0, -220.0] and math.isnan(old.versions[1].baselines[0])
    assert old.best == 1 and old.score(old.versions[1]) == pytest.approx(-210.0)


def test_a_slightly_higher_score_within_the_noise_does_not_take_the_best_place():
    tr = VersionTracker(eval_episodes=3, rollback_margin=100.0)
    tr.add(VersionRecord(1, None, "base.onnx"))
    for ret in (-200.0, -100.0, -300.0):
        tr.on_episode(1, ret)
    tr.add(VersionRecord(2, 1, "v2.onnx"))
    for ret in (-180.0, -80.0, -280.0):  # 20 better, with a spread of 100 per episode: luck, as far as we know
        d = tr.on_episode(2, ret)
    assert tr.best == 1 and d.action == "none" and tr.versions[2].status == "good"
    tr.add(VersionRecord(3, 2, "v3.onnx"))
    for ret in (-20.0, 80.0, -120.0):  # 180 better: more than one standard error (82)
        tr.on_episode(3, ret)
    assert tr.best == 3


def test_one_failed_episode_does_not_throw_the_score_adjustment():
    tr = VersionTracker(eval_episodes=3, rollback_margin=100.0)
    tr.add(VersionRecord(1, None, "base.onnx"))
    bs = (-100.0, -300.0, -200.0, -150.0, -250.0, -180.0, -120.0)
    for i, b in enumerate(bs):
        tr.on_episode(1, 2.0 * b + (-1200.0 if i == 1 else 0.0), b)  # one swing-up failed: -1800
    assert tr.baseline_fit()[0] == pytest.approx(2.0)  # least squares would say 6.5


def test_episodes_carry_the_kit_critics_value_of_their_start(kit_dir, tmp_path):
    ft = tuner(kit_dir, tmp_path / "a")
    up, down = np.array([1.0, 0.0, 0.0]), np.array([-1.0, 0.0, 0.0])  # Pendulum: upright, hanging
    v_up, v_down = ft.start_value(up), ft.start_value(down)
    assert math.isfinite(v_up) and math.isfinite(v_down) and v_up != v_down
    assert math.isnan(ft.start_value(np.array([1.0, 0.0]))) and math.isnan(ft.start_value(np.array([np.nan, 0, 0])))
    for obs, _, _, nxt, term, trunc in pendulum_transitions(200):  # learning must not move the yardstick
        ft.add(obs, np.zeros(1), -1.0, nxt, term, trunc)
    ft.update(50)
    assert ft.start_value(up) == v_up
    ft.on_episode(1, -300.0, start_obs=up)
    ft.on_episode(1, -320.0)  # no start observation: no baseline
    saved = json.loads((tmp_path / "a" / "versions.json").read_text())["versions"][0]
    assert saved["returns"] == [-300.0, -320.0] and saved["baselines"][0] == pytest.approx(v_up)
    assert math.isnan(saved["baselines"][1])
    off = tuner(kit_dir, tmp_path / "b", judge_baseline=False)
    off.on_episode(1, -300.0, start_obs=up)
    assert math.isnan(off.tracker.versions[1].baselines[0])


def test_rollback_restores_the_best_learner_and_resume_continues(kit_dir, tmp_path):
    ft = tuner(kit_dir, tmp_path)
    for t in pendulum_transitions(300):
        ft.add(*t)
    ft.update(25)
    ft.on_episode(1, -300.0)
    ft.on_episode(1, -300.0)
    ft.make_version()  # v2
    v2_actor = [w.detach().clone() for w in ft.agent.actor_net.weights]
    ft.on_episode(2, -200.0)
    ft.on_episode(2, -200.0)
    assert ft.tracker.best == 2
    ft.update(25)
    ft.make_version()  # v3
    ft.update(25)
    assert not all(torch.equal(a, b) for a, b in zip(ft.agent.actor_net.weights, v2_actor))
    ft.on_episode(3, -400.0)
    d = ft.on_episode(3, -400.0)
    assert d.action == "rollback" and d.target.version == 2
    assert all(torch.equal(a, b) for a, b in zip(ft.agent.actor_net.weights, v2_actor))
    # Resume: a new FineTuner on the same directory continues the history and the counters.
    again = tuner(kit_dir, tmp_path)
    assert again.updates == ft.updates and again.tracker.current == 2 and again.tracker.best == 2
    assert again.tracker.next_version == 4
    assert all(torch.equal(a, b) for a, b in zip(again.agent.actor_net.weights, v2_actor))
    # A work_dir of another kit is refused, not half-loaded.
    state = torch.load(tmp_path / "learner.pt", weights_only=False)
    state["kit"] = {**state["kit"], "hidden": 256}
    torch.save(state, tmp_path / "learner.pt")
    with pytest.raises(ValueError, match="another kit"):
        tuner(kit_dir, tmp_path)


def test_a_best_version_whose_later_episodes_fail_loses_its_place(kit_dir, tmp_path):
    """Judged on lucky first episodes, v3 becomes the best; its later ones fail: back to v2, learner too."""
    ft = tuner(kit_dir, tmp_path)
    for t in pendulum_transitions(300):
        ft.add(*t)
    ft.on_episode(1, -300.0)
    ft.on_episode(1, -300.0)
    ft.update(25)
    ft.make_version()  # v2
    v2_actor = [w.detach().clone() for w in ft.agent.actor_net.weights]
    for _ in range(4):
        ft.on_episode(2, -200.0)
    ft.update(25)
    ft.make_version()  # v3
    ft.on_episode(3, -120.0)
    d = ft.on_episode(3, -120.0)
    assert ft.tracker.best == 3 and "best so far" in d.reason
    ft.update(25)
    # Later episodes fail. v3 keeps its place until the evidence is firm: its score below v2's by
    # more than PROMOTE_Z standard errors of the difference (from the pooled spread of returns).
    fails = 0
    while d.action != "rollback" and fails < 10:
        d = ft.on_episode(3, -600.0)
        fails += 1
    assert 2 <= fails <= 6, fails
    assert d.target.version == 2 and ft.tracker.best == 2 and ft.tracker.current == 2
    assert ft.tracker.versions[3].status == "rejected"
    assert all(torch.equal(a, b) for a, b in zip(ft.agent.actor_net.weights, v2_actor))


def test_resume_refills_the_buffer_from_the_log(kit_dir, tmp_path):
    writer = TransitionLogWriter(tmp_path / "log")
    for i, (o, a, r, n, te, tr) in enumerate(pendulum_transitions(250)):
        writer.append(Transition(o, a, r, n, te, tr, 1, float(i)))
    writer.close()
    batch, report = read_log(tmp_path / "log")
    ft = tuner(kit_dir, tmp_path / "ft")
    assert ft.add_batch(batch) == 249 and ft.transitions_seen == 250  # one truncation at step 200
    assert np.allclose(ft.buffer.obs[0], batch.obs[0])
    assert ft.buffer.action[0, 0] == pytest.approx(batch.action[0, 0] / 2)  # [-2, 2] -> [-1, 1]


@pytest.mark.parametrize("kwargs", [dict(lr=0.0), dict(batch_size=0), dict(min_transitions=10, buffer_size=5),
                                    dict(updates_per_transition=0.0), dict(rollback_margin=-1.0),
                                    dict(version_every_updates=0), dict(bc_weight=-0.1),
                                    dict(bc_weight=float("nan")), dict(critic_warmup_updates=-1)])
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match="FineTuneConfig"):
        FineTuneConfig(**kwargs)


@pytest.mark.parametrize("min_return", [None, -1000.0])
def test_no_rollback_trips_without_min_return(min_return):
    """On the shipped default a catastrophic first episode waits for its version's judgement; a floor trips at once."""
    cfg = FineTuneConfig() if min_return is None else FineTuneConfig(min_return=min_return)
    tr = VersionTracker(cfg.eval_episodes, cfg.rollback_margin, cfg.min_return)
    tr.add(VersionRecord(1, None, "base.onnx"))
    for _ in range(cfg.eval_episodes):
        tr.on_episode(1, -200.0)
    tr.add(VersionRecord(2, 1, "v2.onnx"))
    d = tr.on_episode(2, -5000.0)
    if min_return is None:
        assert d.action == "none" and tr.current == 2 and tr.versions[2].status == "candidate"
    else:
        assert d.action == "rollback" and "min_return" in d.reason and tr.current == 1


def test_a_td3_kit_fine_tunes_too(tmp_path):
    """TD3 (delayed actor, its own target actor) through the same kit and learner, on a MuJoCo task."""
    import gymnasium as gym

    trainer = Trainer(TrainConfig(**{**TINY, "algo": "td3", "env_id": "InvertedPendulum-v5"}), tmp_path / "run")
    result = trainer.run()
    export_actor(trainer.agent, trainer.env, tmp_path / "run", result.env_steps)
    kit = load_kit(write_kit(tmp_path / "run", tmp_path / "kit"))
    assert "actor_target" in kit.agent_state
    ft = FineTuner(kit, FineTuneConfig(min_transitions=50, batch_size=32, version_every_updates=20, eval_episodes=1),
                   tmp_path / "ft")
    env = gym.make("InvertedPendulum-v5")
    obs, _ = env.reset(seed=0)
    for _ in range(200):
        a = env.action_space.sample()
        nxt, r, term, trunc, _ = env.step(a)
        ft.add(obs, a, r, nxt, term, trunc)
        obs = env.reset()[0] if term or trunc else nxt
    assert ft.update(100) == 100
    for w, m in zip(ft.agent.actor_net.weights, kit.agent_state["actor_masker"]["masks"]):
        assert torch.all(w[m == 0] == 0)
    ft.on_episode(1, 5.0)
    record = ft.make_version()
    assert (record.version, record.parent_version) == (2, 1)
    assert load_artifact(record.path).act(np.zeros(4)).shape == (1,)
