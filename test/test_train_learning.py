"""Learning: RLx2 sparse SAC (actor 90%, critic 80%) solves Pendulum-v1 within 10k env steps.

Uses the shipped preset config/train_pendulum_sac.yaml unchanged except for stopping at the
target (evaluations every 1000 steps, 5 fixed-seed episodes of the deterministic policy).
"""
from __future__ import annotations

from pathlib import Path

from lowrl_ros.core.train.config import TrainConfig
from lowrl_ros.core.train.trainer import Trainer

PRESET = Path(__file__).resolve().parents[1] / "config" / "train_pendulum_sac.yaml"


def test_sparse_sac_solves_pendulum_within_10k_steps(tmp_path):
    cfg = TrainConfig.from_yaml(PRESET, stop_return=-200.0, seed=0, progress=False)
    assert (cfg.variant, cfg.actor_sparsity, cfg.critic_sparsity, cfg.total_steps) == ("rlx2", 0.9, 0.8, 10_000)
    trainer = Trainer(cfg, tmp_path)
    result = trainer.run()
    assert result.steps_to_target is not None and result.steps_to_target <= 10_000, (
        f"best evaluation {result.best_eval_return:.1f} after {result.env_steps} steps")
    assert result.last_eval_return >= -200.0
    # It learned *sparse*: the final networks hold the configured fraction of weights.
    actor = trainer.agent.actor_masker
    density = sum(float(m.sum()) for m in actor.masks) / sum(m.numel() for m in actor.masks)
    assert abs(density - 0.1) < 0.01
