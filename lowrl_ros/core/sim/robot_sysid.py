"""Identify the reality gap of any robot file with a ``sim:`` section from its own logged steps (no torch, no ROS).

The legged example's identifier (core/sim/sysid.py) reads that example's observation; this one reads
whatever the robot file's observation terms say (core/sim/robot_recording.py ``SignalLayout``) and fits
the robot file's own simulator (core/sim/robot_sim.py ``RobotSim``) within its ``sim.gap_priors``.

1. **Sensors, in closed form at rest.** Every episode starts at rest at the default pose, up to the
   reset spread (``sim.reset``): averaged over those starts, the joint position reads default + encoder
   offset, the gyro reads its bias, and projected gravity reads the simulator's rest gravity turned by
   the IMU's mounting tilt (roll, pitch solved by least squares). The noise levels are the spreads at
   rest minus the reset spread's own variance (uniform: half-width^2 / 3). Each comes with its standard
   error. A start that moves (its joint velocities and gyro far above the other starts': ``_still_starts``) is
   left out, with a note. Too few starts: :class:`IdentificationError` saying how many are needed and how to
   record them.
2. **Physics, by replay with the robot's timing.** Each episode that starts at rest is replayed in the
   simulator from its first observation (joint positions less the offsets), every recorded command held
   (zero-order hold) from its send stamp plus a fitted delay, whatever the phase of the physics step it
   falls in (:func:`~lowrl_ros.core.sim.robot_recording.zoh_schedule`). The delay includes the DDS delay,
   so the identified latency is "physics steps of ``sim.control.physics_dt`` from the command's stamp to
   the first physics step that may use it". The objective (:func:`objective`) compares windowed
   statistics of every signal (mean, spread with the identified noise added,
   lag-1 autocovariance) plus the joint positions' open-loop error from each episode start (``horizon``),
   each channel in units of its recorded variance: statistics need no exact time alignment, the joints'
   open-loop error (stiff PD tracks the commands, so it does not drift like the base) pins latency and
   gains. Mass scale, friction, motor strength, kp/kd scales and latency are searched by the cross-entropy
   method (seeded) inside the priors, then settled by a coordinate search; where a quarter-range move of a
   value is still lower on average (the search stopped on a bump of the noisy objective) the fit moves there
   and settles again (at most ``MAX_DESCENTS`` times). The candidates are replayed in ``workers`` processes (a
   replay is deterministic, so the result is the same for any number of them).
3. **What the data cannot identify** stays at its prior centre, flagged: motor strength when the replayed
   torques never reach the weakest torque limit the prior allows (it changes nothing then), and any
   physics parameter whose quarter-range moves do not raise the objective in significantly more episodes
   than not on at least one side (a one-sided sign test at 5 %: 11 of 14, 7 of 8) and on average on both:
   its effect is below the episode-to-episode noise.

``identify`` returns an :class:`Identification`: the gap, one-sigma uncertainties (sensors: standard errors;
physics: the spread of the final elite set; unidentified: the prior's uniform sigma), the flags, the residual
and one note per thing skipped.
"""
from __future__ import annotations

import dataclasses
import math
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from lowrl_ros.core.config import field as config_field
from lowrl_ros.core.runtime.robot_file import RobotFile
from lowrl_ros.core.sim.robot_recording import (RecordedEpisode, RobotRecording, SignalLayout, as_robot,
                                                recording_from_transitions, sample_steps, sim_signals,
                                                zoh_schedule)
from lowrl_ros.core.sim.robot_sim import Gap, RobotSim, _quat_from_roll_pitch

__all__ = ["IdentificationError", "Identification", "IdentifySettings", "identify", "recording_from_transitions",
           "replay", "objective"]

# The smallest spread a channel is measured in: a signal that hardly moves on the recording (an upright base's
# gravity, a still gyro) would otherwise weigh its chaos-driven differences far above the joints'.
SCALE_FLOOR = {"q": 1e-3, "v": 1e-2, "gyro": 0.05, "gravity": 0.05}
PHYSICS = ("mass_scale", "friction", "motor_strength", "kp_scale", "kd_scale", "latency_steps")


class IdentificationError(ValueError):
    """The recording cannot identify the gap; the message says what is missing and how to record it."""


@dataclass(frozen=True)
class IdentifySettings:
    """How :func:`identify` fits (the defaults identify the quadruped from 2000 steps in about a minute)."""

    min_rest_phases: int = config_field(8, "episode starts at rest needed for the closed-form sensor biases",
                                        range=(2, 100000))
    min_steps: int = config_field(200, "policy steps in replayable episodes needed for the physics fit",
                                  range=(1, 10**9))
    iterations: int = config_field(10, "cross-entropy iterations of the physics fit", range=(1, 1000))
    population: int = config_field(24, "candidates per cross-entropy iteration", range=(4, 10000))
    elites: int = config_field(6, "best candidates each iteration refits the sampling distribution to",
                               range=(2, 10000))
    search_steps: int = config_field(1200, "policy steps each cross-entropy candidate replays (the first "
                                     "episodes; the refinement and the identifiability test replay max_steps)",
                                     range=(1, 10**9))
    window: int = config_field(25, "policy steps per statistics window (25: 0.5 s at 50 Hz)", range=(4, 100000))
    horizon: int = config_field(250, "policy steps of open-loop joint-position error from each episode start "
                                "(0: none)", range=(0, 100000))
    refine_rounds: int = config_field(2, "coordinate-search rounds after the cross-entropy search (steps of 1/8, "
                                      "1/16 ... of each prior range)", range=(0, 100))
    max_steps: int = config_field(4000, "policy steps replayed per candidate at most (the first episodes)",
                                  range=(1, 10**9))
    workers: int = config_field(2, "processes the candidates are replayed in (1: this one; any number gives the "
                                "same result)", range=(1, 512))

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            lo, hi = f.metadata["range"]
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ValueError(f"IdentifySettings.{f.name}={value!r} must be an integer in [{lo}, {hi}]")
        if self.elites >= self.population:
            raise ValueError(f"IdentifySettings.elites={self.elites} must be below population={self.population}")


