"""A sim-to-real session's files and its report: return over time, versions, tiers, latency (no ROS).

A session directory is what the nodes of a session write (docs/sim_to_real.md):

```
SESSION_DIR/
  session.json        what ran: env, reality gap, sim policy, fine-tuning on/off, start time
  episodes.csv        sim robot: one row per finished episode (return, length, policy version)
  policy_stats.csv    recorder (lowrl demo): /lowrl/policy/stats rows (STATS_FIELDS), 10 Hz
  latency_us.csv      recorder: /lowrl/policy/latency_us, one row per inference
  tiers.csv           recorder: /lowrl/compute_tier, one row per tier message
  budget_signals.csv  recorder: the budget monitor's CPU load, miss rate, p99 and wanted tier (its diagnostics, 1 Hz)
  finetune_learner.csv recorder: the fine-tuner's learner state (lowrl/finetune/learner ``state``, 1 Hz)
  process_cpu.csv     lowrl demo: each node's and load burner's CPU use, % of one core, 1 Hz
  finetune/           the fine-tuner's work_dir: versions.json, versions/, transitions/ (docs/finetune.md),
                      episode_terms.csv (robot-file reward terms: per episode each term's sum, interventions)
```

Every file but ``session.json`` and ``episodes.csv`` is optional: the report says which part is
missing instead of failing. :func:`write_session_report` draws ``session_report.png`` and writes
``session_report.md`` (the summary, which ``lowrl demo`` prints). Matplotlib is imported only
there, so the writers here cost the nodes nothing.
"""
from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from lowrl_ros.core.runtime.policy_stats import STATS_FIELDS
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.core.sim.plot import pyplot

SESSION_JSON = "session.json"
EPISODES_CSV = "episodes.csv"
POLICY_STATS_CSV = "policy_stats.csv"
LATENCY_CSV = "latency_us.csv"
TIERS_CSV = "tiers.csv"
SWAPS_CSV = "policy_versions.csv"  # (time_s, version): each change of the version the policy node reports
FINETUNE_DIR = "finetune"
SYSID_STATUS = "offboard/sysid/status.json"  # trainer_node offboard_method sysid (lowrl demo --robot legged --sysid)
REPORT_PNG = "session_report.png"
REPORT_MD = "session_report.md"
EPISODE_FIELDS = ("time_s", "episode", "return", "length", "terminated", "version_start", "version_end")
STATS_CSV_FIELDS = ("time_s",) + STATS_FIELDS
LATENCY_FIELDS = ("time_s", "latency_us")
TIER_FIELDS = ("time_s", "tier")
SWAP_FIELDS = ("time_s", "version")
BUDGET_CSV = "budget_signals.csv"
BUDGET_FIELDS = ("time_s", "cpu_load_pct", "miss_rate", "latency_p99_us", "wanted")
LEARNER_CSV = "finetune_learner.csv"
LEARNER_FIELDS = ("time_s", "state", "updates")
PROCESS_CPU_CSV = "process_cpu.csv"
PROCESS_CPU_FIELDS = ("time_s", "process", "cpu_pct")
# The fine-tuner's per-episode reward log (core/finetune/episode_log.py; repeated here for the same reason as the
# learner states below, and checked by test_session_report too).
EPISODE_TERMS_CSV = "episode_terms.csv"
TERM_PREFIX = "term."
# The fine-tuner's learner states the report names (core/finetune/status.py; core/sim may not import
# core/finetune, so the two names are repeated here and test_session_report checks they agree).
LEARNING = "learning"
WAITING_FOR_FULL_TIER = "waiting_for_full_tier"
# The policy node reports its version in /diagnostics every diagnostics_period_s (1 s): a change is
# seen up to that late, so the misses of a swap are counted from this long before it is seen.
SWAP_WINDOW_BEFORE_S, SWAP_WINDOW_AFTER_S = 1.5, 0.5


class CsvLog:
    """Append-only CSV with a header; each row is flushed at once (a killed node keeps its rows).

    Args:
        path: the file (its directory is created); an existing file is appended to.
        fields: column names, written as the header of a new file.
    """

    def __init__(self, path: str | Path, fields: Iterable[str]) -> None:
        self.path = Path(path)
        self.fields = tuple(fields)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._file = open(self.path, "a", newline="")
        self._writer = csv.writer(self._file)
        if new:
            self._writer.writerow(self.fields)
            self._file.flush()

    def append(self, row: Iterable[Any]) -> None:
        row = list(row)
        if len(row) != len(self.fields):
            raise ValueError(f"{self.path.name}: a row needs {len(self.fields)} values ({', '.join(self.fields)}), "
                             f"got {len(row)}")
        self._writer.writerow(row)
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()


