"""The picture of one robot as labelled rows of text: what `lowrl top` prints and the rqt plugin's labels show.

One formatter for both views, so a number reads the same in a terminal and on a desktop. Each row
fits 80 columns with its label (``lowrl top`` works at 80x24).
"""
from __future__ import annotations

from lowrl_ros.core.monitor.model import NOT_RUNNING, OK, SOURCES, RobotSnapshot, Signal

ROWS = ("sources", "tier", "reason", "inference", "misses", "budget", "versions", "returns", "learner", "trainer",
        "e-stop")
WIDTH = 68  # the text of a row; its label takes 10 more columns


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


def lines(snap: RobotSnapshot) -> list[str]:
    """The rows as ``label     text`` lines, under a title line naming the namespace."""
    return [f"robot {snap.namespace}"] + [f"{label:<10}{text}" for label, text in rows(snap)]
