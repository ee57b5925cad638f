"""Off-board real-to-sim-to-real for any robot with a simulator (a robot file's ``sim:`` section), in the session.

trainer_node runs this with ``offboard_method: retrain`` and ``robot_file`` (finetune_node on the robot with
``learner: offboard`` streams the transitions, with the robot file's rewards and episode ends). No ROS here.
The work runs in a child process (``run_job``), so the node keeps receiving, recording and judging while it
runs, and nothing on the robot waits for it.

1. **Record** (as ``offboard_method: sysid``, core/finetune/offboard_sysid.py, whose recording, judging, rollback
   and resume this class inherits): every transition to ``work_dir/transitions``; ``episodes`` whole episodes of
   the base version in memory.
2. **Identify** (core/sim/robot_sysid.py): the sensor biases at rest, the physics by replay at the recorded
   command times; each value with its uncertainty, what the log cannot identify left at its prior.
3. **Retrain** (core/retrain/retrain.py): the base policy continued with PPO in the identified simulator,
   randomised around the identified values (``spread`` x their uncertainty), on the local cores or a Ray
   cluster (``ray_address``), then quantised to the robot's int8 artifact through the release gates.
4. **Release** ``v<base+1>``, **judge** it on the robot against the base over whole episodes, roll back if worse.

Progress (stage, steps, sim return, ETA) is :attr:`OffboardRetrain.progress`, from the child's
``retrain/progress.jsonl``; the trainer node puts it on its diagnostics and status.json keeps it for the
session report. A restart in the same ``work_dir`` resumes: a job that was identifying or retraining starts
again from the saved recording (``retrain/recording.npz``, and ``identified.json`` once written), never by
recording again. A job that fails (too short a log, a diverged run, a failed gate, a dead Ray worker) says why
in ``paused_reason``; the robot keeps the version it runs.
"""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from lowrl_ros.core.config import field
from lowrl_ros.core.finetune.offboard_sysid import OffboardSysid
from lowrl_ros.core.finetune.transition_log import TransitionLogConfig
from lowrl_ros.core.runtime.bundle import save_bundle

JOB_DIR = "retrain"  # in work_dir: job.json, recording.npz, progress.jsonl, identified.json, result.json
POLL_S = 1.0  # how often step() reads the child's progress
STATUS_S = 10.0  # how often status.json takes in the child's progress (and at every change of state)


@dataclasses.dataclass(frozen=True)
class RetrainSessionSettings:
    """What the in-session real-to-sim-to-real does (trainer_node's ``retrain.*`` parameters; the identification's
    and PPO's own settings are ``identify.*`` and ``ppo.*``)."""

    episodes: int = field(8, "whole episodes of the base version, begun at rest, recorded before the gap is "
                             "identified (one begun moving is kept and one more recorded, up to twice this)",
                          range=(1, 1000))
    judge_episodes: int = field(3, "whole episodes of the new version before it is judged", range=(1, 1000))
    margin: float = field(0.0, "kept unless its mean return is below the base's by more than this", range=(0.0, 1e9))
    sigmas: float = field(2.0, "the retraining randomizes each identified value over +- this many of its "
                               "uncertainties (an unidentified one over its whole prior)", range=(0.0, 100.0))
    seed: int = field(0, "seed of the identification and the retraining", range=(0, 2**31 - 1))
    nice: int = field(10, "niceness added to the child process that identifies and retrains", range=(0, 19))
    release_within_s: float = field(0.0, "release within this many seconds of the recording's end: the retraining "
                                         "stops in time for the gates and releases its best evaluated actor (0: it "
                                         "runs ppo.total_steps)", range=(0.0, 1e6))


