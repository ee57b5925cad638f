"""run_learner (core/finetune/learner_loop.py): the one learner thread over the Learner protocol (no ROS)."""
from __future__ import annotations

import collections
import threading
import time

from lowrl_ros.core.finetune.learner_loop import ReleasingLearner, drain, open_gate, run_learner
from lowrl_ros.core.finetune.status import LearnGate
from lowrl_ros.core.types import Learner, Level


class Counting:
    """A learner that records what it got, fails on the item "boom", and asks to stop after ``slices`` slices."""

    def __init__(self, stop: threading.Event, slices: int) -> None:
        self.items, self.gates, self.failures, self.stop, self.slices = [], [], [], stop, slices

    def receive(self, item) -> None:
        if item == "boom":
            raise RuntimeError("bad item")
        self.items.append(item)

    def step(self, gate) -> float:
        self.gates.append(gate)
        if len(self.gates) >= self.slices:
            self.stop.set()
        return 0.0

    def fail(self, reason: str) -> None:
        self.failures.append(reason)


def test_the_loop_drains_gates_and_pauses_after_an_error():
    stop = threading.Event()
    learner = Counting(stop, slices=3)
    assert isinstance(learner, Learner)
    inbox = collections.deque(["a", "boom", "b"])
    logs: list[tuple[Level, str]] = []
    t0 = time.monotonic()
    run_learner(learner, inbox, lambda rss: LearnGate(rss_mb=rss, memory_cap_mb=1.0), stop,
                log=lambda level, line: logs.append((level, line)))
    # "a" taken, "boom" failed the round (a 1 s pause), then "b" and the slices
    assert learner.items == ["a", "b"] and learner.failures == ["RuntimeError: bad item"]
    assert time.monotonic() - t0 >= 0.9
    assert (Level.ERROR, "learner paused: RuntimeError: bad item") in logs
    assert all(g.rss_mb > 1.0 for g in learner.gates)  # measured: this process holds more than 1 MB
    assert any(level == Level.WARN and "above memory_cap_mb=1" in line for level, line in logs)


def test_an_offboard_learner_releases_through_the_loop(tmp_path):
    released: list = []

    class Offboard:
        def __init__(self) -> None:
            self.got = []

        def receive(self, indices, transitions):
            self.got.append((indices, transitions))
            return [tmp_path / "v2.lowrl"]

        def on_rejected(self, version, reason):
            return [tmp_path / f"v{version + 1}.lowrl"]

        def step(self, n):
            return []

        def can_learn(self) -> bool:
            return False

    inner = Offboard()
    loop = ReleasingLearner(inner, released.append)
    drain(loop, collections.deque([("batch", [0], ["t"]), ("rejected", 2, "bad")]))
    assert inner.got == [([0], ["t"])] and released == []
    assert loop.step(open_gate(10.0)) == 0.0  # released something: at once again
    assert released == [tmp_path / "v2.lowrl", tmp_path / "v3.lowrl"]
    assert loop.step(open_gate(10.0)) == 0.05  # nothing to do: wait
