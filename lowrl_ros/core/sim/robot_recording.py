"""A robot's logged steps as the identification reads them, and a simulated robot that logs them (no torch, no ROS).

**What the trainer receives.** The fine-tuner turns the policy node's step rows into transitions
(core/finetune/recorder.py, ``EpisodeRecorder``; paired mode: transition_log.py ``TransitionAssembler``).
Read from that code, a :class:`~lowrl_ros.core.finetune.transition_log.Transition` holds:

* ``obs``: the observation the policy saw at tick t, built by the robot file's observation terms;
* ``command``: what went out to the actuators at tick t, robot units, the policy's joint order (the step
  row's ``command``: the policy node's timed soft start, its rate limit and any safe action included). The
  replay holds exactly these. A log without it (older logs, a reward topic's paired transitions) has its
  commands rebuilt from ``action`` (the action EXECUTED at tick t, policy units) by the robot file's own
  ``action:`` section (core/runtime/actions.py: ``offset + scale * a`` clipped to the joint limits, then the
  rate limit), which cannot know the soft start: the first ``safety.soft_start_s`` of each episode (it blends
  from the previous episode's last command) then read as other commands than were sent, and the recording
  says so in its notes;
* ``next_obs``: the observation at tick t+1;
* ``stamp``: the DDS source timestamp (the publisher's clock, s) of tick **t+1's** step row: the row that
  completes the transition. The policy node publishes a tick's command and then its row, microseconds
  apart, so tick t's command went out at the previous transition's stamp (for an episode's first
  transition: its stamp minus one control period, estimated from the episode's own stamps).

An episode starts after a transition with ``terminated`` or ``truncated``; its first observation is the
robot at rest at its default pose, up to the reset spread (``sim.reset``). Two consecutive transitions
whose ``next_obs`` and ``obs`` differ (a step was dropped) split the episode: the part after the split
does not start at rest, and is not replayed (its base state is unknown).

:func:`record_in_sim` is the other end, for benchmarks and tests: the robot file's simulator with a gap,
driven by any ``driver(obs, t) -> action`` (a trained policy, or :func:`excitation_driver`), ticking on
its own clock (a random phase against the physics steps plus jitter) and its commands arriving after a
random DDS delay, logged as the trainer would receive it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from lowrl_ros.core.runtime.observation import ObservationSpec, projected_gravity
from lowrl_ros.core.runtime.robot_file import RobotFile, load_robot_file

CHANNELS = ("q", "v", "gyro", "gravity")  # joint position (rad, absolute), joint velocity, IMU rate, gravity dir.
_TOL = 1e-6  # s: stamps near 1.7e9 s carry ~0.2 us of float64 rounding; a time this close to a step boundary is on it


@dataclass
class RecordedEpisode:
    """One episode's observations and the commands sent.

    Attributes:
        obs: (n+1, obs_dim) the observations as the policy read them.
        commands: (n, joints) robot units, policy joint order; command k went out with observation k.
        times: (n+1,) s, when observation k was taken and command k sent (its step row's stamp; relative
            values matter only).
        at_rest_start: the first observation is the robot at rest at its default pose.
    """

    obs: np.ndarray
    commands: np.ndarray
    times: np.ndarray
    at_rest_start: bool = True

    @property
    def steps(self) -> int:
        return len(self.commands)


@dataclass
class RobotRecording:
    """Episodes of one robot, and what was noticed while building them."""

    episodes: list[RecordedEpisode]
    notes: list[str] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return sum(e.steps for e in self.episodes)


def as_robot(robot: RobotFile | str | Path) -> RobotFile:
    return robot if isinstance(robot, RobotFile) else load_robot_file(robot)


def control_period(robot: RobotFile) -> float:
    """The robot file's ``sim.control.period_s`` (the policy's period)."""
    sim = robot.raw.get("sim") or {}
    period = (sim.get("control") or {}).get("period_s") if isinstance(sim, dict) else None
    if not isinstance(period, (int, float)) or not period > 0:
        raise ValueError(robot.where("sim.control.period_s is needed (the policy's control period, s)"))
    return float(period)


def action_processor(robot: RobotFile) -> Any:
    """The robot file's ``action:`` section (core/runtime/actions.py), as the policy node builds it."""
    from lowrl_ros.core.runtime.actions import ActionProcessor

    n = len(robot.joints)
    contract = SimpleNamespace(action_dim=n, action_names=tuple(robot.joints), action_scale=None, action_offset=None)
    return ActionProcessor.from_robot_dict(robot.raw, contract)


