"""sim2sim before hardware: what `lowrl sim2sim` decides from a run (no ROS; numpy at the boundary).

The run puts the policy node with the robot file against the robot's MuJoCo model over ROS 2. Two
streams come back: the policy node's step rows (core/runtime/step_row.py: the observation it built,
its raw output) and the sim robot's truth rows (core/sim/sim_robot.py ``TrueState``: the training
environment's own observation of the simulator's state, with each joint state it published). This
module matches them, compares each observation term with the training definition, measures command
tracking and falls, and gives the verdict.

Matching does not depend on exact timing: a policy tick at wall-clock ``stamp`` used sensor samples
published shortly before it, so its candidates are the truth rows stamped within ``MATCH_WINDOW_S``
before it (or ``STAMP_SLACK_S`` after, for clock rounding). The sample the tick used is the candidate
that reproduces the most sensor entries exactly (the node copies the sensor values, so an entry built
right agrees to float32 rounding), ties going to the smallest total error; the choice is made once
per tick over every sensor entry, never term by term. A mistake in a few terms (two joints swapped, a
wrong scale) agrees with no candidate, so it can neither hide itself nor pull the match off the
sample that the other terms pin.

``last_action`` is not the simulator's to know: its training value is the policy's previous output,
the network's raw output (convention ``raw``: the step row holds the executed action, after the action
transform and the clip, so ``raw_of`` runs the deployed artifact again on the previous row's observation
and takes its pre-transform output; without ``raw_of`` the term is not compared) or clipped to the
action space (``action``: LeggedAnt's ``last_action = clip(a, -1, 1)``), zero after a tick without a
policy action (a reset in training), unknown (not compared) when the previous row is missing.

A term passes when the 95th percentile of ``|policy - training|`` over its entries and matched ticks is
within its tolerance (``TOLERANCES``, observation units after the term's scale). They sit above what
one sample of jitter in the match leaves (a walking gait measured here: docs/deploy_check.md) and far
below what a real mistake gives (a swapped hip/ankle pair is off by ~0.9 rad, a missing 0.05 scale by
~20x the joint velocity). Tracking is reported, not judged (how well a policy walks is its quality,
not a deployment mistake); a fall fails the run.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from lowrl_ros.core.runtime.step_row import StepRow
from lowrl_ros.core.sim.sim_robot import TrueState

MATCH_WINDOW_S = 0.05  # a policy tick's sensor samples were published at most this long before its row
EXACT = 1e-4  # |policy - training| of an entry copied from the same sample (float32 rounding: ~1e-7 here)
STAMP_SLACK_S = 0.002  # a truth stamp this much after the row still counts (clock rounding between processes)
MIN_MATCHED = 20  # fewer matched ticks than this is no evidence either way: the run fails
SETTLE_S = 2.0  # tracking starts this long after the first policy tick (soft start, first steps)
# p95 |policy - training| allowed per term (observation units); a term not listed gets DEFAULT_TOLERANCE.
TOLERANCES = {"imu_angular_velocity": 0.05, "projected_gravity": 0.02, "velocity_command": 1e-3,
              "joint_position": 0.02, "joint_velocity": 0.05, "last_action": 1e-3}
DEFAULT_TOLERANCE = 0.02


@dataclass(frozen=True)
class Simulator:
    """Which simulator runs a robot file: the launch file (under launch/), its env, the names of its truth
    observation (``TrueState.obs``), in order."""

    launch: str
    env_id: str
    truth_names: tuple[str, ...]


def simulator_for(robot: Any) -> Simulator:
    """The simulator of a robot file (``robot``: core/runtime/robot_file.RobotFile).

    The one place that chooses: a robot file with a ``sim:`` section names its own simulator
    (core/sim/robot_sim.py, checked here: a config that disagrees with its MJCF or the robot file raises
    SimConfigError naming the entry), run by the sim robot node's ``env_id: robot_file``
    (core/sim/robot_file_sim.py) from launch/sim2sim.launch.yaml; otherwise the
    legged example's MuJoCo robot (core/sim/legged.py) for a robot file with its joints; ValueError naming
    the fix otherwise."""
    if "sim" in (getattr(robot, "raw", None) or {}):
        from lowrl_ros.core.runtime.observation import ObservationSpec
        from lowrl_ros.core.sim.robot_sim import parse_sim

        config, _ = parse_sim(robot)
        names = ObservationSpec.from_robot_file(robot, config.period_s).entry_names()
        return Simulator("sim2sim.launch.yaml", f"robot_sim:{robot.path}", tuple(names))
    from lowrl_ros.core.sim import legged

    joints = tuple(getattr(robot, "joints", ()) or ())
    if sorted(joints) != sorted(legged.JOINTS):
        raise ValueError(f"no simulator for a robot with joints {', '.join(joints) or '(none)'}: lowrl sim2sim runs "
                         f"the legged example's MuJoCo robot ({', '.join(legged.JOINTS)}) or the simulator of the "
                         "robot file's sim: section (docs/robot_file.md, 'Simulator')")
    return Simulator("legged.launch.yaml", "LeggedAnt", legged.OBS_NAMES)


def term_groups(obs_names: Sequence[str]) -> list[tuple[str, slice]]:
    """Consecutive entries of one term (``term[entry]`` names) as (label, slice); label "N term", N from 0 as
    `lowrl check` numbers the terms."""
    groups: list[tuple[str, slice]] = []
    start = 0
    for i in range(1, len(obs_names) + 1):
        if i == len(obs_names) or obs_names[i].split("[")[0] != obs_names[start].split("[")[0]:
            groups.append((f"{len(groups)} {obs_names[start].split('[')[0]}", slice(start, i)))
            start = i
    return groups


def _term(label: str) -> str:
    return label.split(" ", 1)[1]


@dataclass
class Matched:
    """Policy ticks paired with the training observation of the sample each used (rows x entries)."""

    policy: np.ndarray
    training: np.ndarray
    lag_s: np.ndarray  # row stamp - truth stamp: sensor sample to the policy's output
    stamps: np.ndarray
    unmatched: int


RawOf = Callable[[np.ndarray], np.ndarray]  # observation -> the network's pre-transform output y


def training_last_action(previous: StepRow | None, row: StepRow, convention: str, low: np.ndarray,
                         high: np.ndarray, period_s: float, raw_of: RawOf | None = None) -> np.ndarray:
    """The training value of ``last_action`` at ``row`` (see the module docstring); NaN when unknown."""
    m = low.size
    if previous is None or row.stamp - previous.stamp > 1.5 * period_s:
        return np.full(m, np.nan)
    if previous.safe or not np.isfinite(previous.policy_action).all():
        return np.zeros(m)
    if convention == "raw":
        if raw_of is None or not np.isfinite(previous.obs).all():
            return np.full(m, np.nan)
        return np.asarray(raw_of(previous.obs), dtype=np.float64).copy()
    return np.clip(previous.policy_action, low, high)


def match(rows: Sequence[StepRow], truths: Sequence[TrueState], obs_names: Sequence[str],
          truth_names: Sequence[str], action_names: Sequence[str], convention: str, low, high, period_s: float,
          window_s: float = MATCH_WINDOW_S, raw_of: RawOf | None = None) -> Matched:
    """Pair each policy tick (a non-safe row with a finite observation) with its truth sample."""
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    n = len(obs_names)
    where = {name: i for i, name in enumerate(truth_names)}
    sensor = np.array([i for i, name in enumerate(obs_names) if name in where and not name.startswith("last_action[")],
                      dtype=np.intp)
    from_truth = np.array([where[obs_names[i]] for i in sensor], dtype=np.intp)
    actions = {f"last_action[{a}]": k for k, a in enumerate(action_names)}  # by action name, or by index
    actions.update({f"last_action[{k}]": k for k in range(len(action_names))})  # (a robot file's own entry names)
    last = [(i, actions[name]) for i, name in enumerate(obs_names) if name in actions]
    truths = sorted(truths, key=lambda t: t.stamp)
    t_stamps = np.array([t.stamp for t in truths])
    t_obs = np.array([t.obs for t in truths]) if truths else np.zeros((0, len(truth_names)))
    pol, tra, lags, stamps = [], [], [], []
    unmatched = 0
    previous: StepRow | None = None
    for row in sorted(rows, key=lambda r: r.stamp):
        prev, previous = previous, row
        if row.safe or row.obs.size != n or not np.isfinite(row.obs).all():
            continue
        if not truths or not t_stamps[0] <= row.stamp <= t_stamps[-1] + window_s:
            continue  # the simulator's truth not heard yet, or stopped: no evidence either way
        lo, hi = np.searchsorted(t_stamps, [row.stamp - window_s, row.stamp + STAMP_SLACK_S])
        if hi <= lo:
            unmatched += 1
            continue
        err = np.abs(t_obs[lo:hi][:, from_truth] - row.obs[sensor])
        exact = np.sum(err <= EXACT, axis=1)  # the entries this sample reproduces (float32 rounding aside)
        close = np.sum(err ** 2, axis=1)
        best = lo + int(np.lexsort((close, -exact))[0])  # most exact entries first, then the smallest error
        want = np.full(n, np.nan)
        want[sensor] = t_obs[best, from_truth]
        if last:
            value = training_last_action(prev, row, convention, low, high, period_s, raw_of)
            for i, k in last:
                want[i] = value[k]
        pol.append(row.obs.copy())
        tra.append(want)
        lags.append(row.stamp - t_stamps[best])
        stamps.append(row.stamp)
    shape = (0, n)
    return Matched(np.array(pol).reshape(-1, n) if pol else np.zeros(shape),
                   np.array(tra).reshape(-1, n) if tra else np.zeros(shape), np.array(lags), np.array(stamps),
                   unmatched)


@dataclass(frozen=True)
class TermParity:
    """One observation term: how far the policy's entries are from the training definition."""

    term: str  # "N name", N its position in the observation
    entries: int
    ticks: int  # matched ticks with a training value for this term
    p95: float
    max: float
    rms: float
    worst: str  # the entry with the largest error
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.ticks > 0 and bool(self.p95 <= self.tolerance)

    @property
    def verdict(self) -> str:
        return "ok" if self.ok else ("NO DATA" if self.ticks == 0 else "OUT")