@dataclass
class Identification:
    """An identified gap (see the module docstring).

    Attributes:
        gap: identified values; unidentifiable ones at nominal (sensors) or the prior's centre (physics).
        std: Gap field -> one-sigma uncertainty (latency_steps in physics steps; per-joint lists as the gap).
        identifiable: Gap field -> False when the data could not identify it.
        residual: the physics fit's final objective: the mean squared difference of the replay's statistics and
            the recording's, each channel in units of its recorded variance (dimensionless; 0: identical).
        notes: one line each: what was skipped and why, what was left at the prior.
        details: latency_physics_steps (the fitted delay, unrounded), episodes and steps used, evaluations,
            quarter_moves (per physics value and side: episodes whose objective rose, of how many, the mean rise).
    """

    gap: Gap
    std: dict[str, float | list]
    identifiable: dict[str, bool]
    residual: float
    notes: list[str]
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-able: the gap, the uncertainties, the flags, the residual, the notes, the details."""
        return {"gap": _plain(self.gap.as_dict()), "std": _plain(self.std), "identifiable": _plain(self.identifiable),
                "residual": float(self.residual), "residual_unit": "mean squared, in each channel's recorded variance",
                "notes": list(self.notes), "details": _plain(self.details)}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


# ---- 1. sensors in closed form --------------------------------------------------------------------
@dataclass
class _Sensors:
    values: dict[str, Any]
    std: dict[str, Any]
    identifiable: dict[str, bool]


def _rest_gravity(sim: RobotSim) -> np.ndarray:
    """Projected gravity the nominal simulator's IMU reads at its reset (the body's rest orientation)."""
    from lowrl_ros.core.runtime.observation import projected_gravity

    sim.set_gap(Gap())
    sim.reset(seed=0)
    orientation, _, _ = sim.imu(noisy=False)
    return projected_gravity(orientation, "xyzw")


def _tilted(g_rest: np.ndarray, roll: float, pitch: float) -> np.ndarray:
    """What an IMU mounted with (roll, pitch) reads when the body's projected gravity is ``g_rest``."""
    w, x, y, z = _quat_from_roll_pitch(roll, pitch)
    r = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                  [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                  [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])
    return r.T @ g_rest


def _solve_tilt(g_rest: np.ndarray, g_mean: np.ndarray) -> tuple[float, float]:
    from scipy.optimize import least_squares

    g_mean = g_mean / (np.linalg.norm(g_mean) or 1.0)
    fit = least_squares(lambda p: _tilted(g_rest, p[0], p[1]) - g_mean, np.zeros(2), xtol=1e-14, ftol=1e-14)
    return float(fit.x[0]), float(fit.x[1])


def _sensors(rest: dict[str, np.ndarray], sim: RobotSim, layout: SignalLayout, notes: list[str]) -> _Sensors:
    cfg = sim.config
    n = len(next(iter(rest.values())))
    vals: dict[str, Any] = {}
    std: dict[str, Any] = {}
    ok: dict[str, bool] = {}
    pose = np.asarray(sim.default_pose)
    if "q" in rest:
        q = rest["q"] - pose
        seen = ~np.isnan(q).all(axis=0)
        offset = np.where(seen, np.nanmean(q, axis=0), 0.0)
        se = np.where(seen, np.nanstd(q, axis=0, ddof=1) / math.sqrt(n), 0.0)
        vals["encoder_offset"], std["encoder_offset"] = tuple(offset), list(se)
        ok["encoder_offset"] = bool(seen.all())
        if not seen.all():
            notes.append("encoder_offset: joints " + ", ".join(j for j, s in zip(layout.joints, seen) if not s)
                         + " are not observed; left at 0")
        resid = (q - offset)[:, seen]
        var = float(np.nanmean(resid ** 2)) - cfg.joint_noise ** 2 / 3
        vals["joint_position_noise"] = math.sqrt(max(var, 0.0))
        std["joint_position_noise"] = _noise_se(resid, cfg.joint_noise)
        ok["joint_position_noise"] = True
    else:
        notes.append("encoder_offset, joint_position_noise: no joint_position term; left at 0")
    if "v" in rest:
        v = rest["v"][:, ~np.isnan(rest["v"]).all(axis=0)]
        var = float(np.nanmean(v ** 2)) - cfg.velocity_noise ** 2 / 3
        vals["joint_velocity_noise"] = math.sqrt(max(var, 0.0))
        std["joint_velocity_noise"] = _noise_se(v, cfg.velocity_noise)
        ok["joint_velocity_noise"] = True
    else:
        notes.append("joint_velocity_noise: no joint_velocity term; left at 0")
    if "gyro" in rest:
        g = rest["gyro"]
        vals["gyro_bias"] = tuple(g.mean(axis=0))
        std["gyro_bias"] = list(g.std(axis=0, ddof=1) / math.sqrt(n))
        vals["gyro_noise"] = float(np.sqrt(np.mean((g - g.mean(axis=0)) ** 2)))
        std["gyro_noise"] = _noise_se(g - g.mean(axis=0), 0.0)
        ok["gyro_bias"] = ok["gyro_noise"] = True
    else:
        notes.append("gyro_bias, gyro_noise: no imu_angular_velocity term; left at 0")
    if "gravity" in rest:
        g = rest["gravity"]
        g_rest = _rest_gravity(sim)
        g_mean = g.mean(axis=0)
        roll, pitch = _solve_tilt(g_rest, g_mean)
        vals["tilt_bias"] = (roll, pitch)
        # A small tilt moves the unit gravity by ~ the angle: the mean's standard error per axis is the angle's.
        se = g.std(axis=0, ddof=1) / math.sqrt(n)
        std["tilt_bias"] = [float(math.hypot(se[1], se[2])), float(math.hypot(se[0], se[2]))]
        # a random-axis tilt of sigma moves the unit vector by sigma^2 * 2/3 in total variance
        total = float(np.sum(np.mean((g - g_mean) ** 2, axis=0)))
        vals["orientation_noise"] = math.sqrt(1.5 * total)
        std["orientation_noise"] = vals["orientation_noise"] / math.sqrt(2 * max(n - 1, 1))
        ok["tilt_bias"] = ok["orientation_noise"] = True
    else:
        notes.append("tilt_bias, orientation_noise: no projected_gravity term; left at 0")
    return _Sensors(vals, std, ok)


