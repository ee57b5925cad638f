"""The demo's recorder: a node in `lowrl demo`'s own process that listens to what the session summary
reports (episode returns, per-inference latency, the policy node's stats and version, the compute tier,
the budget monitor's CPU-load and miss-rate signals, the fine-tuner's learner state) and appends it to
the session directory's CSV logs (lowrl_ros/core/session/files.py names and reads them). `lowrl sim2sim`
uses it too, keeping every step row and the sim robot's truth rows (``keep_rows``, ``truth_topic``).
It spins its own executor on a thread, in a context of its own, so the demo's main thread only waits.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from std_msgs.msg import Float64, Float64MultiArray, UInt8

from lowrl_ros.core.runtime.step_row import peek_version
from lowrl_ros.core.session import files as sr
from lowrl_ros.ros.qos import LATCHED, RECORD, STATS

BUDGET_PREFIX = "lowrl/budget/"  # budget_monitor_node's diagnostics (core.budget.monitor.budget_status)
LEARNER_STATUS = "lowrl/finetune/learner"  # the fine-tuner's learner state (core.finetune.status.finetune_status)


class Recorder:
    """Subscribes to what the summary reports; runs its own executor on a thread."""

    def __init__(self, session_dir: Path | None = None, keep_rows: bool = False, truth_topic: str = "") -> None:
        self.context = rclpy.Context()
        # Ctrl-C stays a plain KeyboardInterrupt: the demo then stops the nodes and still reports.
        rclpy.init(context=self.context, signal_handler_options=SignalHandlerOptions.NO)
        self.node = Node("lowrl_demo_recorder", context=self.context)
        self.returns: list[float] = []
        self.latencies_us: list[float] = []
        self.stats: list[float] | None = None
        self.tiers: list[int] = []  # from the budget monitor, when the launch file runs one
        self._logs: dict[str, object] = {}
        if session_dir is not None:  # the session report's inputs (lowrl_ros/core/session/files.py)
            self._logs = {"latency": sr.CsvLog(session_dir / sr.LATENCY_CSV, sr.LATENCY_FIELDS),
                          "stats": sr.CsvLog(session_dir / sr.POLICY_STATS_CSV, sr.STATS_CSV_FIELDS),
                          "tier": sr.CsvLog(session_dir / sr.TIERS_CSV, sr.TIER_FIELDS),
                          "version": sr.CsvLog(session_dir / sr.SWAPS_CSV, sr.SWAP_FIELDS),
                          "budget": sr.CsvLog(session_dir / sr.BUDGET_CSV, sr.BUDGET_FIELDS),
                          "learner": sr.CsvLog(session_dir / sr.LEARNER_CSV, sr.LEARNER_FIELDS)}
        self.learner_states: list[str] = []  # the fine-tuner's learner state, one per diagnostics message
        self.version: int | None = None
        self.node.create_subscription(Float64, "/lowrl/episode_return", lambda m: self.returns.append(m.data), STATS)
        self.node.create_subscription(Float64, "/lowrl/policy/latency_us", self._on_latency, STATS)
        self.node.create_subscription(Float64MultiArray, "/lowrl/policy/stats", self._on_stats, STATS)
        self.node.create_subscription(UInt8, "/lowrl/compute_tier", self._on_tier, LATCHED)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 50)
        self.node.create_subscription(Float64MultiArray, "/lowrl/policy/step", self._on_step, RECORD)
        self.keep_rows = keep_rows
        self.step_rows: list[list[float]] = []  # keep_rows: every step row's values, in arrival order
        self.truth_rows: list[list[float]] = []  # the sim robot's TrueState rows (core/sim/sim_robot.py)
        if truth_topic:
            self.node.create_subscription(Float64MultiArray, truth_topic,
                                          lambda m: self.truth_rows.append(list(m.data)), RECORD)
        self._executor = SingleThreadedExecutor(context=self.context)
        self._executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _log(self, name: str, row: list) -> None:
        log = self._logs.get(name)
        if log is not None:
            log.append([f"{time.time():.4f}"] + row)

    def _on_latency(self, msg) -> None:
        self.latencies_us.append(msg.data)
        self._log("latency", [f"{msg.data:.2f}"])

    def _on_stats(self, msg) -> None:
        self.stats = list(msg.data)
        self._log("stats", [f"{v:g}" for v in msg.data])

    def _on_diagnostics(self, msg) -> None:
        budget: dict[str, str] = {}
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if status.name.startswith(BUDGET_PREFIX):
                budget[status.name[len(BUDGET_PREFIX):]] = values.get("value", "")
                if status.name == BUDGET_PREFIX + "tier":
                    budget["wanted"] = values.get("wanted", "")
            elif status.name == LEARNER_STATUS:
                self.learner_states.append(values.get("state", ""))
                self._log("learner", [values.get("state", ""), values.get("updates") or "nan"])
        if budget:  # the budget monitor's own view, at its diagnostics period (1 s): what the tier follows
            self._log("budget", [budget.get("cpu_load") or "nan", budget.get("deadline_miss_rate") or "nan",
                                 budget.get("latency_p99") or "nan", budget.get("wanted", "")])

    def _on_step(self, msg) -> None:
        """The running version, from the step row the policy node publishes each tick (a swap shows at once)."""
        if self.keep_rows:
            self.step_rows.append(list(msg.data))
        version = peek_version(msg.data)
        if version and version != self.version:
            self.version = version
            self._log("version", [version])

    def _on_tier(self, msg) -> None:
        self.tiers.append(msg.data)
        self._log("tier", [msg.data])

    def _spin(self) -> None:
        while not self._stop.is_set():
            self._executor.spin_once(timeout_sec=0.1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self._executor.shutdown()
        self.node.destroy_node()
        self.context.shutdown()
        for log in self._logs.values():
            log.close()
