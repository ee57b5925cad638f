"""The one learner thread: ``run_learner(learner, inbox, gate, stop)`` (no ROS; torch only through the learner).

Both the on-robot fine-tuner (finetune_node) and the off-board trainer (trainer_node) run their learner in a
worker thread that lowers its own priority (``os.nice``: Linux applies it to this thread only, never the
callbacks), hands the learner what the callbacks queued, gates it on memory, and pauses after an error
instead of dying (recording and streaming must go on). The learners behind it satisfy ``core/types.py:
Learner``: :class:`SessionLearner` (a FineTuneSession, on the robot) and :class:`ReleasingLearner` (the
off-board fine-tuner or identifier, which release bundles).
"""
from __future__ import annotations

import collections
import gc
import math
import os
import threading
from pathlib import Path
from typing import Any, Callable

import psutil

from lowrl_ros.core.finetune.session import Event, FineTuneSession
from lowrl_ros.core.finetune.status import LEARNING, LearnGate
from lowrl_ros.core.types import Learner, Level

ERROR_PAUSE_S = 1.0  # after a failed slice: the error is logged, not spun on


def drain(learner: Learner, inbox: collections.deque) -> None:
    """Hand the learner what had arrived when it looked: not what arrives meanwhile, or a robot publishing
    faster than the (niced) learner drains would starve the updates for good."""
    for _ in range(len(inbox)):
        learner.receive(inbox.popleft())


def run_learner(learner: Learner, inbox: collections.deque, gate: Callable[[float], LearnGate],
                stop: threading.Event, *, nice: int = 0, log: Callable[[Level, str], None] = lambda _l, _m: None
                ) -> None:
    """Drive ``learner`` until ``stop`` is set (the body of a worker thread).

    Args:
        learner: receives ``inbox`` items and steps (core/types.py: Learner).
        inbox: items the callbacks queued (a deque: appends and pops are thread-safe).
        gate: the machine's side now, given the process's resident memory (MB): switch, tier, memory cap.
        stop: set to end the loop.
        nice: added to this thread's niceness (0: unchanged).
        log: where warnings and errors go (level, line).
    """
    if nice:
        try:
            os.nice(nice)  # Linux: this thread only
        except OSError as exc:
            log(Level.WARN, f"could not lower the learner's priority: {exc}")
    proc = psutil.Process()
    while not stop.is_set():
        try:
            drain(learner, inbox)
            now = gate(proc.memory_info().rss / 2**20)
            if now.rss_mb > now.memory_cap_mb:
                gc.collect()
                log(Level.WARN, f"resident memory {now.rss_mb:.0f} MB is above memory_cap_mb={now.memory_cap_mb:.0f}: "
                                "learning paused; lower buffer_size or batch_size, or raise the cap")
            wait = learner.step(now)
        except Exception as exc:  # noqa: BLE001 - the learner failing must not stop recording or streaming
            reason = f"{type(exc).__name__}: {exc}"
            learner.fail(reason)
            log(Level.ERROR, f"learner paused: {reason}")
            wait = ERROR_PAUSE_S
        if wait > 0:
            stop.wait(wait)


class SessionLearner:
    """A FineTuneSession as a Learner: inbox items ``("transition", t)``, ``("episode", Episode)``,
    ``("rejected", version, reason)``; the session's events go to ``carry`` (the node's swap requests)."""

    def __init__(self, session: FineTuneSession, updates_per_slice: int,
                 carry: Callable[[list[Event]], None]) -> None:
        self.session, self.updates_per_slice, self.carry = session, updates_per_slice, carry
        self.error = ""

    def receive(self, item: Any) -> None:
        if item[0] == "transition":
            self.session.add(item[1])
        elif item[0] == "episode":
            episode = item[1]
            self.carry(self.session.episode_ended(episode.version, episode.ret, episode.start_obs))
        else:  # ("rejected", version, reason)
            self.carry(self.session.on_rejected(item[1], item[2], by="the policy node"))

    def step(self, gate: LearnGate) -> float:
        self.carry(self.session.step(self.updates_per_slice, gate))
        if self.session.state != LEARNING:
            return 0.1
        return 0.02 if self.session.last_updates == 0 else 0.0

    def fail(self, reason: str) -> None:
        self.error = reason
        self.session.pause(f"learner error: {reason}")


class ReleasingLearner:
    """An off-board learner (OffboardLearner, OffboardSysid) as a Learner: inbox items ``("batch", indices,
    transitions)`` and ``("rejected", version, reason)``; each bundle it releases goes to ``released``."""

    def __init__(self, learner: Any, released: Callable[[Path], None], updates_per_slice: int = 8) -> None:
        self.learner, self.released, self.updates_per_slice = learner, released, updates_per_slice
        self.error = ""
        self._paths: list[Path] = []

    def receive(self, item: Any) -> None:
        if item[0] == "batch":
            self._paths += self.learner.receive(item[1], item[2])
        else:
            self._paths += self.learner.on_rejected(item[1], item[2])

    def step(self, _gate: LearnGate) -> float:
        paths, self._paths = self._paths + self.learner.step(self.updates_per_slice), []
        for path in paths:
            self.released(path)
        return 0.0 if paths or self.learner.can_learn() else 0.05

    def fail(self, reason: str) -> None:
        self.error = reason


def open_gate(rss_mb: float) -> LearnGate:
    """The off-board computer's gate: always open (no tier, no cap), the memory measured for the record."""
    return LearnGate(rss_mb=rss_mb, memory_cap_mb=math.inf)
