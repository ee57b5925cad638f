"""Helpers for tests with real rclpy nodes: spin until a condition or a deadline (``spin_until``), or for a
stated wall-clock time (``spin_for``), never a bare sleep."""
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


def spin_for(executor, seconds: float, step: float = 0.01) -> None:
    """Spin ``executor`` for ``seconds`` of wall-clock time (nothing to wait for: a paced loop, a window to
    count in, or letting a process run). ``seconds`` <= 0 returns at once; the last ``spin_once`` may overrun
    the deadline by up to ``step``, exactly as the ``spin_until(executor, lambda: False, seconds)`` it replaces."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        executor.spin_once(timeout_sec=step)


def wait_for_match(executor, endpoint, timeout: float = 10.0) -> bool:
    """Wait until a publisher has a subscriber (or a subscription has a publisher): DDS discovery."""
    if hasattr(endpoint, "get_subscription_count"):
        return spin_until(executor, lambda: endpoint.get_subscription_count() > 0, timeout)
    return spin_until(executor, lambda: endpoint.get_publisher_count() > 0, timeout)


PENDULUM_FIELDS = ["pendulum_joint.cos_position", "pendulum_joint.sin_position", "pendulum_joint.velocity"]


def active_policy_node(context, policy_path, *, executor=None, activate: bool = True, **params):
    """The tests' one PolicyNode factory: on the sim pendulum's joint states, set for tests (numpy engine,
    0.1 s diagnostics, no soft start, 1 s watchdog); ``params`` add or override. Without a robot_file the
    ``mode``/``control_period_s`` parameters rule (``robot_timing: parameters``: event mode, one command per
    joint state, what these tests exchange on), unless ``robot_timing`` is given. Added to ``executor``
    (if given) before it is configured and activated; ``activate=False`` leaves it unconfigured."""
    from rclpy.parameter import Parameter

    from lowrl_ros.ros.policy_node import PolicyNode

    values = {"policy_path": str(policy_path), "obs_fields": PENDULUM_FIELDS, "engine": "numpy",
              "diagnostics_period_s": 0.1, "soft_start_steps": 0, "watchdog_timeout_s": 1.0,
              **({} if "robot_file" in params else {"robot_timing": "parameters"}), **params}
    node = PolicyNode(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
    if executor is not None:
        executor.add_node(node)
    if activate:
        node.trigger_configure()
        node.trigger_activate()
    return node