class OffboardRetrain(OffboardSysid):
    """Transitions in; identify, retrain (a child process), release, judge (see the module docstring).

    Args:
        base_path, base_version, work_dir, release_dir, log, log_config: as :class:`OffboardSysid`.
        robot_file: the robot file (with a ``sim:`` section) the robot runs.
        settings: RetrainSessionSettings.
        identify: the identification's settings (core/sim/robot_sysid.py IdentifySettings) or None (defaults).
        ppo: the retraining's settings (core/retrain/retrain.py RetrainSettings) or None (defaults).
    """

    METHOD = "retrain"

    def __init__(self, base_path: str | Path, base_version: int, work_dir: str | Path, release_dir: str | Path,
                 robot_file: str | Path, settings: RetrainSessionSettings = RetrainSessionSettings(),
                 identify: Any = None, ppo: Any = None, log: Callable[[str], None] = lambda _line: None,
                 log_config: TransitionLogConfig | None = None) -> None:
        from lowrl_ros.core.sim.robot_sim import parse_sim
        from lowrl_ros.core.runtime.robot_file import load_robot_file

        if not str(robot_file) or not Path(robot_file).is_file():
            raise ValueError(f"offboard_method retrain needs robot_file: the robot file (with a sim: section) the "
                             f"robot runs (got {str(robot_file)!r})")
        self.robot_file = Path(robot_file)
        self.robot = load_robot_file(self.robot_file)
        parse_sim(self.robot)  # a sim: section that disagrees with its MJCF is refused now, entry named
        source = getattr(ppo, "source_checkpoint", "")
        if source and not Path(source).is_file():  # found out now, not after minutes of recording
            raise ValueError(f"ppo.source_checkpoint {source!r}: no such file; give the SB3 zip or rsl_rl "
                             "model_*.pt the deployed policy was imported from, or '' for a fresh critic")
        if source:
            ppo = dataclasses.replace(ppo, source_checkpoint=str(Path(source).resolve()))  # the job runs elsewhere
        self.identify_settings, self.ppo_settings = identify, ppo
        need = getattr(identify, "min_rest_phases", 0)
        if settings.episodes < need:  # found out now, not after minutes of recording
            raise ValueError(f"retrain.episodes={settings.episodes} records fewer episode starts than the "
                             f"identification needs (identify.min_rest_phases={need}): raise retrain.episodes")
        self.progress: dict = {}
        self._moving_said = 0  # episode starts already said to have moved (_recorded_enough)
        self._job: multiprocessing.Process | None = None
        self._polled = self._status_saved = 0.0
        super().__init__(base_path, base_version, work_dir, release_dir, settings, log, log_config)

    # ---- the hooks of OffboardSysid ------------------------------------------------------------
    def _check_base(self, contract, where: str) -> None:
        """The base must read this robot file's observation and drive its joints."""
        from lowrl_ros.core.runtime.observation import ObservationSpec

        obs_dim = len(ObservationSpec.from_robot_file(self.robot, contract.control_period_s).entry_names())
        if (contract.obs_dim, contract.action_dim) != (obs_dim, len(self.robot.joints)):
            raise ValueError(f"{where}: the policy reads {contract.obs_dim} observations and drives "
                             f"{contract.action_dim} joints; {self.robot_file} gives {obs_dim} and has "
                             f"{len(self.robot.joints)}: is it the robot file this policy was imported for?")

    def _whole_steps(self, contract) -> int | None:
        """The robot file's time limit in steps: an episode truncated sooner was cut for the recording (the
        fine-tuner's record_episodes) and is not judged."""
        from lowrl_ros.core.finetune.recorder import RobotSpecs

        episodes = RobotSpecs.from_robot_file(self.robot, contract.control_period_s).episodes
        return episodes.whole_steps(contract.control_period_s) if episodes is not None else None

    def _base_as(self, version: int) -> Path:
        from lowrl_ros.core.runtime.artifact import parse_artifact, read_artifact_bytes, rewrite_artifact

        parsed = parse_artifact(read_artifact_bytes(self.base_path), str(self.base_path))
        contract = dataclasses.replace(parsed.contract, version=int(version), parent_version=self.base_version)
        return rewrite_artifact(parsed, self.job_dir / f"v{version:06d}_int8.onnx", contract)

    @property
    def job_dir(self) -> Path:
        d = self.work_dir / JOB_DIR
        d.mkdir(parents=True, exist_ok=True)
        return d

    # ---- the work --------------------------------------------------------------------------------
    def step(self, _max_updates: int = 0) -> list[Path]:
        """Start the job when the recording is complete; follow it; release what it made."""
        if self._pending:
            pending, self._pending = self._pending, []
            return pending
        if self.state == "recording" and self._recorded_enough():
            self._save_recording()
            self._start_job("identifying")
        if self.state in ("identifying", "retraining"):
            return self._follow_job()
        return []

    def can_learn(self) -> bool:
        return False  # the work is the child's: step() only polls it (the worker thread waits between polls)

    def _recorded_enough(self) -> bool:
        """``retrain.episodes`` episodes that began at rest (the identification's rule: robot_sysid.moving_starts);
        one that began moving (a reset the robot had not finished) is kept beside them and one more recorded, up to
        twice ``retrain.episodes`` in all (then the identification says what is missing)."""
        from lowrl_ros.core.sim.robot_sysid import moving_starts

        n, want = len(self._episodes), self.settings.episodes
        if n < want or n >= 2 * want:
            return n >= want
        moving = np.flatnonzero(moving_starts(self.robot, np.array([e[0].obs for e in self._episodes])))
        if len(moving) > self._moving_said:
            self._moving_said = len(moving)
            self._log(f"episode start(s) {', '.join(str(i + 1) for i in moving)} of {n} began moving (not at rest): "
                      f"recording more, {want} at rest are needed")
        return n - len(moving) >= want

    def _save_recording(self) -> None:
        """The base episodes to ``retrain/recording.npz`` (the child reads them; a restart starts from them)."""
        episodes = self._episodes
        rows = [(i, t) for i, e in enumerate(episodes) for t in e]
        tmp = self.job_dir / "recording.tmp.npz"
        column = lambda name: np.array([getattr(t, name) for _, t in rows])  # noqa: E731
        columns = {name: column(name) for name in ("obs", "action", "next_obs", "stamp", "terminated", "truncated")}
        if rows and all(t.command is not None for _, t in rows):  # what went out (the identification replays it)
            columns["command"] = column("command")
        np.savez(tmp, **columns, episode=np.array([i for i, _ in rows]))
        os.replace(tmp, self.job_dir / "recording.npz")
        self._log(f"recorded {len(episodes)} episodes ({len(rows)} robot steps) of v{self.base_version}: identifying")

    def _start_job(self, state: str) -> None:
        for name in ("progress.jsonl", "result.json"):
            (self.job_dir / name).unlink(missing_ok=True)
        job = {"robot_file": str(self.robot_file.resolve()), "base_path": str(self.base_path.resolve()),
               "version": self.new_version, "seed": self.settings.seed, "nice": self.settings.nice,
               "sigmas": self.settings.sigmas, "release_within_s": self.settings.release_within_s,
               "identify": _asdict(self.identify_settings), "ppo": _asdict(self.ppo_settings),
               "parent_pid": os.getpid()}
        (self.job_dir / "job.json").write_text(json.dumps(job, indent=1))
        self._job = multiprocessing.get_context("spawn").Process(target=run_job, args=(str(self.job_dir),),
                                                                 name="lowrl-retrain")
        self._job.start()
        self.state, self.progress = state, {"stage": state}
        self.last_decision = f"{state}: the gap of v{self.base_version}'s robot (job pid {self._job.pid})"
        self._save_status()

    def _follow_job(self) -> list[Path]:
        now = time.monotonic()
        if now - self._polled < POLL_S:
            return []
        self._polled = now
        self.progress = _last_line(self.job_dir / "progress.jsonl") or self.progress
        stage, previous = self.progress.get("stage", ""), self.state
        if stage and stage != "identifying" and self.state == "identifying":
            self.state = "retraining"
            identified = self.job_dir / "identified.json"
            if identified.is_file():
                self.identified = json.loads(identified.read_text())
                self._log(f"identified: {self.identified.get('describe', '')}")
        if self.progress:
            self.last_decision = f"{self.state}: " + _describe(self.progress)
        if self.state != previous or now - self._status_saved >= STATUS_S:
            self._status_saved = now
            self._save_status()
        result_path = self.job_dir / "result.json"
        if not result_path.is_file():
            if self._job is not None and not self._job.is_alive() and self._job.exitcode not in (None, 0):
                self._fail(f"the retraining process died (exit code {self._job.exitcode}) before a result")
            return []
        result = json.loads(result_path.read_text())
        self._job = None
        if not result.get("ok"):
            self._fail(str(result.get("reason", "no reason given")))
            return []
        path = save_bundle(self.release_dir / f"v{self.new_version:06d}.lowrl", {"full": result["path"]})
        self.released.append(self.new_version)
        self.state = "judging"
        self.last_decision = (f"released v{self.new_version} (retrained in the identified simulator: sim return "
                              f"{result.get('sim_return_before', float('nan')):.1f} -> "
                              f"{result.get('sim_return_after', float('nan')):.1f}); judging it over "
                              f"{self.settings.judge_episodes} episodes")
        self._log(self.last_decision)
        self._save_status()
        return [path]

    def _fail(self, reason: str) -> None:
        self.state, self.paused_reason = "failed", f"real-to-sim-to-real failed: {reason}; the robot keeps " \
                                                   f"v{self.base_version}"
        self.last_decision = self.paused_reason
        self._log(self.paused_reason)
        self._save_status()

    def _resume(self) -> int:
        n = super()._resume()
        if self.state in ("identifying", "retraining"):
            if (self.job_dir / "recording.npz").is_file():
                self._log(f"resuming the job that was {self.state} from {self.job_dir} (not recording again)")
                self._start_job(self.state)
            else:
                self.state = "recording"
        return n

    def _status_extra(self) -> dict:
        return {"progress": self.progress}

    def close(self) -> None:
        if self._job is not None and self._job.is_alive():
            self._job.terminate()
            self._job.join(timeout=10.0)
        super().close()


