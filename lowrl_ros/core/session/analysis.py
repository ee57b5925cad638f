"""The numbers of a session report, from a session directory's files (no ROS, no matplotlib).

Hot-swaps and their deadline misses, returns per policy version, time, ticks, misses and latency per
applied compute tier, the CPU-load phase and what the budget monitor and the fine-tuner did about it,
the learner's states, each process's CPU use. Each function takes the :class:`SessionData` that
core/session/files.py reads and returns plain values; core/session/report.py renders them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lowrl_ros.core.finetune.status import LEARNING, WAITING_FOR_FULL_TIER
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.core.session.files import SessionData

# The recorder sees a version change in the first step row the new version runs (its policy_version).
# The 1.5 s lead was sized when the version came from the 1 s /diagnostics, up to 1 s late; it is unchanged.
SWAP_WINDOW_BEFORE_S, SWAP_WINDOW_AFTER_S = 1.5, 0.5


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


def applied_tier(data: SessionData, times: np.ndarray) -> np.ndarray:
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


def intervals(times: np.ndarray, values: np.ndarray, end: float) -> list[tuple[float, float, Any]]:
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
    for a, b, state in intervals(ln["time_s"], ln["state"], float(ln["time_s"][-1])):
        out[str(state)] = out.get(str(state), 0.0) + (b - a)
    return out


def process_cpu_by_tier(data: SessionData) -> dict[str, dict[str, float]]:
    """Mean CPU use (% of one core) of each process while the policy node applied the full tier and below it."""
    pc = data.process_cpu
    if not len(pc.get("process", ())) or not len(data.stats.get("tier", ())):
        return {}
    tier = applied_tier(data, pc["time_s"])
    out: dict[str, dict[str, float]] = {}
    for name in sorted(set(pc["process"])):
        mine = pc["process"] == name
        row = {}
        for label, sel in (("full", tier == ComputeTier.FULL), ("below full", tier > ComputeTier.FULL)):
            if (mine & sel).any():
                row[label] = float(pc["cpu_pct"][mine & sel].mean())
        out[str(name)] = row
    return out