def _noise_se(resid: np.ndarray, reset_halfwidth: float) -> float:
    """One sigma of a noise level estimated from rest spreads (the variance's standard error, propagated)."""
    resid = resid[~np.isnan(resid)] if resid.ndim == 1 else resid[:, ~np.isnan(resid).all(axis=0)].ravel()
    m = max(resid.size, 2)
    var = float(np.mean(resid ** 2))
    sd_var = var * math.sqrt(2.0 / (m - 1))
    noise_var = max(var - reset_halfwidth ** 2 / 3, 1e-12)
    return float(min(sd_var / (2 * math.sqrt(noise_var)), math.sqrt(var + sd_var)))


# ---- 2. physics by replay ---------------------------------------------------------------------------
def _debias(signals: dict[str, np.ndarray], gap: Gap) -> dict[str, np.ndarray]:
    """Recorded signals less the sensor biases: what the noiseless, unbiased simulator must reproduce."""
    out = dict(signals)
    if "q" in out:
        out["q"] = out["q"] - np.asarray(gap.encoder_offset)
    if "gyro" in out:
        out["gyro"] = out["gyro"] - np.asarray(gap.gyro_bias)
    if "gravity" in out:
        w, x, y, z = _quat_from_roll_pitch(*gap.tilt_bias)
        r = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                      [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                      [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])
        out["gravity"] = out["gravity"] @ r.T  # g_body = R_tilt g_imu
    return out


def replay(sim: RobotSim, episode: RecordedEpisode, layout: SignalLayout, physics: Gap, delay_s: float | np.ndarray,
           start_q: np.ndarray | None = None, start_v: np.ndarray | None = None,
           peak: bool = True) -> tuple[dict[str, np.ndarray], float]:
    """The simulator's readings at the episode's observation times, its commands held from stamp + delay.

    ``physics``: the gap to simulate (its latency_steps and sensor fields are ignored: the delay is
    ``delay_s``, the readings noiseless and unbiased). ``start_q``/``start_v``: the joints' start state
    (default: the default pose, at rest). Returns the channels of ``layout`` and the largest |torque| /
    nominal torque limit reached (``peak`` False: not tracked, 0; the physics steps then run as few calls as
    the commands and readings allow, the same physics)."""
    sim.set_gap(dataclasses.replace(physics, latency_steps=0, encoder_offset=0.0, gyro_bias=(0.0, 0.0, 0.0),
                                    tilt_bias=(0.0, 0.0), joint_position_noise=0.0, joint_velocity_noise=0.0,
                                    gyro_noise=0.0, orientation_noise=0.0))
    sim.reset(seed=0)
    sim.set_joints(start_q, start_v)
    dt = sim.config.physics_dt
    times = episode.times - episode.times[0]
    samples = sample_steps(times, dt)
    total = int(samples[-1])
    schedule = zoh_schedule(times[:-1], delay_s, dt, total)
    # A segment of physics steps ends where a reading is due or another command takes over (one step each when
    # the peak torque is tracked); the last ends at the last reading.
    ends = np.arange(1, total + 1) if peak else np.union1d(np.flatnonzero(np.diff(schedule)) + 1, samples[samples > 0])
    hold = sim.default_pose
    channels = [c for c in ("q", "v", "gyro", "gravity") if layout.has(c)]
    out = {c: np.empty((len(times), layout.width(c))) for c in channels}
    limit = sim.config.torque_limit
    most = 0.0
    due = samples.tolist()  # each reading's physics step, sorted: a cursor walks it (the replay's hot loop)
    step = k = 0
    for end in ends.tolist():
        i = schedule[step]
        k = _read_due(sim, due, k, step, channels, out)
        sim.step(episode.commands[i] if i >= 0 else hold, physics_steps=end - step)
        if peak:
            most = max(most, float(np.max(np.abs(sim.torque) / limit)))
        step = end
    _read_due(sim, due, k, step, channels, out)
    return out, most


