"""policy_node: runs a compressed policy on the robot (rclpy LifecycleNode; never imports torch).

configure: load the artifact/bundle and the config   activate: start control
deactivate: publish the safe action and stop          cleanup/shutdown: release everything

In: ``/joint_states`` (sensor_msgs/JointState, through the observation adapter) or
``/lowrl/observation`` (std_msgs/Float32MultiArray); ``/lowrl/compute_tier`` (std_msgs/UInt8, latched);
``/lowrl/policy_bundle`` (std_msgs/UInt8MultiArray, latched: signed bundles from the trainer node).
Out: ``/<controller_name>/commands`` (std_msgs/Float64MultiArray, forward_command_controller),
``/diagnostics``, ``/lowrl/policy/latency_us`` (per inference), ``/lowrl/policy/stats`` (10 Hz),
``/lowrl/policy_bundle/status`` (std_msgs/String, JSON: accepted or the rejection code).

A received bundle goes through :class:`lowrl_ros.core.stream.receiver.BundleReceiver` on the same
worker thread as a ``policy_path`` hot swap, then through the same atomic swap between ticks.

The decisions (safety, watchdog, soft start, decimation, tiers) live in
:class:`lowrl_ros.core.runtime.control.PolicyController`; this node converts messages, owns the timers and
the hot-swap worker, and turns every exception at a callback boundary into the safe action and an
ERROR diagnostic, so bad input never takes it down.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import JointState
from std_msgs.msg import (Float32MultiArray, Float64, Float64MultiArray, MultiArrayDimension, String, UInt8,
                          UInt8MultiArray)

from lowrl_ros.core.config import LIVE, field, require
from lowrl_ros.core.runtime.bundle import load_bundle
from lowrl_ros.core.stream.receiver import BundleReceiver, ReceiverConfig
from lowrl_ros.core.stream.protocol import BundleRejected, BundleStatus, load_key, read_header
from lowrl_ros.core.runtime.control import ControlConfig, PolicyController, TickSchedule
from lowrl_ros.core.runtime.obs_adapter import ObsAdapterConfig, ObservationAdapter, ObservationError, from_array
from lowrl_ros.core.runtime.policy_stats import STATS_FIELDS, PolicyStats
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.ros import diagnostics as diag
from lowrl_ros.ros.qos import CONTROL, LATCHED, STATS
from lowrl_ros.ros.qos import STATS as BUNDLE_STATUS  # reliable, volatile, depth 10: what a status reply needs
from lowrl_ros.ros.params import config_from_params, declare_config
from lowrl_ros.ros.spinning import run_node

DIAG_PREFIX = "lowrl/policy"
INPUTS = ("joint_states", "observation")
ENGINES = ("auto", "ort", "numpy")
# Levels as ints: diagnostics.status() takes an int (DiagnosticStatus.OK etc. are one-byte bytes in rclpy).
OK, WARN, ERROR = 0, 1, 2
ERROR_HOLD_S = 2.0  # an input error keeps the status at ERROR this long after the last bad message
# ControlConfig fields a running node may change (the rest shape timers/buffers: read-only).
LIVE_CONTROL = tuple(f.name for f in dataclasses.fields(ControlConfig) if f.metadata[LIVE])
# ReceiverConfig as parameters: keep is keep_bundles; the engine is this node's; probe_count is fixed.
_RECEIVER_PARAMS: dict[str, Any] = dict(skip=("probe_count", "engine"), names={"keep": "keep_bundles"})


@dataclass(frozen=True)
class PolicyNodeSettings:
    """The policy node's own parameters (the core configs bring the rest)."""

    policy_path: str = field("", "artifact (.onnx) or bundle (.lowrl); a change hot-swaps it", live=True)
    engine: str = field("auto", "inference engine: " + " | ".join(ENGINES))
    autostart: bool = field(True, "configure and activate at start (no lifecycle manager needed)")
    input: str = field("joint_states", "observation source: " + " | ".join(INPUTS))
    joint_states_topic: str = field("/joint_states", "sensor_msgs/JointState input")
    observation_topic: str = field("/lowrl/observation", "std_msgs/Float32MultiArray input")
    extra_observation_topic: str = field("/lowrl/extra_observation",
                                         "Float32MultiArray appended to the joint observation")
    controller_name: str = field("forward_command_controller", "commands go to /<controller_name>/commands")
    stats_rate_hz: float = field(10.0, "rate of /lowrl/policy/stats", range=(0.1, 100.0))
    diagnostics_period_s: float = field(1.0, "period of /diagnostics", range=(0.05, 60.0))
    bundle_topic: str = field("/lowrl/policy_bundle",
                              "signed bundles from the trainer (UInt8MultiArray, latched); replies on <topic>/status")
    key_file: str = field("", "HMAC key shared with the trainer (chmod 600); empty: no bundle is accepted unless "
                              "require_signature is false")

    def __post_init__(self) -> None:
        for name, allowed in (("input", INPUTS), ("engine", ENGINES)):
            require(getattr(self, name) in allowed,
                    f"{name} {getattr(self, name)!r} is unknown; use one of {', '.join(allowed)}")