def commands_of(processor: Any, actions: np.ndarray, period_s: float) -> np.ndarray:
    """Robot-unit commands of policy-unit actions: transform, then the rate limit from the previous command."""
    out, previous = [], None
    for a in np.asarray(actions, dtype=np.float64):
        target = processor.limit_rate(processor.transform(a), previous, period_s)
        out.append(target.copy())
        previous = target
    return np.array(out) if out else np.zeros((0, len(processor.offset)))


def recording_from_transitions(robot: RobotFile | str | Path, transitions: Any, first_is_start: bool = True,
                               clip_actions: float | None = None) -> RobotRecording:
    """The trainer's transitions (a list of Transition, or a TransitionBatch) as episodes (module docstring).

    Args:
        robot: the robot file the policy node runs.
        transitions: in the order received.
        first_is_start: the first transition's observation is an episode's first (the stream began at an
            episode start); False: the part before the first end is not replayed.
        clip_actions: clip actions to +-this before the transform (None: the robot file's sim.control.action_clip).
    """
    robot = as_robot(robot)
    if hasattr(transitions, "obs") and hasattr(transitions, "stamp"):
        obs, act, nxt = (np.asarray(transitions.obs, float), np.asarray(transitions.action, float),
                         np.asarray(transitions.next_obs, float))
        done = np.asarray(transitions.terminated, bool) | np.asarray(transitions.truncated, bool)
        stamp = np.asarray(transitions.stamp, float)
        sent = getattr(transitions, "command", None)
    else:
        ts = list(transitions)
        if not ts:
            return RobotRecording([], ["no transitions"])
        obs, act, nxt = (np.array([t.obs for t in ts], float), np.array([t.action for t in ts], float),
                         np.array([t.next_obs for t in ts], float))
        done = np.array([t.terminated or t.truncated for t in ts], bool)
        stamp = np.array([t.stamp for t in ts], float)
        sent = (np.array([t.command for t in ts], float)
                if all(getattr(t, "command", None) is not None for t in ts) else None)
    sent = None if sent is None else np.asarray(sent, dtype=np.float64)
    if sent is not None and sent.shape != (len(obs), len(robot.joints)):
        raise ValueError(f"the transitions' commands have shape {sent.shape}; the robot file's {len(robot.joints)} "
                         f"joints need ({len(obs)}, {len(robot.joints)}): is this the robot file the policy node ran?")
    period = control_period(robot)
    processor = action_processor(robot)
    clip = clip_actions if clip_actions is not None else float(((robot.raw.get("sim") or {}).get("control") or {})
                                                               .get("action_clip", 1.0))
    episodes: list[RecordedEpisode] = []
    notes: list[str] = []
    start, at_rest, splits = 0, bool(first_is_start), 0
    for i in range(len(obs)):
        last = i == len(obs) - 1
        broken = not last and not done[i] and not np.allclose(nxt[i], obs[i + 1], equal_nan=True)
        if done[i] or last or broken:
            sl = slice(start, i + 1)
            st = stamp[sl]
            dt = float(np.median(np.diff(st))) if len(st) > 1 else period
            if not (0.2 * period < dt < 5 * period):
                notes.append(f"episode at transition {start}: its stamps are {dt * 1e3:.1f} ms apart, the control "
                             f"period is {period * 1e3:.1f} ms; using the period")
                dt = period
            times = np.concatenate([[st[0] - dt], st])
            commands = sent[sl].copy() if sent is not None else commands_of(processor, np.clip(act[sl], -clip, clip),
                                                                            period)
            episodes.append(RecordedEpisode(np.vstack([obs[start:start + 1], nxt[sl]]), commands, times, at_rest))
            splits += int(broken)
            start, at_rest = i + 1, bool(done[i])
    if splits:
        notes.append(f"{splits} gap(s) in the transitions (a next_obs that is not the following obs): the parts after "
                     "them do not start at rest and are not replayed")
    if sent is None and episodes:
        notes.append("the transitions carry no command (an older log, or a reward topic's): commands rebuilt from "
                     "the actions by the robot file's action: section, without the policy node's soft start")
    if not first_is_start and episodes:
        notes.append("the first episode was joined mid-way (first_is_start False): not replayed")
    return RobotRecording(episodes, notes)