def _read_due(sim: RobotSim, due: list[int], k: int, step: int, channels: list[str],
              out: dict[str, np.ndarray]) -> int:
    """Readings ``k``, ``k + 1``, ... taken after ``step`` physics steps (``due``: each reading's physics step,
    sorted); returns the index of the next reading."""
    lo = k
    while k < len(due) and due[k] == step:
        k += 1
    if k > lo:
        read = sim_signals(sim)
        for c in channels:
            out[c][lo:k] = read[c]
    return k


def _window_stats(x: np.ndarray, window: int, noise: np.ndarray | float = 0.0) -> np.ndarray:
    """(windows, 3, channels): per window the mean, the spread (with white noise of ``noise`` added in
    variance) and the lag-1 autocovariance (white noise adds none)."""
    w = len(x) // window
    if w == 0:
        return np.zeros((0, 3, x.shape[1]))
    x = x[:w * window].reshape(w, window, -1)
    mean = x.mean(axis=1)
    dev = x - mean[:, None]
    var = (dev ** 2).mean(axis=1) + np.asarray(noise) ** 2
    acov = (dev[:, 1:] * dev[:, :-1]).mean(axis=1)
    return np.stack([mean, np.sqrt(var), acov / np.sqrt(np.maximum(var, 1e-12))], axis=1)


def objective(recorded: dict[str, np.ndarray], simulated: dict[str, np.ndarray], scale: dict[str, np.ndarray],
              noise: dict[str, np.ndarray], window: int, horizon: int) -> float:
    """The fit's objective for one episode (0: identical statistics).

    The statistics part: per ``window`` observations and per channel the mean, the spread and the lag-1
    autocovariance (normalized by the spread), simulated (its noise-free spread widened by the identified
    sensor noise ``noise``) against recorded, each difference in units of the channel's recorded spread
    ``scale``, squared and averaged: a slip of one observation between the two changes nothing much. The
    open-loop part: the joint positions' squared error over the first ``horizon`` observations of the
    episode, less the sensor noise's own contribution, in the same units: it pins latency and gains. Joint
    positions are compared after removing their mean difference over the episode: the encoder offsets from
    the episode starts carry the reset spread's error, which no physics parameter can explain (it is refit
    in closed form after the physics, :func:`identify`)."""
    terms = []
    for c, rec in recorded.items():
        sim = simulated[c]
        cols = ~np.isnan(rec).all(axis=0)
        rec, sim, s, nz = rec[:, cols], sim[:, cols], scale[c][cols], np.asarray(noise[c])[cols]
        if c == "q":  # the encoder offsets' residual error is refit afterwards: compare the motion, not the level
            sim = sim + np.mean(rec - sim, axis=0)
        a = _window_stats(sim, window, nz)
        b = _window_stats(rec, window)
        if len(a):
            terms.append(np.mean(((a - b) / s) ** 2))
        if horizon and c == "q":
            h = min(horizon, len(rec))
            err = ((sim[:h] - rec[:h]) ** 2 - nz ** 2) / s ** 2
            terms.append(float(np.mean(err)))
    return float(np.mean(terms)) if terms else 0.0


@dataclass
class _Problem:
    """The replay's fixed inputs: episodes, their debiased signals and starts, the scales and noises."""

    sim: RobotSim
    layout: SignalLayout
    episodes: list[RecordedEpisode]
    recorded: list[dict[str, np.ndarray]]
    starts: list[tuple[np.ndarray, np.ndarray | None]]
    scale: dict[str, np.ndarray]
    noise: dict[str, np.ndarray]
    settings: IdentifySettings
    evaluations: int = 0

    def first(self, steps: int) -> _Problem:
        """The same problem over its first episodes, up to ``steps`` policy steps (at least two episodes)."""
        n, used = 0, 0
        while n < len(self.episodes) and (used < steps or n < 2):
            used += self.episodes[n].steps
            n += 1
        return dataclasses.replace(self, episodes=self.episodes[:n], recorded=self.recorded[:n],
                                   starts=self.starts[:n])

    def replays(self, physics: Gap, delay_s: float, peak: bool = False) -> tuple[list[dict[str, np.ndarray]], float]:
        """Every episode replayed; the largest torque fraction reached (``peak``: else 0)."""
        self.evaluations += 1
        out, most = [], 0.0
        for ep, (q0, v0) in zip(self.episodes, self.starts):
            sim, p = replay(self.sim, ep, self.layout, physics, delay_s, q0, v0, peak)
            out.append(sim)
            most = max(most, p)
        return out, most

    def per_episode(self, physics: Gap, delay_s: float, peak: bool = False) -> tuple[np.ndarray, float]:
        """The objective of each episode; the largest torque fraction reached (``peak``: else 0)."""
        sims, most = self.replays(physics, delay_s, peak)
        return np.array([objective(rec, sim, self.scale, self.noise, self.settings.window, self.settings.horizon)
                         for rec, sim in zip(self.recorded, sims)]), most


# A replay worker's problems (set once per process by _worker_start): "search" (the first search_steps) and "full".
_WORKER: dict[str, Any] = {}


def _worker_start(robot: RobotFile, problem: _Problem, search_steps: int, names: list[str], priors: dict,
                  dt: float) -> None:
    full = dataclasses.replace(problem, sim=RobotSim(robot))  # its own simulator: a MuJoCo model per process
    _WORKER.update(full=full, search=full.first(search_steps), names=names, priors=priors, dt=dt)


