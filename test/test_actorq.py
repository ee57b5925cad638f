"""ActorQ: int8 snapshots to actor processes, version tags checked on receipt, parity with fp32."""
from __future__ import annotations

import os

import numpy as np
import pytest

from lowrl_ros.core.train.actorq import ActorQConfig, ActorQLearner, StaleVersionError, VersionGate, run_actorq

TINY = dict(hidden=32, depth=2, batch_size=32, total_steps=600, warmup_steps=200, refresh_every=50,
            chunk_steps=25, eval_interval=600, eval_episodes=1, num_actors=2, seed=3)


def _chunk(version: int, n: int = 5) -> dict[str, np.ndarray]:
    return {"obs": np.zeros((n, 3), np.float32), "next_obs": np.zeros((n, 3), np.float32),
            "action": np.zeros((n, 1), np.float32), "behaviour": np.zeros((n, 1), np.float32),
            "reward": np.zeros(n, np.float32), "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool),
            "version": np.full(n, version, np.int64)}


def test_two_actor_processes_tag_transitions_with_increasing_versions():
    res = run_actorq(ActorQConfig(**TINY))
    assert res.env_steps >= 600 and res.gradient_steps >= (600 - 200)
    assert res.versions_published >= 600 // 50
    assert len(res.actors) == 2 and all(a["steps"] > 0 for a in res.actors)
    assert not res.torch_in_actors  # actors run the robot-side runtime only
    assert os.getpid() not in {a["pid"] for a in res.actors}  # really other processes
    for actor in (0, 1):
        versions = [(lo, hi) for a, lo, hi in res.chunk_versions if a == actor]
        assert versions, f"actor {actor} delivered nothing"
        flat = [v for pair in versions for v in pair]
        assert all(b >= a for a, b in zip(flat, flat[1:])), f"actor {actor} versions went back: {versions}"
        assert flat[0] >= 1 and flat[-1] > flat[0], f"actor {actor} never refreshed its snapshot: {versions}"
    assert res.bytes_per_broadcast > 0
    assert res.bytes_broadcast_total == pytest.approx(res.bytes_per_broadcast * res.versions_published * 2)
    assert len(res.snapshot_errors) == res.versions_published - 1  # every publish after v1 was checked
    assert res.snapshot_max_error == max(res.snapshot_errors) and res.snapshot_max_error < 0.2
    assert np.isfinite(res.final_return) and res.evals[-1]["env_steps"] == res.env_steps


def test_learner_rejects_stale_and_unknown_versions():
    learner = ActorQLearner(ActorQConfig(**{**TINY, "max_version_lag": 2}))
    for _ in range(6):
        learner.gate.publish()
    assert learner.receive(0, _chunk(4)) and len(learner.buffer) == 5  # lag 2: allowed
    assert not learner.receive(0, _chunk(3))  # lag 3 > 2: stale
    assert not learner.receive(1, _chunk(7))  # never published
    mixed = _chunk(6)
    mixed["version"][0] = 1  # one stale transition spoils the batch
    assert not learner.receive(1, mixed)
    assert len(learner.buffer) == 5 and learner.result.env_steps == 5
    assert learner.gate.rejected_stale == 2 and learner.gate.rejected_unknown == 1
    gate = VersionGate(0)
    with pytest.raises(StaleVersionError, match="never published"):
        gate.check(np.array([1]))


def test_int8_snapshot_matches_the_fp32_learner_within_the_quantization_budget():
    import torch

    cfg = ActorQConfig(**{**TINY, "hidden": 256})
    learner = ActorQLearner(cfg)
    obs = np.random.default_rng(0).uniform([-1, -1, -8], [1, 1, 8], (64, 3))
    data = learner.make_snapshot(1)
    err = learner.snapshot_error(obs)
    assert learner.snapshot.int8 and learner.snapshot.contract.version == 1
    assert 0 < err <= cfg.snapshot_tolerance  # quantized (not bit-equal) yet within budget
    fp32 = ActorQLearner(ActorQConfig(**{**TINY, "hidden": 256, "int8": False}))
    fp32_data = fp32.make_snapshot(1)
    assert fp32.snapshot_error(obs) < 1e-5
    assert len(data) < 0.4 * len(fp32_data)  # int8 broadcasts ~4x fewer bytes
    # The check can fail: after a learner step the old snapshot no longer matches.
    with torch.no_grad():
        for p in learner.agent.actor_params:
            p.add_(0.5 * torch.randn_like(p))
    assert learner.snapshot_error(obs) > cfg.snapshot_tolerance


def test_config_errors_say_how_to_fix():
    with pytest.raises(ValueError, match="chunk_steps"):
        ActorQConfig(chunk_steps=100, refresh_every=50)
    with pytest.raises(ValueError, match="algo"):
        ActorQConfig(algo="ppo")