# ---- the observation layout: which entries are which signal ------------------------------------------
@dataclass
class SignalLayout:
    """Where each signal the identification reads sits in the observation (from the robot file's terms).

    ``entries[channel]`` is a list of (obs index of the newest step, channel column, scale, offset, pose):
    raw = obs / scale + offset (+ pose for a relative joint position). Terms the identification cannot read
    (cos/sin joint positions, a zero scale, a joint_velocity of joints it does not know, ...) are in ``notes``.
    """

    joints: tuple[str, ...]
    entries: dict[str, list[tuple[int, int, float, float, float]]]
    notes: list[str]

    @classmethod
    def from_robot(cls, robot: RobotFile) -> SignalLayout:
        spec = ObservationSpec.from_robot_file(robot, control_period(robot))
        joints = tuple(robot.joints)
        pose = dict(zip(joints, robot.default_pose or (0.0,) * len(joints)))
        entries: dict[str, list] = {c: [] for c in CHANNELS}
        notes: list[str] = []
        for t, newest in _newest_steps(spec):
            channel = {"joint_position": "q", "joint_velocity": "v", "imu_angular_velocity": "gyro",
                       "projected_gravity": "gravity"}.get(t.term)
            if channel is None:
                if t.term not in ("last_action", "velocity_command"):
                    notes.append(f"{t.describe()}: not a signal the identification reads; skipped")
                continue
            if t.function:
                notes.append(f"{t.describe()}: {t.function} of the joint positions is not invertible; skipped")
                continue
            if np.any(t.scale == 0):
                notes.append(f"{t.describe()}: a zero scale hides the signal; skipped")
                continue
            if t.clip is not None:
                notes.append(f"{t.describe()}: clipped to {t.clip}; values at the bounds read biased")
            for j in range(t.size):
                if channel in ("q", "v"):
                    name = t.joints[j] if t.joints else joints[j]
                    if name not in joints:
                        continue
                    col = joints.index(name)
                    base = pose.get(name, 0.0) if (channel == "q" and t.relative) else 0.0
                else:
                    col, base = j, 0.0
                entries[channel].append((newest + j, col, float(t.scale[j]), float(t.offset[j]), base))
        return cls(joints, entries, notes)

    def has(self, channel: str) -> bool:
        return bool(self.entries[channel])

    def width(self, channel: str) -> int:
        return len(self.joints) if channel in ("q", "v") else 3

    def decode(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        """(T, obs_dim) observations -> channel -> (T, width) raw signals (NaN where not observed)."""
        obs = np.atleast_2d(np.asarray(obs, dtype=np.float64))
        out = {}
        for c in CHANNELS:
            if not self.entries[c]:
                continue
            arr = np.full((len(obs), self.width(c)), np.nan)
            for idx, col, scale, offset, base in self.entries[c]:
                arr[:, col] = obs[:, idx] / scale + offset + base
            out[c] = arr
        return out


def recorded_commands(robot: RobotFile | str | Path, obs: np.ndarray) -> np.ndarray:
    """The velocity commands (vx, vy, yaw rate) the robot was given at each recorded observation: its
    ``velocity_command`` term unscaled, (T, 3), rows with a NaN left out; (0, 3) without such a term."""
    robot = as_robot(robot)
    obs = np.atleast_2d(np.asarray(obs, dtype=np.float64))
    for t, newest in _newest_steps(ObservationSpec.from_robot_file(robot, control_period(robot))):
        if t.term == "velocity_command" and t.size == 3 and np.all(t.scale != 0):
            cmds = obs[:, newest:newest + 3] / t.scale + t.offset
            return cmds[np.isfinite(cmds).all(axis=1)]
    return np.zeros((0, 3))


def _newest_steps(spec: ObservationSpec):
    """Each term of ``spec`` with the observation index where its newest step starts (histories included)."""
    start = 0
    for t in spec.terms:
        yield t, start + (t.history - 1) * t.size if t.history_order == "oldest_first" else start
        start += t.dim


# ---- the zero-order hold at recorded timestamps ------------------------------------------------------
def zoh_schedule(sent: np.ndarray, delay_s: float | np.ndarray, physics_dt: float, steps: int) -> np.ndarray:
    """For each physics step j (covering [j dt, (j+1) dt) after the episode's first observation) the index of the
    command in force: the newest command k whose ``sent[k] + delay`` is at or before the step's start; -1 before
    any (the robot holds its default pose). Times are relative to the episode's first observation."""
    active = np.ceil((np.asarray(sent, dtype=np.float64) + delay_s - _TOL) / physics_dt).astype(np.int64)
    active = np.maximum(active, 0)
    schedule = np.full(steps + 1, -1, dtype=np.int64)
    ok = active < steps
    np.maximum.at(schedule, active[ok], np.flatnonzero(ok))
    return np.maximum.accumulate(schedule)[:steps]


def sample_steps(times: np.ndarray, physics_dt: float) -> np.ndarray:
    """Physics steps completed when each observation was taken (relative times: the first at 0)."""
    return np.floor((np.asarray(times, dtype=np.float64) + _TOL) / physics_dt).astype(np.int64)


def sim_signals(sim: Any) -> dict[str, np.ndarray]:
    """The simulator's noiseless readings (its gap's biases included), as :class:`SignalLayout` channels."""
    _, q, v, _ = sim.joint_state(noisy=False)
    out = {"q": q.copy(), "v": v.copy()}
    if sim.config.imu_site:
        orientation, gyro, _ = sim.imu(noisy=False)
        out["gyro"], out["gravity"] = gyro, projected_gravity(orientation, "xyzw")
    return out


# ---- a simulated robot, logged as the trainer receives it ------------------------------------------
Driver = Callable[[np.ndarray, float], np.ndarray]


def excitation_driver(robot: RobotFile | str | Path, seed: int = 0, amplitude: float = 0.5, hold_s: float = 0.5,
                      frequencies_hz: Sequence[float] = (0.7, 1.9, 4.3), noise: float = 0.1) -> Driver:
    """A user's excitation routine: hold the default pose for ``hold_s``, then per joint a sum of sines at
    ``frequencies_hz`` (random phases) plus white noise, in policy units (0 is the default pose). Seeded."""
    robot = as_robot(robot)
    rng = np.random.default_rng(seed)
    n = len(robot.joints)
    phases = rng.uniform(0, 2 * math.pi, (len(frequencies_hz), n))
    freqs = np.asarray(frequencies_hz, dtype=np.float64)[:, None]

    def drive(_obs: np.ndarray, t: float) -> np.ndarray:
        if t < hold_s:
            return np.zeros(n)
        s = np.sin(2 * math.pi * freqs * (t - hold_s) + phases).sum(axis=0) / len(freqs)
        return amplitude * s + noise * rng.standard_normal(n)

    return drive


class LoggedStep(NamedTuple):
    """A transition as :func:`record_in_sim` logs it: the fields of core/finetune/transition_log.py ``Transition``
    that identification reads, in its order (core.sim may not import core.finetune; finetune imports sim)."""

    obs: np.ndarray
    action: np.ndarray
    reward: float
    next_obs: np.ndarray
    terminated: bool
    truncated: bool
    policy_version: int
    stamp: float
    intervention: bool = False
    reward_terms: tuple = ()
    command: np.ndarray | None = None


@dataclass
class SimRecording:
    """What :func:`record_in_sim` logged, and the truth the log does not hold (to score an identification)."""

    transitions: list[LoggedStep]
    delays_s: list[np.ndarray]  # per episode, per command: its DDS delay (s)
    first_times: list[float]  # per episode: its first observation's time after the reset (s)


def record_in_sim(robot: RobotFile | str | Path, gap: Any, driver: Driver | None = None, *, episodes: int = 8,
                  steps: int = 250, seed: int = 0, dds_delay_s: tuple[float, float] = (0.5e-3, 3e-3),
                  jitter_s: float = 0.5e-3, phase: bool = True) -> SimRecording:
    """Run the robot file's simulator with ``gap`` as "the robot" and log it as the trainer receives it.

    Per episode: a reset (at rest, the reset spread, ``seed``-determined), then ``steps`` policy ticks. The
    ticks run on the policy's clock: a random phase against the physics steps (``phase``) and a uniform
    jitter of +-``jitter_s`` per tick; each command arrives ``dds_delay_s`` (uniform lo..hi) after its tick,
    acts from the next physics step on, and the gap's ``latency_steps`` later still (RobotSim's queue). An
    observation reads the physics steps completed by its tick. A fall (RobotSimEnv's tilt) ends the episode.

    Returns the transitions (:class:`LoggedStep`, stamps as the finetune node sets them: the next tick's
    time) and the per-command delays and first-observation times (the truth the log does not carry).
    """
    from lowrl_ros.core.sim.robot_env import FALL_UP, RobotSimEnv

    robot = as_robot(robot)
    env = RobotSimEnv(robot, gap)
    sim, cfg = env.sim, env.sim.config
    driver = driver or excitation_driver(robot, seed)
    rng = np.random.default_rng(seed)
    dt, period = cfg.physics_dt, cfg.period_s
    clip = cfg.action_clip
    out, delays, firsts = [], [], []
    wall = 1.7e9
    hold = np.asarray(robot.default_pose, dtype=np.float64)
    for e in range(episodes):
        env.reset(seed=seed * 100_003 + e)
        t0 = float(rng.uniform(0, dt)) if phase else 0.0  # the first tick's phase against the physics steps
        ticks = t0 + np.arange(steps + 1) * period
        ticks[1:] += rng.uniform(-jitter_s, jitter_s, steps)
        delay = rng.uniform(*dds_delay_s, steps + 1)
        commands: list[np.ndarray] = []
        obs = env.observe()
        done_steps = 0
        previous = None
        for k in range(steps):
            t = ticks[k]
            action = np.clip(np.asarray(driver(obs, t - t0), dtype=np.float64), -clip, clip)
            target = env.processor.limit_rate(env.processor.transform(action), previous, period)
            previous = target
            commands.append(target.copy())
            env.builder.set_last_action(action, raw=action)
            # physics up to the next tick, each step with the newest command arrived by its start
            until = int(sample_steps(ticks[k + 1:k + 2], dt)[0])
            sched = zoh_schedule(ticks[:k + 1], delay[:k + 1], dt, until)
            while done_steps < until:
                i = sched[done_steps]
                sim.step(commands[i] if i >= 0 else hold, physics_steps=1)
                done_steps += 1
            nxt = env.observe()
            fell = sim.base_up() < FALL_UP
            out.append(LoggedStep(obs.copy(), action.copy(), 0.0, nxt.copy(), bool(fell), k == steps - 1 and not fell,
                                  1, wall + ticks[k + 1], command=target.copy()))
            obs = nxt
            if fell:
                break
        delays.append(delay[:len(commands)])
        firsts.append(t0)
        wall += ticks[-1] + 1.0
    return SimRecording(out, delays, firsts)
