"""Helpers for tests with real rclpy nodes: spin until a condition or a deadline, never a fixed sleep."""
from __future__ import annotations

import time
from typing import Callable


def spin_until(executor, predicate: Callable[[], bool], timeout: float = 10.0, step: float = 0.01) -> bool:
    """Spin ``executor`` until ``predicate()`` is true or ``timeout`` seconds pass; return the predicate."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        executor.spin_once(timeout_sec=step)
    return predicate()


def wait_for_match(executor, endpoint, timeout: float = 10.0) -> bool:
    """Wait until a publisher has a subscriber (or a subscription has a publisher): DDS discovery."""
    if hasattr(endpoint, "get_subscription_count"):
        return spin_until(executor, lambda: endpoint.get_subscription_count() > 0, timeout)
    return spin_until(executor, lambda: endpoint.get_publisher_count() > 0, timeout)
