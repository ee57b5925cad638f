"""What each plot of the "lowrl monitor" widget shows, built from one RobotSnapshot (plain data, no Qt).

Four pictures over the model's window (the last 120 s, x in seconds before now): inference latency
against the deadline with the misses marked; the applied compute tier as a step plot; the episode
returns, one colour per version, swaps and rollbacks as vertical markers; one small plot per budget
signal against its warn and limit lines. Every point is the model's value as it is (only x is made
relative to now), so a test compares them to :attr:`RobotSnapshot.series`.
"""
from __future__ import annotations

import math

from lowrl_ros.core.monitor.model import RobotSnapshot, Signal, tier_label
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.core.types import Level
from lowrl_ros.rqt.plots import Chart, Mark, Trace

ON_LATENCY_PLOT = ("latency_p99", "deadline_miss_rate")  # budget signals the latency plot already shows
VERSION_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
LEVEL_COLORS = {Level.OK: "#1565c0", Level.WARN: "#ef6c00", Level.ERROR: "#c62828", Level.STALE: "#9e9e9e"}
WARN_COLOR, LIMIT_COLOR = "#ef6c00", "#c62828"


def _us(value: float) -> str:
    return f"{value / 1000:g} ms" if value >= 1000 else f"{value:g} us"


MIN_SPAN_S = 30.0  # a view opened a moment ago shows at least this much time, not a sliver of a 120 s axis


def _x_range(snap: RobotSnapshot) -> tuple[float, float]:
    """From the oldest sample heard (at least ``MIN_SPAN_S`` back) to now, at most the model's window."""
    s = snap.series
    starts = [seq[0][0] for seq in (s.latency, s.tier, s.returns, s.events, *s.signals.values()) if seq]
    span = s.now - min(starts) if starts else s.window_s
    return (-min(s.window_s, max(MIN_SPAN_S, span)), 0.0)


def latency_chart(snap: RobotSnapshot) -> Chart:
    """p50 and p99 (log scale, so microseconds and the deadline fit one plot), the deadline, a tick per miss."""
    s = snap.series
    p50 = tuple((t - s.now, v) for t, v, _ in s.latency)
    p99 = tuple((t - s.now, v) for t, _, v in s.latency)
    seen = [v for _, v in p50 + p99 if v > 0] + ([snap.deadline_us] if snap.deadline_us else [])
    lo = 10 ** math.floor(math.log10(min(seen))) if seen else 10.0
    hi = 10 ** math.ceil(math.log10(max(seen) * 1.5)) if seen else 1e4
    hi = max(hi, lo * 100)
    ticks = tuple((10.0 ** k, _us(10.0 ** k)) for k in range(round(math.log10(lo)), round(math.log10(hi)) + 1))
    misses = tuple((t - s.now, lo) for t, _ in s.misses)
    rate = "-" if snap.misses_per_s is None else f"{snap.misses_per_s:.1f}/s"
    title = "inference latency"
    if snap.p99_us is not None:
        title += f"  p99 {snap.p99_us:.0f} us"
    return Chart(
        title=title,
        traces=(Trace("p50", p50, "#90caf9"), Trace("p99", p99, "#0d47a1", width=1.8),
                Trace("misses", misses, LIMIT_COLOR, style="rug")),
        hlines=(Mark(snap.deadline_us, LIMIT_COLOR, f"deadline {_us(snap.deadline_us)}"),) if snap.deadline_us else (),
        x_range=_x_range(snap), y_range=(lo, hi), log_y=True, y_ticks=ticks,
        legend=(("p50", "#64b5f6"), ("p99", "#0d47a1"), (f"| miss ({snap.misses or 0} in all, {rate})",
                                                        LIMIT_COLOR)), note="no policy stats yet")


def tier_chart(snap: RobotSnapshot) -> Chart:
    """The applied tier as steps, full on top, a dip filled; a marker at each change names the new tier."""
    s = snap.series
    points = tuple((t - s.now, float(v)) for t, v in s.tier)
    changes = tuple(Mark(x, "#757575", tier_label(v)) for (_, before), (x, v) in zip(points, points[1:]) if v != before)
    reason = "" if snap.tier_reason in ("-", "none yet") else f"  ({snap.tier_reason})"
    return Chart(
        title=f"compute tier  {snap.tier_applied}{reason}",
        traces=(Trace("tier", points, "#2e7d32", style="step", width=2.0, fill_to=0.0),),
        vlines=changes, x_range=_x_range(snap), y_range=(len(ComputeTier) - 0.6, -0.4),
        y_ticks=tuple((float(t.value), t.label) for t in ComputeTier),
        legend=(("published " + snap.tier_published, "#555555"),), note="no policy stats yet")


