"""budget monitor: own CPU use, reaction time to a breach, deadline misses under CPU burners.

Policy processes: the project's policy_node (lowrl_ros/ros/policy_node.py, fixed rate, the
shipped Pendulum int8 model, observations published by the bench), and ``StandInPolicy``, a
policy-shaped rclpy process whose per-tick work (numpy MLP forward passes) can be sized so that
inference time, not only wake-up latency, is what a burner delays. Every figure names which one
produced it. This module also holds the real load generators the budget tests share (a CPU
burner, a memory hog).

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

import numpy as np
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


# --- a policy-shaped process whose per-tick cost is inference (docs/budget.md, "Benchmark: `lowrl bench budget`")
STAND_IN_CODE = textwrap.dedent("""\
    # Stand-in for policy_node: real MLP inference in numpy at a control period,
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
    cmd_pub = node.create_publisher(Float64MultiArray, cfg["commands"], CONTROL)
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
        cmd_pub.publish(Float64MultiArray(data=[float(x) for x in action]))
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
        self.proc = subprocess.Popen([sys.executable, "-c", STAND_IN_CODE, json.dumps(cfg)], env=_env())

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        stop_process(self.proc)

    def __enter__(self) -> "StandInPolicy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PolicyNodeProcess:
    """The project's policy_node (lowrl_ros/ros/policy_node.py) as a real process: fixed rate,
    observations on /lowrl/observation (the caller publishes them), commands on
    ``/<controller>/commands``, safe action zero. Optionally pinned to a core and niced."""

    MODEL = REPO / "models" / "pendulum_sac_int8.onnx"  # shipped: 3 observations -> 1 action

    def __init__(self, period_ms: float = 10.0, controller: str = "lowrl_bench", core: int | None = None,
                 nice: int = 0, model: Path | None = None) -> None:
        params = {"policy_path": str(model or self.MODEL), "input": "observation", "mode": "fixed_rate",
                  "control_period_s": period_ms / 1e3, "controller_name": controller, "safe_action": "zero",
                  "soft_start_steps": 0, "watchdog_timeout_s": 0.5}
        args = [sys.executable, "-m", "lowrl_ros.ros.policy_node", "--ros-args"]
        for k, v in params.items():
            args += ["-p", f"{k}:={v}"]

        def place() -> None:  # runs in the child before exec
            if nice:
                os.nice(nice)
            if core is not None:
                os.sched_setaffinity(0, {core})

        self.proc = subprocess.Popen(args, env=_env(), preexec_fn=place)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        stop_process(self.proc)

    def __enter__(self) -> "PolicyNodeProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def policy_node_available() -> bool:
    return (REPO / "lowrl_ros" / "ros" / "policy_node.py").is_file() and PolicyNodeProcess.MODEL.is_file()


def start_policy(kind: str, *, period_ms: float, commands_ns: str, core: int | None = None, nice: int = 0,
                 work: int = 4) -> "PolicyNodeProcess | StandInPolicy":
    """``kind`` "policy_node" or "stand-in" (docs/budget.md, "Benchmark"); commands on ``/<commands_ns>/commands``."""
    if kind == "policy_node":
        return PolicyNodeProcess(period_ms=period_ms, controller=commands_ns, core=core, nice=nice)
    return StandInPolicy(period_ms=period_ms, deadline_ms=period_ms / 2, work=work, core=core, nice=nice,
                         commands=f"/{commands_ns}/commands")


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGINT (a ROS node shuts down cleanly), then SIGKILL if it does not end in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


def start_monitor(params: dict[str, Any], params_file: Path | None = None) -> subprocess.Popen:
    """budget_monitor_node as its own process: a params file, then ``-p name:=value`` overrides."""
    args = [sys.executable, "-m", "lowrl_ros.ros.budget_monitor_node", "--ros-args"]
    if params_file is not None:
        args += ["--params-file", str(params_file)]
    for k, v in params.items():
        if isinstance(v, (list, tuple)):
            v = "[" + ",".join(json.dumps(x) for x in v) + "]"
        elif isinstance(v, str):
            v = json.dumps(v)
        args += ["-p", f"{k}:={v}"]
    return subprocess.Popen(args, env=_env())