def term_parity(matched: Matched, obs_names: Sequence[str],
                tolerances: dict[str, float] | None = None) -> list[TermParity]:
    """Per term, the p95/max/RMS of |policy - training| over its entries and ticks (NaN training values skipped)."""
    tol = dict(TOLERANCES if tolerances is None else tolerances)
    out = []
    for label, sl in term_groups(obs_names):
        err = np.abs(matched.policy[:, sl] - matched.training[:, sl])
        known = np.isfinite(err).all(axis=1)
        err = err[known]
        if err.size == 0:
            out.append(TermParity(label, sl.stop - sl.start, 0, float("nan"), float("nan"), float("nan"), "",
                                  tol.get(_term(label), DEFAULT_TOLERANCE)))
            continue
        worst = obs_names[sl.start + int(np.argmax(err.max(axis=0)))]
        out.append(TermParity(label, sl.stop - sl.start, int(err.shape[0]), float(np.percentile(err, 95)),
                              float(err.max()), float(np.sqrt(np.mean(err ** 2))), worst,
                              tol.get(_term(label), DEFAULT_TOLERANCE)))
    return out


@dataclass(frozen=True)
class Tracking:
    """Commanded against achieved base velocity (vx, vy in the heading frame, yaw rate), over the settled run."""

    samples: int
    command: tuple[float, float, float]  # mean commanded
    achieved: tuple[float, float, float]  # mean achieved
    rms_error: tuple[float, float, float]  # RMS of command - achieved, per sample


