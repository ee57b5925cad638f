"""Off-board real-to-sim: the robot's streamed transitions identify its gap, the
policy is corrected off-board and released as the next version, which is judged and rolled back if worse.

trainer_node runs this with ``offboard_method: sysid`` (finetune_node on the robot with ``learner:
offboard`` streams the transitions, with the robot file's rewards and episode ends). No ROS here.

1. **Record**: every transition received goes to ``work_dir/transitions`` (nothing is lost) and into
   memory; the first episode is skipped unless the stream began at its start, index 0 (a partial
   episode's first observation is not the at-rest start the sensor identification reads).
2. **Identify** (lowrl_ros.core.sim.sysid), once ``episodes`` whole episodes of the base version are in:
   the sensor biases in closed form, the physics by replay.
3. **Correct**: the identified sensor biases folded into the base artifact's ``obs_offset`` (instant; the
   weights are unchanged). Released as ``v<base+1>.lowrl`` into ``release_dir``, which the trainer node
   streams. (PPO in the identified simulator, which also undoes the physics, takes minutes:
   ``scripts/train_legged.py sysid`` runs it on the same transition log, docs/finetune.md.)
4. **Judge**: the next ``judge_episodes`` whole episodes of the new version against the base's; worse by
   more than ``margin`` (return) rolls back: the base is released again as the next version.

A restart in the same ``work_dir`` resumes: the state and the versions released come back from
``sysid/status.json``, the base episodes and every episode's return from the transition log (a
session that was judging judges at once if its episodes are in). The stream is then rejoined
mid-episode, so the episode under way is not used.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

import numpy as np

from lowrl_ros.core.config import field
from lowrl_ros.core.finetune.transition_log import (Transition, TransitionLogConfig, TransitionLogWriter,
                                                    read_log)
from lowrl_ros.core.finetune.versions import EpisodeJudge
from lowrl_ros.core.runtime.bundle import save_bundle


STATUS_JSON = "status.json"  # in work_dir/sysid/


@dataclasses.dataclass(frozen=True)
class SysidSettings:
    """What the off-board identification does (trainer_node's ``sysid.*`` parameters)."""

    episodes: int = field(8, "whole episodes of the base version recorded before the gap is identified",
                          range=(1, 1000))
    window: int = field(50, "policy steps replayed open loop from each episode start (50: 2 s)", range=(2, 1000))
    iterations: int = field(8, "cross-entropy iterations of the physics fit (20 candidates each)", range=(1, 100))
    judge_episodes: int = field(3, "whole episodes of the new version before it is judged", range=(1, 1000))
    margin: float = field(0.0, "kept unless its mean return is below the base's by more than this", range=(0.0, 1e9))
    seed: int = field(0, "seed of the cross-entropy search", range=(0, 2**31 - 1))


class OffboardSysid:
    """Transitions in, one corrected version out, judged against the base (see the module docstring).

    Args:
        base_path: the artifact the robot runs (a lowrl/LeggedAnt-v0 contract).
        base_version: its version; releases are base_version + 1, + 2 (a rollback).
        work_dir: the transition log and what identification wrote (sysid/status.json, the artifacts).
        release_dir: where ``vNNNNNN.lowrl`` bundles go (the trainer node's watch_dir).
        settings: SysidSettings.
        log: called with one line per event (the node's logger).
    """

    def __init__(self, base_path: str | Path, base_version: int, work_dir: str | Path, release_dir: str | Path,
                 settings: SysidSettings = SysidSettings(), log: Callable[[str], None] = lambda _line: None,
                 log_config: TransitionLogConfig | None = None) -> None:
        from lowrl_ros.core.runtime.artifact import parse_artifact, read_artifact_bytes

        if not str(base_path) or not Path(base_path).is_file():
            raise ValueError(f"offboard_method {self.METHOD} needs base_policy_path: the artifact the robot runs "
                             f"(got {str(base_path)!r})")
        contract = parse_artifact(read_artifact_bytes(base_path), str(base_path)).contract
        self._check_base(contract, str(base_path))
        self.obs_dim, self.action_dim = contract.obs_dim, contract.action_dim  # the transitions' size
        self.base_path, self.base_version = Path(base_path), int(base_version or contract.version)
        self.work_dir, self.release_dir = Path(work_dir), Path(release_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.release_dir.mkdir(parents=True, exist_ok=True)
        self.settings, self._log = settings, log
        self.writer = TransitionLogWriter(self.work_dir / "transitions", log_config or TransitionLogConfig())
        self.judge = EpisodeJudge(whole_steps=self._whole_steps(contract))
        self.received = 0
        self.released: list[int] = []
        self.paused_reason = ""
        self.last_decision = f"recording: 0/{settings.episodes} episodes of v{self.base_version}"
        self.state = "recording"  # recording -> identifying -> judging -> kept | rolled_back
        self.identified: dict = {}
        self._episodes: list[list[Transition]] = []  # whole base-version episodes, from their first step
        self._current: list[Transition] = []
        self._seen_start = False  # an episode start has been seen (the stream may begin mid-episode)
        self._next_index: int | None = None
        self.new_version = self.base_version + 1
        self._pending: list[Path] = []  # released while resuming, returned by the next step()
        self.resumed = self._resume()

    METHOD = "sysid"  # the trainer node's offboard_method

    def _check_base(self, contract, where: str) -> None:
        """The identifier replays one simulator: is the policy that robot's?"""
        from lowrl_ros.core.sim import sysid

        sysid.check_contract(contract, where)

    def _whole_steps(self, contract) -> int | None:
        """The fewest steps of an episode the time limit ended (shorter ones were cut: never judged); None: any."""
        return None

    def _base_as(self, version: int) -> Path:
        """The base artifact re-released as ``version`` (a rollback: a newer version carrying the base's weights)."""
        from lowrl_ros.core.sim import sysid

        return sysid.fold_sensor_offsets(self.base_path, self.work_dir / "sysid" / f"v{version:06d}_int8.onnx", {},
                                         version=version, parent_version=self.base_version)

    def can_learn(self) -> bool:
        """Whether :meth:`step` has work (identification is due)."""
        return self.state == "recording" and len(self._episodes) >= self.settings.episodes

    def receive(self, indices: list[int], transitions: list[Transition]) -> list[Path]:
        """Record a batch; returns the bundles released (a rollback releases one)."""
        released: list[Path] = []
        for index, t in zip(indices, transitions):
            self.writer.append(t)
            self.received += 1
            if self._take(index, t):
                released += self._judge()
        self._say_recording()
        return released

    def _take(self, index: int, t: Transition) -> bool:
        """Count one numbered transition: the base version's whole episodes (while recording) and every
        episode's return. True when it ended an episode that counts (the judge may be due)."""
        # The robot's first episode (from its transition 0) began when the policy was enabled, not after a reset:
        # the robot may still have been moving, so identification (which reads each episode start as rest) waits
        # for the first episode after an end.
        if self._next_index is not None and index != self._next_index:
            self._current, self._seen_start = [], False  # a lost transition: the replay needs every step
        self._next_index = index + 1
        if self._seen_start:
            self._current.append(t)
        if t.terminated or t.truncated:
            if (self.state == "recording" and self._seen_start and self._current
                    and all(x.policy_version == self.base_version for x in self._current)):
                self._episodes.append(self._current)
            self._current, self._seen_start = [], True
        return self.judge.add(index, t) is not None

    def _say_recording(self) -> None:
        if self.state == "recording":
            self.last_decision = (f"recording: {min(len(self._episodes), self.settings.episodes)}/"
                                  f"{self.settings.episodes} episodes of v{self.base_version}")

    def _resume(self) -> int:
        """A restart in this work_dir: the state from sysid/status.json, the episodes from the transition log;
        returns how many transitions were read back."""
        status = self._read_status()
        if status:
            self.state, self.last_decision = str(status["state"]), str(status.get("decision", ""))
            self.released, self.identified = [int(v) for v in status["released"]], dict(status.get("identified", {}))
            self.new_version = self.released[0] if self.released else self.new_version
        batch, report = read_log(self.work_dir / "transitions")
        for problem in report.problems:
            self._log(f"resuming: {problem}")
        for i in range(len(batch)):
            self._take(i, batch.row(i))
        # The stream comes back mid-episode, after transitions lost while this process was down.
        self._current, self._seen_start, self._next_index = [], False, None
        self.judge.rejoin()
        if status or len(batch):
            self._say_recording()
            self._log(f"resumed from {self.work_dir}: {len(batch)} transitions on disk, "
                      f"{len(self._episodes)} whole episodes of v{self.base_version}; {self.last_decision}")
        if self.state == "judging":
            self._pending = self._judge()  # its episodes may all be in already
        return len(batch)

    def _read_status(self) -> dict:
        """sysid/status.json of this base version, {} when there is none (or it is unreadable: said)."""
        path = self.work_dir / "sysid" / STATUS_JSON
        if not path.is_file():
            return {}
        try:
            status = json.loads(path.read_text())
            if not isinstance(status, dict) or not {"state", "released", "base_version"} <= status.keys():
                raise ValueError("not a sysid status")
        except (OSError, ValueError) as exc:
            self._log(f"not resuming the state in {path}: {exc}; recording afresh")
            return {}
        if status["base_version"] != self.base_version:
            self._log(f"not resuming {path}: it is of base v{status['base_version']}, this session's is "
                      f"v{self.base_version}; recording afresh")
            return {}
        return status

    def step(self, _max_updates: int = 0) -> list[Path]:
        """Identify and release when due (seconds to minutes of CPU: the trainer node's worker thread)."""
        if self._pending:
            pending, self._pending = self._pending, []
            return pending
        if not self.can_learn():
            return []
        self.state = "identifying"
        try:
            return [self._identify_and_release()]
        except Exception as exc:  # noqa: BLE001 - said, and the robot keeps the base
            self.state = "failed"
            self.paused_reason = f"identification failed: {type(exc).__name__}: {exc}"
            self._log(self.paused_reason)
            return []

    def on_rejected(self, version: int, reason: str) -> list[Path]:
        """The robot refused a version we released: said; the robot keeps what it runs."""
        if version == self.new_version:
            self.state, self.last_decision = "failed", f"v{version} refused by the robot: {reason}"
            self._log(self.last_decision)
        return []

    def _identify_and_release(self) -> Path:
        from lowrl_ros.core.sim import sysid

        s = self.settings
        episodes = self._episodes[:max(s.episodes, 1)]
        rec = sysid.Recording(
            observations=[np.vstack([e[0].obs] + [t.next_obs for t in e]) for e in episodes],
            actions=[np.vstack([t.action for t in e]) for e in episodes])
        rec.check()
        self._log(f"identifying the gap from {len(episodes)} episodes ({rec.steps} robot steps)")
        found = sysid.identify(rec, window=s.window, episodes=len(episodes), iterations=s.iterations, seed=s.seed,
                               log=self._log)
        self.identified = {"gap": found.to_dict(), "describe": found.gap().describe(), "robot_steps": rec.steps,
                           "wall_s": found.wall_s}
        self._log(f"identified: {found.gap().describe()} ({found.wall_s} s)")
        out = self.work_dir / "sysid"
        out.mkdir(exist_ok=True)
        artifact = sysid.fold_sensor_offsets(self.base_path, out / f"v{self.new_version:06d}_int8.onnx", found.sensors,
                                             version=self.new_version, parent_version=self.base_version)
        path = save_bundle(self.release_dir / f"v{self.new_version:06d}.lowrl", {"full": str(artifact)})
        self.released.append(self.new_version)
        self.state = "judging"
        self.last_decision = (f"released v{self.new_version} (the identified sensor biases folded into "
                              f"v{self.base_version}); judging it over {s.judge_episodes} episodes")
        self._log(self.last_decision)
        self._save_status()
        return path

    def _save_status(self) -> None:
        """``work_dir/sysid/status.json``: what was identified and decided (the session report reads it)."""
        out = self.work_dir / "sysid"
        out.mkdir(exist_ok=True)
        returns = {f"v{v}": self._returns(v) for v in (self.base_version, *self.released)}
        (out / STATUS_JSON).write_text(json.dumps(
            {"state": self.state, "decision": self.last_decision, "base_version": self.base_version,
             "released": self.released, "episode_returns": returns, "identified": self.identified,
             **self._status_extra()}, indent=1, default=str))

    def _status_extra(self) -> dict:
        """More of status.json (a subclass's own state, e.g. its progress)."""
        return {}

    def _returns(self, version: int) -> list[float]:
        return [r for v, r in self.judge.finished if v == version]

    def _judge(self) -> list[Path]:
        s = self.settings
        new = self._returns(self.new_version)
        if self.state != "judging" or len(new) < s.judge_episodes:
            return []
        base = self._returns(self.base_version)
        base_mean, new_mean = (float(np.mean(base)) if base else float("nan")), float(np.mean(new))
        if base and new_mean < base_mean - s.margin:
            version = self.new_version + 1
            self.state = "rolled_back"
            self.last_decision = (f"v{self.new_version} returned {new_mean:.1f} over {len(new)} episodes against "
                                  f"v{self.base_version}'s {base_mean:.1f}: rolled back "
                                  f"(v{version} = v{self.base_version})")
            artifact = self._base_as(version)
            self._log(self.last_decision)
            self.released.append(version)
            self._save_status()
            return [save_bundle(self.release_dir / f"v{version:06d}.lowrl", {"full": str(artifact)})]
        self.state = "kept"
        self.last_decision = (f"v{self.new_version} kept: {new_mean:.1f} over {len(new)} episodes against "
                              f"v{self.base_version}'s {base_mean:.1f} over {len(base)}")
        self._log(self.last_decision)
        self._save_status()
        return []

    def close(self) -> None:
        self.writer.close()