def _asdict(settings: Any) -> dict:
    return dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else dict(settings or {})


def _last_line(path: Path) -> dict:
    """The last complete JSON line of ``path`` ({} when none)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return {}


def _describe(p: dict) -> str:
    """One line of progress: stage, steps, sim return, ETA."""
    parts = [str(p.get("stage", ""))]
    if p.get("total_steps"):
        parts.append(f"{p.get('steps', 0):,}/{p['total_steps']:,} sim steps")
    elif "fraction" in p:
        parts.append(f"{100 * float(p['fraction']):.0f} %")
    if p.get("sim_return") is not None:
        parts.append(f"sim return {float(p['sim_return']):.1f}")
    if p.get("best_return") is not None and p.get("base_return") is not None:
        parts.append(f"best evaluated {float(p['best_return']):.1f} at {int(p.get('best_steps', 0)):,} steps vs the "
                     f"base's {float(p['base_return']):.1f}")
    if p.get("eta_s") is not None:
        parts.append(f"ETA {float(p['eta_s']):.0f} s")
    return ", ".join(parts)


def run_job(job_dir: str) -> None:
    """The child process: identify the gap from ``recording.npz`` (unless ``identified.json`` is there), retrain
    in the identified simulator, write ``result.json`` (ok, reason, path, returns). Every failure is a result."""
    from lowrl_ros.core.retrain.job import run

    d = Path(job_dir)
    job = json.loads((d / "job.json").read_text())
    try:
        os.nice(int(job.get("nice", 0)))
    except OSError:
        pass
    try:
        result = run(d, job)
    except Exception as exc:  # noqa: BLE001 - every failure is the result the trainer reports
        result = {"ok": False, "reason": f"{type(exc).__name__}: {exc}"}
    tmp = d / "result.tmp.json"
    tmp.write_text(json.dumps(result, indent=1, default=str))
    os.replace(tmp, d / "result.json")