def write_session_info(session_dir: str | Path, info: dict[str, Any]) -> Path:
    """Write (atomically) ``session.json``, merged over what is there already."""
    path = Path(session_dir) / SESSION_JSON
    path.parent.mkdir(parents=True, exist_ok=True)
    current = json.loads(path.read_text()) if path.is_file() else {}
    current.update(info)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(current, indent=1, default=str))
    tmp.replace(path)
    return path


def is_session_dir(path: str | Path) -> bool:
    """True when ``path`` holds a session (``session.json`` or ``episodes.csv``)."""
    p = Path(path)
    return p.is_dir() and ((p / SESSION_JSON).is_file() or (p / EPISODES_CSV).is_file())


@dataclass(frozen=True)
class LoadPhase:
    """The CPU-load phase of a session (``lowrl demo``): ``burners`` busy processes from ``at_s`` for ``seconds``."""

    at_s: float
    seconds: float
    burners: int

    def planned(self) -> dict[str, Any]:
        """What session.json's ``load`` holds before the load starts (the demo adds start/end_unix)."""
        return {"at_s": self.at_s, "seconds": self.seconds, "burners": self.burners}


def _read_csv(path: Path, text: Iterable[str] = ()) -> dict[str, np.ndarray]:
    """Columns of a CSV as float arrays (the ``text`` columns as strings); a row that does not parse
    (a torn last line of a killed writer) is skipped."""
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return {}
    header, body = rows[0], []
    is_text = [name in set(text) for name in header]
    for row in rows[1:]:
        if len(row) != len(header):
            continue
        try:
            body.append([v if t else float(v) for v, t in zip(row, is_text)])
        except ValueError:
            continue
    return {name: np.asarray([r[i] for r in body], dtype=str if is_text[i] else np.float64)
            for i, name in enumerate(header)}


@dataclass
class SessionData:
    """Everything a report draws, read from a session directory."""

    path: Path
    info: dict[str, Any]
    episodes: dict[str, np.ndarray]
    stats: dict[str, np.ndarray]
    latency: dict[str, np.ndarray]
    tiers: dict[str, np.ndarray]
    versions: dict[str, Any] = field(default_factory=dict)
    swaps: dict[str, np.ndarray] = field(default_factory=dict)
    budget: dict[str, np.ndarray] = field(default_factory=dict)
    learner: dict[str, np.ndarray] = field(default_factory=dict)
    process_cpu: dict[str, np.ndarray] = field(default_factory=dict)
    episode_terms: dict[str, np.ndarray] = field(default_factory=dict)  # finetune/episode_terms.csv

    @property
    def term_names(self) -> list[str]:
        """The robot file's reward terms the fine-tuner logged (in its order)."""
        return [k[len(TERM_PREFIX):] for k in self.episode_terms if k.startswith(TERM_PREFIX)]

    @property
    def t0(self) -> float:
        """Session start (unix s): when ``lowrl demo`` started (``demo_started_unix``: its announcements count
        from there), else when the sim robot started (``started_unix``), else the first episode's time."""
        e = self.episodes
        return float(self.info.get("demo_started_unix", self.info.get(
            "started_unix", e["time_s"][0] if self.n_episodes else 0.0)))

    @property
    def n_episodes(self) -> int:
        return len(self.episodes.get("return", ()))


def read_session(session_dir: str | Path) -> SessionData:
    """Read a session directory; ValueError (with the fix) when it is not one."""
    p = Path(session_dir)
    if not is_session_dir(p):
        raise ValueError(f"{p} is not a session directory (no {SESSION_JSON} or {EPISODES_CSV}); give the "
                         "session_dir of a sim-to-real session, e.g. the one lowrl demo prints")
    info = json.loads((p / SESSION_JSON).read_text()) if (p / SESSION_JSON).is_file() else {}
    versions_path = p / FINETUNE_DIR / "versions.json"
    versions = json.loads(versions_path.read_text()) if versions_path.is_file() else {}
    return SessionData(p, info, _read_csv(p / EPISODES_CSV), _read_csv(p / POLICY_STATS_CSV),
                       _read_csv(p / LATENCY_CSV), _read_csv(p / TIERS_CSV), versions, _read_csv(p / SWAPS_CSV),
                       _read_csv(p / BUDGET_CSV, text=("wanted",)), _read_csv(p / LEARNER_CSV, text=("state",)),
                       _read_csv(p / PROCESS_CPU_CSV, text=("process",)),
                       _read_csv(p / FINETUNE_DIR / EPISODE_TERMS_CSV, text=("end",)))


@dataclass(frozen=True)
class SwapWindow:
    """Deadline misses of the policy node around one hot-swap (from its 10 Hz stats)."""

    time_s: float  # when the new version was first reported
    old: int
    new: int
    misses: int  # deadline misses counted in the window
    ticks: int  # control ticks in the window


