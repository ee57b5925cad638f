"""The session report's frames from the session's MCAP recording, the same the demo's CSV logs hold (no ROS).

The demo's recorder (lowrl_ros/ros/recorder_node.py) turns the session's topics into CSV rows as they
arrive; a recording (``session.mcap``, lowrl_ros/core/session/recording.py) holds the same messages, so
the same rules applied to it give the same frames: ``policy_stats`` (/lowrl/policy/stats rows,
STATS_FIELDS), ``latency_us``, ``tiers`` (/lowrl/compute_tier), ``policy_versions`` (each change of the
step row's ``policy_version``), ``budget_signals`` and ``finetune_learner`` (from /diagnostics). The
rules that read diagnostics and step rows are here, used by both. A frame's ``time_s`` is when the
message arrived (the MCAP log time: the watcher's DDS receive time; the recorder's clock for the CSV).

What is not a topic stays a file of the session directory (session.json, the sim robot's episodes.csv,
process_cpu.csv, finetune/): core/session/files.py ``read_session`` takes the frames from here when the
directory holds a recording and the rest from the files.
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, Iterable, Iterator

from lowrl_ros.core.runtime.policy_stats import STATS_FIELDS
from lowrl_ros.core.runtime.step_row import peek_version
from lowrl_ros.core.session.recording import recorded_files, resolve

SESSION_MCAP = "session.mcap"  # what `lowrl demo` records into its session directory
BUDGET_PREFIX = "lowrl/budget/"  # budget_monitor_node's diagnostics (core.budget.monitor.budget_status)
LEARNER_STATUS = "lowrl/finetune/learner"  # the fine-tuner's learner state (core.finetune.status.finetune_status)
POLICY_TIER_STATUS = "lowrl/policy/tier"  # the ladder step the policy node applies (core.runtime.status.TierView)
TOPICS = {"stats": "lowrl/policy/stats", "latency": "lowrl/policy/latency_us", "tier": "lowrl/compute_tier",
          "step": "lowrl/policy/step", "diagnostics": "/diagnostics"}


def budget_row(statuses: Iterable[Any]) -> list[str] | None:
    """The budget_signals.csv row of one DiagnosticArray's statuses (cpu load, miss rate, p99, wanted tier),
    None when the budget monitor is not among them. Takes any objects with ``name`` and ``values``
    (``key``/``value``): rclpy messages or decoded MCAP messages."""
    budget: dict[str, str] = {}
    for status in statuses:
        if status.name.startswith(BUDGET_PREFIX):
            values = {kv.key: kv.value for kv in status.values}
            budget[status.name[len(BUDGET_PREFIX):]] = values.get("value", "")
            if status.name == BUDGET_PREFIX + "tier":
                budget["wanted"] = values.get("wanted", "")
    if not budget:
        return None
    return [budget.get("cpu_load") or "nan", budget.get("deadline_miss_rate") or "nan",
            budget.get("latency_p99") or "nan", budget.get("wanted", "")]


def learner_rows(statuses: Iterable[Any]) -> list[list[str]]:
    """The finetune_learner.csv rows (state, updates, notes) of one DiagnosticArray's statuses."""
    out = []
    for status in statuses:
        if status.name == LEARNER_STATUS:
            values = {kv.key: kv.value for kv in status.values}
            out.append([values.get("state", ""), values.get("updates") or "nan", values.get("notes", "")])
    return out


class LadderSteps:
    """The policy_tier.csv rows (step, requested, ladder, declared): ``seen(statuses)`` returns the rows of
    one DiagnosticArray's statuses where the ladder step the policy node applies (or its ladder) changed."""

    def __init__(self) -> None:
        self.last: list[str] | None = None

    def seen(self, statuses: Iterable[Any]) -> list[list[str]]:
        out = []
        for status in statuses:
            if status.name != POLICY_TIER_STATUS:
                continue
            values = {kv.key: kv.value for kv in status.values}
            if "step" not in values:
                continue
            row = [values["step"]] + [values.get(k, "") for k in ("requested", "ladder", "declared")]
            if row != self.last:
                self.last = row
                out.append(row)
        return out


class VersionChanges:
    """The running version from step rows: ``seen(row)`` returns the new version when it changed, else None."""

    def __init__(self) -> None:
        self.version: int | None = None

    def seen(self, row) -> int | None:
        version = peek_version(row)
        if version and version != self.version:
            self.version = version
            return version
        return None


def _messages(path: Path, topics: set[str]) -> Iterator[tuple[str, float, Any]]:
    """(topic, log time in s, decoded message) of ``topics`` from one MCAP file, in log-time order. A file
    cut short (a recorder killed before it wrote its summary) yields its complete chunks, in file order."""
    from mcap.exceptions import McapError
    from mcap.reader import NonSeekingReader, make_reader
    from mcap_ros2.decoder import DecoderFactory

    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        try:
            indexed = reader.get_summary() is not None
        except McapError:
            indexed = False
        if not indexed:
            f.seek(0)
            reader = NonSeekingReader(f, decoder_factories=[DecoderFactory()], validate_crcs=False)
        try:
            # In file order when not indexed: a non-seeking reader that sorts reads to the end before yielding.
            for _schema, channel, message, decoded in reader.iter_decoded_messages(
                    topics=sorted(topics), log_time_order=indexed):
                yield channel.topic, message.log_time / 1e9, decoded
        except (McapError, EOFError, ValueError, struct.error):
            return  # the torn end of an unfinished file (its last, open chunk is lost)


def read_recording(path: str | Path, namespace: str = "/") -> dict[str, list[list]]:
    """The recorder's rows from a session recording (``path``: its first file; rotations follow).

    Returns {"stats", "latency", "tiers", "swaps", "budget", "learner", "policy_tier"}: each a list of rows with the
    columns of its CSV (core/session/files.py STATS_CSV_FIELDS, LATENCY_FIELDS, ...), time first.
    ``namespace``: the robot's, as recorded (its lowrl topics are under it; /diagnostics is not).
    """
    files = recorded_files(path)
    if not files:
        raise FileNotFoundError(f"no recording at {path}")
    topic = {key: resolve(name, namespace) for key, name in TOPICS.items()}
    rows: dict[str, list] = {k: [] for k in ("stats", "latency", "tiers", "swaps", "budget", "learner",
                                                   "policy_tier")}
    versions, steps = VersionChanges(), LadderSteps()
    for file in files:
        for name, t, msg in _messages(file, set(topic.values())):
            if name == topic["stats"]:
                if len(msg.data) == len(STATS_FIELDS):
                    rows["stats"].append([t, *msg.data])
            elif name == topic["latency"]:
                rows["latency"].append([t, msg.data])
            elif name == topic["tier"]:
                rows["tiers"].append([t, msg.data])
            elif name == topic["step"]:
                version = versions.seen(msg.data)
                if version is not None:
                    rows["swaps"].append([t, version])
            else:
                budget = budget_row(msg.status)
                if budget is not None:
                    rows["budget"].append([t, *budget])
                rows["learner"] += [[t, *row] for row in learner_rows(msg.status)]
                rows["policy_tier"] += [[t, *row] for row in steps.seen(msg.status)]
    return rows
