"""Versions, the rollback rule and the episode rule of fine-tuning (no torch: plain numbers).

Versions and rollback (:class:`VersionTracker`): every ``version_every_updates`` updates the actor
is quantized to an int8 artifact with ``version = highest + 1`` and ``parent_version = running``.
A version is judged once it has run ``eval_episodes`` episodes, and re-scored with every later
one (a version that did well on lucky first episodes loses its place when later ones fail): the
best judged version is kept; a running version whose score falls more than ``rollback_margin``
below the best one's, or a
safety trip (non-finite weights, a rejected swap, a return below ``min_return``), rolls back to the
best version (its artifact is re-deployed and the learner restarts from its fp32 weights).

A version's score is its mean return, adjusted for where its episodes started
(``judge_baseline``): an episode's return depends on its start state as much as on the policy
(Pendulum: 0 to -600 from the start angle alone), so a few episodes of a new version are mostly
a draw of start states. The kit's critic, frozen when fine-tuning starts, values each episode's
first observation, b = Q_kit(s0, pi_kit(s0)); the score is the regression-adjusted mean

    score_v = mean_v(R) - c * (mean_v(b) - mean_all(b))

with c the within-version Theil-Sen slope of R on b over every episode recorded (0 until
``_MIN_BASELINE_EPISODES`` episodes carry a baseline, and never negative). Unbiased for the
version's expected return at any fixed c, and with the return's spread cut to sqrt(1 - rho^2) of
it: on the gapped Pendulum-v1 the kit critic's b correlates with R at rho = 0.91-0.93 (100
episodes each, three sim policies), the per-episode spread falls from 142-153 to 53-63.

Which episodes count (:class:`EpisodeJudge`): an episode counts for a version only if that version
ran all of it — the one rule of the robot's node (episode reports), the off-board trainer
(numbered transitions, where a lost one also spoils the episode) and the benchmark (lockstep).
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

@dataclass
class VersionRecord:
    """One policy version the fine-tuner knows (the base, or one it made)."""

    version: int
    parent_version: int | None
    path: str
    updates: int = 0  # learner updates when it was made
    created: float = field(default_factory=time.time)
    returns: list[float] = field(default_factory=list)  # episodes run while it was deployed
    status: str = "candidate"  # candidate -> good | rejected
    # The start-state value b of each episode in ``returns`` (nan where none was given).
    baselines: list[float] = field(default_factory=list)

    def score(self, n: int, slope: float = 0.0, mean_baseline: float = 0.0) -> float | None:
        """Mean return of all its episodes once it has ``n``, regression-adjusted by ``slope``.

        The adjustment (see the module docstring) applies only when each episode has a baseline.
        """
        if len(self.returns) < n:
            return None
        ret = float(np.mean(self.returns))
        b = self.baselines
        if slope > 0.0 and len(b) == len(self.returns) and all(math.isfinite(x) for x in b):
            ret -= slope * (float(np.mean(b)) - mean_baseline)
        return ret


@dataclass(frozen=True)
class Decision:
    """What the tracker tells the caller to do after an event."""

    action: str  # "none" | "rollback" | "pause"
    target: VersionRecord | None = None
    reason: str = ""


_MIN_BASELINE_EPISODES = 6  # episodes with a baseline before the score adjustment is fitted
# A judged version takes the best's place only when its score is higher by this many standard errors
# of the difference: with 3-5 episodes a version and ~10 versions a run, the highest score is often
# the luckiest, not the best. Chosen by replaying the rules on six fine-tuning runs' versions
# (scripts/selection_study.py, docs/finetune_reference.md): 2 kept the large gains and lost <= 1.6 on average
# where no version was better; 1 lost up to 11, plain first-3-episode means up to 57.
PROMOTE_Z = 2.0
_FIT_EPISODES = 64  # at most this many (the latest) episodes of a version enter the fit: O(64^2) pairs each


class VersionTracker:
    """Keeps the best version by return and decides rollbacks (no torch; plain numbers).

    Args:
        eval_episodes: episodes a version runs before it is judged.
        rollback_margin: a judged version more than this below the best one rolls back.
        min_return: an episode below this trips a rollback at once (nan: off).
    """

    def __init__(self, eval_episodes: int, rollback_margin: float, min_return: float = math.nan) -> None:
        self.eval_episodes = int(eval_episodes)
        self.rollback_margin = float(rollback_margin)
        self.min_return = float(min_return)
        self.versions: dict[int, VersionRecord] = {}
        self.current: int | None = None
        self.best: int | None = None

    def add(self, record: VersionRecord, *, deployed: bool = True) -> None:
        self.versions[record.version] = record
        if deployed:
            self.current = record.version

    @property
    def next_version(self) -> int:
        return max(self.versions) + 1 if self.versions else 1

    def judged(self) -> bool:
        """True when the running version has its score (a new one may replace it)."""
        rec = self.versions.get(self.current)
        return rec is not None and rec.status != "candidate"

    def baseline_fit(self) -> tuple[float, float]:
        """(slope c, mean baseline) of the score adjustment, from every episode that has a baseline.

        c is the Theil-Sen slope of return on baseline within versions: the median of
        (R_i - R_j) / (b_i - b_j) over pairs of episodes of the same version, so better versions do
        not tilt it and a failed swing-up (an outlier return) does not throw it (least squares gave
        1.2-4.1 where 100 episodes say 1.7-1.9 on the gapped Pendulum-v1; Theil-Sen 1.7-2.0).
        0 with fewer than ``_MIN_BASELINE_EPISODES`` such episodes, and never negative.
        """
        slopes, baselines = [], []
        for rec in self.versions.values():
            n = min(len(rec.returns), len(rec.baselines))
            r, b = np.asarray(rec.returns[:n], dtype=np.float64), np.asarray(rec.baselines[:n], dtype=np.float64)
            ok = np.isfinite(b)
            r, b = r[ok][-_FIT_EPISODES:], b[ok][-_FIT_EPISODES:]  # a long-running version: its latest
            baselines.append(b)
            i, j = np.triu_indices(len(b), k=1)
            db = b[i] - b[j]
            keep = np.abs(db) > 1e-9
            slopes.append((r[i] - r[j])[keep] / db[keep])
        baselines_all = np.concatenate(baselines) if baselines else np.empty(0)
        slopes_all = np.concatenate(slopes) if slopes else np.empty(0)
        if baselines_all.size == 0:
            return 0.0, 0.0
        mean_b = float(baselines_all.mean())
        if baselines_all.size < _MIN_BASELINE_EPISODES or slopes_all.size == 0:
            return 0.0, mean_b
        return max(0.0, float(np.median(slopes_all))), mean_b

    def _difference_se(self, a: int, b: int, fit: tuple[float, float]) -> float:
        """Standard error of score(a) - score(b): the pooled within-version spread of the
        (adjusted) returns, sqrt(1/n_a + 1/n_b); 0 while there are too few episodes to tell."""
        slope = fit[0]
        squares, count, groups = 0.0, 0, 0
        for rec in self.versions.values():
            x = np.asarray(rec.returns, dtype=np.float64)
            base = np.asarray(rec.baselines[:len(x)], dtype=np.float64)
            if slope > 0.0 and len(base) == len(x) and np.isfinite(base).all():
                x = x - slope * base
            if len(x):
                squares += float(((x - x.mean()) ** 2).sum())
                count, groups = count + len(x), groups + 1
        if count - groups < 2:
            return 0.0
        sigma = math.sqrt(squares / (count - groups))
        return sigma * math.sqrt(1.0 / len(self.versions[a].returns) + 1.0 / len(self.versions[b].returns))

    def score(self, rec: VersionRecord) -> float | None:
        """``rec``'s score: the mean of its returns (once it has ``eval_episodes``), adjusted (module docstring)."""
        return rec.score(self.eval_episodes, *self.baseline_fit())

    def on_episode(self, version: int, ret: float, baseline: float = math.nan) -> Decision:
        """Count an episode's return (and its start state's baseline value) for ``version``.

        Ignored unless ``version`` is the running one."""
        rec = self.versions.get(version)
        if rec is None or version != self.current or not math.isfinite(ret):
            return Decision("none")
        rec.baselines.extend([math.nan] * (len(rec.returns) - len(rec.baselines)))  # records of old files
        rec.returns.append(float(ret))
        rec.baselines.append(float(baseline) if math.isfinite(baseline) else math.nan)
        if not math.isnan(self.min_return) and ret < self.min_return:
            return self.on_safety_trip(f"episode return {ret:.1f} below min_return {self.min_return:.1f}")
        fit = self.baseline_fit()
        score = rec.score(self.eval_episodes, *fit)
        if score is None:
            return Decision("none")
        judged_now = rec.status == "candidate"
        rec.status = "good"
        # Every episode of the running version is more evidence: re-rank the judged versions, so a
        # version judged well on lucky first episodes loses its place when its later ones fail.
        before = self.best
        scores = {r.version: r.score(self.eval_episodes, *fit) for r in self.versions.values() if r.status == "good"}
        scores = {v: x for v, x in scores.items() if x is not None}
        top = max(scores, key=scores.get)
        if before not in scores or scores[top] - scores[before] > PROMOTE_Z * self._difference_se(top, before, fit):
            self.best = top  # the best changes hands only on evidence (the winner's curse of noisy scores)
        best = self.versions[self.best]
        if best is rec:
            if judged_now or before != version:
                return Decision("none", rec, f"v{version} is the best so far ({score:.1f})")
            return Decision("none")
        if score < scores[self.best] - self.rollback_margin:
            rec.status = "rejected"
            self.current = best.version
            return Decision("rollback", best, f"v{version} returned {score:.1f}, more than {self.rollback_margin:g} "
                                              f"below v{best.version}'s {scores[self.best]:.1f}")
        if judged_now or before != self.best:  # within the margin: kept running, not the best
            return Decision("none", rec, f"v{version} returned {score:.1f} (best v{best.version}: "
                                         f"{scores[self.best]:.1f})")
        return Decision("none")

    def on_safety_trip(self, reason: str) -> Decision:
        """A safety limit tripped on the running version: roll back to the best, or pause if it is the best."""
        rec = self.versions.get(self.current)
        if rec is not None and self.best is not None and rec.version != self.best:
            rec.status = "rejected"
            self.current = self.best
            return Decision("rollback", self.versions[self.best], f"safety: {reason}")
        return Decision("pause", rec, f"safety: {reason} (no better version to roll back to)")

    def to_dict(self) -> dict[str, Any]:
        return {"current": self.current, "best": self.best,
                "versions": [dataclasses.asdict(r) for r in self.versions.values()]}

    def load_dict(self, data: dict[str, Any]) -> None:
        self.versions = {int(r["version"]): VersionRecord(**r) for r in data["versions"]}
        self.current, self.best = data["current"], data["best"]