def _score(problem: _Problem, names: list[str], priors: dict, dt: float, x: np.ndarray) -> np.ndarray:
    """The objective of each of ``problem``'s episodes at the candidate ``x`` (a point on [0, 1]^d over ``names``)."""
    return problem.per_episode(*_physics_gap(names, x, priors, dt))[0]


def _worker_score(which: str, x: np.ndarray) -> np.ndarray:
    w = _WORKER
    return _score(w[which], w["names"], w["priors"], w["dt"], x)


class _Scorer:
    """The objective of each episode for a list of candidates (points on [0, 1]^d over ``names``' priors), on
    the "search" problem (the first ``search_steps``) or the "full" one: in ``settings.workers`` spawned
    processes, or in this one. A replay is deterministic, so both give the same numbers. A pool that breaks
    (a worker killed) is noted and the rest is replayed here."""

    def __init__(self, robot: RobotFile, problem: _Problem, settings: IdentifySettings, names: list[str],
                 priors: dict, dt: float, notes: list[str]) -> None:
        # Copies that count their own replays (self.evaluations).
        self.problems = {"full": dataclasses.replace(problem, evaluations=0),
                         "search": dataclasses.replace(problem.first(settings.search_steps), evaluations=0)}
        self.names, self.priors, self.dt, self.notes = names, priors, dt, notes
        self.pooled = 0
        self.pool: ProcessPoolExecutor | None = None
        if settings.workers > 1 and names:
            # spawn: a clean interpreter per worker (no MuJoCo or torch state inherited); the niceness is inherited
            self.pool = ProcessPoolExecutor(settings.workers, mp_context=mp.get_context("spawn"),
                                            initializer=_worker_start,
                                            initargs=(robot, dataclasses.replace(problem, sim=None),
                                                      settings.search_steps, names, priors, dt))

    def __call__(self, which: str, xs) -> list[np.ndarray]:
        xs = [np.asarray(x, np.float64) for x in xs]
        if self.pool is not None:
            try:
                out = list(self.pool.map(_worker_score, [which] * len(xs), xs))
                self.pooled += len(xs)
                return out
            except BrokenProcessPool as exc:
                self.notes.append(f"a replay worker died ({exc}); the rest of the fit was replayed in one process")
                self.close()
        return [_score(self.problems[which], self.names, self.priors, self.dt, x) for x in xs]

    @property
    def evaluations(self) -> int:
        """Candidates replayed (each over every episode of its problem)."""
        return self.pooled + sum(p.evaluations for p in self.problems.values())

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def __enter__(self) -> _Scorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _physics_params(priors: dict[str, tuple[float, float]], sim: RobotSim, notes: list[str]) -> list[str]:
    names = []
    for k in PHYSICS:
        if k not in priors:
            notes.append(f"{k}: no sim.gap_priors range; left at nominal")
        elif k == "friction" and not sim.config.foot_geoms:
            notes.append("friction: no sim.foot_geoms to scale; left at nominal")
        elif k in ("kp_scale", "kd_scale") and sim.config.interface != "position":
            notes.append(f"{k}: interface {sim.config.interface} has no PD gains; left at nominal")
        elif priors[k][0] == priors[k][1]:
            notes.append(f"{k}: its prior is the single value {priors[k][0]:g}; fixed there")
        else:
            names.append(k)
    return names


def _bounds(name: str, priors: dict[str, tuple[float, float]]) -> tuple[float, float]:
    lo, hi = priors[name]
    return (lo, hi + 1.0) if name == "latency_steps" else (lo, hi)  # latency: + up to one step of DDS delay


def _physics_gap(names: list[str], x: np.ndarray, priors: dict, dt: float) -> tuple[Gap, float]:
    values = {n: lo + v * (hi - lo) for n, v, (lo, hi) in zip(names, x, (_bounds(n, priors) for n in names))}
    delay_steps = values.pop("latency_steps", 0.0)
    return Gap(**values), delay_steps * dt


MAX_DESCENTS = 3  # quarter-range moves the fit takes after its search (each followed by the refinement)


def _refine(score: _Scorer, best_x: np.ndarray, best_j: float, rounds: int) -> tuple[np.ndarray, float]:
    """A coordinate search from ``best_x``: per round and value both moves by the round's step (1/8, 1/16, ... of
    the prior range), replayed at once; the lower one is taken first, as one after the other would."""
    step = 0.125
    for _ in range(rounds):
        for i in range(len(best_x)):
            moves = [best_x.copy(), best_x.copy()]
            for x, sign in zip(moves, (-1.0, 1.0)):
                x[i] = float(np.clip(x[i] + sign * step, 0.0, 1.0))
            for x, j in zip(moves, score("full", moves)):
                if float(j.mean()) < best_j:
                    best_x, best_j = x, float(j.mean())
                    break
        step /= 2
    return best_x, best_j


def _settle(score: _Scorer, best_x: np.ndarray, best_j: float, rounds: int):
    """The search's best point refined, then moved on while a quarter-range move lowers the mean objective (the
    search stopped short of the minimum: a noisy objective, a bump the refinement's smaller steps did not cross),
    at most ``MAX_DESCENTS`` times, each followed by the refinement. Returns the point, its mean objective, the
    per-episode objectives of the identifiability test's moves from it (keyed (value index, sign); replayed here,
    the pool still open) and how many moves were taken."""
    best_x, best_j = _refine(score, best_x, best_j, rounds)
    descents = 0
    while True:
        moved = _quarter_moves(best_x)
        moved_j = dict(zip(moved, score("full", list(moved.values()))))
        lower = min(moved_j, key=lambda key: float(moved_j[key].mean()), default=None)
        if lower is None or float(moved_j[lower].mean()) >= best_j or descents == MAX_DESCENTS:
            return best_x, best_j, moved_j, descents
        descents += 1
        best_x, best_j = _refine(score, moved[lower], float(moved_j[lower].mean()), rounds)


