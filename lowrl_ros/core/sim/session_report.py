"""A sim-to-real session's files and its report: return over time, versions, tiers, latency (no ROS).

A session directory is what the nodes of a session write (docs/sim_to_real.md):

```
SESSION_DIR/
  session.json        what ran: env, reality gap, sim policy, fine-tuning on/off, start time
  episodes.csv        sim robot: one row per finished episode (return, length, policy version)
  policy_stats.csv    recorder (lowrl demo): /lowrl/policy/stats rows (STATS_FIELDS), 10 Hz
  latency_us.csv      recorder: /lowrl/policy/latency_us, one row per inference
  tiers.csv           recorder: /lowrl/compute_tier, one row per tier message
  finetune/           the fine-tuner's work_dir: versions.json, versions/, transitions/ (docs/finetune.md)
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
REPORT_PNG = "session_report.png"
REPORT_MD = "session_report.md"
EPISODE_FIELDS = ("time_s", "episode", "return", "length", "terminated", "version_start", "version_end")
STATS_CSV_FIELDS = ("time_s",) + STATS_FIELDS
LATENCY_FIELDS = ("time_s", "latency_us")
TIER_FIELDS = ("time_s", "tier")
SWAP_FIELDS = ("time_s", "version")
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


def _read_csv(path: Path) -> dict[str, np.ndarray]:
    """Columns of a CSV as float arrays; a torn last line (a killed writer) is skipped."""
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return {}
    header, body = rows[0], []
    for row in rows[1:]:
        try:
            values = [float(v) for v in row]
        except ValueError:
            continue
        if len(values) == len(header):
            body.append(values)
    data = np.asarray(body, dtype=np.float64).reshape(len(body), len(header))
    return {name: data[:, i] for i, name in enumerate(header)}


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
                       _read_csv(p / LATENCY_CSV), _read_csv(p / TIERS_CSV), versions, _read_csv(p / SWAPS_CSV))


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
        lines.append("No episode finished (run longer).")
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
    if data.versions.get("versions"):
        v = data.versions
        lines += ["", f"Fine-tuner versions (finetune/versions.json): current v{v.get('current')}, "
                      f"best v{v.get('best')}"]
        for rec in v["versions"]:
            score = f"{np.mean(rec['returns']):.1f} over {len(rec['returns'])}" if rec.get("returns") else "not run"
            lines.append(f"- v{rec['version']} (parent v{rec.get('parent_version')}, {rec.get('updates', 0)} updates): "
                         f"{rec.get('status')}, return {score}")
    elif finetune.startswith("on"):
        lines += ["", "Fine-tuner: no versions.json yet (no version made)."]
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
    missing = [name for name, d in ((LATENCY_CSV, data.latency), (TIERS_CSV, data.tiers),
                                    (POLICY_STATS_CSV, data.stats)) if not d]
    if missing:
        lines += ["", f"Not recorded in this session: {', '.join(missing)} (lowrl demo records them)."]
    return "\n".join(lines) + "\n"


def _plot(data: SessionData, png: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(14, 8))
    ax = axes[0][0]
    e = data.episodes
    t0 = float(data.info.get("started_unix", e["time_s"][0] if data.n_episodes else 0.0))
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
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set(title="episode return over time", xlabel="session time (s)", ylabel="return")
    ax = axes[0][1]
    if data.n_episodes:
        ax.step(e["time_s"] - t0, e["version_end"], where="post")
    ax.set(title="running policy version", xlabel="session time (s)", ylabel="version")
    ax = axes[1][0]
    if data.tiers:
        ax.step(data.tiers["time_s"] - t0, data.tiers["tier"], where="post")
        ax.set_yticks([t.value for t in ComputeTier], [t.label for t in ComputeTier])
    else:
        ax.text(0.5, 0.5, "tiers not recorded", ha="center", transform=ax.transAxes)
    ax.set(title="compute tier", xlabel="session time (s)")
    ax = axes[1][1]
    lat = data.latency.get("latency_us")
    if lat is not None and len(lat):
        ax.hist(lat, bins=50, range=(0, float(np.percentile(lat, 99.5)) * 1.1 or 1.0))
        ax.set(xlabel="inference latency (us)", ylabel="calls")
    else:
        ax.text(0.5, 0.5, "latency not recorded", ha="center", transform=ax.transAxes)
    ax.set(title="inference latency")
    fig.suptitle(f"session {data.path.name}: {data.info.get('env_id', '')}, gap {data.info.get('gap', '')}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)


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

