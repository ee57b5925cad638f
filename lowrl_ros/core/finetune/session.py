"""FineTuneSession: the one fine-tuning loop (no ROS), for the robot's node, the off-board trainer and the bench.

Read top to bottom, a session is::

    session = FineTuneSession(kit, config, work_dir, base_path=...)
    session.resume()                       # a restart: refill the buffer from the transition log
    for each recorded transition:
        session.add(t)
        events = session.step(n, gate)     # up to n updates while the gate is open; a version when due
    for each episode that counts (EpisodeJudge: one version ran all of it):
        events = session.episode_ended(version, ret, start_obs)   # judge it; maybe roll back
    for each version the robot refused:
        events = session.on_rejected(version, reason)              # a safety trip

The events say what the caller must carry to the robot: :class:`VersionMade` (deploy a new
version), :class:`Rollback` (deploy an older one again; with ``newer_only`` the session has
already made a newer version carrying its weights, for a receiver that accepts only newer versions,
such as the bundle stream), :class:`Paused` (a safety trip with nothing better to go back to),
:class:`Judged` (what the tracker concluded; for the log). The node turns them into swap
requests, the trainer into bundles, the benchmark into artifact loads; the learner's internals
stay in here and in :class:`~lowrl_ros.core.finetune.learner.FineTuner`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from lowrl_ros.core.finetune.kit import FineTuneKit
from lowrl_ros.core.finetune.learner import FineTuner
from lowrl_ros.core.finetune.config import FineTuneConfig
from lowrl_ros.core.finetune.status import LEARNING, LearnGate, learn_gate
from lowrl_ros.core.finetune.transition_log import Transition, read_log
from lowrl_ros.core.finetune.versions import Decision, VersionRecord


@dataclass(frozen=True)
class VersionMade:
    """A new version: deploy ``record``."""

    record: VersionRecord
    reason: str


@dataclass(frozen=True)
class Rollback:
    """Go back to ``target``; with ``newer_only``, ``release`` is the newer version carrying its weights."""

    target: VersionRecord
    reason: str
    release: VersionRecord | None = None


@dataclass(frozen=True)
class Paused:
    """Learning stopped on a safety trip; an operator clears it (:meth:`FineTuneSession.clear_pause`)."""

    reason: str


@dataclass(frozen=True)
class Judged:
    """The tracker's conclusion on an episode (a new best, a score); nothing to deploy."""

    reason: str


Event = Union[VersionMade, Rollback, Paused, Judged]


@dataclass(frozen=True)
class ResumeReport:
    """What :meth:`FineTuneSession.resume` found: transitions refilled, log segments read, learner state."""

    transitions: int
    segments: int
    from_wal: int
    updates: int
    running: int | None