# --- the benchmark ----------------------------------------------------------------------------
IDLE_NODE_CODE = textwrap.dedent("""\
    # Baseline for the monitor's CPU use: an rclpy node that only spins (no timers, no probes).
    import rclpy
    rclpy.init()
    node = rclpy.create_node("idle_baseline")
    try:
        rclpy.spin(node)
    except BaseException:
        pass
""")


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


def _cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def measure_cpu(proc: subprocess.Popen, warmup_s: float, seconds: float) -> float:
    """% of one core a process uses over ``seconds``, after ``warmup_s`` (imports, discovery)."""
    time.sleep(warmup_s)
    c0, t0 = _cpu_seconds(proc.pid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = _cpu_seconds(proc.pid), time.monotonic()
    return 100.0 * (c1 - c0) / (t1 - t0)


class _Watcher:
    """A bench-side rclpy node: tier messages, policy stats and commands, with arrival times."""

    def __init__(self, commands: str, observe_hz: float = 0.0) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from std_msgs.msg import Float32MultiArray, Float64MultiArray, UInt8

        from lowrl_ros.ros.qos import CONTROL, LATCHED, STATS

        self.rclpy = rclpy
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node("budget_bench", context=self.ctx)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.tiers: list[tuple[float, int]] = []
        self.commands: list[tuple[float, tuple[float, ...]]] = []
        self.stats: list[float] | None = None
        self.pid: int | None = None  # only stats from this policy process count
        self.first_applied: list[float] | None = None  # stats when a tier other than full first showed
        self.node.create_subscription(UInt8, "/lowrl/compute_tier",
                                      lambda m: self.tiers.append((time.monotonic(), m.data)), LATCHED)
        self.node.create_subscription(Float64MultiArray, "/lowrl/policy/stats", self._on_stats, STATS)
        self.node.create_subscription(Float64MultiArray, commands, self._on_command, CONTROL)
        if observe_hz > 0:  # a pendulum swinging slowly, for policy_node's /lowrl/observation input
            obs_pub = self.node.create_publisher(Float32MultiArray, "/lowrl/observation", CONTROL)

            def observe() -> None:
                theta = 0.5 * time.monotonic()
                obs_pub.publish(Float32MultiArray(data=[float(np.cos(theta)), float(np.sin(theta)), 0.3]))

            self.node.create_timer(1.0 / observe_hz, observe)

    def _on_stats(self, msg) -> None:
        data = list(msg.data)
        if self.pid is not None and int(data[7]) != self.pid:
            return  # a late message of the previous policy process
        self.stats = data
        if self.first_applied is None and data[6] != 0:
            self.first_applied = data

    def _on_command(self, msg) -> None:
        self.commands.append((time.monotonic(), tuple(msg.data)))
        del self.commands[:-2000]

    def spin(self, seconds: float, until=None) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if until is not None and until():
                return True
            self.executor.spin_once(timeout_sec=0.005)
        return bool(until and until())

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.rclpy.try_shutdown(context=self.ctx)


def bench_cpu(seconds: float, repeats: int, params_file: Path) -> dict[str, Any]:
    """Monitor process CPU at 10 Hz and 100 Hz (shipped config) vs an idle rclpy node, interleaved."""
    samples: dict[str, list[float]] = {"monitor_10hz": [], "monitor_100hz": [], "idle_rclpy_node": []}
    with StandInPolicy(period_ms=10.0, deadline_ms=5.0, work=4):  # stats flowing, as on a robot
        for _ in range(repeats):
            for label in samples:
                if label == "idle_rclpy_node":
                    proc = subprocess.Popen([sys.executable, "-c", IDLE_NODE_CODE], env=_env())
                else:
                    rate = 10.0 if label == "monitor_10hz" else 100.0
                    proc = start_monitor({"sample_rate_hz": rate}, params_file)
                try:
                    samples[label].append(measure_cpu(proc, 3.0, seconds))
                finally:
                    stop_process(proc)
    med = {k: sorted(v)[len(v) // 2] for k, v in samples.items()}
    return {"samples_pct_of_one_core": samples, "median_pct_of_one_core": med,
            "monitor_10hz_minus_idle_pct": med["monitor_10hz"] - med["idle_rclpy_node"],
            "monitor_100hz_minus_idle_pct": med["monitor_100hz"] - med["idle_rclpy_node"]}


def bench_reaction(trials: int, tmp: Path, kind: str) -> dict[str, Any]:
    """Breach (temperature file past the hard limit) -> SAFE published -> safe action applied.

    The policy's first all-zero command after the tier message is the tier applied; both arrive
    at this process over the same DDS path, so their difference is the policy's own delay.
    """
    temp = tmp / "temp"
    temp.write_text("40000")
    period_ms = 10.0
    watcher = _Watcher("/lowrl_bench/commands", observe_hz=1e3 / period_ms)
    policy = start_policy(kind, period_ms=period_ms, commands_ns="lowrl_bench")
    monitor = start_monitor({"temperature_source": "file", "temperature_file": str(temp), "sample_rate_hz": 10.0,
                             "escalate_after": 3, "recover_dwell_s": 0.3, "cpu_load_limit_pct": 0.0,
                             "publish_period_s": 1.0})
    detect, applied = [], []
    try:
        if not watcher.spin(30.0, lambda: watcher.tiers and watcher.tiers[-1][1] == 0 and len(watcher.commands) > 10):
            raise RuntimeError("monitor or policy did not come up within 30 s")
        for _ in range(trials):
            n_tiers = len(watcher.tiers)
            t_breach = time.monotonic()
            temp.write_text("95000")
            if not watcher.spin(10.0, lambda: any(v == 3 for _, v in watcher.tiers[n_tiers:])):
                raise RuntimeError("no SAFE tier within 10 s of the breach")
            t_tier = next(t for t, v in watcher.tiers[n_tiers:] if v == 3)
            watcher.spin(0.5)
            t_safe = next((t for t, c in watcher.commands if t >= t_tier and c and not any(c)), None)
            if t_safe is None:
                raise RuntimeError("the policy did not apply the safe action within 0.5 s")
            detect.append(t_tier - t_breach)
            applied.append(t_safe - t_tier)
            temp.write_text("40000")
            watcher.spin(20.0, lambda: watcher.tiers and watcher.tiers[-1][1] == 0)
            watcher.spin(0.3)
    finally:
        stop_process(monitor)
        policy.stop()
        watcher.close()
    periods = [a * 1e3 / period_ms for a in applied]
    return {"control_period_ms": period_ms, "breach_to_tier_published_s": detect,
            "tier_published_to_applied_ms": [a * 1e3 for a in applied],
            "tier_published_to_applied_periods": periods, "max_periods": max(periods),
            "note": "detection takes escalate_after samples (3 at 10 Hz) by design"}


def bench_misses(seconds: float, repeats: int, params_file: Path, kind: str) -> dict[str, Any]:
    """Deadline misses of a 100 Hz policy under two burners on its core, without / with the monitor.

    Each phase starts a fresh policy process (so it starts on the full tier) pinned to core 0 at
    nice 10, two burners (nice 0) on the same core, and counts misses over ``seconds``; with the
    monitor, it runs the shipped config and the window includes its reaction.
    """
    out: dict[str, list[dict[str, float]]] = {"without_monitor": [], "with_monitor": []}
    watcher = _Watcher("/lowrl_bench/commands", observe_hz=100.0)
    try:
        for _ in range(repeats):
            for label in out:
                policy = start_policy(kind, period_ms=10.0, commands_ns="lowrl_bench", core=0, nice=10, work=100)
                monitor = start_monitor({}, params_file) if label == "with_monitor" else None
                try:
                    watcher.stats, watcher.first_applied, watcher.pid = None, None, policy.pid
                    ok = watcher.spin(30.0, lambda: watcher.stats is not None and watcher.stats[3] > 100
                                      and (monitor is None or bool(watcher.tiers)))
                    if not ok:
                        raise RuntimeError("policy (or monitor) did not come up within 30 s")
                    m0, k0 = watcher.stats[2], watcher.stats[3]
                    with CpuBurner(0), CpuBurner(0):
                        watcher.spin(seconds)
                    watcher.spin(0.3)  # the last stats of the phase (the policy was starved)
                    m1, k1 = watcher.stats[2], watcher.stats[3]
                    phase = {"misses": m1 - m0, "ticks": k1 - k0, "final_tier": watcher.stats[6],
                             "miss_rate": (m1 - m0) / max(k1 - k0, 1.0)}
                    if watcher.first_applied is not None:  # split: reaction transient / after it
                        phase["misses_before_tier_applied"] = watcher.first_applied[2] - m0
                        phase["misses_after_tier_applied"] = m1 - watcher.first_applied[2]
                    out[label].append(phase)
                finally:
                    if monitor is not None:
                        stop_process(monitor)
                    policy.stop()
                    watcher.tiers.clear()
    finally:
        watcher.close()
    total = {k: sum(p["misses"] for p in v) for k, v in out.items()}
    after = sum(p.get("misses_after_tier_applied", p["misses"]) for p in out["with_monitor"])
    return {"phases": out, "total_misses": total,
            "ratio_with_over_without": total["with_monitor"] / max(total["without_monitor"], 1.0),
            "ratio_after_tier_applied_over_without": after / max(total["without_monitor"], 1.0)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each measured phase (s)")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats of each phase")
    parser.add_argument("--trials", type=int, default=5, help="breaches for the reaction time")
    parser.add_argument("--params-file", type=Path, default=REPO / "config" / "budget_monitor.yaml",
                        help="budget monitor parameters (the shipped config by default)")
    parser.add_argument("--only", choices=("cpu", "reaction", "misses"), action="append",
                        help="run only these parts (repeatable)")
    parser.add_argument("--policy", choices=("auto", "policy_node", "stand-in"), default="auto",
                        help="policy process for reaction and misses: the project's policy_node, the stand-in "
                             "(numpy MLP work per tick), or auto: both (policy_node only where present)")
    parser.add_argument("--ladder", action="store_true",
                        help="instead: the legged robot walking under 2 CPU burners for --seconds, with its fallback "
                             "ladder, with the old decimation and without the monitor, against the unloaded walk "
                             "(lowrl_ros/bench/budget_ladder.py; docs/budget.md)")


def headline(r: dict) -> str:
    """The bench_results headline: what the monitor costs at 10 Hz above an idle machine."""
    return f"monitor at 10 Hz: {r['cpu']['monitor_10hz_minus_idle_pct']:.2f} % of a core above idle"


def run(args: argparse.Namespace) -> int:
    from lowrl_ros.bench import record

    setting = record.setting_of(args, add_arguments, skip=("params_file",))
    try:  # a result of another command there: refused before the measurement, not after
        record.check_free(record.result_path("budget", setting=setting), record.command_line())
    except record.ResultExists as exc:
        print(f"lowrl bench budget: {exc}", file=sys.stderr)
        return 2

    if not args.params_file.is_file():
        print(f"error: --params-file {args.params_file} does not exist; pass the budget_monitor.yaml to use",
              file=sys.stderr)
        return 2
    if args.seconds <= 0 or args.repeats < 1 or args.trials < 1:
        print("error: --seconds must be > 0, --repeats and --trials >= 1", file=sys.stderr)
        return 2
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_LOCALHOST_ONLY", "1")
    if args.ladder:
        from lowrl_ros.bench.budget_ladder import bench_ladder, markdown

        r = bench_ladder(args.seconds)
        md = markdown(r)
        lad = r["arms"]["ladder"]
        path = record.write_result("budget", r, "\n".join(md), setting=setting, headline=(
            f"legged under 2 burners: ladder tracking {lad['tracking_pct_of_unloaded']:.1f} % of unloaded, "
            f"{lad['falls']} falls, {lad['deadline_misses']} misses"))
        print("\n".join(md))
        print(f"results: {path}")
        return 0
    parts = args.only or ["cpu", "reaction", "misses"]
    if args.policy == "auto":
        kinds = ["policy_node", "stand-in"] if policy_node_available() else ["stand-in"]
    else:
        kinds = [args.policy]
    names = {"policy_node": f"policy_node (lowrl_ros/ros/policy_node.py, fixed_rate, {PolicyNodeProcess.MODEL.name})",
             "stand-in": "stand-in (lowrl_ros.bench.budget.StandInPolicy: numpy 17-256-256-6 MLP x work per tick)"}
    results: dict[str, Any] = {"policy_processes": [names[k] for k in kinds]}
    md = [f"Policy processes: {'; '.join(results['policy_processes'])}.", ""]
    if "cpu" in parts:
        r = results["cpu"] = bench_cpu(args.seconds, args.repeats, args.params_file)
        m = r["median_pct_of_one_core"]
        md += ["## Monitor CPU use (% of one core, median of interleaved runs)", "",
               "| process | % of one core |", "|---|---|",
               *[f"| {k} | {v:.2f} |" for k, v in m.items()],
               "", f"Monitor above an idle rclpy node: {r['monitor_10hz_minus_idle_pct']:.2f} % at 10 Hz, "
               f"{r['monitor_100hz_minus_idle_pct']:.2f} % at 100 Hz (target at 10 Hz: <= 1 %).", ""]
    for kind in kinds:
        if "reaction" in parts:
            with tempfile.TemporaryDirectory() as tmp:
                r = results[f"reaction/{kind}"] = bench_reaction(args.trials, Path(tmp), kind)
            md += [f"## Reaction, {names[kind]}", "",
                   f"Breach -> SAFE published: {', '.join(f'{x * 1e3:.0f}' for x in r['breach_to_tier_published_s'])}"
                   " ms (escalate_after samples by design).",
                   f"SAFE published -> applied in the policy: "
                   f"{', '.join(f'{x:.2f}' for x in r['tier_published_to_applied_periods'])} control periods "
                   f"of {r['control_period_ms']:g} ms (target <= 2).", ""]
        if "misses" in parts:
            r = results[f"misses/{kind}"] = bench_misses(args.seconds, args.repeats, args.params_file, kind)
            md += [f"## Deadline misses, 100 Hz, two burners on the policy's core, {args.seconds:g} s phases, "
                   f"{names[kind]}", "",
                   "| phase | misses | of which before the tier was applied | ticks | final tier |",
                   "|---|---|---|---|---|"]
            for label, phases in r["phases"].items():
                md += [f"| {label} | {p['misses']:.0f} | {p.get('misses_before_tier_applied', '')} "
                       f"| {p['ticks']:.0f} | {p['final_tier']:.0f} |" for p in phases]
            md += ["", f"Misses with the monitor / without: {r['ratio_with_over_without']:.3f} (target <= 0.1); "
                   f"only misses after the tier was applied: {r['ratio_after_tier_applied_over_without']:.3f}.", ""]
    path = record.write_result("budget", results, "\n".join(md), setting=setting)
    print("\n".join(md))
    print(f"results: {path}")
    return 0
