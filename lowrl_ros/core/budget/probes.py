"""Probes of the robot computer for the budget monitor: memory, CPU load, temperature, throttling.

Every probe returns a ``Reading``; a probe that raises becomes a STALE reading in
``ProbeSet.sample`` (the monitor never dies of a bad sensor). No ROS, no torch: psutil and sysfs.

Temperature sources (``BudgetConfig.temperature_source``):

- ``auto``: /sys/class/thermal/thermal_zone*/temp (CPU/SoC zones preferred), then
  /sys/class/hwmon/hwmon*/temp*_input, then psutil.sensors_temperatures. Many boxes (VMs, this
  development machine) have none:
  the reading is then STALE with "no sensor", never a made-up number.
- ``file``: a path whose content is millidegrees Celsius, exactly like a sysfs thermal zone. Point
  it at a zone auto does not pick, at a file an external sensor driver writes, or (in tests) at a
  file the test writes.
- ``estimated``: a first-order thermal model driven by CPU load,
  ``dT/dt = (ambient + rise * load - T) / tau``; always labelled "estimated".
- ``none``: temperature is not monitored.
"""
from __future__ import annotations

import collections
import math
import os
import time
from pathlib import Path
from typing import Callable

import psutil

from lowrl_ros.core.budget.monitor import BudgetConfig, Reading

MB = 1e6
# Sensor names that are the CPU/SoC (psutil keys, thermal zone types), preferred over others.
_CPU_SENSORS = ("coretemp", "k10temp", "k8temp", "zenpower", "cpu", "soc", "x86_pkg", "acpitz", "tsens")


def _is_cpu_sensor(name: str) -> bool:
    return any(key in name.lower() for key in _CPU_SENSORS)