class FineTuneSession:
    """The fine-tune loop over one :class:`FineTuner`: add, step, episode_ended, on_rejected -> events.

    Args:
        kit, config, work_dir, base_path, base_version: the learner's (FineTuner); ``work_dir``
            holds its resume point and, under ``transitions/``, the transition log.
        nstep, train_on_truncated: FineTuner's n-step options (the benchmark's experiment).
        newer_only: a rollback is delivered as a newer version carrying the best one's weights
            (the bundle stream accepts only newer versions).
        versions_between_episodes: make versions only when an episode ends, after it is judged
            (lockstep: every episode then runs one version); else as soon as one is due, after an update or
            after the judgement it waited for.
    """

    def __init__(self, kit: FineTuneKit, config: FineTuneConfig, work_dir: str | Path, *, base_path: str = "",
                 base_version: int | None = None, nstep: int = 1, train_on_truncated: bool = False,
                 newer_only: bool = False, versions_between_episodes: bool = False) -> None:
        self.work_dir = Path(work_dir)
        self.tuner = FineTuner(kit, config, self.work_dir, base_path=base_path, base_version=base_version,
                               nstep=nstep, train_on_truncated=train_on_truncated)
        self.newer_only = newer_only
        self.versions_between_episodes = versions_between_episodes
        self.state = "starting"  # the learn gate's last answer (status.py's states)
        self.paused_reason = ""
        self.last_decision = "none"
        self.last_updates = 0  # updates the last step ran
        self.rejections = 0  # versions the robot refused while they were the running one (on_rejected)
        self.rollbacks = 0  # rollback decisions (a judged version too far below the best one, or a safety trip)

    # ---- data ---------------------------------------------------------------------------------
    def resume(self, log_dir: str | Path | None = None) -> ResumeReport:
        """Refill the buffer from the transition log (default ``work_dir/transitions``): a buffer's worth.

        The learner's own resume point (learner.pt) already counts the transitions it saw; the log
        holds every one counted before, so the count becomes max(saved, read), never their sum.
        """
        batch, report = read_log(Path(log_dir) if log_dir is not None else self.work_dir / "transitions",
                                 max_transitions=self.tuner.config.buffer_size)
        seen = self.tuner.transitions_seen
        self.tuner.add_batch(batch)
        self.tuner.transitions_seen = max(seen, len(batch))
        return ResumeReport(len(batch), report.segments, report.from_wal, self.tuner.updates,
                            self.tuner.tracker.current)

    def add(self, t: Transition) -> bool:
        """One recorded transition; False when it is kept out of training (FineTuner.add)."""
        return self.tuner.add(t.obs, t.action, t.reward, t.next_obs, t.terminated, t.truncated, t.intervention)

    # ---- learning -----------------------------------------------------------------------------
    def can_learn(self) -> bool:
        """Not paused, and the learner has data to learn from now."""
        return not self.paused_reason and self.tuner.can_update()

    def step(self, max_updates: int, gate: LearnGate | None = None) -> list[Event]:
        """Up to ``max_updates`` updates while ``gate`` is open; then a version if one is due.

        ``self.state`` says why no update ran (the gate's state); ``self.last_updates`` how many did.
        """
        self.last_updates = 0
        self.state = learn_gate(gate or LearnGate(), self.paused_reason, self.tuner.can_update())
        if self.state != LEARNING:
            return []
        self.last_updates = self.tuner.update(max_updates)
        if self.last_updates == 0:
            return []
        if not self.tuner.weights_finite():
            return self._decide(self.tuner.on_safety_trip("the learner's weights became non-finite"))
        return [] if self.versions_between_episodes else self._version_if_due()

    def episode_ended(self, version: int, ret: float, start_obs: Any = None) -> list[Event]:
        """An episode that counts for ``version`` (EpisodeJudge) returned ``ret``: judge it."""
        events = self._decide(self.tuner.on_episode(version, ret, start_obs))
        # A version whose updates are done and that waited only for this judgement is made now, not at the
        # next update: that one may wait for data the robot no longer sends (e.g. it stopped for a reset).
        if self.versions_between_episodes or not self.paused_reason:
            events += self._version_if_due()
        return events

    def on_rejected(self, version: int, reason: str, *, by: str = "the robot") -> list[Event]:
        """The robot refused ``version``: a safety trip if it is the running one (else the answer is stale)."""
        if version != self.tuner.tracker.current:
            return []
        self.rejections += 1
        return self._decide(self.tuner.on_safety_trip(f"{by} rejected v{version}: {reason}"))

    def pause(self, reason: str) -> None:
        """Hold learning (e.g. the learner failed); :meth:`clear_pause` resumes it."""
        self.paused_reason = reason

    def clear_pause(self) -> None:
        """An operator re-enabled learning: a safety pause ends."""
        self.paused_reason = ""

    def close(self) -> None:
        """Save the learner (its resume point)."""
        self.tuner.save()

    # ---- decisions -> events ------------------------------------------------------------------
    def _version_if_due(self) -> list[Event]:
        if not self.tuner.version_due():
            return []
        record = self.tuner.make_version()
        self.last_decision = f"v{record.version} made after {record.updates} updates"
        return [VersionMade(record, self.last_decision)]

    def _decide(self, decision: Decision) -> list[Event]:
        if decision.reason:
            self.last_decision = decision.reason
        if decision.action == "pause":
            self.paused_reason = decision.reason
            return [Paused(decision.reason)]
        if decision.action == "rollback":
            self.rollbacks += 1
            if not self.newer_only:
                return [Rollback(decision.target, decision.reason)]
            # The learner now holds the best version's weights; the receiver takes only newer versions.
            record = self.tuner.make_version()
            self.last_decision = (f"rollback: v{record.version} carries v{decision.target.version}'s weights "
                                  f"({decision.reason})")
            return [Rollback(decision.target, self.last_decision, release=record)]
        return [Judged(decision.reason)] if decision.reason else []
