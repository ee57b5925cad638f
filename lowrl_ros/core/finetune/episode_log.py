"""The fine-tuner's per-episode reward log: ``WORK_DIR/episode_terms.csv`` (no torch, no ROS).

With the robot file's ``reward:`` terms the fine-tuner computes each step's reward itself; at each episode
end it appends one row here: when (unix s), the episode's index, how it ended (``terminated`` / ``truncated``),
its return, its steps, how many of them a person teleoperated (interventions), the policy version running
at its end, and the sum of each reward term over the episode (``term.<name>`` columns, weighted, in the
robot file's order). In a sim-to-real session the work_dir is ``SESSION_DIR/finetune``, and the session report
(core/session/report.py) plots the terms and interventions over time from it. Each row is flushed at
once, so a killed node keeps its rows.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

EPISODE_TERMS_CSV = "episode_terms.csv"
EPISODE_TERMS_FIELDS = ("time_s", "episode", "end", "return", "steps", "interventions", "version")
TERM_PREFIX = "term."


class EpisodeTermsLog:
    """Append-only ``episode_terms.csv``; a new header (other terms) starts a new file beside the old one."""

    def __init__(self, work_dir: str | Path, term_names: Sequence[str]) -> None:
        self.fields = EPISODE_TERMS_FIELDS + tuple(TERM_PREFIX + n for n in term_names)
        path = Path(work_dir) / EPISODE_TERMS_CSV
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.stat().st_size:
            with open(path, newline="") as f:
                header = next(csv.reader(f), [])
            if tuple(header) != self.fields:  # the robot file's terms changed: keep the old file
                path.replace(path.with_name(f"{path.stem}.before_{int(path.stat().st_mtime)}.csv"))
        self.path = path
        new = not path.is_file() or path.stat().st_size == 0
        self._file = open(path, "a", newline="")
        self._writer = csv.writer(self._file)
        if new:
            self._writer.writerow(self.fields)
        self._file.flush()
        self.rows = 0

    def append(self, time_s: float, episode: int, end: str, ret: float, steps: int, interventions: int,
               version: int, term_sums: Sequence[float]) -> None:
        if len(term_sums) != len(self.fields) - len(EPISODE_TERMS_FIELDS):
            raise ValueError(f"{self.path.name}: {len(term_sums)} term sums for "
                             f"{len(self.fields) - len(EPISODE_TERMS_FIELDS)} terms")
        self._writer.writerow([f"{time_s:.3f}", episode, end, f"{ret:.6g}", steps, interventions, version]
                              + [f"{v:.6g}" for v in term_sums])
        self._file.flush()
        self.rows += 1

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
