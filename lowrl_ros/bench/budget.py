"""budget monitor: own CPU use, reaction time to a breach, deadline misses under CPU burners.

Also home of the real load generators the budget tests share (a CPU burner, a memory hog) and
of ``StandInPolicy``, a small policy-shaped rclpy process (real numpy MLP inference at a control
period, tiers applied, /lowrl/policy/stats per the contract) used where engineer B's policy node
is not available. Every figure names which policy process produced it.

Method: phases are interleaved (monitor / no monitor, 10 Hz / 100 Hz, repeated), because this
machine's speed drifts by up to 1.7x for seconds at a time; results are ratios within one run.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]


# --- load generators (real processes) ---------------------------------------------------------
class CpuBurner:
    """A busy-looping subprocess, optionally pinned to one core (the policy's core)."""

    def __init__(self, core: int | None = None) -> None:
        pin = f"os.sched_setaffinity(0, {{{core}}})\n" if core is not None else ""
        code = f"import os\n{pin}while True:\n    pass\n"
        self.proc = subprocess.Popen([sys.executable, "-c", code])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def __enter__(self) -> "CpuBurner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_HOG_CODE = """\
import sys
held = []
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd and cmd[0] == "alloc":
        # bytearray(b"\\x01") * n writes every page, so the memory is really resident.
        held.append(bytearray(b"\\x01") * int(float(cmd[1]) * 1e6))
    elif cmd and cmd[0] == "free":
        held.clear()
    print("ok", flush=True)
"""


class MemoryHog:
    """A subprocess that allocates and frees resident memory on command.

    It runs as a script named ``name`` (so the budget monitor can find it by name, as it finds
    ``finetune_node``); ``pid`` is there for the by-pid probe.
    """

    def __init__(self, name: str = "lowrl_memhog.py", directory: Path | None = None) -> None:
        self._dir = Path(directory or tempfile.mkdtemp(prefix="lowrl_hog_"))
        script = self._dir / name
        script.write_text(_HOG_CODE)
        self.proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self._expect("ready")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_mb(self) -> float:
        return psutil.Process(self.pid).memory_info().rss / 1e6

    def _expect(self, word: str) -> None:
        line = self.proc.stdout.readline().strip()
        if line != word:
            raise RuntimeError(f"memory hog said {line!r}, expected {word!r}")

    def alloc(self, mb: float) -> None:
        self.proc.stdin.write(f"alloc {mb}\n")
        self.proc.stdin.flush()
        self._expect("ok")

    def free(self) -> None:
        self.proc.stdin.write("free\n")
        self.proc.stdin.flush()
        self._expect("ok")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def __enter__(self) -> "MemoryHog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- a policy-shaped process for when engineer B's policy node is not there -------------------
STAND_IN_CODE = textwrap.dedent("""\
    # Stand-in for policy_node (engineer B's): real MLP inference in numpy at a control period,
    # tiers applied (full: `work` forward passes; lite: a quarter; decimated: lite every 4th tick,
    # the last action held in between; safe: zeros), stats on /lowrl/policy/stats per the contract.
    # A tick misses its deadline when its inference takes longer than the deadline.
    import os, sys, time, json
    import numpy as np
    import rclpy
    from std_msgs.msg import Float64MultiArray, UInt8
    from lowrl_ros.ros.qos import LATCHED, STATS, CONTROL
    cfg = json.loads(sys.argv[1])
    os.nice(cfg.get("nice", 0))
    if cfg.get("core") is not None:
        os.sched_setaffinity(0, {cfg["core"]})
    rng = np.random.default_rng(0)
    layers = [(rng.standard_normal((256, 17)) * 0.1, rng.standard_normal((256, 256)) * 0.06,
               rng.standard_normal((6, 256)) * 0.06)]
    obs = rng.standard_normal(17)
    def forward():
        w1, w2, w3 = layers[0]
        return np.tanh(w3 @ np.maximum(w2 @ np.maximum(w1 @ obs, 0), 0))
    rclpy.init()
    node = rclpy.create_node("stand_in_policy")
    tier = [0]
    node.create_subscription(UInt8, "/lowrl/compute_tier", lambda m: tier.__setitem__(0, int(m.data)), LATCHED)
    stats_pub = node.create_publisher(Float64MultiArray, "/lowrl/policy/stats", STATS)
    cmd_pub = node.create_publisher(Float64MultiArray, cfg.get("commands", "/forward_command_controller/commands"), CONTROL)
    lat, misses, ticks, action = [], 0, 0, np.zeros(6)
    period_us, deadline_us = cfg["period_ms"] * 1e3, cfg["deadline_ms"] * 1e3
    def tick():
        global misses, ticks, action
        t0 = time.perf_counter()
        t, n = tier[0], 0
        if t == 0:
            n = cfg["work"]
        elif t == 1 or (t == 2 and ticks % 4 == 0):
            n = max(1, cfg["work"] // 4)
        for _ in range(n):
            action = forward()
        if t == 3:
            action = np.zeros(6)
        us = (time.perf_counter() - t0) * 1e6
        cmd_pub.publish(Float64MultiArray(data=[float(x) for x in action] + [float(t)]))
        ticks += 1
        if n:
            lat.append(us)
            del lat[:-50]  # about a second of inference samples
        misses += us > deadline_us
    def stats():
        w = np.array(lat) if lat else np.zeros(1)
        stats_pub.publish(Float64MultiArray(data=[float(np.percentile(w, 50)), float(np.percentile(w, 99)),
            float(misses), float(ticks), period_us, deadline_us, float(tier[0]), float(os.getpid())]))
    node.create_timer(cfg["period_ms"] / 1e3, tick)
    node.create_timer(0.1, stats)
    try:
        rclpy.spin(node)
    except BaseException:
        pass
""")


class StandInPolicy:
    """Runs STAND_IN_CODE as a subprocess (real rclpy node, real inference work)."""

    def __init__(self, period_ms: float = 10.0, deadline_ms: float = 5.0, work: int = 4,
                 core: int | None = None, commands: str = "/forward_command_controller/commands",
                 nice: int = 0) -> None:
        cfg = {"period_ms": period_ms, "deadline_ms": deadline_ms, "work": work, "core": core, "commands": commands,
               "nice": nice}
        env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        self.proc = subprocess.Popen([sys.executable, "-c", STAND_IN_CODE, json.dumps(cfg)], env=env)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        stop_process(self.proc)

    def __enter__(self) -> "StandInPolicy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGINT (a ROS node shuts down cleanly), then SIGKILL if it does not end in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


def start_monitor(params: dict[str, Any]) -> subprocess.Popen:
    """budget_monitor_node as its own process, with ``-p name:=value`` overrides."""
    args = [sys.executable, "-m", "lowrl_ros.ros.budget_monitor_node", "--ros-args"]
    for k, v in params.items():
        if isinstance(v, (list, tuple)):
            v = "[" + ",".join(json.dumps(x) for x in v) + "]"
        elif isinstance(v, str):
            v = json.dumps(v)
        args += ["-p", f"{k}:={v}"]
    return subprocess.Popen(args, env=dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"))


# --- the benchmark ----------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each measured phase")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats of each phase")


def run(args: argparse.Namespace) -> int:
    raise SystemExit("not implemented yet")