def swap_windows(data: SessionData) -> list[SwapWindow]:
    """Each version change the policy node reported, with its deadline misses and ticks from
    ``SWAP_WINDOW_BEFORE_S`` before the change was seen to ``SWAP_WINDOW_AFTER_S`` after it."""
    sw, st = data.swaps, data.stats
    if not len(sw.get("version", ())) or not len(st.get("ticks", ())):
        return []
    t, misses, ticks = st["time_s"], st["deadline_misses"], st["ticks"]
    out = []
    versions = sw["version"].astype(int)
    for i in range(1, len(versions)):
        if versions[i] == versions[i - 1]:
            continue
        at = float(sw["time_s"][i])
        lo = np.searchsorted(t, at - SWAP_WINDOW_BEFORE_S, side="right") - 1  # last stats before the window
        hi = np.searchsorted(t, at + SWAP_WINDOW_AFTER_S, side="left")  # first stats after it
        if lo < 0 or hi >= len(t):
            continue  # the window is not covered by stats on both sides
        out.append(SwapWindow(at, int(versions[i - 1]), int(versions[i]), int(misses[hi] - misses[lo]),
                              int(ticks[hi] - ticks[lo])))
    return out


def version_returns(data: SessionData) -> dict[int, list[float]]:
    """Episode returns per policy version, counting only episodes one version ran from start to end."""
    out: dict[int, list[float]] = {}
    e = data.episodes
    for ret, v0, v1 in zip(e.get("return", ()), e.get("version_start", ()), e.get("version_end", ())):
        if v0 == v1 and v0 > 0:
            out.setdefault(int(v0), []).append(float(ret))
    return out


@dataclass(frozen=True)
class TierCost:
    """What the policy node did on one compute tier (the tier it applied, from its 10 Hz stats)."""

    tier: ComputeTier
    seconds: float
    ticks: int
    misses: int
    inferences: int  # /lowrl/policy/latency_us messages: one per inference
    latency_p50_us: float | None
    latency_p99_us: float | None

    @property
    def inferences_per_s(self) -> float:
        return self.inferences / self.seconds if self.seconds > 0 else 0.0


def _applied_tier(data: SessionData, times: np.ndarray) -> np.ndarray:
    """The tier the policy node applied at each time (its last stats at or before it; -1 before any)."""
    st = data.stats
    if not len(st.get("tier", ())):
        return np.full(len(times), -1)
    i = np.searchsorted(st["time_s"], times, side="right") - 1
    return np.where(i >= 0, st["tier"][np.clip(i, 0, None)].astype(int), -1)


def tier_costs(data: SessionData) -> list[TierCost]:
    """Per applied tier: time on it, control ticks, deadline misses, inferences and their latency.

    Each interval between two stats messages is counted on the tier the later one reports (the
    policy node applies a new tier at its next tick, so at most one 0.1 s interval is mis-assigned
    per change); each inference on the tier of the stats that follow it.
    """
    st = data.stats
    if len(st.get("ticks", ())) < 2:
        return []
    t, tier = st["time_s"], st["tier"].astype(int)
    d_t, d_ticks, d_miss = np.diff(t), np.diff(st["ticks"]), np.diff(st["deadline_misses"])
    ok = (d_ticks >= 0) & (d_miss >= 0)  # a restarted policy node resets its counters
    lat_t = data.latency.get("time_s", np.zeros(0))
    lat = data.latency.get("latency_us", np.zeros(0))
    j = np.searchsorted(t, lat_t, side="left")  # the first stats at or after each inference
    inside = j < len(t)
    lat_tier = np.where(inside, tier[np.clip(j, 0, len(t) - 1)], -1)
    lat_tier[lat_t < t[0]] = -1
    out = []
    for k in sorted(set(tier[1:])):
        sel = ok & (tier[1:] == k)
        if not sel.any():
            continue
        mine = lat[lat_tier == k]
        p50, p99 = np.percentile(mine, [50, 99]) if len(mine) else (None, None)
        out.append(TierCost(ComputeTier(int(k)), float(d_t[sel].sum()), int(d_ticks[sel].sum()),
                            int(d_miss[sel].sum()), int(len(mine)), p50, p99))
    return out


def _misses_between(data: SessionData, lo: float, hi: float) -> tuple[int, int] | None:
    """(deadline misses, ticks) the policy node counted between two times (its stats around them)."""
    st = data.stats
    if not len(st.get("ticks", ())):
        return None
    t = st["time_s"]
    a = np.searchsorted(t, lo, side="right") - 1
    b = np.searchsorted(t, hi, side="left")
    if a < 0 or b >= len(t):
        return None
    return int(st["deadline_misses"][b] - st["deadline_misses"][a]), int(st["ticks"][b] - st["ticks"][a])