# ---- the episode rule -----------------------------------------------------------------------
@dataclass(frozen=True)
class Episode:
    """A finished episode that counts for ``version``: its return and its first observation (or None)."""

    version: int
    ret: float
    start_obs: Any = None


@dataclass
class EpisodeJudge:
    """Which finished episodes count: an episode counts for a version only if that version ran all of it.

    Fed one of three ways: episode reports (:meth:`begin`, :meth:`spoil` when a swap is asked for
    mid-episode, :meth:`end` with the version running at the end: the robot's node), numbered
    transitions (:meth:`add`, where a lost or repeated index also spoils the episode: the
    off-board trainer), or lockstep steps (:meth:`begin` and :meth:`end`: the benchmark).
    Version 0 or None means "not known": such an episode does not count.
    """

    version: int | None = None  # the version the episode under way started with
    whole: bool = False  # no other version (and no gap) seen in the episode under way
    start_obs: Any = None  # the first observation of the episode under way
    ended_start_obs: Any = None  # ... and of the episode that ended last
    total: float = 0.0  # return summed from transitions (numbered-transition feed)
    expected_index: int | None = None
    lost: int = 0  # transitions missing from the stream (gaps in the index)
    finished: list[tuple[int, float]] = field(default_factory=list)  # (version, return) of each that counted
    # add(): an episode truncated before this many steps was cut short (the fine-tuner's record_episodes): not whole
    whole_steps: int | None = None
    _open: bool = False  # an episode is under way (add(): the next transition does not start one)
    _steps: int = 0  # add(): transitions of the episode under way

    def rejoin(self) -> None:
        """The stream is heard again after a break of unknown length (a restart): the episode under way,
        and the one the next transition belongs to, do not count; lost transitions are not counted."""
        self.expected_index = None
        self.spoil()

    def begin(self, version: int | None, start_obs: Any = None) -> None:
        """An episode starts while ``version`` runs (0/None: unknown, so it will not count)."""
        self.version, self.start_obs = (int(version) if version else None), start_obs
        self.whole, self.total, self._open = self.version is not None, 0.0, True

    def spoil(self) -> None:
        """The episode under way will not count (a swap was asked for, a transition was lost)."""
        self.whole = False

    def end(self, ret: float, running: int | None, start_obs: Any = None) -> Episode | None:
        """The episode under way ended with return ``ret`` while ``running`` runs.

        Returns the episode when it counts: the version it began with ran to its end, nothing
        spoiled it, and ``ret`` is finite. ``start_obs`` replaces the one given to :meth:`begin`
        where the caller learns the first observation late (the node pairs it by timestamp)."""
        if start_obs is not None:
            self.start_obs = start_obs
        counts = self._open and self.whole and self.version is not None and self.version == running \
            and math.isfinite(ret)
        episode = Episode(self.version, float(ret), self.start_obs) if counts else None
        self.ended_start_obs, self.version, self.start_obs = self.start_obs, None, None
        self.whole, self.total, self._open = False, 0.0, False
        if episode is not None:
            self.finished.append((episode.version, episode.ret))
        return episode

    def add(self, index: int, t: Any) -> tuple[int, float] | None:
        """Count one numbered transition (a ``Transition``); returns (version, return) when it ends an episode
        that counts.

        The first transition heard (or the first after :meth:`rejoin`) may come mid-episode: its episode
        counts only if the index is 0, the robot's first transition, which begins its first episode."""
        joined_late = self.expected_index is None and index != 0
        gap = self.expected_index is not None and index != self.expected_index
        if gap and index > self.expected_index:
            self.lost += index - self.expected_index
        self.expected_index = index + 1
        if not self._open:
            self.begin(t.policy_version, t.obs)
            self._steps = 0
        elif t.policy_version != self.version:
            self.spoil()  # a swap inside the episode
        if gap or joined_late:
            self.spoil()  # a gap (or a repeat), or joined mid-stream: this episode is not judged
        self.total += t.reward
        self._steps += 1
        if not (t.terminated or t.truncated):
            return None
        if t.truncated and not t.terminated and self.whole_steps and self._steps < self.whole_steps:
            self.spoil()  # cut short for a recording, not a whole episode
        episode = self.end(self.total, t.policy_version)
        return None if episode is None else (episode.version, episode.ret)