def tracking(truths: Sequence[TrueState], start: float, end: float, settle_s: float = SETTLE_S) -> Tracking:
    """Tracking over the truth samples stamped in [start + settle_s, end] (the policy's settled control)."""
    inside = [t for t in truths if start + settle_s <= t.stamp <= end]
    if not inside:
        nan3 = (float("nan"),) * 3
        return Tracking(0, nan3, nan3, nan3)
    cmd = np.array([t.command for t in inside])
    vel = np.array([t.velocity for t in inside])
    as3 = lambda v: tuple(round(float(x), 4) for x in v)  # noqa: E731
    return Tracking(len(inside), as3(cmd.mean(axis=0)), as3(vel.mean(axis=0)),
                    as3(np.sqrt(np.mean((cmd - vel) ** 2, axis=0))))


def falls_between(truths: Sequence[TrueState], start: float, end: float) -> int:
    """Falls counted by the simulator between the first and the last truth sample in [start, end]."""
    counts = [t.falls for t in truths if start <= t.stamp <= end]
    return counts[-1] - counts[0] if counts else 0


@dataclass
class Sim2SimReport:
    """Everything `lowrl sim2sim` prints and writes; ``ok`` is the verdict, ``reasons`` why not."""

    seconds: float
    policy_ticks: int
    matched: int
    unmatched: int
    lag_ms_p50: float
    lag_ms_p95: float
    terms: list[TermParity]
    tracking: Tracking
    falls: int
    deadline_misses: int | None
    control_ticks: int | None
    reasons: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.reasons

    def table(self) -> str:
        head = f"{'term':<26}{'entries':>8}{'ticks':>7}{'p95 |err|':>11}{'max |err|':>11}{'tolerance':>11}  " \
               f"{'verdict':<8} worst entry"
        lines = [head, "-" * len(head)]
        for t in self.terms:
            lines.append(f"{t.term:<26}{t.entries:>8}{t.ticks:>7}{t.p95:>11.2g}{t.max:>11.2g}{t.tolerance:>11.2g}  "
                         f"{t.verdict:<8} {t.worst if not t.ok else ''}".rstrip())
        return "\n".join(lines)

    def summary(self) -> str:
        tr = self.tracking
        fmt = lambda v: ", ".join(f"{x:+.2f}" for x in v)  # noqa: E731
        misses = "not received" if self.deadline_misses is None else \
            f"{self.deadline_misses} of {self.control_ticks} control ticks"
        lines = [f"policy ticks {self.policy_ticks} over {self.seconds:.1f} s, matched to a simulator sample "
                 f"{self.matched} (unmatched {self.unmatched}); sample to output p50 {self.lag_ms_p50:.1f} ms, "
                 f"p95 {self.lag_ms_p95:.1f} ms",
                 f"tracking over {tr.samples} samples (vx, vy m/s, yaw rate rad/s): command ({fmt(tr.command)}), "
                 f"achieved ({fmt(tr.achieved)}), RMS error ({fmt(tr.rms_error)})",
                 f"falls {self.falls}; deadline misses {misses}"]
        lines += [f"FAIL {r}" for r in self.reasons]
        lines.append("sim2sim: ok" if self.ok else f"sim2sim: {len(self.reasons)} failure(s)")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["terms"] = [dict(asdict(t), ok=t.ok) for t in self.terms]
        d["ok"] = self.ok
        return d