def _intervals(times: np.ndarray, values: np.ndarray, end: float) -> list[tuple[float, float, Any]]:
    """Runs of equal consecutive values as (start, end, value); the last run ends at ``end``."""
    out: list[tuple[float, float, Any]] = []
    for i, (t, v) in enumerate(zip(times, values)):
        if out and out[-1][2] == v:
            continue
        if out:
            out[-1] = (out[-1][0], float(t), out[-1][2])
        out.append((float(t), end, v))
    return out


@dataclass(frozen=True)
class LoadOutcome:
    """What happened around the CPU-load phase, in session seconds (None where it did not happen)."""

    start_s: float
    end_s: float
    burners: int
    cut_short: bool
    step_down_s: float | None  # first tier below full published after the load started
    lowest_tier: ComputeTier | None  # the cheapest tier published during the load (+ one dwell)
    back_to_full_s: float | None  # first full tier published after the load ended
    misses: tuple[int, int] | None  # (misses, ticks) during the load
    misses_before: tuple[int, int] | None  # the same length of time just before it
    paused_s: float | None  # first waiting_for_full_tier after the load started
    resumed_s: float | None  # first learning again after it


def load_outcome(data: SessionData) -> LoadOutcome | None:
    """The load phase from session.json's ``load`` and what the monitor and the fine-tuner did about it."""
    load = data.info.get("load") or {}
    if "start_unix" not in load:
        return None
    t0 = data.t0
    start = float(load["start_unix"])
    end = float(load.get("end_unix", start + float(load.get("seconds", 0.0))))
    step_down = lowest = back = paused = resumed = None
    tiers = data.tiers
    if len(tiers.get("tier", ())):
        t, k = tiers["time_s"], tiers["tier"].astype(int)
        before = np.flatnonzero(t < start)
        if len(before) and k[before[-1]] > ComputeTier.FULL:  # already down when the load started
            first = before[-1]
            while first > 0 and k[first - 1] > ComputeTier.FULL:
                first -= 1
            down = np.array([first])
        else:
            down = np.flatnonzero((t >= start) & (k > ComputeTier.FULL))
        if len(down):
            step_down = float(t[down[0]])
            during = k[(t >= start) & (t <= max(end, step_down) + 1.0)]
            lowest = ComputeTier(int(during.max()))
            # back to full: the first full tier after the load ended (a step up during the load that
            # did not hold is not "back")
            up = np.flatnonzero((t > max(step_down, end)) & (k == ComputeTier.FULL))
            back = float(t[up[0]]) if len(up) else None
    ln = data.learner
    if step_down is not None and len(ln.get("state", ())):
        lt, state = ln["time_s"], ln["state"]
        off = np.flatnonzero((lt >= start) & (state == WAITING_FOR_FULL_TIER))
        if len(off):
            paused = float(lt[off[0]])
            on = np.flatnonzero((lt > paused) & (state == LEARNING))
            resumed = float(lt[on[0]]) if len(on) else None

    def rel(x: float | None) -> float | None:
        return None if x is None else x - t0

    return LoadOutcome(start - t0, end - t0, int(load.get("burners", 0)), bool(load.get("cut_short", False)),
                       rel(step_down), lowest, rel(back), _misses_between(data, start, end),
                       _misses_between(data, 2 * start - end, start), rel(paused), rel(resumed))


def learner_seconds(data: SessionData) -> dict[str, float]:
    """Seconds the fine-tuner's learner spent in each state (from its 1 Hz diagnostics)."""
    ln = data.learner
    if not len(ln.get("state", ())):
        return {}
    out: dict[str, float] = {}
    for a, b, state in _intervals(ln["time_s"], ln["state"], float(ln["time_s"][-1])):
        out[str(state)] = out.get(str(state), 0.0) + (b - a)
    return out


def process_cpu_by_tier(data: SessionData) -> dict[str, dict[str, float]]:
    """Mean CPU use (% of one core) of each process while the policy node applied the full tier and below it."""
    pc = data.process_cpu
    if not len(pc.get("process", ())) or not len(data.stats.get("tier", ())):
        return {}
    tier = _applied_tier(data, pc["time_s"])
    out: dict[str, dict[str, float]] = {}
    for name in sorted(set(pc["process"])):
        mine = pc["process"] == name
        row = {}
        for label, sel in (("full", tier == ComputeTier.FULL), ("below full", tier > ComputeTier.FULL)):
            if (mine & sel).any():
                row[label] = float(pc["cpu_pct"][mine & sel].mean())
        out[str(name)] = row
    return out


def _pct(pair: tuple[int, int] | None) -> str:
    if pair is None:
        return "not covered by the policy node's stats"
    misses, ticks = pair
    return f"{misses} over {ticks} ticks ({100.0 * misses / max(ticks, 1):.1f} %)"