def _quarter_moves(best_x: np.ndarray) -> dict[tuple[int, float], np.ndarray]:
    """The identifiability test's moves: each value a quarter of its prior range either way (clipped to the prior;
    a move the clip shortens below a tenth is left out)."""
    moved: dict[tuple[int, float], np.ndarray] = {}
    for i in range(len(best_x)):
        for sign in (-1.0, 1.0):
            x = best_x.copy()
            x[i] = float(np.clip(x[i] + sign * 0.25, 0.0, 1.0))
            if abs(x[i] - best_x[i]) >= 0.1:
                moved[(i, sign)] = x
    return moved


def _problem(sim: RobotSim, layout: SignalLayout, starts: list[RecordedEpisode], sensor_gap: Gap,
             gap_values: dict[str, Any], settings: IdentifySettings) -> tuple[_Problem, int]:
    """The replay's inputs: the episodes (up to ``max_steps``), their debiased signals, start states, scales and
    the identified noise levels."""
    cfg = sim.config
    rest_gravity = _rest_gravity(sim) if layout.has("gravity") else np.zeros(3)
    replayable, used = [], 0
    for e in starts:
        if used >= settings.max_steps:
            break
        replayable.append(e)
        used += e.steps
    if used < settings.min_steps:
        raise IdentificationError(
            f"identification needs at least {settings.min_steps} policy steps in episodes that start at rest to "
            f"replay; the recording has {used}. Record longer (each episode begun at rest at the default pose)")
    recorded = [_debias(layout.decode(e.obs), sensor_gap) for e in replayable]
    start_states = []
    for rec in recorded:
        q0 = rec["q"][0] if "q" in rec else None
        q0 = None if q0 is None else np.where(np.isnan(q0), sim.default_pose, q0)
        v0 = rec["v"][0] if "v" in rec else None
        if v0 is not None:
            v0 = np.clip(np.nan_to_num(v0), -cfg.velocity_noise, cfg.velocity_noise)
        start_states.append((q0, v0))
    scale = {c: np.maximum(np.nanstd(np.vstack([r[c] for r in recorded]), axis=0), SCALE_FLOOR[c]) for c in recorded[0]}
    noise = {"q": np.full(len(layout.joints), gap_values.get("joint_position_noise", 0.0)),
             "v": np.full(len(layout.joints), gap_values.get("joint_velocity_noise", 0.0)),
             "gyro": np.full(3, gap_values.get("gyro_noise", 0.0)),
             # a tilt of sigma about a random axis moves each component of unit gravity g by sigma sqrt((1 - g_i^2) / 3)
             "gravity": gap_values.get("orientation_noise", 0.0) * np.sqrt((1 - rest_gravity ** 2) / 3)}
    return _Problem(sim, layout, replayable, recorded, start_states, scale, noise, settings), used


