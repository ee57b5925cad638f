"""Off-board fine-tuning: the robot streams its transitions, the off-board computer learns from them.

When the robot's computer cannot spare the CPU or memory for learning, finetune_node runs with
``learner: offboard``: it still records every transition to disk (nothing is lost), and streams
them on ``/lowrl/transitions``; trainer_node, given a fine-tune kit, learns from them with the
same FineTuneSession (updates, versions, judging, rollback) and releases each new version as a signed
bundle through its usual stream (``/lowrl/policy_bundle``), so it reaches the policy node through
the same validation and hot-swap as any bundle. No ROS here.

The wire format of ``/lowrl/transitions`` is in wire.py; which episodes count, in versions.py
(EpisodeJudge: a lost transition spoils its episode).

A rollback on the off-board side cannot re-send an older version (the robot accepts only newer
versions): the learner is restored to the best version's weights and released again as the next
version, with the best version as its parent.
"""
from __future__ import annotations

from pathlib import Path

from lowrl_ros.core.finetune.kit import FineTuneKit
from lowrl_ros.core.finetune.learner import FineTuner
from lowrl_ros.core.finetune.config import FineTuneConfig
from lowrl_ros.core.finetune.session import Event, FineTuneSession, Rollback, VersionMade
from lowrl_ros.core.finetune.transition_log import Transition, TransitionLogConfig, TransitionLogWriter
from lowrl_ros.core.finetune.versions import EpisodeJudge, VersionRecord
from lowrl_ros.core.runtime.bundle import save_bundle


class OffboardLearner:
    """A FineTuneSession fed by the stream; new versions become bundles in ``release_dir``.

    Args:
        kit: the fine-tune kit of the policy the robot runs.
        config: FineTuneConfig.
        work_dir: the learner's resume point (learner.pt, versions.json, versions/) and the log of
            every transition received (transitions/), from which a restart refills the buffer.
        release_dir: where ``vNNNNNN.lowrl`` bundles go (the trainer node's watch_dir).
        base_path, base_version: the artifact the robot starts with and its version.
        log_config: settings of the transition log kept here.
    """

    def __init__(self, kit: FineTuneKit, config: FineTuneConfig, work_dir: str | Path, release_dir: str | Path,
                 base_path: str = "", base_version: int | None = None,
                 log_config: TransitionLogConfig | None = None) -> None:
        self.work_dir, self.release_dir = Path(work_dir), Path(release_dir)
        self.release_dir.mkdir(parents=True, exist_ok=True)
        # Open (and repair) the log first, then read it back: resume = reload what is on disk.
        self.writer = TransitionLogWriter(self.work_dir / "transitions", log_config or TransitionLogConfig())
        self.session = FineTuneSession(kit, config, self.work_dir, base_path=base_path, base_version=base_version,
                                       newer_only=True)  # the robot accepts only newer bundle versions
        self.resumed = self.session.resume().transitions
        self.judge = EpisodeJudge()
        self.received = 0
        self.released: list[int] = []
        self.obs_dim, self.action_dim = kit.obs_dim, kit.action_dim  # the transitions' size

    @property
    def tuner(self) -> FineTuner:
        return self.session.tuner

    def can_learn(self) -> bool:
        """Whether :meth:`step` has updates to make now."""
        return self.session.can_learn()

    @property
    def paused_reason(self) -> str:
        return self.session.paused_reason

    @property
    def last_decision(self) -> str:
        return self.session.last_decision

    def receive(self, indices: list[int], transitions: list[Transition]) -> list[Path]:
        """Record and learn from a batch; returns the bundles released (a rollback releases one)."""
        released = []
        for index, t in zip(indices, transitions):
            self.writer.append(t)
            self.received += 1
            self.session.add(t)
            ended = self.judge.add(index, t)
            if ended is not None:
                released += self._release(self.session.episode_ended(*ended, self.judge.ended_start_obs))
        return released

    def step(self, max_updates: int) -> list[Path]:
        """Up to ``max_updates`` updates; a new version when one is due. Returns bundles released."""
        return self._release(self.session.step(max_updates))

    def on_rejected(self, version: int, reason: str) -> list[Path]:
        """The robot refused a version we released: a safety trip (roll back to the best)."""
        return self._release(self.session.on_rejected(version, reason))

    def _release(self, events: list[Event]) -> list[Path]:
        paths = []
        for event in events:
            record: VersionRecord | None = event.record if isinstance(event, VersionMade) else \
                event.release if isinstance(event, Rollback) else None
            if record is not None:
                paths.append(save_bundle(self.release_dir / f"v{record.version:06d}.lowrl", {"full": record.path}))
                self.released.append(record.version)
        return paths

    def close(self) -> None:
        self.writer.close()
        self.session.close()