def adaptive_compute_lines(data: SessionData) -> list[str]:
    """The report's "Adaptive compute" section: the load phase, the tiers, misses and cost per tier,
    the fine-tuner's pause, and each process's CPU on the full tier and below it."""
    lines = ["", "## Adaptive compute", ""]
    load = data.info.get("load")
    if data.info.get("cpu_load_limit"):
        lines.append(f"- budget monitor's CPU-load limit: {data.info['cpu_load_limit']}")
    out = load_outcome(data)
    if out is None:
        lines.append("No CPU-load phase in this session" + (" (it ended before the load started)." if load else
                                                            " (lowrl demo --no-load, or not a demo session)."))
    else:
        def f(x: float | None) -> str:
            return "never" if x is None else f"t={x:.1f} s"

        lines.append(f"- CPU load: {out.burners} burner processes from t={out.start_s:.1f} s to "
                     f"t={out.end_s:.1f} s ({out.end_s - out.start_s:.0f} s{', cut short' if out.cut_short else ''})")
        if out.step_down_s is None:
            lines.append("- budget monitor: did **not** step the tier down during the load")
        else:
            back = ("did not come back to full" if out.back_to_full_s is None else
                    f"back to full at t={out.back_to_full_s:.1f} s ({out.back_to_full_s - out.end_s:.1f} s after the "
                    "load ended)")
            when = (f"{out.step_down_s - out.start_s:.1f} s into the load" if out.step_down_s >= out.start_s else
                    f"{out.start_s - out.step_down_s:.1f} s **before** the load: something else loaded the machine")
            lines.append(f"- budget monitor: full -> {out.lowest_tier.label} at t={out.step_down_s:.1f} s ({when}), "
                         f"{back}")
        lines.append(f"- deadline misses during the load: {_pct(out.misses)}; in the "
                     f"{out.end_s - out.start_s:.0f} s before it: {_pct(out.misses_before)}")
        if data.learner:
            lines.append(f"- fine-tuner: paused ({WAITING_FOR_FULL_TIER}) {f(out.paused_s)}, learning again "
                         f"{f(out.resumed_s)}")
    tiers = data.tiers.get("tier")
    if tiers is not None and len(tiers):
        changes = _intervals(data.tiers["time_s"], tiers.astype(int), float(data.tiers["time_s"][-1]))
        lines.append("- tiers published: " + " -> ".join(
            f"{ComputeTier(int(v)).label} (t={a - data.t0:.1f} s)" for a, _, v in changes))
    costs = tier_costs(data)
    if costs:
        lines += ["", "| tier applied | time on it | control ticks | deadline misses | inferences/s | "
                      "inference p50 / p99 (us) |", "|---|---|---|---|---|---|"]
        for c in costs:
            lat = "—" if c.latency_p50_us is None else f"{c.latency_p50_us:.1f} / {c.latency_p99_us:.1f}"
            lines.append(f"| {c.tier.label} | {c.seconds:.1f} s | {c.ticks} | {c.misses} "
                         f"({100.0 * c.misses / max(c.ticks, 1):.1f} %) | {c.inferences_per_s:.1f} | {lat} |")
    seconds = learner_seconds(data)
    if seconds:
        lines.append("")
        lines.append("Fine-tuner's learner state (lowrl/finetune/learner): " + ", ".join(
            f"{state} {s:.0f} s" for state, s in sorted(seconds.items(), key=lambda kv: -kv[1])))
    cpu = process_cpu_by_tier(data)
    if cpu:
        def pct(row: dict[str, float], key: str) -> str:
            return f"{row[key]:.0f}" if key in row else "—"

        lines.append("CPU use, % of one core, mean on the full tier / below it: " + "; ".join(
            f"{name} {pct(row, 'full')} / {pct(row, 'below full')}" for name, row in cpu.items()))
    return lines