def identify(robot: RobotFile | str | Path, recording: RobotRecording, settings: IdentifySettings | None = None,
             seed: int = 0, progress: Callable[[str, float], None] | None = None) -> Identification:
    """The robot's gap from its recording (see the module docstring).

    Raises:
        IdentificationError: too few episode starts at rest, or too few steps to replay.
    """
    settings = settings or IdentifySettings()
    progress = progress or (lambda _stage, _fraction: None)
    robot = as_robot(robot)
    sim = RobotSim(robot)
    cfg = sim.config
    layout = SignalLayout.from_robot(robot)
    notes = list(recording.notes) + list(layout.notes)
    if not (layout.has("q") or layout.has("v")):
        raise IdentificationError(robot.where("the observation has no joint_position or joint_velocity term: "
                                              "nothing to identify the physics from"))
    at_rest = [e for e in recording.episodes if e.at_rest_start]
    starts = _still_starts(at_rest, layout, notes)
    need = settings.min_rest_phases
    if len(starts) < need:
        moved = f" ({len(at_rest) - len(starts)} left out: moving at their start)" if len(starts) < len(at_rest) else ""
        raise IdentificationError(
            f"identification needs at least {need} episode starts at rest (the closed-form sensor biases average "
            f"them); the recording has {len(starts)} in {len(recording.episodes)} episode(s){moved}. Record more "
            "episodes, each begun with the robot standing still at its default pose (reset it, wait a second, "
            "then enable the policy), and keep the stream from the start of an episode (first_is_start)")
    progress("sensors", 0.0)
    rest = {c: np.array([v[0] for v in vals]) for c, vals in
            _transpose([layout.decode(e.obs[:1]) for e in starts]).items()}
    sensors = _sensors(rest, sim, layout, notes)
    gap_values: dict[str, Any] = dict(sensors.values)
    std: dict[str, Any] = dict(sensors.std)
    identifiable: dict[str, bool] = dict(sensors.identifiable)
    for key in ("encoder_offset", "gyro_bias", "tilt_bias", "joint_position_noise", "joint_velocity_noise",
                "gyro_noise", "orientation_noise"):
        identifiable.setdefault(key, False)
        lo_hi = cfg.gap_priors.get(key)
        value = gap_values.get(key)
        if value is not None and lo_hi is not None and np.any((np.asarray(value) < lo_hi[0] - 1e-12)
                                                              | (np.asarray(value) > lo_hi[1] + 1e-12)):
            notes.append(f"{key}: identified {np.round(np.asarray(value), 4).tolist()} lies outside its prior "
                         f"{list(lo_hi)}: kept (check the prior or the recording)")
    sensor_gap = Gap(**{k: tuple(map(float, v)) if isinstance(v, tuple) else float(v) for k, v in gap_values.items()})
    progress("sensors", 1.0)

    # ---- physics ----------------------------------------------------------------------------------
    problem, used = _problem(sim, layout, starts, sensor_gap, gap_values, settings)
    priors = dict(cfg.gap_priors)
    names = _physics_params(priors, sim, notes)
    dt = cfg.physics_dt

    # Motor strength only scales the torque limit under PD: it matters only where torques reach it.
    if "motor_strength" in names and cfg.interface == "position":
        centre = np.full(len(names), 0.5)
        _, peak = problem.per_episode(*_physics_gap(names, centre, priors, dt), peak=True)
        if peak < priors["motor_strength"][0]:
            names.remove("motor_strength")
            identifiable["motor_strength"] = False
            notes.append(f"motor_strength: the replayed torques reach {100 * peak:.0f} % of the torque limit, never "
                         f"the weakest limit the prior allows ({100 * priors['motor_strength'][0]:.0f} %): it "
                         "changes nothing here; left at the prior centre")
    rng = np.random.default_rng(seed)
    d = len(names)
    with _Scorer(robot, problem, settings, names, priors, dt, notes) as score:
        mean, sd = np.full(d, 0.5), np.full(d, 0.3)
        best_x, best_j, elite = np.full(d, 0.5), math.inf, np.zeros((0, d))
        for it in range(settings.iterations if d else 0):
            pop = np.clip(rng.normal(mean, sd, (settings.population, d)), 0.0, 1.0)
            if it == 0:
                pop[0] = 0.5  # the prior centre is always tried
            scores = np.array([j.mean() for j in score("search", pop)])
            order = np.argsort(scores)
            elite = pop[order[:settings.elites]]
            if scores[order[0]] < best_j:
                best_j, best_x = float(scores[order[0]]), pop[order[0]].copy()
            mean = 0.3 * mean + 0.7 * elite.mean(axis=0)
            sd = np.maximum(0.3 * sd + 0.7 * elite.std(axis=0), 0.04)
            progress("physics", 0.9 * (it + 1) / settings.iterations)
        best_j = float(score("full", [best_x])[0].mean()) if d else math.inf
        best_x, best_j, moved_j, descents = _settle(score, best_x, best_j, settings.refine_rounds)
    problem.evaluations += score.evaluations
    progress("physics", 1.0)
    physics_gap, delay = _physics_gap(names, best_x, priors, dt)
    base, peak = problem.per_episode(physics_gap, delay, peak=True)
    residual = float(base.mean())
    if layout.has("q") and len(problem.episodes) > 1:
        # The encoder offsets again, now over every replayed observation: the mean of recorded minus simulated
        # joint position (the simulator carries the gravity sag); the reset spread no longer limits them.
        sims, _ = problem.replays(physics_gap, delay)
        # Kept per joint only where it is the sharper estimate (a noiseless start is exact already).
        diffs = np.array([np.nanmean(rec["q"] - s["q"], axis=0) for rec, s in zip(problem.recorded, sims)])
        se = diffs.std(axis=0, ddof=1) / math.sqrt(len(diffs))
        start = np.broadcast_to(np.asarray(sensor_gap.encoder_offset, dtype=np.float64), se.shape)
        better = ~np.isnan(se) & (se < np.asarray(std["encoder_offset"]))
        sensor_gap = dataclasses.replace(sensor_gap, encoder_offset=tuple(
            float(v) for v in np.where(better, start + np.nan_to_num(diffs.mean(axis=0)), start)))
        std["encoder_offset"] = [float(a if ok else b) for a, b, ok in zip(se, std["encoder_offset"], better)]

    # ---- identifiability: a paired test of a quarter-range move per parameter ---------------------
    widths = {n: _bounds(n, priors)[1] - _bounds(n, priors)[0] for n in names}
    if not _significant(len(problem.episodes), len(problem.episodes)):
        notes.append(f"only {len(problem.episodes)} episodes replayed: the identifiability test cannot pass with fewer "
                     "than 5 (raise identify.max_steps to replay more, or record more episodes); every physics value "
                     "stays at its prior")
    found: dict[str, float] = {}
    tests: dict[str, dict[str, list]] = {}  # the evidence, in the details: per value and side [rose, of, mean rise]
    for i, n in enumerate(names):
        rises = []  # per side: (episodes whose objective rose, episodes, mean rise)
        for sign in (-1.0, 1.0):
            if (i, sign) in moved_j:
                diff = moved_j[(i, sign)] - base
                rises.append((int(np.sum(diff > 0)), len(diff), float(diff.mean())))
                tests.setdefault(n, {})["down" if sign < 0 else "up"] = list(rises[-1])
        # One side significant, the other rising on average: a value near its prior's edge, or with one flat
        # side (a stiff contact), is still pinned; both sides significant flagged correct fits (far gap's kp).
        ok = bool(rises) and any(_significant(k, m) for k, m, _ in rises) and all(mean > 0 for _, _, mean in rises)
        identifiable[n] = ok
        lo, hi = _bounds(n, priors)
        value = lo + best_x[i] * (hi - lo)
        if ok:
            found[n] = float(value)
            std[n] = float(elite[:, i].std(ddof=1) * widths[n]) if len(elite) > 1 else float("nan")
        else:
            seen = ", ".join(f"{k} of {m}" for k, m, _ in rises) or "no room to move"
            notes.append(f"{n}: a quarter-range move does not raise the objective in significantly more episodes than "
                         f"not (rose in {seen}; sign test, 5 %): not identifiable here; left at the prior centre")
        progress("identifiability", (i + 1) / max(d, 1))
    for n in PHYSICS:
        identifiable.setdefault(n, False)
        if n not in found and n in priors:
            lo, hi = _bounds(n, priors) if n != "latency_steps" else priors[n]
            std[n] = (hi - lo) / math.sqrt(12)
    latency_exact = found.get("latency_steps", 0.5 * sum(priors.get("latency_steps", (0, 0))))
    values = {n: v for n, v in found.items() if n != "latency_steps"}
    for n in ("mass_scale", "friction", "motor_strength", "kp_scale", "kd_scale"):
        if n not in values and n in priors:
            values[n] = 0.5 * sum(priors[n])
    gap = dataclasses.replace(sensor_gap, **values, latency_steps=int(round(latency_exact)))
    return Identification(gap, std, identifiable, residual, notes,
                          {"latency_physics_steps": float(latency_exact), "physics_dt": dt,
                           "episodes_at_rest": len(starts), "episodes_replayed": len(problem.episodes),
                           "steps_replayed": used, "evaluations": problem.evaluations,
                           "peak_torque_fraction": peak, "descents": descents, "quarter_moves": tests,
                           "search_best": {n: float(lo + v * (hi - lo)) for n, v, (lo, hi) in
                                           zip(names, best_x, (_bounds(n, priors) for n in names))}})