class PolicyNode(LifecycleNode):
    """The on-robot policy runner. See the module docstring and docs/policy_node.md."""

    def __init__(self, node_name: str = "policy_node", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        declare_config(self, PolicyNodeSettings)
        declare_config(self, ObsAdapterConfig, defaults={"obs_fields": [""]})  # [""]: a typed (string) array
        declare_config(self, ControlConfig)
        declare_config(self, ReceiverConfig, **_RECEIVER_PARAMS)
        self.add_on_set_parameters_callback(self._validate_parameters)
        self.add_post_set_parameters_callback(self._apply_parameters)
        self._diag_pub = self.create_publisher(diag.DiagnosticArray, "/diagnostics", 10)
        self._lock = threading.Lock()  # guards _pending and the swap status
        self._pending = None  # a validated, warmed-up bundle waiting for the next tick
        self._swap_thread: threading.Thread | None = None
        self._queued: tuple[str, Any] | None = None  # ("path", str) or ("bundle", bytes); newest wins
        self._swap_status = (OK, "no swap requested")
        self._receiver: BundleReceiver | None = None
        self._stream_version = 0  # highest bundle version accepted from the stream
        self._stream_status = (OK, "no bundle received", {})
        self._clear_runtime()

    def _clear_runtime(self) -> None:
        self.controller: PolicyController | None = None
        self.adapter: ObservationAdapter | None = None
        self._pubs: list = []
        self._subs: list = []
        self._timers: list = []
        self._control_timer = None
        self._schedule: TickSchedule | None = None
        self._last_diag_error = 0.0
        self._error_reported: float | None = None
        self.active_policy_path = ""

    # ---- configuration ---------------------------------------------------------------------
    def _get(self, name: str) -> Any:
        return self.get_parameter(name).value

    def _control_config(self, overrides: dict[str, Any] | None = None) -> ControlConfig:
        return config_from_params(self, ControlConfig, overrides=overrides)

    def _adapter_config(self) -> ObsAdapterConfig:
        return config_from_params(self, ObsAdapterConfig, obs_fields=tuple(f for f in self._get("obs_fields") if f))

    def _validate_parameters(self, params) -> SetParametersResult:
        """Reject a live change the core config refuses, with its reason (shown by rqt_reconfigure)."""
        changes = {p.name: p.value for p in params if p.name in LIVE_CONTROL}
        try:
            if changes:
                config = self._control_config(changes)
                if self.controller is not None and config.safe_action == "default_pose" \
                        and len(config.default_pose) != self.controller.action_dim:
                    raise ValueError(f"default_pose needs {self.controller.action_dim} values")
            for p in params:
                if p.name == "policy_path" and not isinstance(p.value, str):
                    raise ValueError("policy_path must be a string path to a .onnx or .lowrl file")
        except ValueError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def _apply_parameters(self, params) -> None:
        names = {p.name for p in params}
        if self.controller is not None and names & set(LIVE_CONTROL):
            self.controller.config = self._control_config()
            if "watchdog_timeout_s" in names and self.controller.active and self.controller.config.mode == "event":
                self._destroy_control_timer()
                self._control_timer = self.create_timer(self.controller.config.watchdog_timeout_s / 2,
                                                        self._on_watchdog_tick)
        path = next((p.value for p in params if p.name == "policy_path"), None)
        if path is not None and self.controller is not None and path != self.active_policy_path:
            self._start_swap(path)

    # ---- lifecycle -------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            path = self._get("policy_path")
            if not path:
                raise ValueError("policy_path is empty; set it to a .onnx artifact or .lowrl bundle "
                                 "(e.g. models/pendulum_sac_int8.onnx)")
            config_from_params(self, PolicyNodeSettings)  # checks input and engine
            config = self._control_config()
            bundle = load_bundle(path, engine=self._get("engine"))
            controller = PolicyController(config, bundle, clock=time.perf_counter)
            if self._get("input") == "joint_states":
                adapter = ObservationAdapter(self._adapter_config())
                if adapter.obs_dim != controller.obs_dim:
                    raise ValueError(f"obs_fields (+ extra_obs_dim) give {adapter.obs_dim} observation entries but "
                                     f"the policy reads {controller.obs_dim} ({', '.join(bundle.contract.obs_names)}); "
                                     "list one '<joint>.<field>' per policy observation")
                self.adapter = adapter
            receiver = self._make_receiver()
        except Exception as exc:  # noqa: BLE001 - any load failure must become a FAILURE, not a crash
            self.get_logger().error(f"configure failed: {exc}")
            self._publish_diag([diag.status(diag.POLICY_STATUS, ERROR, f"configure failed: {exc}")])
            self._clear_runtime()
            return TransitionCallbackReturn.FAILURE
        self.controller = controller
        self._receiver = receiver
        self.active_policy_path = path
        self._create_io()
        self.get_logger().info(
            f"configured: {path} v{bundle.version}, tiers {', '.join(bundle.policies)}, "
            f"{controller.obs_dim} obs -> {controller.action_dim} actions, mode {config.mode}")
        return TransitionCallbackReturn.SUCCESS

    def _make_receiver(self) -> BundleReceiver:
        """The bundle receiver from the parameters; a key_file that is set but unusable fails configure."""
        key_file = self._get("key_file")
        config = config_from_params(self, ReceiverConfig, **_RECEIVER_PARAMS, engine=self._get("engine"))
        key = load_key(key_file) if key_file else None
        if key is None and config.require_signature:
            self.get_logger().warning(f"no key_file: bundles on {self._get('bundle_topic')} will be rejected "
                                      "(set key_file to the trainer's key to accept streamed policies)")
        elif not config.require_signature:
            self.get_logger().warning("require_signature is false: UNSIGNED bundles will be accepted "
                                      "(bench only; anyone on the network can replace the policy)")
        return BundleReceiver(config, key)

    def _create_io(self) -> None:
        cmd_topic = f"/{self._get('controller_name').strip('/')}/commands"
        self._cmd_pub = self.create_publisher(Float64MultiArray, cmd_topic, CONTROL)
        self._latency_pub = self.create_publisher(Float64, "/lowrl/policy/latency_us", STATS)
        self._stats_pub = self.create_publisher(Float64MultiArray, "/lowrl/policy/stats", STATS)
        self._pubs = [self._cmd_pub, self._latency_pub, self._stats_pub]
        if self._get("input") == "joint_states":
            self._subs.append(self.create_subscription(JointState, self._get("joint_states_topic"),
                                                       self._on_joint_state, CONTROL))
            if self.adapter.config.extra_obs_dim:
                self._subs.append(self.create_subscription(Float32MultiArray, self._get("extra_observation_topic"),
                                                           self._on_extra, CONTROL))
        else:
            self._subs.append(self.create_subscription(Float32MultiArray, self._get("observation_topic"),
                                                       self._on_observation, CONTROL))
        self._subs.append(self.create_subscription(UInt8, "/lowrl/compute_tier", self._on_tier, LATCHED))
        bundle_topic = self._get("bundle_topic")
        self._subs.append(self.create_subscription(UInt8MultiArray, bundle_topic, self._on_bundle, LATCHED))
        self._bundle_status_pub = self.create_publisher(String, f"{bundle_topic.rstrip('/')}/status", BUNDLE_STATUS)
        self._pubs.append(self._bundle_status_pub)
        self._timers.append(self.create_timer(1.0 / self._get("stats_rate_hz"), self._guarded(self._publish_stats)))
        self._timers.append(self.create_timer(self._get("diagnostics_period_s"), self._guarded(self._publish_status)))
        self._cmd_msg = Float64MultiArray()
        self._stats_msg = Float64MultiArray()
        self._stats_msg.layout.dim = [MultiArrayDimension(label=",".join(STATS_FIELDS), size=len(STATS_FIELDS),
                                                          stride=len(STATS_FIELDS))]

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.controller.activate()
        config = self.controller.config
        if config.mode == "fixed_rate":
            self._start_fixed_rate()
        else:
            # Event mode acts on observations; this timer only notices when they stop (watchdog).
            self._control_timer = self.create_timer(config.watchdog_timeout_s / 2, self._on_watchdog_tick)
        self.get_logger().info("activated")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._destroy_control_timer()
        self._publish_command(self.controller.deactivate())
        self.get_logger().info("deactivated: safe action sent")
        return super().on_deactivate(state)

    def _destroy_control_timer(self) -> None:
        if self._control_timer is not None:
            self.destroy_timer(self._control_timer)
            self._control_timer = None

    def _release(self) -> None:
        self._destroy_control_timer()
        for t in self._timers:
            self.destroy_timer(t)
        for s in self._subs:
            self.destroy_subscription(s)
        for pub in self._pubs:
            self.destroy_publisher(pub)
        with self._lock:
            self._pending = None
        self._clear_runtime()

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        self.get_logger().info("cleaned up")
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self.controller is not None and self.controller.active:
            self._publish_command(self.controller.deactivate())
        self._release()
        return TransitionCallbackReturn.SUCCESS

    # ---- control path ----------------------------------------------------------------------
    def _take_pending(self) -> None:
        if self._pending is None:  # unlocked read: the common case costs nothing
            return
        with self._lock:
            bundle, self._pending = self._pending, None
        if bundle is None:
            return
        try:
            self.controller.swap(bundle)
        except ValueError as exc:
            self._swap_rejected(str(bundle.path), str(exc))
            return
        self.active_policy_path = str(bundle.path)
        with self._lock:
            self._swap_status = (OK, f"swapped to {bundle.path} v{bundle.version}")
        self.get_logger().info(f"hot-swapped to {bundle.path} v{bundle.version} (soft start)")

    def _on_joint_state(self, msg: JointState) -> None:
        self._observe(time.perf_counter(), self.adapter.from_joint_state,
                      msg.name, msg.position, msg.velocity, msg.effort)

    def _on_observation(self, msg: Float32MultiArray) -> None:
        self._observe(time.perf_counter(), from_array, msg.data, self.controller.obs_dim)

    def _observe(self, t0: float, convert, *args) -> None:
        """Convert a message to an observation (a bad one becomes the reason for the safe action),
        then act at once in event mode, with the message's arrival ``t0`` as the deadline reference."""
        try:
            self.controller.observe(convert(*args))
        except ObservationError as exc:
            self.controller.observe(None, str(exc))
        except Exception as exc:  # noqa: BLE001 - never die on input
            self.controller.observe(None, f"unexpected {type(exc).__name__}: {exc}")
        if self.controller.config.mode == "event":
            self._tick(t0)

    def _on_extra(self, msg: Float32MultiArray) -> None:
        try:
            self.adapter.set_extra(msg.data)
        except Exception as exc:  # noqa: BLE001 - never die on input
            self.controller.observe(None, str(exc))

    def _on_control_tick(self) -> None:
        """fixed_rate: the reference is when the tick was due (TickSchedule), so lateness is counted."""
        due, skipped = self._schedule.tick(time.perf_counter())
        self.controller.deadline_misses += skipped  # each skipped period is an output that never came
        self._tick(due)

    def _start_fixed_rate(self) -> None:
        """(Re)start the control timer at the tier's output period (ControlConfig.output_period_s)."""
        self._destroy_control_timer()
        period = self.controller.output_period_s()
        self._schedule = TickSchedule(period)
        self._control_timer = self.create_timer(period, self._on_control_tick)

    def _on_watchdog_tick(self) -> None:
        age = self.controller.observation_age()
        if age is None or age > self.controller.config.watchdog_timeout_s:
            self._tick(time.perf_counter())

    def _tick(self, reference: float) -> None:
        if self.controller is None or not self.controller.active:
            return
        try:
            self._take_pending()
            result = self.controller.step(reference)
        except Exception as exc:  # noqa: BLE001 - a failing policy call must still end in a command
            self.controller.last_error = f"control step failed: {type(exc).__name__}: {exc}"
            self.controller.last_error_time = time.perf_counter()
            result = None
        action = self.controller.safe_action() if result is None else result.action
        self._publish_command(action)
        if result is not None and result.latency_s is not None:
            self._latency_pub.publish(Float64(data=result.latency_s * 1e6))
        if self.controller.last_error_time != self._error_reported:  # a new input error: say so now
            self._input_error_diag()

    def _publish_command(self, action: np.ndarray) -> None:
        self._cmd_msg.data = action.tolist()
        self._cmd_pub.publish(self._cmd_msg)

    # ---- tiers, hot-swap -------------------------------------------------------------------
    def _on_tier(self, msg: UInt8) -> None:
        try:
            line = self.controller.set_tier(msg.data)
        except ValueError as exc:
            self.get_logger().error(f"ignoring compute tier: {exc}")
            return
        if line:
            self.get_logger().warning(line) if self.controller.tier > ComputeTier.FULL else self.get_logger().info(line)
            if (self.controller.config.mode == "fixed_rate" and self.controller.active
                    and self.controller.output_period_s() != self._schedule.period_s):
                self._start_fixed_rate()
                self._tick(time.perf_counter())  # the new tier's first output now, not a period later
            self._publish_status()

    def _start_swap(self, path: str) -> None:
        """Load, validate and warm up ``path`` on a worker thread; the control path never waits."""
        self.get_logger().info(f"hot-swap requested: {path}")
        self._queue_work(("path", path))

    def _on_bundle(self, msg: UInt8MultiArray) -> None:
        """A bundle from the trainer: only queued here; all checking happens on the swap worker."""
        if self.controller is None:
            return
        self._queue_work(("bundle", msg.data.tobytes() if hasattr(msg.data, "tobytes") else bytes(msg.data)))

    def _queue_work(self, item: tuple[str, Any]) -> None:
        """One worker at a time: a request that arrives while one runs is queued (newest wins) and
        picked up by the same worker, so no callback ever blocks on a join."""
        with self._lock:
            self._queued = item
            if self._swap_thread is not None and self._swap_thread.is_alive():
                return
            self._swap_thread = threading.Thread(target=self._swap_worker, name="policy-swap", daemon=True)
            self._swap_thread.start()

    def _swap_worker(self) -> None:
        engine = self._get("engine")
        controller = self.controller
        while True:
            with self._lock:
                item, self._queued = self._queued, None
                if item is None:
                    return
            kind, what = item
            if kind == "bundle":
                bundle = self._receive_bundle(controller, what)
                if bundle is None:
                    continue
                path = str(bundle.path)
            else:
                path = what
                try:
                    bundle = load_bundle(path, engine=engine)  # validates and warms up every tier
                    controller.check_compatible(bundle)
                except Exception as exc:  # noqa: BLE001 - a bad artifact is reported, never raised
                    self._swap_rejected(path, str(exc))
                    continue
            with self._lock:
                self._pending = bundle
                self._swap_status = (OK, f"{path} v{bundle.version} validated, swapping at the next tick")

    def _receive_bundle(self, controller: PolicyController, message: bytes):
        """Run the receiver's checks (worker thread); reply on the status topic; the bundle or None."""
        with self._lock:
            pending = self._pending
        running = controller.bundle
        current = max(running.version, self._stream_version, pending.version if pending is not None else 0)
        try:
            version: int | None = read_header(message).version
        except BundleRejected:
            version = None
        try:
            got = self._receiver.receive(message, current_version=current, running=running.contract,
                                         running_sha256=running.sha256, protect=(self.active_policy_path,))
            controller.check_compatible(got.bundle)
        except Exception as exc:  # noqa: BLE001 - whatever went wrong, the running policy keeps acting
            if not isinstance(exc, BundleRejected):
                exc = BundleRejected("invalid_artifact", f"{type(exc).__name__}: {exc}")
            reply = BundleStatus.rejected(exc, version, current)
            self._reply(reply)
            if exc.code == "duplicate":
                self.get_logger().info(str(exc))
                self._stream_status = (OK, f"v{version} already running", {"last_code": exc.code})
                return None
            self._stream_status = (ERROR, f"rejected v{version}: [{exc.code}] {exc}",
                                   {"last_code": exc.code, "resend_requested": reply.resend})
            self._swap_rejected(f"bundle v{version}", f"[{exc.code}] {exc}")
            return None
        self._stream_version = got.header.version
        self._reply(BundleStatus(version=got.header.version, accepted=True, code="ok",
                                 reason=f"validated, swapping at the next tick ({got.path})",
                                 running_version=got.header.version))
        self._stream_status = (OK, f"accepted v{got.header.version}", {"last_code": "ok"})
        self.get_logger().info(f"bundle v{got.header.version} accepted ({got.header.total_len} bytes, "
                               f"{got.header.n_chunks} chunks) -> {got.path}")
        return got.bundle

    def _reply(self, status: BundleStatus) -> None:
        try:
            self._bundle_status_pub.publish(String(data=status.to_json()))
        except Exception as exc:  # noqa: BLE001 - a torn-down publisher (cleanup during a receive)
            self.get_logger().warning(f"could not send the bundle status reply: {exc}")

    def _swap_rejected(self, path: str, reason: str) -> None:
        with self._lock:
            self._swap_status = (ERROR, f"rejected {path}: {reason}")
        self.get_logger().error(f"hot-swap rejected, keeping {self.active_policy_path}: {reason}")
        try:
            self._publish_status()  # now, from the swap worker; the periodic diagnostics repeat it
        except Exception as exc:  # noqa: BLE001 - publishers torn down (cleanup/shutdown during a swap)
            self.get_logger().warning(f"could not publish the rejection diagnostic: {exc}")

    def wait_for_swap(self, timeout: float | None = None) -> None:
        """Block until a running swap worker finishes (tests and tools; never the control path)."""
        thread = self._swap_thread
        if thread is not None:
            thread.join(timeout)

    # ---- reporting -------------------------------------------------------------------------
    def _input_error_diag(self) -> None:
        now = time.perf_counter()
        if now - self._last_diag_error > 0.2:  # immediate, but a flood of bad input is rate-limited
            self._last_diag_error = now
            self._error_reported = self.controller.last_error_time
            self._publish_status()

    def _guarded(self, fn) -> Any:
        """Wrap a timer callback: report an exception instead of letting it stop the executor."""
        def run() -> None:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - reporting must never take control down
                self.get_logger().error(f"{fn.__name__} failed: {type(exc).__name__}: {exc}")
        return run

    def _publish_stats(self) -> None:
        c = self.controller
        if c is None:
            return
        stats = PolicyStats(pid=float(os.getpid()), **c.stats())
        self._stats_msg.data = stats.to_list()
        self._stats_pub.publish(self._stats_msg)

    def _publish_diag(self, statuses: list) -> None:
        self._diag_pub.publish(diag.array(self.get_clock().now().to_msg(), statuses))

    def _publish_status(self) -> None:
        c = self.controller
        if c is None:
            return
        s = c.stats()
        now = time.perf_counter()
        statuses = []
        late = s["deadline_misses"] > 0
        statuses.append(diag.status(
            f"{DIAG_PREFIX}/latency", WARN if late else OK,
            f"p99 {s['window_p99_us']:.0f} us, {int(s['deadline_misses'])} deadline misses",
            {"p50_us": s["window_p50_us"], "p99_us": s["window_p99_us"], "deadline_misses": int(s["deadline_misses"]),
             "ticks": int(s["ticks"]), "deadline_us": s["deadline_us"]}))
        recent = c.last_error_time is not None and now - c.last_error_time < ERROR_HOLD_S
        statuses.append(diag.status(
            f"{DIAG_PREFIX}/input", ERROR if recent else OK,
            c.last_error if recent else "observations OK",
            {"last_error": c.last_error or "none"}))
        with self._lock:
            swap_level, swap_message = self._swap_status
        bundle = c.bundle
        statuses.append(diag.status(
            diag.POLICY_STATUS, swap_level, swap_message if swap_level != OK else
            f"v{bundle.version} {self.active_policy_path}",
            {"version": bundle.version, "path": self.active_policy_path, "tiers": ",".join(bundle.policies),
             "swap": swap_message, "active": c.active}))
        stream_level, stream_message, stream_values = self._stream_status
        receiver = self._receiver
        statuses.append(diag.status(
            f"{DIAG_PREFIX}/bundle", stream_level, stream_message,
            {"stream_version": self._stream_version, "topic": self._get("bundle_topic"),
             "signed_only": receiver is not None and receiver.config.require_signature,
             "key": "loaded" if receiver is not None and receiver.key is not None else "none", **stream_values}))
        statuses.append(diag.status(
            f"{DIAG_PREFIX}/tier", OK if c.tier == ComputeTier.FULL else WARN,
            f"tier {c.tier.label}", {"tier": c.tier.label, "requested": c.requested_tier.label,
                                     "tier_value": int(c.tier)}))
        self._publish_diag(statuses)


def _autostart(node: PolicyNode) -> int:
    if not node.get_parameter("autostart").value:
        return 0
    node.trigger_configure()
    if node.controller is None:
        print("policy_node: configure failed (see the error above); fix the parameters and restart", file=sys.stderr)
        return 1
    node.trigger_activate()
    return 0


def _deactivate(node: PolicyNode) -> None:
    if node.controller is not None and node.controller.active:
        node.trigger_deactivate()  # the actuators get the safe action on the way out


def main(args: list[str] | None = None) -> int:
    return run_node("policy_node", PolicyNode, args=args, start=_autostart, stop=_deactivate)

if __name__ == "__main__":
    sys.exit(main())
