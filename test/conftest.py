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