def read_millidegrees(path: Path) -> float:
    """Parse a sysfs-style temperature file (integer millidegrees C) into degrees C.

    Raises:
        ValueError: the content is not an integer, with the path and what was found.
    """
    text = Path(path).read_text().strip()
    try:
        return int(text) / 1000.0
    except ValueError:
        raise ValueError(f"{path} holds {text[:40]!r}; expected integer millidegrees C like sysfs "
                         "(45000 = 45 C)") from None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class _ProcFile:
    """A /proc file opened once and re-read with pread: the kernel regenerates its content on each
    read, and a sample no longer pays open/close (at 10 Hz on a cold cache, the probes' psutil
    paths were most of the monitor's CPU). For /proc/PID files the fd stays bound to that process:
    a new process that reuses the pid is never read by mistake (reads raise ProcessLookupError)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)

    def read(self) -> bytes:
        return os.pread(self._fd, 4096, 0)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()


_HAVE_PROC = Path("/proc/self/statm").exists()


class _Rss:
    """Resident bytes of one process: /proc/PID/statm through a kept fd on Linux, else psutil."""

    def __init__(self, proc: psutil.Process) -> None:
        self.proc = proc
        self._statm = _ProcFile(f"/proc/{proc.pid}/statm") if _HAVE_PROC else None

    def rss(self) -> int:
        if self._statm is None:
            return self.proc.memory_info().rss
        try:
            return int(self._statm.read().split()[1]) * _PAGE
        except (ProcessLookupError, IndexError, ValueError):
            raise psutil.NoSuchProcess(self.proc.pid) from None


class ProcessRssProbe:
    """Resident memory (MB) of a process given by pid (a callable, e.g. from policy stats) or by name.

    By name, every process whose name (comm), or whose script (argv[0] or argv[1] basename, for
    Python console scripts), equals ``name`` is summed. The processes found are kept and read
    through their /proc/PID/statm; while none is found the probe looks again every ``rescan_s``
    seconds, reading /proc/PID/cmdline only of pids it has not seen before (a full psutil scan
    costs ~10 ms here, a fifth of the monitor's CPU budget at one scan per 5 s).
    """

    def __init__(self, pid: Callable[[], int | None] | None = None, name: str | None = None,
                 rescan_s: float = 5.0) -> None:
        if (pid is None) == (name is None):
            raise ValueError("ProcessRssProbe needs exactly one of pid= (a callable) or name=")
        self._pid, self.name, self.rescan_s = pid, name, rescan_s
        self._procs: list[_Rss] = []
        self._cached_pid: int | None = None
        self._last_scan = -math.inf
        self._seen: set[int] = set()  # pids already found not to match
        self._seen_since = -math.inf  # forgotten every minute: a pid that exec'd a new program

    def _by_pid(self) -> list[_Rss]:
        pid = self._pid()
        if pid is None:
            return []
        if pid != self._cached_pid:
            self._procs, self._cached_pid = [_Rss(psutil.Process(pid))], pid
        return self._procs

    def _by_name(self) -> list[_Rss]:
        now = time.monotonic()
        if not self._procs and now - self._last_scan >= self.rescan_s:
            self._last_scan = now
            self._procs = [_Rss(psutil.Process(pid)) for pid in self._scan()]
        return self._procs

    def _scan(self) -> list[int]:
        """Pids of the processes named ``name`` (this process excluded)."""
        if not _HAVE_PROC:
            return [p.pid for p in psutil.process_iter(["name", "cmdline"]) if p.pid != os.getpid()
                    and self._matches(p.info.get("name"), p.info.get("cmdline") or [])]
        pids = {int(e.name) for e in os.scandir("/proc") if e.name.isdigit()}
        if time.monotonic() - self._seen_since > 60.0:
            self._seen, self._seen_since = set(), time.monotonic()
        self._seen &= pids  # forget pids that ended; a reused pid is then read afresh
        found = []
        for pid in pids - self._seen - {os.getpid()}:
            try:
                with open(f"/proc/{pid}/comm", "rb") as f:
                    comm = f.read().strip().decode(errors="replace")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = [a.decode(errors="replace") for a in f.read().split(b"\0")[:2]]
            except OSError:  # ended meanwhile, or not ours to read
                continue
            if self._matches(comm, cmd):
                found.append(pid)
            elif cmd != [""]:  # kernel threads and zombies have no cmdline yet: look again later
                self._seen.add(pid)
        return found

    def _matches(self, name: str | None, cmd: list[str]) -> bool:
        return name == self.name or any(os.path.basename(arg) == self.name for arg in cmd[:2])

    def read(self) -> Reading:
        try:
            procs = self._by_pid() if self._pid is not None else self._by_name()
            if not procs:
                why = ("no policy pid (no fresh policy stats)" if self._pid is not None
                       else f"no process named {self.name!r}")
                return Reading(None, "psutil", why)
            return Reading(sum(p.rss() for p in procs) / MB, "psutil")
        except psutil.NoSuchProcess:
            # One of them ended: by name, scan again at the next sample (a restarted process).
            self._procs, self._cached_pid, self._last_scan = [], None, -math.inf
            return Reading(None, "psutil", "process ended")


class AvailableMemoryProbe:
    """System memory available to new allocations (MB): MemAvailable, as psutil's ``available``.

    On Linux it reads the one line of /proc/meminfo it needs through a kept fd
    (psutil.virtual_memory parses the whole file and was a third of a sample's cost); elsewhere psutil.
    """

    def __init__(self, meminfo: Path = Path("/proc/meminfo")) -> None:
        self.meminfo = _ProcFile(str(meminfo)) if meminfo.exists() else None

    def read(self) -> Reading:
        if self.meminfo is not None:
            text = self.meminfo.read()
            at = text.find(b"MemAvailable:")
            if at >= 0:
                return Reading(int(text[at:].split()[1]) * 1024 / MB, "/proc/meminfo")
        return Reading(psutil.virtual_memory().available / MB, "psutil")


class CpuLoadProbe:
    """System-wide CPU load in percent since the previous call, or over the last ``window_s`` seconds.

    On Linux, the first line of /proc/stat through a kept fd, with psutil's definition (busy = all
    but idle and iowait; guest time is already inside user and nice); elsewhere psutil.cpu_percent.
    The kernel counts in 10 ms ticks: on 2 cores a 0.1 s interval holds 20 of them, so one idle (or
    iowait) tick in a fully loaded interval reads 95 %. ``window_s`` (Linux) averages over a longer
    interval that still ends now, so a limit near 100 % is not reset by a single tick.

    Args:
        stat: /proc/stat (tests point it elsewhere).
        window_s: 0: since the previous call; otherwise from the oldest earlier reading at most this
            old (or the previous one, if it is older) to now.
        clock: monotonic seconds.
    """

    def __init__(self, stat: Path = Path("/proc/stat"), window_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._stat = _ProcFile(str(stat)) if stat.exists() else None
        self.window_s, self._clock = float(window_s), clock
        self._history: collections.deque = collections.deque()  # (time, (busy, total)) of earlier reads
        # prime: the first call has no interval to average over
        if self._stat is not None:
            self._history.append((self._clock(), self._times()))
        else:
            psutil.cpu_percent(interval=None)

    def _times(self) -> tuple[int, int]:
        fields = [int(x) for x in self._stat.read().split(b"\n", 1)[0].split()[1:9]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields) - idle, sum(fields)  # (busy, total); fields end at steal

    def read(self) -> Reading:
        if self._stat is None:
            return Reading(psutil.cpu_percent(interval=None), "psutil")
        now, (busy1, total1) = self._clock(), self._times()
        # The base: the oldest earlier reading at most window_s old, else the previous one (window 0: always).
        while len(self._history) > 1 and now - self._history[0][0] > self.window_s:
            self._history.popleft()
        busy0, total0 = self._history[0][1]
        self._history.append((now, (busy1, total1)))
        if total1 <= total0:
            return Reading(0.0, "/proc/stat")
        return Reading(min(max(100.0 * (busy1 - busy0) / (total1 - total0), 0.0), 100.0), "/proc/stat")


class _Discovered:
    """Sensor files found by a glob, found again only every ``rediscover_s`` (globbing sysfs at
    every sample would cost more than the rest of the monitor)."""

    def __init__(self, find: Callable[[], list], rediscover_s: float = 30.0) -> None:
        self._find, self.rediscover_s = find, rediscover_s
        self._found: list = []
        self._at = -math.inf

    def get(self, stale: bool = False) -> list:
        now = time.monotonic()
        if stale or now - self._at >= self.rediscover_s:
            self._found, self._at = self._find(), now
        return self._found


# Raspberry Pi firmware (sysfs of the raspberrypi firmware driver): bits that say the CPU is held back NOW.
# Bits 16-19 say the same happened since boot (history, not a present state); bit 0 is under-voltage now,
# which throttles only by setting bit 2.
PI_GET_THROTTLED = "devices/platform/soc/soc:firmware/get_throttled"
_PI_NOW = {1: "ARM frequency capped", 2: "throttled", 3: "soft temperature limit active"}
# Cooling devices that slow the CPU (cpufreq cooling "cpufreq-cpu0"/"thermal-cpufreq-0", ACPI "Processor",
# Jetson "cpu-balanced"...); a fan ("pwm-fan", "Fan") spinning is cooling, not throttling.
_CPU_COOLING = ("cpu", "processor")
_NOT_THROTTLING = ("fan",)


class ThrottleProbe:
    """How much the CPU is throttled now: 0 = not at all, up to 1; the worst of the sources the board has.

    Real throttling is a thermal or power limit holding the CPU back; it is read where the kernel reports it:

    - the frequency *cap*: ``1 - scaling_max_freq / cpuinfo_max_freq`` on the worst core. cpufreq cooling
      devices (Jetson, most ARM boards) and power limits lower the policy maximum below the hardware's.
    - x86 ``cpu*/thermal_throttle/*_throttle_count`` (core and package): a count that rose since the previous
      read means the CPU hit its thermal limit (PROCHOT); reported as 1.0 for ``hold_s`` after the rise (the
      counters step once per event, while the throttling lasts longer than one sample). The count since boot
      is history: the first read only takes the baseline.
    - Raspberry Pi ``get_throttled`` (firmware): bit 1 ARM frequency capped, 2 throttled, 3 soft temperature
      limit, set now: 1.0 (the firmware caps behind the kernel's back, so the cap above does not show it).
    - CPU cooling devices of the thermal framework (``class/thermal/cooling_device*``, fans excluded):
      ``cur_state / max_state``; and a thermal zone past its *passive* trip point (the kernel throttles
      there): 1.0.

    The *current* frequency (``scaling_cur_freq``) is never read: ondemand/schedutil governors lower it
    whenever the CPU idles (DVFS), so "current < maximum" is not throttling, and an idle Jetson or
    Raspberry Pi reads 0. A power mode chosen on purpose (Jetson ``nvpmodel``) lowers scaling_max_freq too
    and so reads as a cap; the shipped ``throttle_limit`` (0.5, warn at 0.375) leaves the usual modes alone.
    STALE where sysfs has none of these (VMs).
    """

    def __init__(self, root: Path = Path("/sys"), hold_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = Path(root)
        self.hold_s, self.clock = hold_s, clock
        cpus = "devices/system/cpu/cpu[0-9]*"
        self._dirs = _Discovered(lambda: sorted(self.root.glob(f"{cpus}/cpufreq")))
        self._counters = _Discovered(lambda: sorted(self.root.glob(f"{cpus}/thermal_throttle/*_throttle_count")))
        self._cooling = _Discovered(self._find_cooling)
        self._trips = _Discovered(self._find_passive_trips)
        self._counts: dict[Path, int] = {}
        self._rose_at = -math.inf
        self._rose = ""

    def _find_cooling(self) -> list[tuple[str, Path]]:
        found = []
        for d in sorted(self.root.glob("class/thermal/cooling_device*")):
            kind = _text(d / "type").lower()
            if any(k in kind for k in _CPU_COOLING) and not any(k in kind for k in _NOT_THROTTLING):
                found.append((kind, d))
        return found

    def _find_passive_trips(self) -> list[tuple[str, Path, Path]]:
        found = []
        for zone in sorted(self.root.glob("class/thermal/thermal_zone*")):
            for trip in sorted(zone.glob("trip_point_*_type")):
                if _text(trip) == "passive":
                    found.append((_text(zone / "type") or zone.name, zone / "temp",
                                  trip.with_name(trip.name.replace("_type", "_temp"))))
        return found

    def _cap(self) -> float | None:
        worst: float | None = None
        for d in self._dirs.get():
            try:
                cap = float((d / "scaling_max_freq").read_text())
                top = float((d / "cpuinfo_max_freq").read_text())
            except (OSError, ValueError):
                continue
            if top > 0:
                worst = max(worst or 0.0, 1.0 - cap / top)
        return None if worst is None else max(worst, 0.0)

    def _counters_rose(self, now: float) -> bool | None:
        files = self._counters.get()
        if not files:
            return None
        for f in files:
            try:
                count = int(f.read_text())
            except (OSError, ValueError):
                continue
            before = self._counts.get(f)
            self._counts[f] = count
            if before is not None and count > before:
                self._rose_at, self._rose = now, f"{f.parent.parent.name} {f.name} rose to {count}"
        return now - self._rose_at <= self.hold_s

    def read(self) -> Reading:
        now = self.clock()
        parts: list[tuple[float, str, str]] = []  # (value, source, why)
        cap = self._cap()
        if cap is not None:
            parts.append((cap, "cpufreq cap", f"scaling_max_freq {cap:.0%} below cpuinfo_max_freq" if cap else ""))
        rose = self._counters_rose(now)
        if rose is not None:
            parts.append((1.0 if rose else 0.0, "thermal_throttle counters", self._rose if rose else ""))
        pi = self.root / PI_GET_THROTTLED
        try:
            bits: int | None = int(_text(pi), 16) if pi.exists() else None  # hex, as the firmware driver prints it
        except ValueError:
            bits = None
        if bits is not None:
            now_set = [why for bit, why in _PI_NOW.items() if bits >> bit & 1]
            parts.append((1.0 if now_set else 0.0, "get_throttled", f"Pi firmware: {', '.join(now_set)}"
                          if now_set else ""))
        for kind, d in self._cooling.get():
            try:
                cur, top = int(_text(d / "cur_state")), int(_text(d / "max_state"))
            except ValueError:
                continue
            if top > 0:
                parts.append((min(cur / top, 1.0), "cooling devices",
                              f"{d.name} ({kind}) at state {cur}/{top}" if cur else ""))
        for kind, temp, trip in self._trips.get():
            try:
                hot = int(_text(temp)) >= int(_text(trip))
            except ValueError:
                continue
            parts.append((1.0 if hot else 0.0, "passive trip points",
                          f"{kind} past its passive trip point {int(_text(trip)) / 1000:g} C" if hot else ""))
        if not parts:
            return Reading(None, "cpufreq", "no sensor: no cpufreq cap, throttle counters, firmware flags or "
                           "CPU cooling devices in sysfs")
        value = max(v for v, _, _ in parts)
        sources = " + ".join(dict.fromkeys(src for _, src, _ in parts))
        why = "; ".join(dict.fromkeys(w for v, _, w in parts if w and v >= value))
        return Reading(value, f"sysfs {sources}", why)


def _text(path: Path) -> str:
    """A small sysfs file's content, stripped; "" when it is missing or unreadable (sensors come and go)."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


class SystemTemperatureProbe:
    """Hottest CPU/SoC temperature (C) from /sys/class/thermal, hwmon or psutil; STALE "no sensor".

    The sensor files are found once (and again every 30 s, or when one disappears); each sample
    then reads only those files.
    """

    def __init__(self, root: Path = Path("/sys")) -> None:
        self.root = Path(root)
        self._real = self.root == Path("/sys")  # psutil reads the real /sys only
        self._files = _Discovered(self._find)
        # psutil's sensor scan costs as much as the rest of a sample; without sensors, ask rarely.
        self._psutil = _Discovered(lambda: [True] if self._psutil_temps() else [])

    def _find(self) -> list[tuple[str, Path]]:
        zones: list[tuple[str, Path]] = []
        for zone in sorted(self.root.glob("class/thermal/thermal_zone*")):
            kind = (zone / "type").read_text().strip() if (zone / "type").exists() else ""
            if (zone / "temp").exists():
                zones.append((kind, zone / "temp"))
        picked = [p for k, p in zones if _is_cpu_sensor(k)] or [p for _, p in zones]
        if picked:
            return [("sysfs thermal", p) for p in picked]
        hwmon: list[tuple[str, Path]] = []
        for d in sorted(self.root.glob("class/hwmon/hwmon*")):
            name = (d / "name").read_text().strip() if (d / "name").exists() else ""
            hwmon += [(name, p) for p in sorted(d.glob("temp*_input"))]
        picked = [p for k, p in hwmon if _is_cpu_sensor(k)] or [p for _, p in hwmon]
        return [("sysfs hwmon", p) for p in picked]

    @staticmethod
    def _psutil_temps() -> list[float]:
        if not hasattr(psutil, "sensors_temperatures"):
            return []
        sensors = psutil.sensors_temperatures() or {}
        picked = {k: v for k, v in sensors.items() if _is_cpu_sensor(k)} or sensors
        return [t.current for entries in picked.values() for t in entries if t.current is not None]

    def read(self) -> Reading:
        files = self._files.get()
        if files:
            try:
                return Reading(max(read_millidegrees(p) for _, p in files), files[0][0])
            except FileNotFoundError:
                files = self._files.get(stale=True)  # a sensor went away: look again
                if files:
                    return Reading(max(read_millidegrees(p) for _, p in files), files[0][0])
        if self._real and self._psutil.get():
            # Platforms where psutil knows sensors that sysfs globbing does not find.
            temps = self._psutil_temps()
            if temps:
                return Reading(max(temps), "psutil")
        return Reading(None, "auto", "no sensor: no thermal zones, hwmon or psutil sensors; "
                       "use temperature_source 'file' or 'estimated'")


class FileTemperatureProbe:
    """Temperature from a file of millidegrees C (sysfs format): external sensors and tests."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self) -> Reading:
        return Reading(read_millidegrees(self.path), "file", str(self.path))


class EstimatedTemperatureProbe:
    """First-order thermal model driven by CPU load; every reading is labelled "estimated".

    ``dT/dt = (ambient + rise * load/100 - T) / tau``, integrated exactly between samples. It starts
    at the steady state of the first load it sees. A stand-in where no sensor exists: it knows
    nothing of the enclosure, the fan or the sun, so set ``rise`` and ``tau`` from one measured run.
    """

    def __init__(self, ambient_c: float, rise_c: float, tau_s: float) -> None:
        self.ambient_c, self.rise_c, self.tau_s = ambient_c, rise_c, tau_s
        self.temperature: float | None = None
        self._t: float | None = None

    def update(self, now: float, load_pct: float) -> Reading:
        target = self.ambient_c + self.rise_c * min(max(load_pct, 0.0), 100.0) / 100.0
        if self.temperature is None or self._t is None:
            self.temperature = target
        else:
            alpha = 1.0 - math.exp(-max(now - self._t, 0.0) / self.tau_s)
            self.temperature += (target - self.temperature) * alpha
        self._t = now
        return Reading(self.temperature, "estimated", "estimated from CPU load (first-order model)")


class ProbeSet:
    """All probes the monitor samples, built from a BudgetConfig; ``sample()`` never raises.

    Args:
        config: which temperature source, which named processes.
        policy_pid: returns the policy node's pid from its stats, or None.
        sysfs_root: where sysfs is (tests point it at a fake tree).
        clock: monotonic seconds, for the estimated temperature model.
    """

    def __init__(self, config: BudgetConfig, policy_pid: Callable[[], int | None],
                 sysfs_root: Path = Path("/sys"), clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.load = CpuLoadProbe(window_s=config.cpu_load_window_s)
        self.probes: dict[str, object] = {
            "policy_rss": ProcessRssProbe(pid=policy_pid),
            "memory_available": AvailableMemoryProbe(),
            "cpu_throttle": ThrottleProbe(sysfs_root),
        }
        for name in config.process_names:
            self.probes[f"process_rss/{name}"] = ProcessRssProbe(name=name)
        self.estimator: EstimatedTemperatureProbe | None = None
        src = config.temperature_source
        if src == "auto":
            self.probes["cpu_temperature"] = SystemTemperatureProbe(sysfs_root)
        elif src == "file":
            self.probes["cpu_temperature"] = FileTemperatureProbe(config.temperature_file)
        elif src == "estimated":
            self.estimator = EstimatedTemperatureProbe(config.ambient_c, config.thermal_rise_c,
                                                       config.thermal_time_constant_s)

    @staticmethod
    def _safe(name: str, read: Callable[[], Reading]) -> Reading:
        try:
            return read()
        except Exception as e:  # a broken sensor must give STALE, never stop the monitor
            return Reading(None, name, f"probe failed: {type(e).__name__}: {e}")

    def sample(self) -> dict[str, Reading]:
        """Read every probe once; a probe that raises gives a STALE reading with the error."""
        out = {name: self._safe(name, probe.read) for name, probe in self.probes.items()}
        out["cpu_load"] = self._safe("cpu_load", self.load.read)
        if self.estimator is not None:
            load = out["cpu_load"].value
            out["cpu_temperature"] = (self.estimator.update(self.clock(), load) if load is not None
                                      else Reading(None, "estimated", "no CPU load to estimate from"))
        elif "cpu_temperature" not in out:
            out["cpu_temperature"] = Reading(None, "none", "temperature not monitored (temperature_source: none)")
        return out
