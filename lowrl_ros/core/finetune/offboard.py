"""Off-board fine-tuning: the robot streams its transitions, the off-board computer learns from them.

When the robot's computer cannot spare the CPU or memory for learning, finetune_node runs with
``learner: offboard``: it still records every transition to disk (nothing is lost), and streams
them on ``/lowrl/transitions``; trainer_node, given a fine-tune kit, learns from them with the
same FineTuner (updates, versions, judging, rollback) and releases each new version as a signed
bundle through its usual stream (``/lowrl/policy_bundle``), so it reaches the policy node through
the same validation and hot-swap as any bundle. No ROS here: the wire format and the learner.

Wire format of ``/lowrl/transitions`` (std_msgs/Float64MultiArray, reliable): a batch of rows,
``layout.dim[0]`` = (``"transitions"``, rows, rows * width), ``layout.dim[1]`` = (the row's fields
with their sizes, width, width). A row is exactly a record of the robot's transition log
(lowrl_ros/core/finetune/transition_log.py: obs, action, reward, next_obs, terminated, truncated,
policy_version, stamp; same topic name, same field order) followed by ``index``, e.g. the label
``obs:3;action:1;reward:1;next_obs:3;terminated:1;truncated:1;policy_version:1;stamp:1;index:1``.
``index`` counts the robot's transitions from 0 at each start of its node and never repeats within
one, so the receiver sees a lost batch (a gap) and does not judge an episode with a gap; the
robot's own log still holds every transition.

A rollback on the off-board side cannot re-send an older version (the robot accepts only newer
versions): the learner is restored to the best version's weights and released again as the next
version, with the best version as its parent.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lowrl_ros.core.finetune.transition_log import Transition, transition_label

def row_width(obs_dim: int, act_dim: int) -> int:
    return 2 * obs_dim + act_dim + 6  # reward, terminated, truncated, policy_version, stamp, index


def column_names(obs_dim: int, act_dim: int) -> str:
    return transition_label(obs_dim, act_dim) + ";index:1"


def encode_transitions(transitions: list[Transition], first_index: int) -> np.ndarray:
    """Rows (float64, shape [n, width]) for transitions numbered from ``first_index``."""
    if not transitions:
        raise ValueError("no transitions to encode")
    obs_dim, act_dim = len(transitions[0].obs), len(transitions[0].action)
    rows = np.empty((len(transitions), row_width(obs_dim, act_dim)), dtype=np.float64)
    for i, t in enumerate(transitions):
        rows[i] = np.concatenate([t.obs, t.action, [t.reward], t.next_obs,
                                  [float(t.terminated), float(t.truncated), t.policy_version, t.stamp,
                                   first_index + i]])
    return rows


def decode_transitions(data, obs_dim: int, act_dim: int) -> tuple[list[int], list[Transition]]:
    """(indices, transitions) of a message's flat data; ValueError saying what is wrong.

    A row with a non-finite value is dropped (the robot's log keeps it; it is not trained on)."""
    flat = np.asarray(data, dtype=np.float64).ravel()
    width, n, m = row_width(obs_dim, act_dim), obs_dim, act_dim
    if flat.size == 0 or flat.size % width:
        raise ValueError(f"a transitions message has {flat.size} values, not a multiple of the row width {width} "
                         f"(2 x obs_dim {obs_dim} + act_dim {act_dim} + 6); is the robot's policy the kit's?")
    indices, out = [], []
    for r in flat.reshape(-1, width):
        if not np.isfinite(r).all():
            continue
        tail = r[2 * n + m + 1:]
        indices.append(int(tail[4]))
        out.append(Transition(obs=r[:n].copy(), action=r[n:n + m].copy(), reward=float(r[n + m]),
                              next_obs=r[n + m + 1:2 * n + m + 1].copy(), terminated=bool(tail[0]),
                              truncated=bool(tail[1]), policy_version=int(tail[2]), stamp=float(tail[3])))
    return indices, out


@dataclass
class EpisodeJudge:
    """Episode returns from a stream of transitions: an episode counts for a version only when that
    version ran all of it and no transition of it was lost."""

    total: float = 0.0
    version: int | None = None
    whole: bool = True
    expected_index: int | None = None
    lost: int = 0  # transitions missing from the stream (gaps in the index)
    finished: list[tuple[int, float]] = field(default_factory=list)
    start_obs: Any = None  # the first observation of the episode under way
    ended_start_obs: Any = None  # ... and of the episode that ended last (the score's baseline)

    def add(self, index: int, t: Transition) -> tuple[int, float] | None:
        """Count one transition; returns (version, return) when it ends a judged episode."""
        if self.expected_index is not None and index != self.expected_index:
            if index > self.expected_index:
                self.lost += index - self.expected_index
            self.whole = False  # a gap (or a repeat): this episode is not judged
        self.expected_index = index + 1
        if self.version is None:
            self.version, self.start_obs = t.policy_version, t.obs
        elif t.policy_version != self.version:
            self.whole = False
        self.total += t.reward
        if not (t.terminated or t.truncated):
            return None
        result = (self.version, self.total) if self.whole and self.version and math.isfinite(self.total) else None
        self.total, self.version, self.whole, self.ended_start_obs = 0.0, None, True, self.start_obs
        if result is not None:
            self.finished.append(result)
        return result


class OffboardLearner:
    """FineTuner on transitions from the stream; new versions become bundles in ``release_dir``.

    Args:
        kit: the fine-tune kit of the policy the robot runs.
        config: FineTuneConfig.
        work_dir: the learner's resume point (learner.pt, versions.json, versions/) and the log of
            every transition received (transitions/), from which a restart refills the buffer.
        release_dir: where ``vNNNNNN.lowrl`` bundles go (the trainer node's watch_dir).
        base_path, base_version: the artifact the robot starts with and its version.
    """

    def __init__(self, kit, config, work_dir: str | Path, release_dir: str | Path, base_path: str = "",
                 base_version: int | None = None, log_config=None) -> None:
        from lowrl_ros.core.finetune.learner import FineTuner
        from lowrl_ros.core.finetune.transition_log import TransitionLogConfig, TransitionLogWriter, read_log

        self.work_dir, self.release_dir = Path(work_dir), Path(release_dir)
        self.release_dir.mkdir(parents=True, exist_ok=True)
        self.writer = TransitionLogWriter(self.work_dir / "transitions", log_config or TransitionLogConfig())
        batch, _ = read_log(self.work_dir / "transitions", max_transitions=config.buffer_size)
        self.tuner = FineTuner(kit, config, self.work_dir, base_path=base_path, base_version=base_version)
        self.tuner.add_batch(batch)
        self.resumed = len(batch)
        self.judge = EpisodeJudge()
        self.received = 0
        self.paused_reason = ""
        self.last_decision = "none"
        self.released: list[int] = []

    def receive(self, indices: list[int], transitions: list[Transition]) -> list[Path]:
        """Record and learn from a batch; returns the bundles released (a rollback releases one)."""
        released = []
        for index, t in zip(indices, transitions):
            self.writer.append(t)
            self.received += 1
            self.tuner.add(t.obs, t.action, t.reward, t.next_obs, t.terminated, t.truncated)
            ended = self.judge.add(index, t)
            if ended is not None:
                released += self._decide(self.tuner.on_episode(*ended, self.judge.ended_start_obs))
        return released

    def step(self, max_updates: int) -> list[Path]:
        """Up to ``max_updates`` updates; a new version when one is due. Returns bundles released."""
        if self.paused_reason or self.tuner.update(max_updates) == 0:
            return []
        if not self.tuner.weights_finite():
            return self._decide(self.tuner.on_safety_trip("the learner's weights became non-finite"))
        if self.tuner.version_due():
            record = self.tuner.make_version()
            self.last_decision = f"v{record.version} made after {record.updates} updates"
            return [self._release(record)]
        return []

    def on_rejected(self, version: int, reason: str) -> list[Path]:
        """The robot refused a version we released: a safety trip (roll back to the best)."""
        if version != self.tuner.tracker.current:
            return []
        return self._decide(self.tuner.on_safety_trip(f"the robot rejected v{version}: {reason}"))

    def _decide(self, decision) -> list[Path]:
        if decision.reason:
            self.last_decision = decision.reason
        if decision.action == "pause":
            self.paused_reason = decision.reason
        if decision.action != "rollback":
            return []
        # The learner now holds the best version's weights; the robot takes only newer versions.
        record = self.tuner.make_version()
        self.last_decision = (f"rollback: v{record.version} carries v{decision.target.version}'s weights "
                              f"({decision.reason})")
        return [self._release(record)]

    def _release(self, record) -> Path:
        from lowrl_ros.core.runtime.bundle import save_bundle

        path = save_bundle(self.release_dir / f"v{record.version:06d}.lowrl", {"full": record.path})
        self.released.append(record.version)
        return path

    def close(self) -> None:
        self.writer.close()
        self.tuner.save()
