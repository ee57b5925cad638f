"""budget_monitor_node: enforce the robot computer's budget by picking the policy's compute tier.

Samples its probes (lowrl_ros.core.budget.probes) at ``sample_rate_hz``, reads the policy node's
``/lowrl/policy/stats``, decides with lowrl_ros.core.budget.monitor.BudgetMonitor, and publishes

- ``/lowrl/compute_tier`` std_msgs/UInt8 (ComputeTier), LATCHED QoS: on every change and every
  ``publish_period_s``, so a restarted policy node gets the current tier at once;
- ``/diagnostics``: one status per signal under ``lowrl/budget/...`` plus ``lowrl/budget/tier``,
  every ``publish_period_s`` and at once on a tier change.

Topic names are relative: in a namespace (robot.launch.yaml namespace:=r1) they are /r1/lowrl/...,
and the diagnostics carry the namespace in their names (r1/lowrl/budget/...).

Every ROS parameter is a BudgetConfig field, with ranges for rqt_reconfigure; a change is
validated by building a new BudgetConfig, and rejected with its error message if it does not
build. This module never imports torch (the on-robot memory budget).
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.exceptions import ParameterException
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from std_msgs.msg import Float64MultiArray, UInt8

from lowrl_ros.core.budget.monitor import Assessment, BudgetConfig, BudgetMonitor, budget_status
from lowrl_ros.core.budget.probes import ProbeSet
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.ros import diagnostics as diag
from lowrl_ros.ros.params import add_post_set_callback, config_from_params, declare_config
from lowrl_ros.ros.qos import LATCHED, STATS
from lowrl_ros.ros.spinning import exit_with_launcher

NODE_NAME = "budget_monitor"
TIER_TOPIC = "lowrl/compute_tier"  # relative: a robot in a namespace has its own
STATS_TOPIC = "lowrl/policy/stats"
DIAG_PREFIX = "lowrl/budget"

# Changing these rebuilds the probes (rates are read by the sampler at every sample).
_PROBE_FIELDS = {"process_names", "temperature_source", "temperature_file", "ambient_c", "thermal_rise_c",
                 "thermal_time_constant_s", "cpu_load_window_s"}




class BudgetMonitorNode(Node):
    """Samples probes, judges them against a BudgetConfig and publishes the compute tier."""

    def __init__(self, sysfs_root: Path = Path("/sys"), **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        try:
            declare_config(self, BudgetConfig)  # ranges and help from the fields; every one is live
            self.config = self._config_from({})
        except (ValueError, TypeError, ParameterException) as e:
            # Wrong type or out of range from a params file / -p: say which and how to fix it.
            raise ValueError(f"{NODE_NAME}: bad parameters: {e} (fix config/budget_monitor.yaml or the "
                             "-p override; docs/budget.md lists every parameter)") from None
        self._sysfs_root = Path(sysfs_root)
        self.monitor = BudgetMonitor(self.config)
        self.probes = self._make_probes(self.config)
        self.last: Assessment | None = None
        self.last_change = "none yet"
        self._note = ""  # the last "no cheaper step left" note logged

        self.tier_pub = self.create_publisher(UInt8, TIER_TOPIC, LATCHED)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._lock = threading.Lock()  # the sampler thread vs parameter callbacks of the executor
        self._stats_node: Node | None = None
        self._stats_sub = self._subscribe_stats()
        self.add_on_set_parameters_callback(self._validate_parameters)
        add_post_set_callback(self, self._apply_parameters)
        # No tier before `escalate_after` samples: a monitor restarted while the robot is hot must
        # not flash FULL to a policy node that is running the safe action.
        self._samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="budget_sampler", daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"budget monitor up: {self.config.sample_rate_hz:g} Hz, headroom {self.config.headroom:.0%}, "
            f"temperature source {self.config.temperature_source}")

    # --- parameters -------------------------------------------------------------------------
    def _config_from(self, overrides: dict[str, Any]) -> BudgetConfig:
        return config_from_params(self, BudgetConfig, overrides=overrides)

    def _validate_parameters(self, params: list[Parameter]) -> SetParametersResult:
        try:
            self._config_from({p.name: p.value for p in params if p.name in self._field_names()})
        except (ValueError, TypeError) as e:
            return SetParametersResult(successful=False, reason=str(e))
        return SetParametersResult(successful=True)

    def _apply_parameters(self, params: list[Parameter]) -> None:
        changed = {p.name for p in params}
        old, self.config = self.config, self._config_from({})
        with self._lock:
            self.monitor.reconfigure(self.config)
            if changed & _PROBE_FIELDS:
                self.probes = self._make_probes(self.config)
        diff = ", ".join(f"{n}={getattr(self.config, n)!r}" for n in sorted(changed) if
                         getattr(old, n, None) != getattr(self.config, n, None))
        if diff:
            self.get_logger().info(f"reconfigured: {diff}")

    @staticmethod
    def _field_names() -> set[str]:
        return {f.name for f in fields(BudgetConfig)}

    def _make_probes(self, config: BudgetConfig) -> ProbeSet:
        return ProbeSet(config, lambda: self.monitor.policy_pid(time.monotonic()), self._sysfs_root)

    # --- sampling ---------------------------------------------------------------------------
    # Why a thread and not rclpy timers/callbacks: each executor wake-up costs ~0.7 ms of CPU in
    # rclpy here (a 10 Hz timer alone: 0.7 % of a core; a 10 Hz subscription: 0.8 %), more than
    # the monitor's own work, and its budget is <= 1 % of a core at 10 Hz. The sampler thread
    # sleeps between samples and takes the policy stats from the subscription's queue itself;
    # the executor only wakes for parameter services.
    def _subscribe_stats(self) -> Any:
        # use_global_arguments=False: a launcher's `-r __node:=budget_monitor` must not give the
        # helper the monitor's name; the monitor's own remaps are applied to the topic instead.
        helper = rclpy.create_node(f"{self.get_name()}_stats_reader", context=self.context,
                                   namespace=self.get_namespace(), use_global_arguments=False,
                                   enable_rosout=False, start_parameter_services=False)
        topic = self.resolve_topic_name(STATS_TOPIC)
        sub = helper.create_subscription(Float64MultiArray, topic, lambda _msg: None, STATS)
        if callable(getattr(sub.handle, "take_message", None)):
            self._stats_node = helper  # never added to an executor: the sampler takes from it
            return sub
        helper.destroy_node()  # an rclpy without take_message: plain callbacks
        return self.create_subscription(Float64MultiArray, STATS_TOPIC, self._on_stats, STATS)

    def _drain_stats(self) -> None:
        if self._stats_node is None:
            return
        while True:
            taken = self._stats_sub.handle.take_message(Float64MultiArray, False)
            if taken is None:
                return
            self._on_stats(taken[0])

    def _run(self) -> None:
        next_sample = next_publish = time.monotonic()
        while not self._stop.is_set() and self.context.ok():
            now = time.monotonic()
            if now < next_sample:
                self._stop.wait(next_sample - now)
                continue
            try:
                with self._lock:
                    self._drain_stats()
                    self._sample()
                    self._samples += 1
                    if self._samples == self.config.escalate_after:
                        self._publish_tier()  # the first judged tier, at once
                    if now >= next_publish:
                        self._periodic()
                        next_publish = now + self.config.publish_period_s
                    period = 1.0 / self.config.sample_rate_hz
            except Exception as e:  # never let the sampler die: the tier must keep coming
                if not self.context.ok():
                    return
                self.get_logger().error(f"budget sampler: {type(e).__name__}: {e}", throttle_duration_sec=5.0)
                period = 1.0 / self.config.sample_rate_hz
            # Fixed rate without bursts: after a stall, start again from now.
            next_sample = max(next_sample + period, now)

    def destroy_node(self) -> None:
        # getattr: rclpy also destroys a node whose __init__ raised (bad parameters), half built.
        if getattr(self, "_stop", None) is not None:
            self._stop.set()
            if self._thread.is_alive() and self._thread is not threading.current_thread():
                self._thread.join(timeout=5.0)
        if getattr(self, "_stats_node", None) is not None:
            self._stats_node.destroy_node()
            self._stats_node = None
        super().destroy_node()

    def _on_stats(self, msg: Float64MultiArray) -> None:
        try:
            self.monitor.on_policy_stats(time.monotonic(), msg.data)
        except ValueError as e:
            self.get_logger().warning(f"ignoring {STATS_TOPIC}: {e}", throttle_duration_sec=5.0)

    def _sample(self) -> None:
        try:
            self.last = self.monitor.step(time.monotonic(), self.probes.sample(), time.time())
        except Exception as e:  # a bug here must not stop the tier from being published
            self.get_logger().error(f"budget sample failed: {type(e).__name__}: {e}", throttle_duration_sec=5.0)
            return
        if self.last.note and self.last.note != self._note:
            self.get_logger().warning(f"compute tier {self.last.tier.label}: {self.last.note}")
            self._publish_diagnostics()  # said before the stop is taken
        self._note = self.last.note
        if self.last.changed:
            self.last_change = self.last.reason
            # rclpy loggers need one severity per call site, hence two calls.
            if self.last.tier > ComputeTier.FULL:
                self.get_logger().warning(f"compute tier {self.last.reason}")
            else:
                self.get_logger().info(f"compute tier {self.last.reason}")
            self._publish_tier()
            self._publish_diagnostics()

    def _periodic(self) -> None:
        self._publish_tier()
        self._publish_diagnostics()

    @property
    def tier(self) -> ComputeTier:
        return self.monitor.decider.tier

    def _publish_tier(self) -> None:
        if self._samples >= self.config.escalate_after or self.last is not None and self.last.changed:
            self.tier_pub.publish(UInt8(data=int(self.tier)))

    def _publish_diagnostics(self) -> None:
        if self.last is None:
            return
        entries = budget_status(self.last, self.tier, self.monitor.policy, self.last_change, DIAG_PREFIX,
                                self.monitor.ladder)
        self.diag_pub.publish(diag.array(self.get_clock().now().to_msg(), diag.from_entries(entries),
                                               self.get_namespace()))


def main(args: list[str] | None = None) -> int:
    rclpy.init(args=args)
    exit_with_launcher()
    try:
        node = BudgetMonitorNode()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        rclpy.try_shutdown()
        return 2
    # SingleThreadedExecutor, not rclpy.experimental.EventsExecutor: the latter burns ~33 % of a
    # core even with no timers here (rclpy 9.1.2, measured), which is the budget this node guards.
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
