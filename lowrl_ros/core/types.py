"""Small shared vocabulary of the core, both sides of the robot boundary (imports numpy only).

- ``Observation`` / ``Action``: the numpy boundary every policy, adapter and controller speaks
  (float64 vectors; Stable-Baselines3's ``type_aliases`` idea).
- ``Level``: diagnostic levels with the byte values of diagnostic_msgs/DiagnosticStatus, so a pure
  status function in core can say OK/WARN/ERROR/STALE without importing ROS; only
  ``lowrl_ros/ros/diagnostics.py`` turns a Level into a message.
- ``StatusEntry``: one named status (what a DiagnosticStatus carries), the output of the pure
  status functions (``core/runtime/status.py``, ``core/budget/monitor.py: budget_status``).
- ``Silence``: an input not heard for longer than its timeout, and since when: the one rule behind
  every STALE input entry (policy inputs, the budget monitor's policy stats, the fine-tuner's step rows).
- ``Policy``: what running a policy needs (``act`` and the I/O ``contract``); the engines'
  ``Policy`` satisfies it, as does a test's fake.
"""
from __future__ import annotations

import enum
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Observation = npt.NDArray[np.float64]  # one observation vector [obs_dim], normalised by the policy itself
Action = npt.NDArray[np.float64]  # one action vector [action_dim], clamped to the contract's limits


class Level(enum.IntEnum):
    """Diagnostic level; the values are diagnostic_msgs/DiagnosticStatus's OK, WARN, ERROR, STALE bytes."""

    OK = 0
    WARN = 1
    ERROR = 2
    STALE = 3


@dataclass(frozen=True)
class StatusEntry:
    """One named status: what ``lowrl_ros.ros.diagnostics`` turns into a DiagnosticStatus.

    Attributes:
        name: the diagnostic name, grouped under ``lowrl/<node>/...`` for the aggregator.
        level: OK, WARN, ERROR or STALE.
        message: one line for rqt_robot_monitor.
        values: key/value pairs shown beside it (formatted by the ROS side).
    """

    name: str
    level: Level
    message: str
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Silence:
    """An input not heard for longer than its timeout: what it is, for how long, and since when.

    The caller keeps its own clock (``now``, any monotonic one) and passes the wall clock beside it
    (``wall_now``), so a person reads *when* it went stale as a time of day, not a clock reading.

    Attributes:
        what: the input, as a person names it (a topic, "policy stats", "step rows").
        heard: a message came at least once (False: nothing since the watch began).
        silent_s: seconds since the newest message (or since the watch began).
        timeout_s: the input's timeout.
        since: wall-clock time (epoch seconds) it went stale: the newest message (or the watch's start) + timeout.
    """

    what: str
    heard: bool
    silent_s: float
    timeout_s: float
    since: float

    @classmethod
    def of(cls, what: str, last: float | None, start: float | None, timeout_s: float, now: float,
           wall_now: float) -> "Silence | None":
        """The silence of an input last heard at ``last`` (None: never) and watched since ``start`` (None: not
        watched yet), at ``now`` on the same clock; None while it is fresh or not watched."""
        ref = last if last is not None else start
        if ref is None or now - ref <= timeout_s:
            return None
        silent = now - ref
        return cls(what, last is not None, silent, timeout_s, wall_now - (silent - timeout_s))

    @property
    def since_text(self) -> str:
        """When it went stale, ISO 8601 UTC to the second (``2026-11-27T20:41:03Z``)."""
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since))

    def message(self) -> str:
        """One line for rqt_robot_monitor: what, since when, how long, the timeout."""
        quiet = f"no message for {self.silent_s:.1f} s" if self.heard else f"nothing heard in {self.silent_s:.1f} s"
        return f"{self.what} stale since {self.since_text[11:19]} UTC: {quiet} (timeout {self.timeout_s:g} s)"

    def values(self) -> dict[str, Any]:
        """The keys a STALE entry carries (a fresh one carries ``stale_since`` "" beside them)."""
        return {"stale_since": self.since_text, "silent_s": round(self.silent_s, 3), "timeout_s": self.timeout_s}


class ContractLike(Protocol):
    """The part of an artifact's PolicyContract that the runtime checks against."""

    obs_names: Sequence[str]
    obs_dim: int
    action_dim: int


@runtime_checkable
class Policy(Protocol):
    """A policy the control loop can run: ``act(obs) -> action`` and its I/O contract.

    The engines' ``lowrl_ros.core.runtime.engines.Policy`` satisfies it (ONNX Runtime or numpy),
    and so does any fake with the same two members.
    """

    contract: Any

    def act(self, obs: Observation) -> Action: ...


@runtime_checkable
class Learner(Protocol):
    """What a learner thread drives (Acme's ``acme/core.py`` Learner): ``core/finetune/learner_loop.py:
    run_learner`` hands it what arrived (:meth:`receive`), asks it for a slice of work (:meth:`step`), and tells
    it when a slice failed (:meth:`fail`). The fine-tuner's session, the off-board fine-tuner and the off-board
    identifier each sit behind it, so the thread (priority, memory gate, error pause) is written once.
    """

    def receive(self, item: Any) -> None:
        """One item from the inbox (a transition, a batch, an episode, a rejected version)."""

    def step(self, gate: Any) -> float:
        """One slice of learning while ``gate`` (a LearnGate) allows; the seconds to wait before the next one."""

    def fail(self, reason: str) -> None:
        """The last slice raised: hold learning (an operator or a retry clears it)."""