def evaluate(rows: Sequence[StepRow], truths: Sequence[TrueState], contract: Any, simulator: Simulator,
             convention: str, stats: Sequence[float] | None = None,
             tolerances: dict[str, float] | None = None, settle_s: float = SETTLE_S,
             raw_of: RawOf | None = None) -> Sim2SimReport:
    """The verdict of a run: parity per term, tracking, falls, deadline misses (``stats``: the policy node's
    last PolicyStats values, core/runtime/policy_stats.py; reported, not judged). ``raw_of``: the deployed
    policy's pre-transform output for an observation (needed for a ``raw`` last action)."""
    matched = match(rows, truths, contract.obs_names, simulator.truth_names, contract.action_names, convention,
                    contract.action_low, contract.action_high, contract.control_period_s, raw_of=raw_of)
    terms = term_parity(matched, contract.obs_names, tolerances)
    policy_stamps = sorted(r.stamp for r in rows if not r.safe)
    start, end = (policy_stamps[0], policy_stamps[-1]) if policy_stamps else (0.0, 0.0)
    reasons = []
    n = len(matched.stamps)
    if n < MIN_MATCHED:
        reasons.append(f"only {n} policy ticks matched a simulator sample (at least {MIN_MATCHED}): did the policy "
                       "node run (its log) and the sim robot publish its truth?")
    for t in terms:
        if not t.ok:
            what = "no tick to compare" if t.ticks == 0 else (
                f"p95 |err| {t.p95:.3g} > tolerance {t.tolerance:g} (worst entry {t.worst}, max {t.max:.3g})")
            reasons.append(f"obs {t.term}: {what}")
    falls = falls_between(truths, start, end)
    if falls:
        reasons.append(f"the robot fell {falls} time(s)")
    misses = ticks = None
    if stats is not None:
        from lowrl_ros.core.runtime.policy_stats import PolicyStats

        s = PolicyStats.from_list(stats)
        misses, ticks = int(s.deadline_misses), int(s.ticks)
    lag_ms = matched.lag_s * 1e3
    p50, p95 = (np.percentile(lag_ms, [50, 95]) if lag_ms.size else (float("nan"), float("nan")))
    return Sim2SimReport(round(end - start, 3), len(policy_stamps), n, matched.unmatched, float(p50), float(p95),
                         terms, tracking(truths, start, end, settle_s), falls, misses, ticks, reasons)