def returns_chart(snap: RobotSnapshot) -> Chart:
    """A dot per episode coloured by its version, each version's mean as a bar across its episodes (the best and
    the running one named), a dashed marker at each swap (the new version) and a red one at each rollback."""
    s = snap.series
    by_version: dict[int, list[tuple[float, float]]] = {}
    for t, version, ret in s.returns:
        by_version.setdefault(version, []).append((t - s.now, ret))
    traces, means = [], []
    for version, pts in sorted(by_version.items()):
        color = VERSION_COLORS[version % len(VERSION_COLORS)]
        mean = sum(r for _, r in pts) / len(pts)
        tags = [tag for tag, v in (("best", snap.best_version), ("running", snap.running_version)) if v == version]
        means.append(Trace(f"v{version} mean", ((pts[0][0], mean), (max(pts[-1][0], pts[0][0] + 2.0), mean)), color,
                           width=3.0, label=f"v{version} " + "/".join(tags) if tags else ""))
        traces.append(Trace(f"v{version}", tuple(pts), color, style="dots", width=0.9))
    markers = []
    for t, kind, version in s.events:
        if kind == "swap":
            markers.append(Mark(t - s.now, VERSION_COLORS[version % len(VERSION_COLORS)], f"v{version}"))
        else:
            markers.append(Mark(t - s.now, LIMIT_COLOR if kind == "rollback" else WARN_COLOR, kind, dashed=False,
                                label_low=True))
    rets = [r for _, _, r in s.returns]
    lo, hi = (min(rets), max(rets)) if rets else (0.0, 1.0)
    pad = max(1.0, 0.1 * (hi - lo))
    running = "-" if snap.running_version is None else f"v{snap.running_version}"
    best = "-" if snap.best_version is None else f"v{snap.best_version}"
    return Chart(
        title=f"episode returns  running {running}  best {best}",
        traces=tuple(traces + means), vlines=tuple(markers), x_range=_x_range(snap), y_range=(lo - pad, hi + pad),
        legend=(("● episode ▬ mean ┆ swap", "#555555"), (f"rollbacks {snap.rollbacks}", LIMIT_COLOR)),
        note="no episode yet")


def signal_chart(snap: RobotSnapshot, signal: Signal) -> Chart:
    """One budget signal against its warn and limit lines, coloured by its level."""
    s = snap.series
    points = tuple((t - s.now, v) for t, v in s.signals.get(signal.name, ()))
    limits = [v for v in (signal.warn, signal.limit) if v is not None]
    values = [v for _, v in points] + limits
    hi = max(values) * 1.2 if values and max(values) > 0 else 1.0
    if signal.unit == "%":
        hi = max(hi, 100.0)
    lo = min(0.0, min(values)) if values else 0.0
    unit = f" {signal.unit}" if signal.unit else ""
    value = "-" if signal.value is None else f"{signal.value:,.0f}{unit}" if abs(signal.value) >= 1000 \
        else f"{signal.value:.3g}{unit}"
    hlines = tuple(m for m in (
        Mark(signal.warn, WARN_COLOR, f"warn {signal.warn:g}") if signal.warn is not None else None,
        Mark(signal.limit, LIMIT_COLOR, f"limit {signal.limit:g}") if signal.limit is not None else None) if m)
    return Chart(title=f"{signal.name}  {value}",
                 traces=(Trace(signal.name, points, LEVEL_COLORS.get(signal.level, "#1565c0")),),
                 hlines=hlines, x_range=_x_range(snap), y_range=(lo, hi),
                 note="not measured" if signal.value is None else "no samples yet")


def plotted_signals(snap: RobotSnapshot) -> list[Signal]:
    """The budget signals with a plot of their own (those the latency plot does not already show)."""
    return [s for s in snap.signals if s.name not in ON_LATENCY_PLOT]
