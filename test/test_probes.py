"""Probes against real processes and sysfs-format files.

This machine has no thermal zones, hwmon or cpufreq; the sysfs tests build a tree in the same
file format under tmp_path (a test double of the kernel's files, the only way to run that parsing
here). The Jetson-like, Raspberry-Pi-like and x86 trees below stand in for boards this machine is
not: their file names and formats are the kernel's (cpufreq, thermal, thermal_throttle) and the Pi
firmware driver's (get_throttled, hex). Memory is measured on a real subprocess that allocates resident memory.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from lowrl_ros.bench.budget import MemoryHog
from lowrl_ros.core.budget.monitor import BudgetConfig, Reading
from lowrl_ros.core.budget.probes import (
    EstimatedTemperatureProbe,
    FileTemperatureProbe,
    ProbeSet,
    ProcessRssProbe,
    SystemTemperatureProbe,
    ThrottleProbe,
    read_millidegrees,
)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_file_source_reads_millidegrees(tmp_path):
    f = tmp_path / "temp"
    f.write_text("45500\n")
    r = FileTemperatureProbe(f).read()
    assert r.value == pytest.approx(45.5) and r.source == "file"


def test_file_source_garbage_is_a_clear_error(tmp_path):
    f = tmp_path / "temp"
    f.write_text("hot")
    with pytest.raises(ValueError, match="expected integer millidegrees"):
        read_millidegrees(f)


def test_sysfs_thermal_zones_prefer_the_cpu(tmp_path):
    write(tmp_path / "class/thermal/thermal_zone0/type", "acpitz-board\n")
    write(tmp_path / "class/thermal/thermal_zone0/temp", "30000\n")
    write(tmp_path / "class/thermal/thermal_zone1/type", "x86_pkg_temp\n")
    write(tmp_path / "class/thermal/thermal_zone1/temp", "61000\n")
    write(tmp_path / "class/thermal/thermal_zone2/type", "battery\n")
    write(tmp_path / "class/thermal/thermal_zone2/temp", "90000\n")
    r = SystemTemperatureProbe(tmp_path).read()
    assert r.value == pytest.approx(61.0) and r.source == "sysfs thermal"


def test_hwmon_when_no_thermal_zone(tmp_path):
    write(tmp_path / "class/hwmon/hwmon0/temp1_input", "52000")
    write(tmp_path / "class/hwmon/hwmon0/temp2_input", "57000")
    assert SystemTemperatureProbe(tmp_path).read().value == pytest.approx(57.0)


def test_no_sensor_says_so(tmp_path):
    r = SystemTemperatureProbe(tmp_path).read()
    assert r.value is None and "no sensor" in r.detail


def test_throttle_is_the_frequency_cap_not_idle_dvfs(tmp_path):
    """A cap lowered by a thermal/power limit is throttling; an idle core clocked down (DVFS) is not."""
    cpus = {"cpu0": ("600000", "1800000"),   # idle, clocked down by the governor, no cap: not throttled
            "cpu1": ("900000", "900000")}    # capped at half its maximum: throttled by 0.5
    for cpu, (cur, cap) in cpus.items():
        write(tmp_path / f"devices/system/cpu/{cpu}/cpufreq/scaling_cur_freq", cur)
        write(tmp_path / f"devices/system/cpu/{cpu}/cpufreq/scaling_max_freq", cap)
        write(tmp_path / f"devices/system/cpu/{cpu}/cpufreq/cpuinfo_max_freq", "1800000")
    r = ThrottleProbe(tmp_path).read()
    assert r.value == pytest.approx(0.5) and "cpufreq cap" in r.source  # the worst core's cap
    assert "scaling_max_freq 50% below cpuinfo_max_freq" in r.detail
    write(tmp_path / "devices/system/cpu/cpu1/cpufreq/scaling_max_freq", "1800000")  # the cap lifted
    assert ThrottleProbe(tmp_path).read().value == pytest.approx(0.0)  # idle cpu0 alone throttles nothing
    assert ThrottleProbe(tmp_path / "nothing").read().value is None


def test_estimated_temperature_follows_a_first_order_model():
    p = EstimatedTemperatureProbe(ambient_c=25.0, rise_c=40.0, tau_s=10.0)
    r0 = p.update(0.0, 0.0)
    assert r0.value == pytest.approx(25.0) and "estimated" in r0.detail
    assert p.update(10.0, 100.0).value == pytest.approx(25.0 + 40.0 * (1 - 0.36787944), rel=1e-6)
    for t in range(11, 200):
        r = p.update(float(t), 100.0)
    assert r.value == pytest.approx(65.0, abs=0.01)


def test_process_rss_by_pid_and_by_name_tracks_a_real_allocation(tmp_path):
    with MemoryHog(name="lowrl_probe_hog.py", directory=tmp_path) as hog:
        by_pid = ProcessRssProbe(pid=lambda: hog.pid)
        by_name = ProcessRssProbe(name="lowrl_probe_hog.py")
        base = by_pid.read().value
        assert by_name.read().value == pytest.approx(base, rel=0.2)
        hog.alloc(80)
        assert by_pid.read().value - base > 70
        assert by_name.read().value - base > 70
        hog.free()
        assert by_pid.read().value - base < 20
    assert by_name.read().value is None or not by_name._procs  # it ended


def test_a_process_started_after_a_scan_is_found_at_the_next_one_and_its_end_is_seen(tmp_path):
    probe = ProcessRssProbe(name="lowrl_late_hog.py", rescan_s=0.0)
    assert probe.read().value is None  # scanned: every pid now seen, none matched
    with MemoryHog(name="lowrl_late_hog.py", directory=tmp_path):
        assert probe.read().value > 1.0  # a new pid is read at the next scan
    r = probe.read()
    assert r.value is None and "ended" in r.detail


def test_cpu_load_agrees_with_psutil_under_load():
    import threading
    import time

    import psutil

    from lowrl_ros.core.budget.probes import CpuLoadProbe

    probe, stop = CpuLoadProbe(), threading.Event()
    psutil.cpu_percent(interval=None)
    spin = threading.Thread(target=lambda: [None for _ in iter(stop.is_set, True)])
    spin.start()
    try:
        time.sleep(0.5)
    finally:
        stop.set()
        spin.join()
    ours, theirs = probe.read().value, psutil.cpu_percent(interval=None)
    assert ours > 100.0 / (os.cpu_count() or 1) / 2  # one busy thread shows
    assert ours == pytest.approx(theirs, abs=10.0)


def test_cpu_load_window_is_not_reset_by_one_idle_tick_and_still_follows_the_load(tmp_path):
    """20 ticks per sample (2 cores at 10 ms, near 10 Hz): one idle tick reads 95 % per sample, 98.75 % over a
    0.5 s window (4 samples of 0.125 s, exact in binary so the window holds exactly 4)."""
    from lowrl_ros.core.budget.probes import CpuLoadProbe

    stat, clock = tmp_path / "stat", [0.0]
    busy = idle = 0

    def tick(b: int, i: int) -> None:
        nonlocal busy, idle
        busy, idle = busy + b, idle + i
        stat.write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n")
        clock[0] += 0.125

    tick(0, 0)
    clock[0] = 0.0
    per_sample = CpuLoadProbe(stat, clock=lambda: clock[0])
    windowed = CpuLoadProbe(stat, window_s=0.5, clock=lambda: clock[0])
    loads = []
    for b, i in [(20, 0)] * 6 + [(19, 1)] + [(20, 0)] * 6 + [(4, 16)] * 6:  # a full load, one idle tick, then idle
        tick(b, i)
        loads.append((per_sample.read().value, windowed.read().value))
    assert loads[6][0] == pytest.approx(95.0) and loads[6][1] == pytest.approx(79 / 80 * 100)
    assert all(w >= 97.0 for _, w in loads[:13])  # a 97 % limit sees the load without a break
    assert loads[14][1] == pytest.approx((2 * 20 + 2 * 4) / 80 * 100)  # the last 0.5 s only
    assert loads[-1] == (pytest.approx(20.0), pytest.approx(20.0))  # the window has moved on: idle again


def test_missing_process_is_stale_not_an_error():
    r = ProcessRssProbe(name="no_such_process_lowrl").read()
    assert r.value is None and "no process named" in r.detail
    assert ProcessRssProbe(pid=lambda: None).read().value is None


def test_a_probe_that_raises_gives_stale_never_a_crash(tmp_path):
    f = tmp_path / "temp"  # does not exist yet
    ps = ProbeSet(BudgetConfig(temperature_source="file", temperature_file=str(f)), lambda: os.getpid())

    class Broken:
        def read(self) -> Reading:
            raise RuntimeError("sensor bus error")

    ps.probes["memory_available"] = Broken()
    out = ps.sample()
    assert out["memory_available"].value is None and "sensor bus error" in out["memory_available"].detail
    assert out["cpu_temperature"].value is None and "probe failed" in out["cpu_temperature"].detail
    assert out["policy_rss"].value > 0 and out["cpu_load"].value is not None
    f.write_text("40000")
    assert ps.sample()["cpu_temperature"].value == pytest.approx(40.0)


def test_estimated_source_in_a_probe_set_is_labelled():
    ps = ProbeSet(BudgetConfig(temperature_source="estimated"), lambda: None)
    r = ps.sample()["cpu_temperature"]
    assert r.value is not None and r.source == "estimated"


def test_source_none_is_stale_with_the_reason():
    r = ProbeSet(BudgetConfig(temperature_source="none"), lambda: None).sample()["cpu_temperature"]
    assert r.value is None and "not monitored" in r.detail


def test_available_memory_agrees_with_psutil():
    import psutil

    from lowrl_ros.core.budget.probes import AvailableMemoryProbe

    ours = AvailableMemoryProbe().read().value
    assert ours == pytest.approx(psutil.virtual_memory().available / 1e6, rel=0.05)


def shipped_budget() -> BudgetConfig:
    import yaml

    doc = yaml.safe_load((Path(__file__).resolve().parent.parent / "config/budget_monitor.yaml").read_text())
    return BudgetConfig.from_mapping(doc["/**/budget_monitor"]["ros__parameters"])


def throttle_status(root: Path, probe: ThrottleProbe | None = None):
    """The cpu_throttle status the budget monitor gives with the shipped config on this sysfs tree."""
    from lowrl_ros.core.budget.monitor import BudgetMonitor

    reading = (probe or ThrottleProbe(root)).read()
    (status,) = [s for s in BudgetMonitor(shipped_budget()).judge_all(0.0, {"cpu_throttle": reading})
                 if s.name == "cpu_throttle"]
    return reading, status


def cpufreq(root: Path, cpus: int, governor: str, cur: int, cap: int, top: int) -> None:
    for i in range(cpus):
        d = root / f"devices/system/cpu/cpu{i}/cpufreq"
        for name, value in (("scaling_governor", governor), ("scaling_cur_freq", cur), ("scaling_max_freq", cap),
                            ("cpuinfo_max_freq", top), ("cpuinfo_min_freq", top // 10)):
            write(d / name, f"{value}\n")


def jetson_like(root: Path) -> Path:
    """An idle Jetson Orin-like board: schedutil clocked every core down, no cap; the fan runs; the CPU
    zone is far below its passive (throttling) trip point."""
    cpufreq(root, 6, "schedutil", 729600, 1510400, 1510400)
    for i, (kind, temp, trips) in enumerate((("cpu-thermal", 47000, (("passive", 99000), ("critical", 104500))),
                                             ("gpu-thermal", 45000, (("passive", 99000),)))):
        write(root / f"class/thermal/thermal_zone{i}/type", kind)
        write(root / f"class/thermal/thermal_zone{i}/temp", str(temp))
        for j, (ttype, ttemp) in enumerate(trips):
            write(root / f"class/thermal/thermal_zone{i}/trip_point_{j}_type", ttype)
            write(root / f"class/thermal/thermal_zone{i}/trip_point_{j}_temp", str(ttemp))
    for name, value in (("type", "pwm-fan"), ("cur_state", "4"), ("max_state", "10")):
        write(root / f"class/thermal/cooling_device0/{name}", value)
    for name, value in (("type", "cpufreq-cpu0"), ("cur_state", "0"), ("max_state", "12")):
        write(root / f"class/thermal/cooling_device1/{name}", value)
    return root


def pi_like(root: Path) -> Path:
    """An idle Raspberry Pi 4-like board: ondemand at its lowest clock, no cap; the firmware says it was
    throttled and under-volted since boot (bits 16, 18: history), nothing now."""
    cpufreq(root, 4, "ondemand", 600000, 1500000, 1500000)
    write(root / "class/thermal/thermal_zone0/type", "cpu-thermal")
    write(root / "class/thermal/thermal_zone0/temp", "48000")
    write(root / "class/thermal/thermal_zone0/trip_point_0_type", "critical")
    write(root / "class/thermal/thermal_zone0/trip_point_0_temp", "110000")
    write(root / "devices/platform/soc/soc:firmware/get_throttled", "50000\n")
    return root


def test_idle_jetson_and_pi_raise_no_alarm_with_the_shipped_config(tmp_path):
    from lowrl_ros.core.budget.monitor import Severity

    for board in (jetson_like(tmp_path / "jetson"), pi_like(tmp_path / "pi")):
        reading, status = throttle_status(board)
        assert reading.value == pytest.approx(0.0), (board.name, reading)
        assert status.severity == Severity.OK, (board.name, status)
    _, source = throttle_status(tmp_path / "pi")
    assert "get_throttled" in source.source and "cpufreq cap" in source.source


def test_jetson_cap_cooling_or_passive_trip_is_throttling(tmp_path):
    from lowrl_ros.core.budget.monitor import Severity

    board = jetson_like(tmp_path)
    cpufreq(board, 6, "schedutil", 652800, 652800, 1510400)  # cpufreq cooling lowered the cap to 43 %
    reading, status = throttle_status(board)
    assert reading.value == pytest.approx(1 - 652800 / 1510400) and status.severity == Severity.HARD
    cpufreq(board, 6, "schedutil", 729600, 1510400, 1510400)  # cap lifted ...
    write(board / "class/thermal/cooling_device1/cur_state", "9")  # ... but the CPU cooling device at 9/12
    reading, status = throttle_status(board)
    assert reading.value == pytest.approx(0.75) and status.severity == Severity.HARD
    assert "cooling_device1 (cpufreq-cpu0) at state 9/12" in reading.detail
    write(board / "class/thermal/cooling_device1/cur_state", "0")
    write(board / "class/thermal/thermal_zone0/temp", "99500")  # past the CPU zone's passive trip point
    reading, status = throttle_status(board)
    assert reading.value == 1.0 and "cpu-thermal past its passive trip point 99 C" in reading.detail
    write(board / "class/thermal/cooling_device0/cur_state", "10")  # the fan at full speed is not throttling
    write(board / "class/thermal/thermal_zone0/temp", "60000")
    assert throttle_status(board)[0].value == pytest.approx(0.0)


@pytest.mark.parametrize("flags, now", [("0x1", False), ("2", True), ("4", True), ("8", True), ("50005", True),
                                        ("e0000", False)])
def test_pi_firmware_flags_now_are_throttling_history_is_not(tmp_path, flags, now):
    from lowrl_ros.core.budget.monitor import Severity

    board = pi_like(tmp_path)
    write(board / "devices/platform/soc/soc:firmware/get_throttled", flags)
    reading, status = throttle_status(board)
    assert (reading.value == 1.0) is now and (status.severity == Severity.HARD) is now, (flags, reading)
    if now:
        assert reading.detail.startswith("Pi firmware: ")


def test_x86_throttle_counters_rising_are_throttling_for_hold_s(tmp_path):
    """The count since boot is history (baseline); a rise is throttling, held for hold_s after it."""
    t = [100.0]
    for cpu in ("cpu0", "cpu1"):
        write(tmp_path / f"devices/system/cpu/{cpu}/thermal_throttle/core_throttle_count", "12")
        write(tmp_path / f"devices/system/cpu/{cpu}/thermal_throttle/package_throttle_count", "3")
    probe = ThrottleProbe(tmp_path, hold_s=5.0, clock=lambda: t[0])
    assert probe.read().value == 0.0  # 12 events since boot: not throttling now
    t[0] += 1.0
    assert probe.read().value == 0.0
    write(tmp_path / "devices/system/cpu/cpu1/thermal_throttle/core_throttle_count", "13")
    t[0] += 1.0
    reading, status = throttle_status(tmp_path, probe)
    assert reading.value == 1.0 and "cpu1 core_throttle_count rose to 13" in reading.detail
    t[0] += 4.9
    assert probe.read().value == 1.0  # still within hold_s of the rise
    t[0] += 0.2
    assert probe.read().value == 0.0  # quiet for longer than hold_s
