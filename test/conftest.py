"""Shared test set-up: DDS stays on this machine, on a private domain per test session."""
from __future__ import annotations

import os
import random

# Must happen before anything initialises rclpy (and is inherited by node subprocesses).
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_LOCALHOST_ONLY"] = "1"
if "LOWRL_TEST_DOMAIN_ID" in os.environ:
    os.environ["ROS_DOMAIN_ID"] = os.environ["LOWRL_TEST_DOMAIN_ID"]
else:
    # Private per session, inside 1..101 (higher ids collide with Linux ephemeral ports);
    # 0 (the default domain) and the Makefile's 61 are avoided.
    os.environ["ROS_DOMAIN_ID"] = str(random.SystemRandom().choice([d for d in range(1, 102) if d != 61]))

import pytest  # noqa: E402


@pytest.fixture
def ros_context():
    """A fresh rclpy context for one test, shut down afterwards."""
    rclpy = pytest.importorskip("rclpy")
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        yield ctx
    finally:
        if ctx.ok():
            rclpy.shutdown(context=ctx)


# A real (tiny) `lowrl train` run: RLx2 SAC on Pendulum-v1, 300 steps. Enough for a policy and a
# kit with masks; its return means nothing.
TINY_TRAIN = dict(total_steps=300, warmup_steps=100, batch_size=32, hidden=32, eval_interval=300, eval_episodes=1,
                  mask_interval=20, buffer_min=150, buffer_check_size=64, buffer_check_interval=100,
                  checkpoint_interval=0, progress=False, variant="rlx2")


@pytest.fixture(scope="session")
def tiny_kit(tmp_path_factory):
    """(kit dir, its int8 artifact) from one tiny `lowrl train` run, shared by the session."""
    from lowrl_ros.core.finetune.learner import write_kit
    from lowrl_ros.core.train.config import TrainConfig
    from lowrl_ros.core.train.export import export_actor
    from lowrl_ros.core.train.trainer import Trainer

    run = tmp_path_factory.mktemp("tiny_run")
    trainer = Trainer(TrainConfig(**TINY_TRAIN), run)
    result = trainer.run()
    _, int8 = export_actor(trainer.agent, trainer.env, run, result.env_steps)
    return write_kit(run, tmp_path_factory.mktemp("tiny_kit"), artifact=int8), int8