def reward_lines(data: SessionData) -> list[str]:
    """The report's "Reward terms and interventions" section (finetune/episode_terms.csv): each term's mean per
    episode for each policy version and for the first and last episodes, and the teleoperated steps."""
    lines = ["", "## Reward terms and interventions", ""]
    et = data.episode_terms
    names = data.term_names
    n = len(et.get("return", ()))
    if not n:
        lines.append(f"No {FINETUNE_DIR}/{EPISODE_TERMS_CSV}: the fine-tuner did not compute the reward from a robot "
                     "file's reward: terms (a reward topic, or no episode ended), so there are no per-term rewards.")
        return lines
    steps, interv = et["steps"], et["interventions"]
    ends = et["end"]
    lines.append(f"Fine-tuner's episodes: {n} ({int(np.sum(ends == 'terminated'))} terminated, "
                 f"{int(np.sum(ends == 'truncated'))} truncated), {int(steps.sum())} steps; interventions "
                 f"(teleoperated steps): {int(interv.sum())} ({100.0 * interv.sum() / max(steps.sum(), 1):.1f} % of "
                 f"the steps) in {int(np.sum(interv > 0))} episodes")
    versions = et["version"].astype(int)
    lines += ["", "Mean per episode (weighted, as summed into the return):", "",
              "| episodes | n | return | " + " | ".join(names) + " | interventions |",
              "|---" * (len(names) + 4) + "|"]
    groups = [(f"v{v}", versions == v) for v in sorted(set(versions))]
    k = min(5, n // 2)  # first and last apart (nothing to compare with one episode)
    if k:
        groups += [(f"first {k}", np.arange(n) < k), (f"last {k}", np.arange(n) >= n - k)]
    for label, sel in groups:
        cells = [f"{et[TERM_PREFIX + t][sel].mean():.3g}" for t in names]
        lines.append(f"| {label} | {int(sel.sum())} | {et['return'][sel].mean():.3g} | " + " | ".join(cells)
                     + f" | {interv[sel].mean():.3g} |")
    return lines


def summarize(data: SessionData) -> str:
    """The markdown summary (also what `lowrl demo` prints)."""
    info = data.info
    lines = [f"# Sim-to-real session {data.path.name}", ""]
    lines.append(f"- robot: {info.get('env_id', '?')} with reality gap: {info.get('gap', 'unknown')}")
    if info.get("policy_path"):
        lines.append(f"- sim policy: {info['policy_path']}")
    finetune = info.get("finetune") or ("on (a finetune/ directory is here)" if (data.path / FINETUNE_DIR).is_dir()
                                        else "off (no finetune/ directory)")
    lines.append(f"- fine-tuning: {finetune}")
    if info.get("duration_s") is not None:
        lines.append(f"- duration: {float(info['duration_s']):.0f} s")
    lines.append("")
    n = data.n_episodes
    if n == 0:
        lines.append("No episode finished on the sim robot's count (run longer" + (
            "; the fine-tuner's own episode ends are below)." if len(data.episode_terms.get("return", ())) else ")."))
    else:
        returns = data.episodes["return"]
        k = min(5, n)
        lines.append(f"Episodes: {n}; mean return of the first {k}: {returns[:k].mean():.1f}, of the last {k}: "
                     f"{returns[-k:].mean():.1f} (all: {returns.mean():.1f})")
        per_version = version_returns(data)
        if per_version:
            lines += ["", "| policy version | episodes | mean return | best | worst |", "|---|---|---|---|---|"]
            for v in sorted(per_version):
                r = np.asarray(per_version[v])
                lines.append(f"| v{v} | {len(r)} | {r.mean():.1f} | {r.max():.1f} | {r.min():.1f} |")
    sysid_path = data.path / SYSID_STATUS
    sysid = json.loads(sysid_path.read_text()) if sysid_path.is_file() else None
    if data.versions.get("versions"):
        v = data.versions
        lines += ["", f"Fine-tuner versions (finetune/versions.json): current v{v.get('current')}, "
                      f"best v{v.get('best')}"]
        for rec in v["versions"]:
            score = f"{np.mean(rec['returns']):.1f} over {len(rec['returns'])}" if rec.get("returns") else "not run"
            lines.append(f"- v{rec['version']} (parent v{rec.get('parent_version')}, {rec.get('updates', 0)} updates): "
                         f"{rec.get('status')}, return {score}")
    elif sysid is None and finetune.startswith("on"):
        lines += ["", "Fine-tuner: no versions.json yet (no version made)."]
    if sysid is not None:
        found = sysid.get("identified") or {}
        lines += ["", f"Off-board identification (trainer node, {SYSID_STATUS}): {sysid.get('decision')}"]
        if found:
            lines.append(f"- identified from {found.get('robot_steps')} robot steps in {found.get('wall_s')} s: "
                         f"{found.get('describe')}")
    lat = data.latency.get("latency_us")
    if lat is not None and len(lat):
        p50, p99 = np.percentile(lat, [50, 99])
        lines += ["", f"Inference latency over {len(lat)} calls: p50 {p50:.1f} us, p99 {p99:.1f} us"]
    if data.stats.get("ticks") is not None and len(data.stats["ticks"]):
        s = data.stats
        lines.append(f"Control ticks {int(s['ticks'][-1])}, deadline misses {int(s['deadline_misses'][-1])} "
                     "(as the policy node counted them since its activation)")
    swaps = swap_windows(data)
    if swaps:
        lines.append(f"Hot-swaps: {len(swaps)} ({', '.join(f'v{w.old}->v{w.new}' for w in swaps)}); deadline misses "
                     f"within -{SWAP_WINDOW_BEFORE_S:g}/+{SWAP_WINDOW_AFTER_S:g} s of them: "
                     f"{sum(w.misses for w in swaps)} over {sum(w.ticks for w in swaps)} ticks "
                     f"(per swap: {', '.join(str(w.misses) for w in swaps)})")
    tiers = data.tiers.get("tier")
    if tiers is not None and len(tiers):
        seen = ", ".join(ComputeTier(int(t)).label for t in sorted(set(tiers.astype(int))))
        changes = int(np.sum(tiers[1:] != tiers[:-1]))
        lines.append(f"Compute tiers seen: {seen} ({changes} changes)")
    lines += reward_lines(data)
    lines += adaptive_compute_lines(data)
    missing = [name for name, d in ((LATENCY_CSV, data.latency), (TIERS_CSV, data.tiers),
                                    (POLICY_STATS_CSV, data.stats)) if not d]
    if missing:
        lines += ["", f"Not recorded in this session: {', '.join(missing)} (lowrl demo records them)."]
    return "\n".join(lines) + "\n"


def _shade_load(ax: Any, out: "LoadOutcome | None") -> None:
    if out is not None:
        ax.axvspan(out.start_s, out.end_s, color="orange", alpha=0.2, label=f"CPU load ({out.burners} burners)")


def _plot(data: SessionData, png: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(4, 2, figsize=(14, 14))
    ax = axes[0][0]
    e = data.episodes
    t0 = data.t0
    out = load_outcome(data)
    if data.n_episodes:
        t = e["time_s"] - t0
        versions = e["version_end"].astype(int)
        mixed = e["version_start"] != e["version_end"]
        known = sorted(v for v in set(versions) if v > 0)  # 0: the policy node had not reported yet
        for v in sorted(set(versions)):
            sel = (versions == v) & ~mixed
            if v == 0:
                label = "version not reported yet"
            else:
                label = f"sim policy (v{v})" if v == known[0] else f"fine-tuned v{v}"
            ax.plot(t[sel], e["return"][sel], "o", ms=4, label=label, color="lightgray" if v == 0 else None)
        if mixed.any():
            ax.plot(t[mixed], e["return"][mixed], "x", color="gray", label="episode across a swap")
        k = min(10, data.n_episodes)  # Pendulum's return depends on the start state: the trend needs a mean
        ax.plot(t[k - 1:], np.convolve(e["return"], np.ones(k) / k, mode="valid"), "k-", lw=1.5,
                label=f"mean of the last {k} episodes")
    et = data.episode_terms
    fine_tuner_episodes = not data.n_episodes and len(et.get("return", ()))
    if fine_tuner_episodes:  # the fine-tuner ends episodes (robot file episode:), the sim robot counts none
        for v in sorted(set(et["version"].astype(int))):
            sel = et["version"].astype(int) == v
            ax.plot(et["time_s"][sel] - t0, et["return"][sel], "o", ms=4, label=f"v{v} (fine-tuner's episodes)")
    _shade_load(ax, out)
    if data.n_episodes or fine_tuner_episodes:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set(title="episode return over time", xlabel="session time (s)", ylabel="return")
    ax = axes[0][1]
    if data.n_episodes:
        ax.step(e["time_s"] - t0, e["version_end"], where="post")
    elif fine_tuner_episodes:
        ax.step(et["time_s"] - t0, et["version"], where="post")
    _shade_load(ax, out)
    ax.set(title="running policy version", xlabel="session time (s)", ylabel="version")
    ax = axes[1][0]  # tiers, the load and the fine-tuner's pause on one time axis
    if data.tiers:
        ax.step(data.tiers["time_s"] - t0, data.tiers["tier"], where="post", label="tier published (monitor)")
        if len(data.stats.get("tier", ())):
            ax.step(data.stats["time_s"] - t0, data.stats["tier"], where="post", ls="--",
                    label="tier applied (policy node)")
        ax.set_yticks([t.value for t in ComputeTier], [t.label for t in ComputeTier])
    else:
        ax.text(0.5, 0.5, "tiers not recorded", ha="center", transform=ax.transAxes)
    ln = data.learner
    if len(ln.get("state", ())):
        end = float(ln["time_s"][-1])
        look = {WAITING_FOR_FULL_TIER: ("red", "fine-tuner paused (waiting for the full tier)"),
                LEARNING: ("green", "fine-tuner learning")}
        for a, b, state in _intervals(ln["time_s"], ln["state"], end):
            if state in look:  # the legend keeps one entry per label (deduplicated below)
                ax.axvspan(a - t0, b - t0, ymin=0.0, ymax=0.08, color=look[state][0], alpha=0.6, lw=0,
                           label=look[state][1])
    _shade_load(ax, out)
    ax.set_ylim(-0.3, 3.3)
    ax.invert_yaxis()  # cheaper tiers lower on the plot
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=7, loc="lower left")
    ax.set(title="compute tier and the fine-tuner's learner", xlabel="session time (s)")
    ax = axes[1][1]  # CPU: what the monitor saw, and what each process used
    b = data.budget
    if len(b.get("cpu_load_pct", ())):
        ax.plot(b["time_s"] - t0, b["cpu_load_pct"], "k-", lw=1.5, label="system CPU load, % (budget monitor)")
    pc = data.process_cpu
    for name in sorted(set(pc.get("process", ()))):
        if str(name).startswith("burner"):
            continue
        sel = pc["process"] == name
        ax.plot(pc["time_s"][sel] - t0, pc["cpu_pct"][sel], lw=1, label=f"{name}, % of one core")
    _shade_load(ax, out)
    if len(b.get("cpu_load_pct", ())) or len(pc.get("process", ())):
        ax.legend(fontsize=7, loc="upper left")
    else:
        ax.text(0.5, 0.5, "CPU not recorded", ha="center", transform=ax.transAxes)
    ax.set(title="CPU use", xlabel="session time (s)", ylabel="%")
    ax = axes[2][0]
    st = data.stats
    if len(st.get("ticks", ())) > 1 and st["time_s"][-1] - st["time_s"][0] >= 2.0:
        # Per whole second of the counters (interpolated): the 10 Hz stats reach the recorder in bunches
        # on a busy machine, and a rate over 10 ms between two of them would read as thousands per second.
        t = st["time_s"]
        grid = np.arange(np.ceil(t[0]), np.floor(t[-1]) + 1.0)
        for key, style, label in (("deadline_misses", "r-", "deadline misses per second"),
                                  ("ticks", "b-", "control ticks per second")):
            per_s = np.clip(np.diff(np.interp(grid, t, st[key])), 0, None)  # a restarted node resets its counters
            ax.plot(grid[1:] - t0, per_s, style, lw=1, label=label)
        ax.legend(fontsize=7, loc="upper left")
    else:
        ax.text(0.5, 0.5, "policy stats not recorded", ha="center", transform=ax.transAxes)
    _shade_load(ax, out)
    ax.set(title="policy node: ticks and deadline misses", xlabel="session time (s)", ylabel="per second")
    ax = axes[2][1]
    lat = data.latency.get("latency_us")
    if lat is not None and len(lat):
        hi = float(np.percentile(lat, 99.5)) * 1.1 or 1.0
        tiers = _applied_tier(data, data.latency["time_s"])
        for k in sorted(set(tiers)):
            label = "before the first stats" if k < 0 else ComputeTier(int(k)).label
            ax.hist(lat[tiers == k], bins=50, range=(0, hi), alpha=0.6, label=f"{label} ({int((tiers == k).sum())})")
        ax.legend(fontsize=7)
        ax.set(xlabel="inference latency (us)", ylabel="calls")
    else:
        ax.text(0.5, 0.5, "latency not recorded", ha="center", transform=ax.transAxes)
    ax.set(title="inference latency per applied tier")
    _plot_rewards(data, axes[3][0], axes[3][1])
    fig.suptitle(f"session {data.path.name}: {data.info.get('env_id', '')}, gap {data.info.get('gap', '')}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)


def _plot_rewards(data: SessionData, ax_terms: Any, ax_interv: Any) -> None:
    """Each reward term's sum per episode over time, and the teleoperated steps per episode."""
    et = data.episode_terms
    if not len(et.get("return", ())):
        for ax in (ax_terms, ax_interv):
            ax.text(0.5, 0.5, "no per-term rewards (finetune/episode_terms.csv)", ha="center", transform=ax.transAxes)
    else:
        t = et["time_s"] - data.t0
        for name in data.term_names:
            ax_terms.plot(t, et[TERM_PREFIX + name], ".-", lw=1, ms=3, label=name)
        ax_terms.plot(t, et["return"], "k-", lw=1.5, label="return (sum)")
        ax_terms.axhline(0.0, color="gray", lw=0.5)
        ax_terms.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        width = max(float(np.median(np.diff(t))) * 0.8, 0.1) if len(t) > 1 else 1.0
        ax_interv.bar(t, et["interventions"], width=width, color="purple", alpha=0.7,
                      label="teleoperated steps per episode")
        ax_interv.plot(t, et["steps"], "k_", ms=8, label="steps per episode")
        ax_interv.legend(fontsize=7, loc="upper left")
    ax_terms.set(title="reward terms per episode (fine-tuner)", xlabel="session time (s)", ylabel="sum over episode")
    ax_interv.set(title="interventions", xlabel="session time (s)", ylabel="steps")


def write_session_report(session_dir: str | Path) -> Path:
    """Draw ``session_report.png`` and write ``session_report.md`` in ``session_dir``; return the .md path.

    Raises:
        ValueError: ``session_dir`` is not a session directory (the message says what to give).
    """
    data = read_session(session_dir)
    png, md = data.path / REPORT_PNG, data.path / REPORT_MD
    _plot(data, png)
    md.write_text(summarize(data) + f"\n![session]({REPORT_PNG})\n")
    return md

