"""ros/spinning.guarded: a timer callback that raises is logged (and counted), never raised into the executor."""
from __future__ import annotations

import pytest

from lowrl_ros.ros.spinning import guarded

pytestmark = pytest.mark.ros  # imports the ros layer (rclpy), though it spins no node


class FakeLogger:
    def __init__(self) -> None:
        self.errors: list[tuple[str, dict]] = []

    def error(self, line: str, **kwargs) -> None:
        self.errors.append((line, kwargs))


class FakeNode:
    def __init__(self) -> None:
        self.logger = FakeLogger()

    def get_logger(self) -> FakeLogger:
        return self.logger


def test_guarded_logs_the_failure_and_calls_on_error():
    node, seen = FakeNode(), []

    def publish_status() -> None:
        raise RuntimeError("publisher gone")

    run = guarded(node, publish_status, on_error=seen.append, throttle_s=1.0)
    run()  # must not raise
    assert node.logger.errors == [("publish_status failed: RuntimeError: publisher gone",
                                   {"throttle_duration_sec": 1.0})]
    assert len(seen) == 1 and isinstance(seen[0], RuntimeError)


def test_guarded_passes_a_good_call_through_and_takes_no_arguments():
    node, calls = FakeNode(), []
    run = guarded(node, lambda: calls.append(1))
    run()
    assert calls == [1] and node.logger.errors == []
    guarded(node, lambda: 1 / 0)()
    assert node.logger.errors[0][1] == {}  # not throttled unless asked