MOVING_FACTOR = 8.0  # a start moves when its motion exceeds the starts' median by this many robust spreads...
MOVING_RATIO = 3.0  # ... and is this many times the median (a tight spread alone does not make a start move)
MOVING_FLOOR = 0.05  # rad/s: and above this (a noiseless recording's starts all read ~0)


def moving_starts(robot: RobotFile | str | Path, first_observations: np.ndarray) -> np.ndarray:
    """Which episodes began moving, from each one's first observation (rows): :func:`identify` leaves them out.

    A start's motion is the RMS of its joint velocities plus that of its gyro (the channels the robot file has); a
    start moves when its motion is above the median by ``MOVING_FACTOR`` robust spreads (1.4826 MAD),
    ``MOVING_RATIO`` times the median and ``MOVING_FLOOR``. Fewer than 3 starts, or neither channel: none moves."""
    return _moving(np.atleast_2d(np.asarray(first_observations, dtype=np.float64)),
                   SignalLayout.from_robot(as_robot(robot)))[0]


def _moving(first: np.ndarray, layout: SignalLayout) -> tuple[np.ndarray, np.ndarray, float, list[str]]:
    """(moving mask, motions, their median, the channels) of the starts' first observations ``first`` (rows)."""
    channels = [c for c in ("v", "gyro") if layout.has(c)]
    if len(first) < 3 or not channels:
        return np.zeros(len(first), bool), np.zeros(len(first)), 0.0, channels
    decoded = layout.decode(first)
    motion = sum(np.sqrt(np.nanmean(decoded[c] ** 2, axis=1)) for c in channels)
    median = float(np.median(motion))
    spread = 1.4826 * float(np.median(np.abs(motion - median)))
    moving = (motion > median + MOVING_FACTOR * spread) & (motion > MOVING_RATIO * median) & (motion > MOVING_FLOOR)
    return moving, motion, median, channels


def _still_starts(starts: list[RecordedEpisode], layout: SignalLayout, notes: list[str]) -> list[RecordedEpisode]:
    """The episode starts whose first observation is still (:func:`moving_starts`): an episode that began while the
    robot moved (the first one after the policy was enabled on a robot still settling, a reset that did not
    complete) would bias every sensor estimate averaged over the starts and start its replay from a wrong state.
    Those are left out, with a note."""
    if not starts:
        return starts
    moving, motion, median, channels = _moving(np.vstack([e.obs[:1] for e in starts]), layout)
    if moving.any():
        which = ", ".join(f"{i + 1} ({motion[i]:.2f})" for i in np.flatnonzero(moving))
        notes.append(f"episode start(s) {which} moved (RMS {'+'.join(channels)} against the starts' median "
                     f"{median:.2f}): not at rest, left out of the sensor biases and the replay")
    return [e for e, m in zip(starts, moving) if not m]


def _significant(rose: int, episodes: int, level: float = 0.05) -> bool:
    """A one-sided sign test: ``rose`` of ``episodes`` is unlikely (below ``level``) if a rise were a coin flip.
    Robust to the few episodes whose replay differs a lot (a contact that went otherwise), unlike a mean's z."""
    tail = sum(math.comb(episodes, k) for k in range(rose, episodes + 1)) / 2.0 ** episodes
    return tail < level


def _transpose(decoded: list[dict[str, np.ndarray]]) -> dict[str, list[np.ndarray]]:
    out: dict[str, list[np.ndarray]] = {}
    for d in decoded:
        for k, v in d.items():
            out.setdefault(k, []).append(v)
    return out
