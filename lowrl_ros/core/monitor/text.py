"""The picture of one robot as labelled rows of text: what `lowrl top` prints and the rqt plugin's labels show.

One formatter for both views, so a number reads the same in a terminal and on a desktop. Each row
fits 80 columns with its label (``lowrl top`` works at 80x24). :func:`trend_rows` adds the last
minute as block-character sparklines (latency p99, the tier) for the terminal, where the rqt
plugin draws plots instead.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from lowrl_ros.core.monitor.model import NOT_RUNNING, OK, SOURCES, RobotSnapshot, Signal
from lowrl_ros.core.runtime.tiers import ComputeTier

ROWS = ("sources", "tier", "reason", "inference", "misses", "budget", "versions", "returns", "learner", "trainer",
        "e-stop")
WIDTH = 68  # the text of a row; its label takes 10 more columns
TREND_S = 60.0  # the sparklines cover the last minute
TREND_COLUMNS = 36  # 1.7 s a column; the rest of the row says what the scale is
BLOCKS = "▁▂▃▄▅▆▇█"
TIER_BLOCKS = {ComputeTier.FULL: "█", ComputeTier.LITE: "▅", ComputeTier.DECIMATED: "▃", ComputeTier.SAFE: "▁"}


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} us"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _fit(text: str, width: int = WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def signal_text(s: Signal) -> str:
    """``cpu_load 45 % (warn 80, limit 95)``; ``-`` for a value not measured."""
    value = "-" if s.value is None else f"{s.value:.3g}"
    unit = f" {s.unit}" if s.unit else ""
    return f"{s.name} {value}{unit} (warn {_num(s.warn)}, limit {_num(s.limit)})"


def source_text(snap: RobotSnapshot) -> str:
    """``policy ok  budget ok  finetune not running ...``: what is heard, what went quiet."""
    return "  ".join(f"{s} {snap.sources[s]}" for s in SOURCES)


def rows(snap: RobotSnapshot) -> list[tuple[str, str]]:
    """(label, text) in :data:`ROWS` order, one ``budget`` row per signal (the label on the first only);
    a source not heard reads ``not running``, one gone quiet ``[stale]``."""
    src = snap.sources
    policy = src["policy"]
    inference = f"p50 {_us(snap.p50_us)}  p99 {_us(snap.p99_us)}  deadline {_us(snap.deadline_us)}"
    misses = (f"{'-' if snap.misses_per_s is None else f'{snap.misses_per_s:.1f}'}/s, "
              f"{'-' if snap.misses is None else snap.misses} in all (outputs later than the deadline)")
    if policy != OK:
        inference = f"[{policy}] " + inference
    budget = [signal_text(s) for s in snap.signals] or ["-"]
    if src["budget"] != OK:
        budget[0] = f"[{src['budget']}] " + budget[0]
    running = "-" if snap.running_version is None else f"v{snap.running_version}"
    best = "-" if snap.best_version is None else f"v{snap.best_version}"
    returns = "  ".join(f"v{v} {mean:.1f} ({n})" for v, (mean, n) in list(snap.returns.items())[-4:]) or "-"
    if snap.last_return is not None:
        returns += f"  last {snap.last_return:.1f}"
    learner = (f"{snap.learner_state}, {snap.learner_updates} updates; {snap.last_decision}"
               if src["finetune"] != NOT_RUNNING else NOT_RUNNING)
    if src["finetune"] not in (OK, NOT_RUNNING):
        learner = f"[{src['finetune']}] " + learner
    trainer = snap.trainer_stage if src["trainer"] != NOT_RUNNING else NOT_RUNNING
    if src["trainer"] not in (OK, NOT_RUNNING):
        trainer = f"[{src['trainer']}] " + trainer
    estop = ("-" if snap.estop_latched is None else "LATCHED" if snap.estop_latched else "clear")
    text = {
        "sources": source_text(snap),
        "tier": f"published {snap.tier_published}, applied {snap.tier_applied}",
        "reason": snap.tier_reason,
        "inference": inference,
        "misses": misses,
        "budget": "",
        "versions": f"running {running}  best {best}  swaps {snap.swaps}  rejections {snap.rejections}  "
                    f"rollbacks {snap.rollbacks}",
        "returns": returns,
        "learner": learner,
        "trainer": trainer,
        "e-stop": f"{estop} ({snap.estop_topic}, reset {snap.estop_reset_topic})",
    }
    out = []
    for label in ROWS:
        if label == "budget":  # one row per signal, the label on the first
            out += [("budget" if i == 0 else "", _fit(b)) for i, b in enumerate(budget)]
        else:
            out.append((label, _fit(text[label])))
    return out


def columns(points: Sequence[tuple[float, float]], now: float, reduce: Callable[[list[float]], float],
            span_s: float = TREND_S, n: int = TREND_COLUMNS) -> list[float | None]:
    """``points`` (t, value) of the last ``span_s`` in ``n`` equal time columns, oldest first, each the ``reduce``
    (max: a spike stays visible) of its values, None where nothing was heard."""
    cols: list[list[float]] = [[] for _ in range(n)]
    for t, v in points:
        age = now - t
        if 0 <= age < span_s:
            cols[n - 1 - int(age / span_s * n)].append(v)
    return [reduce(c) if c else None for c in cols]


def sparkline(values: Sequence[float | None], top: float) -> str:
    """One block character per value, ``▁`` at 0 to ``█`` at ``top``; a space where nothing was heard."""
    top = top if top > 0 else 1.0
    return "".join(" " if v is None else BLOCKS[max(0, min(len(BLOCKS) - 1, math.ceil(v / top * len(BLOCKS)) - 1))]
                   for v in values)


def trend_rows(snap: RobotSnapshot) -> list[tuple[str, str]]:
    """``p99 60 s`` and ``tier 60 s``: the last minute as sparklines. The p99 scale is the minute's highest
    (named, with the deadline beside it); the tier's worst in each column shows, so a short step down stays."""
    s = snap.series
    p99 = columns([(t, v) for t, _, v in s.latency], s.now, max)
    heard = [v for v in p99 if v is not None]
    top = max(heard) if heard else 0.0
    latency = (f"{sparkline(p99, top)}  max {_us(top if heard else None)}, deadline {_us(snap.deadline_us)}"
               if heard else "-")
    tiers = columns([(t, float(v)) for t, v in s.tier], s.now, max)
    tier = ("".join(" " if v is None else TIER_BLOCKS.get(int(v), "?") for v in tiers) + "  "
            + " ".join(f"{block}{t.label[:4]}" for t, block in TIER_BLOCKS.items())) if any(
        v is not None for v in tiers) else "-"
    return [("p99 60 s", _fit(latency)), ("tier 60 s", _fit(tier))]


def lines(snap: RobotSnapshot) -> list[str]:
    """The rows as ``label     text`` lines, under a title line naming the namespace; the sparklines go under the
    tier's reason (the tier) and under the inference row (p99)."""
    p99, tier = trend_rows(snap)
    under = {"reason": tier, "inference": p99}
    out = [f"robot {snap.namespace}"]
    for label, text in rows(snap):
        out.append(f"{label:<10}{text}")
        if label in under:
            out.append(f"{under[label][0]:<10}{under[label][1]}")
    return out
