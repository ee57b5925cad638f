"""EpisodeRecorder: step rows in, transitions and episode ends out (no ROS, no torch).

The fine-tuner reads what the policy saw and did from the policy node's step rows
(core/runtime/step_row.py). What a row means for learning is decided here, so the node only feeds
rows (and, where the robot publishes them, reward messages and episode ends) and acts on what comes
back: it writes the transitions, hands them and the judged episodes to the learner, appends the
episode-log row and publishes the reset request. Like Isaac Lab's ``RewardManager``, the recorder
owns the episode's sums and resets them at each end.

Two ways to get a reward, chosen by the robot file:

* **computed** (``reward: terms``): the previous row's observation, executed action and command, and
  this row's observation, make one transition whose reward the terms compute (core/finetune/rewards.py);
  the robot file's ``episode:`` section ends episodes (then the robot is asked to reset). A safe tick
  (no policy action) breaks the chain: no transition spans it. A step whose reward input is missing
  (no JointState effort yet, a stale reward input) is dropped and counted in ``incomplete``. With
  ``await_ready`` (the robot says when it stands again after a reset, as the policy node's
  ``ready_topic``), the rows between an end and the robot's ready are not recorded: a row the policy
  node sent before the reset request reached it shows the old episode's robot, and would otherwise
  start the new episode (counted in ``before_ready``). The policy node holds the safe action from the
  request until the ready, and sends a safe row at the request: the first policy row after a safe one
  starts the episode too, so a ready that reaches this node late (behind a busy executor) loses no row.
* **paired** (a reward topic): rows are paired with the robot's reward messages and episode ends by
  their DDS source timestamps (TransitionAssembler: the reward sent between two rows is the first
  row's). A step whose executed action is not finite (a safe tick) is dropped and counted.

Either way an episode counts for a version only if that version ran all of it (EpisodeJudge), and
its first observation goes with it (the learner values the episode's start state).
"""
from __future__ import annotations

import collections
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from lowrl_ros.core.finetune.rewards import EpisodeSpec, RewardSpec
from lowrl_ros.core.finetune.transition_log import Transition, TransitionAssembler
from lowrl_ros.core.finetune.versions import Episode, EpisodeJudge
from lowrl_ros.core.runtime.observation import ObservationSpec
from lowrl_ros.core.runtime.robot_file import RobotFile
from lowrl_ros.core.runtime.step_row import StepRow
from lowrl_ros.core.types import Silence

_KEPT_FLAGS = 1000  # paired: intervention flags kept by stamp until their transition seals
_RECENT_OBS = 16  # paired: observations kept to find the one that follows a late episode end


@dataclass(frozen=True)
class RobotSpecs:
    """What the fine-tuner reads from the robot file: the joints, the observation size, ``reward:``, ``episode:``.

    Attributes:
        path: the robot file (for messages).
        joints: the policy's joint order (a joint_effort term reads JointState efforts in it).
        obs_dim: the observation the file builds.
        rewards, episodes: the ``reward:`` and ``episode:`` sections (None when absent).
    """

    path: str
    joints: tuple[str, ...]
    obs_dim: int
    rewards: RewardSpec | None
    episodes: EpisodeSpec | None

    @classmethod
    def from_robot_file(cls, robot: RobotFile, control_period_s: float) -> RobotSpecs:
        """Parse the sections (RobotFileError names the entry and the fix)."""
        spec = ObservationSpec.from_robot_file(robot, control_period_s)
        return cls(robot.path or "robot file", robot.joints, spec.obs_dim, RewardSpec.from_robot_file(robot, spec),
                   EpisodeSpec.from_robot_file(robot, spec))

    def cut_recording(self, episodes: int, steps: int) -> None:
        """The first ``episodes`` episodes end after ``steps`` steps (the fine-tuner's ``record_*``; 0: none)."""
        if not episodes:
            return
        if self.episodes is None:
            raise ValueError(f"record_episodes {episodes}: {self.path} has no episode: section, so the fine-tuner "
                             "ends no episode; add one or set record_episodes 0")
        self.episodes.cut_first(episodes, steps)

    @property
    def computed(self) -> bool:
        """The reward comes from the file's terms (not a topic)."""
        return self.rewards is not None and not self.rewards.topic

    def check_against(self, kit: Any) -> None:
        """Raise ValueError, with the fix, when the file does not fit the kit's policy (anything with ``obs_dim``:
        a FineTuneKit, a PolicyContract) or does not fit itself."""
        if self.obs_dim != kit.obs_dim:
            raise ValueError(f"robot_file {self.path} builds {self.obs_dim} observations but the kit's policy reads "
                             f"{kit.obs_dim}; give the robot file the policy node runs with")
        if self.episodes is not None and not self.computed:
            raise ValueError(f"robot_file {self.path}: an episode: section needs reward: terms (ends are computed "
                             "with them); with a reward topic the episode ends come from episode_info_topic: "
                             "remove episode:")


