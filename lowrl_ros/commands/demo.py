"""`lowrl demo` (what `make demo` runs): a simulated Pendulum robot driven by the shipped policy.

Runs launch/demo.launch.yaml through the project's launcher (sim robot + policy node, each its own
process, talking over DDS) for ``--seconds``, while a recorder node in this process listens to
the episode returns, the per-inference latency and the policy node's stats; then prints a summary
of those figures. Nothing in the summary is computed anywhere but from those messages.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from lowrl_ros.launcher import Launcher, LaunchError, package_share, parse_launch, PACKAGE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to run (default 20)")
    parser.add_argument("--policy", default=None, help="artifact or bundle to run (default: the shipped "
                        "models/pendulum_sac.lowrl)")
    parser.add_argument("--log-dir", type=Path, default=None, help="per-node logs (default under ~/.ros/log)")
    parser.add_argument("--quiet", action="store_true", help="do not echo the nodes' output")


class Recorder:
    """Subscribes to what the summary reports; runs its own executor on a thread."""

    def __init__(self) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from std_msgs.msg import Float64, Float64MultiArray, UInt8

        from lowrl_ros.ros.qos import LATCHED, STATS

        from rclpy.signals import SignalHandlerOptions

        self.context = rclpy.Context()
        # Ctrl-C stays a plain KeyboardInterrupt: the demo then stops the nodes and still reports.
        rclpy.init(context=self.context, signal_handler_options=SignalHandlerOptions.NO)
        self.node = Node("lowrl_demo_recorder", context=self.context)
        self.returns: list[float] = []
        self.latencies_us: list[float] = []
        self.stats: list[float] | None = None
        self.tiers: list[int] = []  # from the budget monitor, when the launch file runs one
        self.node.create_subscription(Float64, "/lowrl/episode_return", lambda m: self.returns.append(m.data), STATS)
        self.node.create_subscription(Float64, "/lowrl/policy/latency_us",
                                      lambda m: self.latencies_us.append(m.data), STATS)
        self.node.create_subscription(Float64MultiArray, "/lowrl/policy/stats",
                                      lambda m: setattr(self, "stats", list(m.data)), STATS)
        self.node.create_subscription(UInt8, "/lowrl/compute_tier", lambda m: self.tiers.append(m.data), LATCHED)
        self._executor = SingleThreadedExecutor(context=self.context)
        self._executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            self._executor.spin_once(timeout_sec=0.1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self._executor.shutdown()
        self.node.destroy_node()
        self.context.shutdown()


def summary(rec: Recorder, seconds: float) -> str:
    from lowrl_ros.core.policy_stats import PolicyStats
    from lowrl_ros.core.tiers import ComputeTier

    lines = [f"lowrl demo: Pendulum-v1 sim robot + policy node over ROS 2, {seconds:.0f} s"]
    if rec.returns:
        lines.append(f"  episodes finished: {len(rec.returns)}, mean return {np.mean(rec.returns):.1f} "
                     f"(last {rec.returns[-1]:.1f}; Pendulum-v1: 0 is best)")
    else:
        lines.append("  episodes finished: 0 (run longer: --seconds 30)")
    if rec.latencies_us:
        p50, p99 = np.percentile(rec.latencies_us, [50, 99])
        lines.append(f"  inference latency over {len(rec.latencies_us)} calls: p50 {p50:.1f} us, p99 {p99:.1f} us")
    if rec.stats is not None:
        s = PolicyStats.from_list(rec.stats)
        lines.append(f"  control ticks {int(s.ticks)}, deadline misses {int(s.deadline_misses)} "
                     f"(deadline {s.deadline_us / 1000:.1f} ms), compute tier now {ComputeTier(int(s.tier)).label}")
    if rec.tiers:
        changes = sum(1 for a, b in zip(rec.tiers, rec.tiers[1:]) if a != b)
        lines.append(f"  budget monitor: {changes} tier changes published, tiers seen: "
                     f"{', '.join(ComputeTier(t).label for t in sorted(set(rec.tiers)))}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    overrides = {"policy_path": str(Path(args.policy).resolve())} if args.policy else {}
    try:
        nodes = parse_launch(package_share(PACKAGE) / "launch" / "demo.launch.yaml", overrides)
    except LaunchError as exc:
        print(f"lowrl demo: {exc}", file=sys.stderr)
        return 2
    rec = Recorder()
    launcher = Launcher(nodes, args.log_dir, console=None if args.quiet else sys.stdout)
    died: dict[str, int] = {}
    started = time.monotonic()
    try:
        launcher.start()
        print(f"lowrl demo: running for {args.seconds:.0f} s (logs in {launcher.log_dir}) ...", flush=True)
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            died = launcher.exited()
            if died:
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        print("lowrl demo: interrupted, stopping the nodes", flush=True)
    finally:
        elapsed = time.monotonic() - started
        launcher.shutdown()
        time.sleep(0.2)  # let the last messages reach the recorder
        rec.close()
    if died:
        print(f"lowrl demo: node(s) {', '.join(died)} stopped early; see the logs in {launcher.log_dir}",
              file=sys.stderr)
        return 1
    print(summary(rec, elapsed))
    return 0 if rec.latencies_us else 1
