"""A session directory: which files a sim-to-real session writes, the writers, and the reader (no ROS).

A session directory is what the nodes of a session write (docs/sim_to_real.md):

```
SESSION_DIR/
  session.json        what ran: env, reality gap, sim policy, fine-tuning on/off, start time
  episodes.csv        sim robot: one row per finished episode (return, length, policy version)
  policy_stats.csv    recorder (lowrl demo): /lowrl/policy/stats rows (STATS_FIELDS), 10 Hz
  latency_us.csv      recorder: /lowrl/policy/latency_us, one row per inference
  tiers.csv           recorder: /lowrl/compute_tier, one row per tier message
  policy_tier.csv     recorder: the policy's ladder step (lowrl/policy/tier step, ladder, declared), on change
  policy_versions.csv recorder: each change of the version in the policy node's step rows (policy_version)
  budget_signals.csv  recorder: the budget monitor's CPU load, miss rate, p99 and wanted tier (its diagnostics, 1 Hz)
  finetune_learner.csv recorder: the fine-tuner's learner state (lowrl/finetune/learner ``state``, ``notes``, 1 Hz)
  process_cpu.csv     lowrl demo: each node's and load burner's CPU use, % of one core, 1 Hz
  session.mcap        lowrl demo: the session's topics (lowrl_ros/ros/monitor_node.py), rotated session_001.mcap...;
                      when present, the report takes the recorder's frames (the CSVs above) from it
  finetune/           the fine-tuner's work_dir: versions.json, versions/, transitions/ (docs/finetune_reference.md),
                      episode_terms.csv (robot-file reward terms: per episode each term's sum, interventions)
```

Every file but ``session.json`` and ``episodes.csv`` is optional: the analysis
(core/session/analysis.py) and the report (core/session/report.py) say which part is missing instead
of failing. The nodes import only this module, which loads neither matplotlib nor torch.
"""
from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from lowrl_ros.core.finetune.episode_log import EPISODE_TERMS_CSV, TERM_PREFIX
from lowrl_ros.core.runtime.policy_stats import STATS_FIELDS
from lowrl_ros.core.session.recorded import SESSION_MCAP, read_recording

SESSION_JSON = "session.json"
EPISODES_CSV = "episodes.csv"
POLICY_STATS_CSV = "policy_stats.csv"
LATENCY_CSV = "latency_us.csv"
TIERS_CSV = "tiers.csv"
SWAPS_CSV = "policy_versions.csv"  # (time_s, version): each change of the version in the policy node's step rows
FINETUNE_DIR = "finetune"
SYSID_STATUS = "offboard/sysid/status.json"  # trainer_node offboard_method sysid (lowrl demo --robot legged --sysid)
REPORT_PNG = "session_report.png"
REPORT_MD = "session_report.md"
EPISODE_FIELDS = ("time_s", "episode", "return", "length", "terminated", "version_start", "version_end")
STATS_CSV_FIELDS = ("time_s",) + STATS_FIELDS
LATENCY_FIELDS = ("time_s", "latency_us")
TIER_FIELDS = ("time_s", "tier")
POLICY_TIER_CSV = "policy_tier.csv"
POLICY_TIER_FIELDS = ("time_s", "step", "requested", "ladder", "declared")
STEP_TEXT = POLICY_TIER_FIELDS[1:]
SWAP_FIELDS = ("time_s", "version")
BUDGET_CSV = "budget_signals.csv"
BUDGET_FIELDS = ("time_s", "cpu_load_pct", "miss_rate", "latency_p99_us", "wanted")
LEARNER_CSV = "finetune_learner.csv"
LEARNER_FIELDS = ("time_s", "state", "updates", "notes")
PROCESS_CPU_CSV = "process_cpu.csv"
PROCESS_CPU_FIELDS = ("time_s", "process", "cpu_pct")


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
    policy_tier: dict[str, np.ndarray] = field(default_factory=dict)  # the ladder step the policy applied

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


def _frame(fields: tuple[str, ...], rows: list[list], text: Iterable[str] = ()) -> dict[str, np.ndarray]:
    """Rows as the columns _read_csv gives (floats; the ``text`` columns as strings); {} for no rows."""
    if not rows:
        return {}
    text = set(text)
    return {name: np.asarray([r[i] if name in text else float(r[i]) for r in rows],
                             dtype=str if name in text else np.float64) for i, name in enumerate(fields)}


def recorder_frames(p: Path, source: str = "auto") -> tuple[dict[str, np.ndarray], ...]:
    """(stats, latency, tiers, swaps, budget, learner, policy_tier): from the session's recording (SESSION_MCAP) when
    ``source`` is "mcap", or "auto" and the directory holds one; else from the recorder's CSV files."""
    if source not in ("auto", "mcap", "csv"):
        raise ValueError(f"source {source!r}: auto, mcap or csv")
    if source == "mcap" or (source == "auto" and (p / SESSION_MCAP).is_file()):
        rows = read_recording(p / SESSION_MCAP)
        return (_frame(STATS_CSV_FIELDS, rows["stats"]), _frame(LATENCY_FIELDS, rows["latency"]),
                _frame(TIER_FIELDS, rows["tiers"]), _frame(SWAP_FIELDS, rows["swaps"]),
                _frame(BUDGET_FIELDS, rows["budget"], text=("wanted",)),
                _frame(LEARNER_FIELDS, rows["learner"], text=("state", "notes")),
                _frame(POLICY_TIER_FIELDS, rows["policy_tier"], text=STEP_TEXT))
    return (_read_csv(p / POLICY_STATS_CSV), _read_csv(p / LATENCY_CSV), _read_csv(p / TIERS_CSV),
            _read_csv(p / SWAPS_CSV), _read_csv(p / BUDGET_CSV, text=("wanted",)),
            _read_csv(p / LEARNER_CSV, text=("state", "notes")), _read_csv(p / POLICY_TIER_CSV, text=STEP_TEXT))


def read_session(session_dir: str | Path, source: str = "auto") -> SessionData:
    """Read a session directory; ValueError (with the fix) when it is not one. ``source``: where the
    recorder's frames come from (``recorder_frames``: the recording when there is one, by default)."""
    p = Path(session_dir)
    if not is_session_dir(p):
        raise ValueError(f"{p} is not a session directory (no {SESSION_JSON} or {EPISODES_CSV}); give the "
                         "session_dir of a sim-to-real session, e.g. the one lowrl demo prints")
    info = json.loads((p / SESSION_JSON).read_text()) if (p / SESSION_JSON).is_file() else {}
    versions_path = p / FINETUNE_DIR / "versions.json"
    versions = json.loads(versions_path.read_text()) if versions_path.is_file() else {}
    stats, latency, tiers, swaps, budget, learner, policy_tier = recorder_frames(p, source)
    return SessionData(p, info, _read_csv(p / EPISODES_CSV), stats, latency, tiers, versions, swaps, budget, learner,
                       _read_csv(p / PROCESS_CPU_CSV, text=("process",)),
                       _read_csv(p / FINETUNE_DIR / EPISODE_TERMS_CSV, text=("end",)), policy_tier)
