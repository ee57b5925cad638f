"""A one-line progress bar on stderr (no dependency): steps, last return, steps/s, ETA."""
from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressLine:
    """Redraws one line at most every ``min_interval`` seconds; silent when disabled.

    Args:
        total: steps of the whole run.
        enabled: draw anything at all.
        stream: where to draw (stderr by default, so stdout stays clean for paths and results).
    """

    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None,
                 min_interval: float = 0.5, width: int = 24) -> None:
        self.total = max(1, total)
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.min_interval = min_interval
        self.width = width
        self._last_draw = 0.0
        self._t0 = time.perf_counter()
        self._s0: int | None = None
        # Not a terminal (a log file, CI): a plain line every tenth of the run instead of redraws.
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._next_tenth = 0.1

    def update(self, step: int, fields: dict[str, str], force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if self._s0 is None:
            self._s0, self._t0 = step, now
        frac = min(1.0, step / self.total)
        if not self.tty:
            if not force and frac < self._next_tenth:
                return
            self._next_tenth = (int(frac * 10) + 1) / 10
        elif not force and now - self._last_draw < self.min_interval:
            return
        self._last_draw = now
        filled = int(frac * self.width)
        rate = (step - self._s0) / max(now - self._t0, 1e-9)
        eta = (self.total - step) / rate if rate > 0 else float("inf")
        eta_s = f"{eta:5.0f}s" if eta != float("inf") else "    ?"
        extra = " ".join(f"{k} {v}" for k, v in fields.items())
        line = (f"\r[{'#' * filled}{'.' * (self.width - filled)}] {step}/{self.total} "
                f"{rate:6.0f} steps/s ETA {eta_s} {extra}")
        self.stream.write(line[:160].ljust(100) if self.tty else line[1:] + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