@dataclass(frozen=True)
class EpisodeEnded:
    """An episode ended.

    Attributes:
        kind: "terminated", "truncated" or "cut" (truncated for the identification's recording: never judged).
        ret: its return.
        version: the policy version running at its end.
        judged: the episode for the learner when it counts (one version ran all of it), else None.
        reset: the robot must be asked to reset (an end the robot file's ``episode:`` computed).
        reason: why it ended (computed ends: "fall: ...", "time limit: ...").
        steps, interventions, term_sums: computed ends: its transitions, the teleoperated ones, and each
            reward term's sum (the episode-log row); paired ends do not know them (0, 0, {}).
    """

    kind: str
    ret: float
    version: int
    judged: Episode | None
    reset: bool = False
    reason: str = ""
    steps: int = 0
    interventions: int = 0
    term_sums: dict[str, float] = field(default_factory=dict)


Recorded = Union[Transition, EpisodeEnded]


class EpisodeRecorder:
    """Turns step rows into transitions and episode ends (see the module docstring).

    Args:
        rewards: the robot file's ``reward:`` section; with terms the reward is computed here, with a
            topic (or None) it comes from reward messages (:meth:`reward`).
        episodes: the robot file's ``episode:`` section (computed rewards only).
        max_reward_delay_s: paired: how long a step waits for its reward before it is dropped.
        await_ready: computed: after each end, the next episode starts only once :meth:`ready` is called (the
            robot stands again); without it, at the first usable row after the end.
    """

    def __init__(self, rewards: RewardSpec | None = None, episodes: EpisodeSpec | None = None,
                 max_reward_delay_s: float = 0.5, await_ready: bool = False) -> None:
        self.rewards = rewards
        self.computed = rewards is not None and not rewards.topic
        self.episodes = episodes if self.computed else None
        self.await_ready = await_ready and self.episodes is not None
        self.before_ready = 0  # policy rows between an end and the robot's ready, not recorded
        self._awaiting = False
        self._readies_due = 0  # resets requested whose ready has not come (the hold may have started the episode)
        self.judge = EpisodeJudge()
        self.assembler = TransitionAssembler(max_reward_delay_s)
        self.running_version = 0  # from the rows (0: not heard yet)
        self.swaps = 0  # times the rows' running version changed: swaps the robot carried out (rollbacks too)
        self.last_row_at: float | None = None  # the newest row's arrival (the caller's monotonic clock)
        self._watch_from: float | None = None  # rows are awaited since (rows_silence's first call)
        self.interventions = 0  # rows a person teleoperated
        self.effort: np.ndarray | None = None  # the newest joint efforts (a joint_effort term the policy does not see)
        self.last_terms: dict[str, float] = {}  # the last computed episode's term sums
        self._dropped = 0
        # computed: the previous usable row (obs, action, command, intervention) and the episode so far
        self._prev: tuple[np.ndarray, np.ndarray, np.ndarray, bool] | None = None
        self._start_obs: np.ndarray | None = None
        self._return = 0.0
        self._terms = np.zeros(len(rewards.terms) if self.computed else 0)
        self._steps = self._interv = 0
        # paired: the intervention flag of the transition ending at each row's stamp; the episode start rule
        self._flags: collections.OrderedDict[float, bool] = collections.OrderedDict()
        self._last_flag = False
        self._start: tuple[float, np.ndarray | None] = (-math.inf, None)  # (the last end, the first obs after it)
        self._recent: collections.deque = collections.deque(maxlen=_RECENT_OBS)

    @property
    def incomplete(self) -> int:
        """Steps dropped: no reward (or two), a missing reward input, a safe tick."""
        return self._dropped + self.assembler.incomplete

    # ---- rows ---------------------------------------------------------------------------------
    def step(self, row: StepRow, sent: float, now: float) -> list[Recorded]:
        """One policy-node tick, sent at ``sent`` (publisher's clock); ``now`` is the caller's monotonic clock
        (reward inputs' freshness, the pairing's wait). Returns what it completed, in order."""
        self.last_row_at = now
        if row.policy_version:
            if self.running_version and row.policy_version != self.running_version:
                self.swaps += 1
            self.running_version = row.policy_version
        if row.intervention:
            self.interventions += 1
        return self._computed(row, sent, now) if self.computed else self._paired(row, sent, now)

    def ready(self) -> None:
        """The robot stands again after its reset: the next usable row starts the next episode (a ready that comes
        after the policy node's hold already started it answers that reset, not a later one)."""
        self._readies_due = max(self._readies_due - 1, 0)
        self._awaiting = self._awaiting and self._readies_due > 0

    def _computed(self, row: StepRow, sent: float, now: float) -> list[Recorded]:
        """The previous row's transition ends at this row's observation."""
        if self._awaiting:  # the robot is not back yet: the row shows the old episode's robot (or the hold)
            self.before_ready += int(row.usable)
            # The policy node's hold from the reset request on (a safe row, sent at the request): its next policy
            # row follows the robot's ready, however late the ready itself reaches this node.
            self._awaiting = row.usable
            return []
        out: list[Recorded] = []
        obs = row.obs
        if self._prev is not None and np.isfinite(obs).all():
            p_obs, p_action, p_command, p_interv = self._prev
            end = self.episodes.step(obs, sent) if self.episodes is not None else None
            fell = end is not None and end.kind == "terminated"
            r = self.rewards.compute(p_obs, p_action, p_command, obs, fell, effort=self.effort, now=now)
            if math.isfinite(r.total):
                self._return += r.total
                self._terms += r.terms
                self._steps += 1
                self._interv += int(p_interv)
                out.append(Transition(p_obs, p_action, r.total, obs.copy(), fell, end is not None and not fell,
                                      self.running_version, sent, p_interv, tuple(float(v) for v in r.terms),
                                      p_command))
            else:  # an input of a term is missing: dropped, counted
                self._dropped += 1
            if end is not None:
                out.append(self._computed_end(end.kind, end.reason))
                self._prev = None  # the row after the end (after the robot's ready) starts the next episode
                self._awaiting = self.await_ready
                self._readies_due += int(self.await_ready)
                return out
        if not row.usable:
            self._prev = None  # a safe tick (or no observation) breaks the chain: no transition across it
            return out
        if self._start_obs is None:
            self._start_obs = obs.copy()
        self._prev = (obs.copy(), row.action.copy(), row.command.copy(), row.intervention)
        return out

    def _computed_end(self, kind: str, reason: str) -> EpisodeEnded:
        if kind == "cut":
            self.judge.spoil()  # not a whole episode
        self.last_terms = dict(zip(self.rewards.names, (float(v) for v in self._terms)))
        ended = EpisodeEnded(kind, self._return, self.running_version,
                             self._judge_end(self._return, self._start_obs), reset=True, reason=reason,
                             steps=self._steps, interventions=self._interv, term_sums=dict(self.last_terms))
        self._return, self._start_obs = 0.0, None
        self._terms[:] = 0.0
        self._steps = self._interv = 0
        self.rewards.reset()
        return ended

    def _paired(self, row: StepRow, sent: float, now: float) -> list[Recorded]:
        """The row's observation and executed action, paired with the reward messages by timestamp."""
        self._flags[sent] = self._last_flag  # the transition ending at `sent` is the previous row's
        while len(self._flags) > _KEPT_FLAGS:
            self._flags.popitem(last=False)
        usable = row.usable
        self._last_flag = row.intervention and usable
        if not np.isfinite(row.obs).all():
            return []
        return self._observed(row.obs, sent, now) + self._commanded(
            row.action if usable else np.full(row.action.size, np.nan), sent, now)

    def _observed(self, obs: np.ndarray, sent: float, now: float) -> list[Recorded]:
        """An observation sent at ``sent`` (closes the step before it)."""
        obs = np.array(obs, dtype=np.float64)
        self._recent.append((sent, obs))
        after, start = self._start
        if start is None and sent > after:
            self._start = (after, obs)
        return self._kept(self.assembler.observation(obs, sent, self.running_version, now))

    def _commanded(self, action: np.ndarray, sent: float, now: float) -> list[Recorded]:
        """The action executed from the newest observation, sent at ``sent``."""
        return self._kept(self.assembler.command(action, sent, now))

    def reward(self, value: float, sent: float, now: float) -> list[Recorded]:
        """Paired: a reward message sent at ``sent``; returns the transitions it completed."""
        return self._kept(self.assembler.reward(value, sent, now))

    def episode_end(self, ret: float, kind: str, sent: float) -> list[Recorded]:
        """Paired: the robot ended an episode (return ``ret``, ``kind`` terminated/truncated) at ``sent``."""
        self.assembler.episode_end(kind, sent)
        start = self._start[1]
        # The first observation sent after this end starts the next episode (it may have arrived already).
        self._start = (sent, next((o for t, o in self._recent if t > sent), None))
        return [EpisodeEnded(kind, ret, self.running_version, self._judge_end(ret, start))]

    def timeout(self, now: float) -> list[Recorded]:
        """Paired: give up on steps whose reward never came (call periodically: messages may stop)."""
        return self._kept(self.assembler.observation_timeout(now))

    def flush(self) -> list[Recorded]:
        """Shutdown: seal every open step (complete ones are returned, the rest counted)."""
        return self._kept(self.assembler.flush())

    def rows_silence(self, timeout_s: float, now: float, wall_now: float) -> Silence | None:
        """The step rows' silence at ``now`` (None: heard within ``timeout_s``); awaited from the first call on."""
        if self._watch_from is None:
            self._watch_from = now
        return Silence.of("step rows", self.last_row_at, self._watch_from, timeout_s, now, wall_now)

    def swap_requested(self) -> None:
        """A new version was asked for: the episode under way will have run two versions and is not judged."""
        self.judge.spoil()

    def _judge_end(self, ret: float, start_obs: np.ndarray | None) -> Episode | None:
        episode = self.judge.end(ret, self.running_version, start_obs=start_obs)
        self.judge.begin(self.running_version)
        return episode

    def _kept(self, transitions: list[Transition]) -> list[Recorded]:
        """Paired transitions without a policy action (a safe tick) are dropped; the teleop flag is attached."""
        out: list[Recorded] = []
        for t in transitions:
            if not np.isfinite(t.action).all():
                self._dropped += 1
                continue
            if self._flags.pop(t.stamp, False):
                t = dataclasses.replace(t, intervention=True)
            out.append(t)
        return out
