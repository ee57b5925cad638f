"""policy_node: runs a compressed policy on the robot (rclpy LifecycleNode; never imports torch).

configure: load the policy and the robot file; activate: start control; deactivate: the safe action, stop.

In: every robot through a robot file (ros/robot_inputs.py: the newest sample of each topic, taken at the
tick): ``robot_file``, or without it the one the old ``input``/``obs_fields``/``extra_obs_dim``
parameters describe (logged as YAML at configure). ``/lowrl/compute_tier``, ``/lowrl/policy_bundle``.
Out (ros/robot_outputs.py PolicyOutputs, lifecycle publishers: silent unless active, but the safe action
on deactivate/shutdown goes out first): the commands, ``lowrl/policy/latency_us``, ``lowrl/policy/stats``,
``step_topic`` (docs/CONTRACTS.md); ``/diagnostics`` and ``<bundle_topic>/status`` in any state.

Timing (``robot_timing``, core ControlTiming): fixed_rate at the contract's control period, or the
``mode``/``control_period_s`` parameters (a WARN when that is not the contract's rate). fixed_rate ticks
run on the node's own thread (core ControlLoop, OS name ``lowrl_control``, ``rt_*``), each kept just after
the robot's joint states arrive (``tick_phase_s``, core PhaseLock); event mode on the
executor, as each trigger message arrives. One lock (``PolicyNode._lock``) makes each tick and each
executor callback atomic with respect to the other. The decisions live in core (PolicyController,
PolicySwapper, ObservationBuilder, policy_status); every exception at a callback boundary becomes the
safe action and an ERROR diagnostic, so bad input never takes the node down.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from typing import Any

from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from std_msgs.msg import Bool, Empty, Float64MultiArray, String, UInt8, UInt8MultiArray

from lowrl_ros.core.config import LIVE
from lowrl_ros.core.runtime.actions import ActionProcessor, measured_positions
from lowrl_ros.core.runtime.bundle import load_bundle
from lowrl_ros.core.runtime.control import (NOTHING, RESET, ControlConfig, ControlTiming, EStopLatch, PolicyController,
                                            percentiles_us)
from lowrl_ros.core.runtime.obs_adapter import ObsAdapterConfig, ObservationError
from lowrl_ros.core.runtime.observation import ObservationBuilder, ObservationSpec
from lowrl_ros.core.runtime.policy_settings import PolicyNodeSettings, PolicySetup
from lowrl_ros.core.runtime.policy_stats import PolicyStats
from lowrl_ros.core.runtime.realtime import ControlLoop, RealtimeResult, apply_realtime, parse_cpus
from lowrl_ros.core.runtime.status import InputErrorReports, RunningPolicy, TierView, policy_status, robot_io_status
from lowrl_ros.core.runtime.swap import PolicySwapper
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.core.stream.protocol import BundleStatus, load_key
from lowrl_ros.core.stream.receiver import BundleReceiver, ReceiverConfig
from lowrl_ros.core.types import Level
from lowrl_ros.ros import diagnostics as diag
from lowrl_ros.ros.params import add_post_set_callback, config_from_params, declare_config
from lowrl_ros.ros.qos import LATCHED, STATUS
from lowrl_ros.ros.robot_inputs import RobotInputs, create_operator_inputs
from lowrl_ros.ros.robot_outputs import PolicyOutputs, check_output, create_estop
from lowrl_ros.ros.spinning import autostart, guarded, locked, run_node

__all__ = ["PolicyNode", "PolicyNodeSettings", "main"]
# ControlConfig fields a running node may change (the rest shape timers/buffers: read-only).
LIVE_CONTROL = tuple(f.name for f in dataclasses.fields(ControlConfig) if f.metadata[LIVE])
# ReceiverConfig as parameters: keep is keep_bundles; the engine is this node's; probe_count is fixed.
_RECEIVER_PARAMS: dict[str, Any] = dict(skip=("probe_count", "engine"), names={"keep": "keep_bundles"})


class PolicyNode(LifecycleNode):
    """The on-robot policy runner. See the module docstring and docs/policy_node.md."""

    def __init__(self, node_name: str = "policy_node", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        declare_config(self, PolicyNodeSettings)
        declare_config(self, ObsAdapterConfig, defaults={"obs_fields": [""]})  # [""]: a typed (string) array
        declare_config(self, ControlConfig)
        declare_config(self, ReceiverConfig, **_RECEIVER_PARAMS)
        self.add_on_set_parameters_callback(self._validate_parameters)
        add_post_set_callback(self, self._apply_parameters)
        self._diag_pub = self.create_publisher(diag.DiagnosticArray, "/diagnostics", 10)
        # Outlives cleanup/configure: a latched e-stop stays latched until its reset, whatever else happens.
        self._estop_latch: EStopLatch | None = None
        # The control thread and the executor's callbacks share the controller, builder, swapper and publishers: one
        # re-entrant lock makes each tick and callback atomic (callbacks are rare and short; ~0.1 us per acquire).
        self._lock = threading.RLock()
        self._loop: ControlLoop | None = None
        self._clear_runtime()

    def _clear_runtime(self) -> None:
        self.controller: PolicyController | None = None
        self.swapper: PolicySwapper | None = None
        self.actions: ActionProcessor | None = None  # the robot file's output side (None: the command parameters)
        self._outputs: PolicyOutputs | None = None
        self._subs, self._timers = [], []
        self._control_timer = self._bundle_status_pub = None
        self._input_reports = InputErrorReports()
        self.robot_inputs: RobotInputs | None = None
        self._builder: ObservationBuilder | None = None
        self._timing: ControlTiming | None = None  # robot_timing against the contract (its ControlConfig overrides)
        self._realtime: RealtimeResult | None = None
        self._intervening = False

    @property
    def active_policy_path(self) -> str:
        """The file the control path runs ("" before configure)."""
        return self.swapper.active_path if self.swapper is not None else ""

    # ---- configuration ---------------------------------------------------------------------
    def _get(self, name: str) -> Any:
        return self.get_parameter(name).value

    def _control_config(self, overrides: dict[str, Any] | None = None) -> ControlConfig:
        timing = self._timing.overrides if self._timing is not None else {}
        return config_from_params(self, ControlConfig, overrides={**timing, **(overrides or {})})

    @locked
    def _validate_parameters(self, params) -> SetParametersResult:
        """Reject a live change the core config refuses, with its reason (shown by rqt_reconfigure)."""
        changes = {p.name: p.value for p in params if p.name in LIVE_CONTROL}
        try:
            if changes:
                config = self._control_config(changes)
                if self.controller is not None:
                    self.controller.check_config(config)
            for p in params:
                if p.name == "policy_path" and not isinstance(p.value, str):
                    raise ValueError("policy_path must be a string path to a .onnx or .lowrl file")
        except ValueError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    @locked
    def _apply_parameters(self, params) -> None:
        names = {p.name for p in params}
        if self.controller is not None and names & set(LIVE_CONTROL):
            self.controller.config = self._control_config()
            if "watchdog_timeout_s" in names and self.controller.active and self.controller.config.mode == "event":
                self._start_watchdog()
        path = next((p.value for p in params if p.name == "policy_path"), None)
        if path is not None and self.swapper is not None:
            self.swapper.request_path(path)

    # ---- lifecycle -------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            if not self._get("policy_path"):
                raise ValueError("policy_path is empty; set it to a .onnx artifact or .lowrl bundle "
                                 "(e.g. models/pendulum_sac_int8.onnx)")
            settings = config_from_params(self, PolicyNodeSettings)  # checks input and engine
            bundle = load_bundle(settings.policy_path, engine=settings.engine)
            fields = tuple(filter(None, self._get("obs_fields")))  # [""]: the typed empty default
            legacy = settings.reads_obs_fields and config_from_params(self, ObsAdapterConfig, obs_fields=fields)
            # One input path: always a robot file (without robot_file, the one the old parameters describe).
            setup = PolicySetup.plan(settings, bundle.contract, legacy=legacy or None, mode=self._get("mode"),
                                     control_period_s=self._get("control_period_s"),
                                     watchdog_timeout_s=self._get("watchdog_timeout_s"), estop=self._estop_latch)
            check_output(setup.actions)  # e.g. trajectory_msgs missing: a FAILURE saying how to install it
            self._timing, self._deploy = setup.timing, setup.deploy  # deploy: the deploy check's diagnostic
            config = self._control_config()
            controller = PolicyController(config, bundle, clock=time.perf_counter, actions=setup.actions,
                                          estop=setup.estop, ladder=setup.ladder)
            receiver = self._make_receiver()
        except Exception as exc:  # noqa: BLE001 - any load failure must become a FAILURE, not a crash
            self.get_logger().error(f"configure failed: {exc}")
            self._publish_diag([diag.status(diag.POLICY_STATUS, Level.ERROR, f"configure failed: {exc}")])
            self._clear_runtime()
            return TransitionCallbackReturn.FAILURE
        self.controller, self.actions, self._estop_latch = controller, setup.actions, setup.estop
        self._builder = ObservationBuilder(setup.spec, setup.last_action)
        for level, line in setup.log_lines(settings.robot_file):
            self._log(level, line)
        engine = settings.engine
        self.swapper = PolicySwapper(controller, lambda path: load_bundle(path, engine=engine),
                                     active_path=settings.policy_path, receiver=receiver, reply=self._reply,
                                     log=self._log, on_reject=lambda _status: self._publish_status())
        self._create_io(setup.spec)
        self.get_logger().info(f"configured: {settings.policy_path} v{bundle.version}, tiers "
                               f"{', '.join(bundle.policies)}, {controller.obs_dim} obs -> {controller.action_dim} "
                               f"actions, {self._timing.text}")
        return TransitionCallbackReturn.SUCCESS

    def _make_receiver(self) -> BundleReceiver:
        """The bundle receiver from the parameters; a key_file that is set but unusable fails configure."""
        config = config_from_params(self, ReceiverConfig, **_RECEIVER_PARAMS, engine=self._get("engine"))
        key = load_key(self._get("key_file")) if self._get("key_file") else None
        for line in config.warnings(key_loaded=key is not None, topic=self._get("bundle_topic")):
            self.get_logger().warning(line)
        return BundleReceiver(config, key)

    def _create_io(self, spec: ObservationSpec) -> None:
        c = self.controller
        self._outputs = PolicyOutputs(self, self.actions, c.output_period_s, obs_dim=c.obs_dim, action_dim=c.action_dim,
                                      controller_name=self._get("controller_name"),
                                      step_topic=self._get("step_topic") if self._get("publish_step") else "")
        if self.actions is not None:
            self._subs.extend(create_estop(self, self.actions, self._on_estop, self._on_estop_reset))
        c.override_timeout_s = self._get("teleop_timeout_s")
        self._subs += create_operator_inputs(self, teleop_topic=self._get("teleop_topic"), on_teleop=self._on_teleop,
                                             reset_topic=self._get("reset_topic"), on_reset=self._on_reset,
                                             ready_topic=self._get("ready_topic"), on_ready=self._on_ready)
        # Event mode: the trigger topic's messages call _observe, which acts at once; fixed_rate: the loop takes.
        trigger = self._observe if self.controller.config.mode == "event" else None
        self.robot_inputs = RobotInputs(self, spec, self._builder, trigger=trigger)
        self._subs.append(self.create_subscription(UInt8, "lowrl/compute_tier", self._on_tier, LATCHED))
        bundle_topic = self._get("bundle_topic")
        self._subs.append(self.create_subscription(UInt8MultiArray, bundle_topic, self._on_bundle, LATCHED))
        # A plain publisher: the trainer gets its answer in any lifecycle state.
        self._bundle_status_pub = self.create_publisher(String, f"{bundle_topic.rstrip('/')}/status", STATUS)
        self._timers.append(self.create_timer(1.0 / self._get("stats_rate_hz"), guarded(self, self._publish_stats)))
        self._timers.append(self.create_timer(self._get("diagnostics_period_s"), guarded(self, self._on_diagnostics)))

    @locked
    def _on_teleop(self, msg: Float64MultiArray) -> None:
        try:
            if self.controller is not None:
                self.controller.set_override(msg.data, time.perf_counter())
        except ValueError as exc:
            self.get_logger().error(f"ignoring {self._get('teleop_topic')}: {exc}", throttle_duration_sec=2.0)

    @locked
    def _on_reset(self, _msg: Empty) -> None:
        if self.controller is not None:
            self._builder.forget("joint_state")  # the soft start after the ready: from a pose measured after this
            self.controller.hold_until_ready(f"reset requested on {self._get('reset_topic')}: no policy until "
                                             f"true on {self._get('ready_topic')}")
            self._tick_held(time.perf_counter())  # its step row marks the reset for the fine-tuner (what goes out
            self.get_logger().info(self.controller.waiting_ready)  # meanwhile: PolicyController.hold_until_ready)

    @locked
    def _on_ready(self, msg: Bool) -> None:
        if self.controller is not None and msg.data and self.controller.waiting_ready:
            self.controller.release_hold()
            self.get_logger().info("robot ready: the policy acts again (soft start)")

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._lock:
            self.controller.activate()
            self._builder.reset(time.perf_counter())  # no sample or history from before this activation
            fixed_rate = self.controller.config.mode == "fixed_rate"
            if not fixed_rate:
                # Event mode acts on observations, on the executor thread: the RT settings go to it.
                self._apply_realtime()
                self._start_watchdog()
        result = super().on_activate(state)  # enables the lifecycle publishers
        if fixed_rate:  # after the publishers are enabled: its first tick may publish at once
            self._loop = ControlLoop(self.controller.output_period_s(), self._loop_tick, on_start=self._apply_realtime,
                                     on_error=self._loop_error, name=f"{self.get_name()}_control",
                                     phase=self.controller.config.phase_lock(self._builder.clock_age)).start()
        self.get_logger().info("activated")
        return result

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_control()  # outside the lock: its last tick takes the lock
        with self._lock:
            sent = self._send_safe_action()  # first: super().on_deactivate silences the lifecycle publishers
        self.get_logger().info("deactivated: " + ("safe action sent" if sent else
                                                  "nothing sent (the joint positions were never measured)"))
        return super().on_deactivate(state)

    def _send_safe_action(self) -> bool:
        """Stop the controller, publish its safe action (on a position interface the measured pose; False: none)."""
        self._update_measured()
        action = self.controller.deactivate()
        if action is not None:
            self._outputs.publish_command(action)
        return action is not None

    def _apply_realtime(self) -> None:
        """rt_* parameters, asked for the calling thread: the control thread (fixed_rate) or the executor's
        (event mode, where the executor runs the control ticks); mlockall is for the whole process."""
        priority, cpus, lock = self._get("rt_priority"), parse_cpus(self._get("rt_cpus")), self._get("rt_lock_memory")
        if priority or cpus or lock:
            self._realtime = apply_realtime(priority, cpus, lock)
            for level, line in self._realtime.lines:
                self._log(level, f"realtime: {line}")

    def _start_watchdog(self) -> None:
        """Event mode: a timer that only notices when the observations stop (the ticks come with them)."""
        self._stop_control(loop=False)
        self._control_timer = self.create_timer(self.controller.config.watchdog_timeout_s / 2, self._on_watchdog_tick)

    def _stop_control(self, loop: bool = True) -> None:
        """End the control thread (fixed_rate; call without holding the lock) and the watchdog timer."""
        loop_, self._loop = (self._loop, None) if loop else (None, self._loop)
        if loop_ is not None:
            loop_.stop()
        if self._control_timer is not None:
            self.destroy_timer(self._control_timer)
            self._control_timer = None

    def _loop_error(self, exc: Exception) -> None:
        self.get_logger().error(f"control tick failed: {type(exc).__name__}: {exc}", throttle_duration_sec=2.0)

    def destroy_node(self) -> None:
        """Stop the control thread before the node's publishers go (a test or tool may skip shutdown)."""
        self._stop_control()
        super().destroy_node()

    def _release(self) -> None:
        self._stop_control()
        for t in self._timers:
            self.destroy_timer(t)
        for s in self._subs:
            self.destroy_subscription(s)
        if self.robot_inputs is not None:
            self.robot_inputs.destroy()
        if self._outputs is not None:
            self._outputs.destroy(self)
        if self._bundle_status_pub is not None:
            self.destroy_publisher(self._bundle_status_pub)
        if self.swapper is not None:
            self.swapper.drop_pending()
        self._clear_runtime()

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._lock:
            self._release()
        self.get_logger().info("cleaned up")
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_control()  # outside the lock: its last tick takes the lock
        with self._lock:
            if self.controller is not None and self.controller.active:
                self._send_safe_action()  # the publishers are still enabled: shutdown does not deactivate them
            self._release()
        return TransitionCallbackReturn.SUCCESS

    # ---- control path ----------------------------------------------------------------------
    @locked
    def _observe(self, t0: float) -> None:
        """Take the newest sample of each robot topic and build the observation (a bad or stale one becomes
        the reason for the safe action); in event mode act at once, the trigger's arrival ``t0`` the reference."""
        try:
            self.robot_inputs.take()
            self.controller.observe(self._builder.build(time.perf_counter()))
        except ObservationError as exc:
            self.controller.observe(None, str(exc))
        except Exception as exc:  # noqa: BLE001 - never die on input
            self.controller.observe(None, f"unexpected {type(exc).__name__}: {exc}")
        if self.controller.config.mode == "event":
            self._tick(t0)

    # The control thread already holds the lock (_loop_tick): these skip the re-entry (a frame and an RLock each).
    _observe_held = _observe.__wrapped__

    def _loop_tick(self, due: float, skipped: int) -> bool:
        """One tick of the control thread (fixed_rate): ``due`` is when it was due on the schedule, so lateness
        is counted; each skipped period is an output that never came. False: the node was released."""
        with self._lock:
            if self.controller is None:
                return False
            self.controller.deadline_misses += skipped
            if self.robot_inputs is not None and self.controller.active:
                self._observe_held(due)
            self._tick_held(due)
            return True

    @locked
    def _on_watchdog_tick(self) -> None:
        age = self.controller.observation_age()
        if age is None or age > self.controller.config.watchdog_timeout_s:
            self._tick(time.perf_counter())

    @locked
    def _tick(self, reference: float) -> None:
        # Inactive: no control work (ticks not counted); the lifecycle publishers would drop the output anyway.
        c = self.controller
        if c is None or not c.active:
            return
        try:
            self.swapper.take()
            self._update_measured()
            result = c.step(reference)
        except Exception as exc:  # noqa: BLE001 - a failing policy call must still end in a command
            c.last_error = f"control step failed: {type(exc).__name__}: {exc}"
            c.last_error_time = time.perf_counter()
            result = None
        action = c.safe_action() if result is None else result.action
        self._builder.after_step(result)  # the last_action rule
        sent = action is not None and (result is None or result.source not in (NOTHING, RESET))  # no command due
        if sent:
            self._outputs.publish_command(action)
        self._outputs.publish_tick(result, action if sent else None, policy_version=c.bundle.version,
                                   estop=self._estop_latch is not None and self._estop_latch.latched, obs=c.observation)
        intervening = result is not None and result.intervention
        if intervening != self._intervening:  # say so at once, not at the next diagnostics period
            self._intervening = intervening
            self._log(Level.WARN if intervening else Level.OK, "intervention active: the teleop action replaces the "
                      "policy's" if intervening else "intervention ended: the policy acts again")
            self._publish_status()
        if self._input_reports.due(c.last_error_time, time.perf_counter()):  # a new input error: say so now
            self._publish_status()

    _tick_held = _tick.__wrapped__  # see _observe_held

    def _update_measured(self) -> None:
        """Hand the newest measured positions of the policy's joints to the controller (robot file)."""
        if self.actions is None or self.controller is None:
            return
        sample = self._builder.joint_state()
        if sample is not None:
            self.controller.set_measured(measured_positions(*sample, self.actions.joint_index))

    # ---- e-stop, tiers, hot-swap ----------------------------------------------------------
    @locked
    def _on_estop(self, asserted: bool) -> None:
        latch = self._estop_latch
        if latch is not None and latch.update(asserted, time.perf_counter()):
            self._log(Level.ERROR, f"e-stop on {latch.topic}: safe action latched until a reset on {latch.reset_topic}")
            self._tick(time.perf_counter())  # the safe action now, not at the next tick
            self._publish_status()

    @locked
    def _on_estop_reset(self) -> None:
        if self._estop_latch is not None:
            released, line = self._estop_latch.reset()
            self._log(Level.WARN if released else Level.ERROR, line)
            self._publish_status()

    @locked
    def _on_tier(self, msg: UInt8) -> None:
        try:
            line = self.controller.set_tier(msg.data)
        except ValueError as exc:
            self.get_logger().error(f"ignoring compute tier: {exc}")
            return
        if line:
            self._log(Level.WARN if self.controller.tier > ComputeTier.FULL else Level.OK, line)
            # fixed_rate: the loop re-timed to the tier's period, and its first output now, not at the next wake.
            c = self.controller
            if self._loop is not None and c.active and self._loop.retime(c.output_period_s()):
                self._tick(time.perf_counter())
            self._publish_status()

    @locked
    def _on_bundle(self, msg: UInt8MultiArray) -> None:
        """A bundle from the trainer: only queued here; all checking happens on the swap worker."""
        if self.swapper is not None:
            self.swapper.request_bundle(msg.data.tobytes() if hasattr(msg.data, "tobytes") else bytes(msg.data))

    def _reply(self, status: BundleStatus) -> None:
        self._bundle_status_pub.publish(String(data=status.to_json()))

    def _log(self, level: Level, line: str) -> None:
        diag.log(self.get_logger(), level, line)

    # ---- reporting -------------------------------------------------------------------------
    def _publish_stats(self) -> None:
        # The percentiles (a partition of up to latency_window samples) run off the lock the control thread ticks
        # under. Nobody subscribes (no budget monitor, recorder or tool): not built (~0.5 % of a core at 10 Hz).
        with self._lock:
            c = self.controller
            if c is None or not self._outputs.stats.get_subscription_count():
                return
            numbers, latencies = c.stats(percentiles=False), c.latency.snapshot()
        numbers["window_p50_us"], numbers["window_p99_us"] = percentiles_us(latencies)
        stats = PolicyStats(pid=float(os.getpid()), **numbers)
        with self._lock:
            if self.controller is not c:  # released or reconfigured meanwhile: its publisher may be gone
                return
            self._outputs.publish_stats(stats.to_list())

    @locked
    def _on_diagnostics(self) -> None:
        """The diagnostics timer: the matched-event counts' safety net (Listened.refresh), then the status."""
        if self._outputs is not None:
            self._outputs.refresh()
        self._publish_status()

    def _publish_diag(self, statuses: list) -> None:
        self._diag_pub.publish(diag.array(self.get_clock().now().to_msg(), statuses, self.get_namespace()))

    @locked
    def _publish_status(self) -> None:
        c, swapper = self.controller, self.swapper
        # Nobody subscribes to /diagnostics (no aggregator, no tool): the message would be dropped, so it is not
        # built. A subscriber gets the next one (the timer's period, or at once on the next event).
        if c is None or swapper is None or not self._diag_pub.get_subscription_count():
            return
        running = RunningPolicy(version=c.bundle.version, path=swapper.active_path, tiers=tuple(c.bundle.policies),
                                active=c.active, last_error=c.last_error, last_error_time=c.last_error_time,
                                bundle_topic=self._get("bundle_topic"), inputs=self._builder.inputs())
        entries = policy_status({**c.stats(), **c.timing_stats()}, swapper.status(), swapper.stream_status(),
                                TierView(c.tier, c.requested_tier, c.ladder), time.perf_counter(), running, time.time())
        entries += robot_io_status(timing=self._timing, estop=self._estop_latch, teleop_topic=self._get("teleop_topic"),
                                   override_held=c.override_held(), interventions=c.interventions,
                                   realtime=self._realtime, deploy=self._deploy,
                                   phase=self._loop.phase if self._loop is not None else None)
        self._publish_diag(diag.from_entries(entries))


def _deactivate(node: PolicyNode) -> None:
    if node.controller is not None and node.controller.active:
        node.trigger_deactivate()  # the actuators get the safe action on the way out


def main(args: list[str] | None = None) -> int:
    return run_node("policy_node", PolicyNode, args=args, start=autostart, stop=_deactivate)


if __name__ == "__main__":
    sys.exit(main())
