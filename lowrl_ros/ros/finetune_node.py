"""finetune_node: records every transition on the robot and fine-tunes the running policy.

In: the policy node's step rows (``lowrl/policy/step``: what the policy saw, what was executed, whether a
person intervened, which version ran; core/runtime/step_row.py), for every robot; the reward, either the
robot file's ``reward:`` terms computed here (with their reward-only ``inputs``, and JointState efforts for
a joint_effort term the policy does not observe) or a reward topic (``/lowrl/reward``, std_msgs/Float64)
with the robot's episode ends (``/lowrl/episode`` or ``/lowrl/episode_return``); the compute tier
(``/lowrl/compute_tier``, latched) and ``/diagnostics`` (a swap the policy node rejected). Without a
``robot_file`` the old obs_fields/input parameters describe one (core/runtime/robot_file.py, logged once).

Out: transitions on disk (core/finetune/transition_log.py: MCAP + write-ahead log); new versions through
``/<policy_node>/set_parameters`` (the policy node's own validation, warm-up and atomic swap); a reset
request on ``reset_topic`` at each end of the robot file's ``episode:``; ``/diagnostics`` under
``lowrl/finetune/{log,learner,versions,reward}``. ``learner: offboard``: it streams the transitions on
``transitions_topic`` to trainer_node instead, its first ``record_episodes`` episodes cut for the identification.

The decisions live in core: the recorder (core/finetune/recorder.py: rows -> transitions, episode ends),
the session (learning, versions, rollback) and the learner thread (core/finetune/learner_loop.py: niced,
only while the tier is FULL and memory is under ``memory_cap_mb``). This process imports torch; the policy
node and budget monitor never do.
"""
from __future__ import annotations

import collections
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Twist, TwistStamped
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Empty, Float32MultiArray, Float64, Float64MultiArray, UInt8

from lowrl_ros.core.finetune.kit import recording_policy
from lowrl_ros.core.finetune.learner import FineTuner
from lowrl_ros.core.finetune.config import FineTuneConfig, FineTuneNodeSettings
from lowrl_ros.core.finetune.demos import load_demos
from lowrl_ros.core.finetune.episode_log import EpisodeTermsLog
from lowrl_ros.core.finetune.session import Event, FineTuneSession, Paused, Rollback, VersionMade
from lowrl_ros.core.finetune.learner_loop import SessionLearner, drain, run_learner
from lowrl_ros.core.finetune.status import FineTuneFacts, LearnGate, finetune_status
from lowrl_ros.core.finetune.recorder import EpisodeEnded, EpisodeRecorder, Recorded, RobotSpecs
from lowrl_ros.core.finetune.wire import column_names, encode_transitions
from lowrl_ros.core.runtime import step_row
from lowrl_ros.core.runtime.joints import JointIndex
from lowrl_ros.core.runtime.obs_adapter import ObsAdapterConfig
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.core.finetune.transition_log import TransitionLogConfig, TransitionLogWriter
from lowrl_ros.core.runtime.robot_file import (RobotFile, legacy_robot_file, load_robot_file, parse_robot_file,
                                             robot_file_yaml)
from lowrl_ros.core.types import Level
from lowrl_ros.ros.params import add_post_set_callback, config_from_params, declare_config
from lowrl_ros.ros.spinning import guarded, make_executor, run_node
from lowrl_ros.ros import diagnostics as diag
from lowrl_ros.ros.qos import LATCHED, RECORD, STATUS

DIAG_PREFIX = "lowrl/finetune"
LOG_PREFIX = "log_"  # TransitionLogConfig fields appear as log_<field> parameters


# The observation adapter as parameters: no extra observation here (the policy node's extra_obs_dim).
_ADAPTER_PARAMS: dict[str, Any] = dict(skip=("extra_obs_dim",))


class FineTuneNode(Node):
    """The on-robot fine-tuner; see the module docstring and docs/finetune.md."""

    def __init__(self, node_name: str = "finetune_node", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        declare_config(self, FineTuneNodeSettings)
        # [""]: a typed (string) array, as the policy node's.
        declare_config(self, ObsAdapterConfig, defaults={"obs_fields": [""]}, **_ADAPTER_PARAMS)
        declare_config(self, FineTuneConfig)
        declare_config(self, TransitionLogConfig, prefix=LOG_PREFIX)
        add_post_set_callback(self, self._on_parameters_set)

        get = self._get
        self.config = config_from_params(self, FineTuneConfig)
        self.log_config = config_from_params(self, TransitionLogConfig, prefix=LOG_PREFIX)
        config_from_params(self, FineTuneNodeSettings)  # checks the choices
        kit = recording_policy(get("kit_path"), get("base_policy_path"), get("learner") == "offboard")
        self.robot_file = get("robot_file")
        self.robot = self._robot(kit)  # what the step rows describe
        specs = RobotSpecs.from_robot_file(self.robot, kit.contract.control_period_s)
        specs.check_against(kit)  # before anything touches the disk
        specs.cut_recording(get("record_episodes"), get("record_time_limit_steps"))
        self.rewards, self.episodes = specs.rewards, specs.episodes
        self.obs_dim, self.action_dim = kit.obs_dim, kit.action_dim
        self.work_dir = Path(get("work_dir")).expanduser()
        log_dir = self.work_dir / "transitions"
        # Open (and repair) the log first, then read it all back: resume = reload what is on disk.
        self.writer = TransitionLogWriter(log_dir, self.log_config)
        self.offboard = get("learner") == "offboard"
        self.resumed = 0
        self.resumed_from_wal = self.writer.repaired
        self.session: FineTuneSession | None = None
        self.tuner: FineTuner | None = None
        if not self.offboard:  # off-board, the trainer node keeps its own log and buffer
            self.session = FineTuneSession(kit, self.config, self.work_dir, base_path=get("base_policy_path"),
                                           base_version=get("base_version") or None)
            self.tuner = self.session.tuner
            if get("demos_dir"):
                kept = self.tuner.add_demos(load_demos(Path(get("demos_dir")).expanduser()))
                self.get_logger().info(f"demo buffer: {kept} transitions from {get('demos_dir')}")
            report = self.session.resume(log_dir)
            self.resumed = report.transitions
            if self.resumed:
                self.get_logger().info(f"resumed: {report.transitions} transitions from {report.segments} segments "
                                       f"({self.writer.repaired} rebuilt from a crash's write-ahead log), "
                                       f"learner at {report.updates} updates, running v{report.running}")

        # Executor-thread state.
        self.recorder = EpisodeRecorder(self.rewards, self.episodes, await_ready=bool(get("ready_topic")))
        self.recorded = self.bad_inputs = self.callback_errors = 0
        self.received: collections.Counter = collections.Counter()  # messages per input, for diagnostics
        self.tier: ComputeTier | None = None  # unknown until the budget monitor speaks: no learning
        self._requested: dict[str, int] = {}  # artifact path -> version, for rejection reports
        # Per-episode return, reward terms and interventions, for the session report (computed rewards only).
        self.episode_log = EpisodeTermsLog(self.work_dir, self.rewards.names) if specs.computed else None
        self.resets_requested = 0
        self._effort_index = JointIndex(specs.joints)  # joint_effort from JointState, the policy's joint order
        self._effort_lacking: tuple[str, ...] = ()
        # Worker hand-over (thread-safe containers).
        self._to_learner: collections.deque = collections.deque()
        self._swaps: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self.rss_mb = 0.0

        # Pairing a reward or an episode end from a topic with its step needs each message's DDS source timestamp
        # (the message info). With the robot file computing both, the step row's own stamp is enough, and the
        # node runs on the EventsExecutor (main; docs/finetune_reference.md gives the CPU it saves).
        self.needs_message_info = not self.computed_reward or self.episodes is None or get("executor") == "single"
        step_cb = self._on_step if self.needs_message_info else (lambda msg: self._on_step(msg, None))
        self.create_subscription(Float64MultiArray, get("step_topic"), step_cb, RECORD)
        if self.rewards is not None and self.rewards.needs_effort:  # joint_effort, effort not observed
            self.create_subscription(JointState, get("joint_states_topic"), self._on_effort, RECORD)
        self._subscribe_reward_inputs()
        if not self.computed_reward:
            topic = self.rewards.topic if self.rewards is not None else get("reward_topic")
            self.create_subscription(Float64, topic, self._on_reward, RECORD)
        if self.episodes is not None:
            self._reset_pub = self.create_publisher(Empty, get("reset_topic"), STATUS)
            if get("ready_topic"):
                self.create_subscription(Bool, get("ready_topic"), lambda m: m.data and self.recorder.ready(), LATCHED)
        elif get("episode_info_topic"):
            self.create_subscription(Float64MultiArray, get("episode_info_topic"), self._on_episode_info, RECORD)
        else:
            self.create_subscription(Float64, get("episode_topic"), self._on_episode, RECORD)
        self.create_subscription(UInt8, "lowrl/compute_tier", self._on_tier, LATCHED)
        self.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 50)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        service = f"{get('policy_node').rstrip('/')}/set_parameters"  # relative: the policy node beside it
        self._set_params = self.create_client(SetParameters, service)
        self.create_timer(0.1, guarded(self, self._housekeeping, on_error=self._callback_failed, throttle_s=1.0))
        self.create_timer(get("diagnostics_period_s"),
                          guarded(self, self._publish_diagnostics, on_error=self._callback_failed, throttle_s=1.0))
        self._stop = threading.Event()
        self._learner = SessionLearner(self.session, self.config.updates_per_slice, self._carry) \
            if self.session is not None else None
        self._worker = threading.Thread(target=run_learner, name="finetune-learner", daemon=True, args=(
            self._learner, self._to_learner, self._gate, self._stop), kwargs=dict(nice=self.config.nice, log=self._log))
        # Off-board: transitions numbered from 0 at each start (the receiver sees a restart as a new run).
        self._outbox: list = []
        self.streamed = 0
        self._next_index = 0
        if self.offboard:
            self._tx_pub = self.create_publisher(Float64MultiArray, get("transitions_topic"), RECORD)
            self.get_logger().info(f"recording to {log_dir}; learning off-board: streaming transitions on "
                                   f"{get('transitions_topic')} to trainer_node")
        else:
            self._worker.start()
            self.get_logger().info(f"recording to {log_dir}; kit {get('kit_path')} ({kit.train_config.algo}, "
                                   f"{kit.obs_dim} obs -> {kit.action_dim} actions); versions to {service}"
                                   + "".join(f"; {note}" for note in self.tuner.notes))

    def _get(self, name: str) -> Any:
        return self.get_parameter(name).value

    def _robot(self, kit) -> RobotFile:
        """The robot file; without one, the one the old observation parameters describe (logged once, to keep)."""
        if self.robot_file:
            return load_robot_file(self.robot_file)
        adapter = config_from_params(self, ObsAdapterConfig, **_ADAPTER_PARAMS,
                                     obs_fields=tuple(f for f in self._get("obs_fields") if f))
        data = legacy_robot_file(adapter.obs_fields, adapter.obs_offset, adapter.obs_scale, input=self._get("input"),
                                 obs_dim=kit.obs_dim, joint_states_topic=self._get("joint_states_topic"),
                                 observation_topic=self._get("observation_topic"))
        self.get_logger().info("no robot_file: reading the step rows of this robot file, built from obs_fields/input "
                               "(save it and pass robot_file:=... to the policy node and here):\n"
                               + robot_file_yaml(data))
        return parse_robot_file(data, "robot file from obs_fields/input")

    def _subscribe_reward_inputs(self) -> None:
        """The robot file's reward-only inputs (e.g. a state estimator's twist): read here, not by the policy
        node, so the policy's observation and its step message stay as they are. One subscription per topic
        (a TwistStamped can feed a linear and an angular input)."""
        if self.rewards is None:
            return
        by_topic: dict[tuple[str, str], list] = {}
        for x in self.rewards.inputs:
            by_topic.setdefault((x.topic, x.type), []).append(x)
        for (topic, kind), inputs in by_topic.items():
            msg_type = {"twist_stamped": TwistStamped, "twist": Twist}.get(kind, Float32MultiArray)
            self.create_subscription(msg_type, topic, self._reward_input_callback(inputs), RECORD)

    def _reward_input_callback(self, inputs: list):
        # A closure of one argument: rclpy passes the message info to callbacks that take two.
        return lambda msg: self._on_reward_input(msg, inputs)

    def _on_reward_input(self, msg: Any, inputs: list) -> None:
        now = time.monotonic()
        twist = getattr(msg, "twist", msg)  # TwistStamped carries a Twist
        for x in inputs:
            if x.type == "float32_multi_array":
                value = msg.data
            else:
                v = getattr(twist, x.field)
                value = (v.x, v.y, v.z)
            try:
                self.rewards.set_input(x.name, value, now)
            except ValueError as exc:
                self._bad(str(exc))
                continue
            self.received[f"reward_input.{x.name}"] += 1

    @property
    def computed_reward(self) -> bool:
        """The reward comes from the robot file's terms (not a topic)."""
        return self.recorder.computed

    @property
    def state(self) -> str:
        """The learner's state (status.py's states; "offboard" when it learns elsewhere)."""
        return "offboard" if self.session is None else self.session.state

    @property
    def worker_error(self) -> str:
        return self._learner.error if self._learner is not None else ""

    @property
    def running_version(self) -> int:
        """What the policy node runs (0: not heard yet)."""
        return self.recorder.running_version

    @property
    def interventions(self) -> int:
        return self.recorder.interventions

    @property
    def paused_reason(self) -> str:
        return self.session.paused_reason if self.session is not None else ""

    @property
    def last_decision(self) -> str:
        return self.session.last_decision if self.session is not None else "none"

    def _on_parameters_set(self, params) -> None:
        """Post-set: the change is accepted (on-set callbacks only validate, and any of them may refuse it)."""
        for prm in params:
            if prm.name == "enabled" and prm.value and self.session is not None:
                self.session.clear_pause()  # an operator re-enabling clears a safety pause

    def _callback_failed(self, _exc: Exception) -> None:
        self.callback_errors += 1  # shown in the log diagnostics: reporting must never stop recording

    # ---- recording (executor thread) --------------------------------------------------------
    # Callbacks take (msg, info): the pairing uses each message's DDS source timestamp (when its
    # publisher sent it), so the order in which different topics arrive here does not matter.
    def _on_step(self, msg: Float64MultiArray, info) -> None:
        """One policy-node tick (the step row: core/runtime/step_row.py)."""
        try:
            row = step_row.decode_step(msg.data, self.obs_dim, self.action_dim)
        except step_row.StepRowError as exc:
            self._bad(f"{self._get('step_topic')}: {exc}")
            return
        self.received["step"] += 1
        sent = _sent(info) if info is not None else row.stamp  # the policy node's wall clock at the tick
        self._record(self.recorder.step(row, sent, time.monotonic()))

    def _on_effort(self, msg: JointState) -> None:
        """joint_effort without an effort observation: the newest efforts of the policy's joints, by name."""
        effort = self._effort_index.take(msg.name, msg.effort)
        if effort is not None:
            self.recorder.effort = effort
        elif tuple(msg.name) != self._effort_lacking:  # said once per name list
            self._effort_lacking = tuple(msg.name)
            what = ", ".join(self._effort_index.missing(msg.name)) or "its joints"
            self._bad(f"{self._get('joint_states_topic')} lacks the effort of {what}; the joint_effort "
                      "reward needs the driver to fill JointState.effort")

    def _on_reward(self, msg: Float64, info) -> None:
        if not math.isfinite(msg.data):
            self._bad(f"reward {msg.data} is not finite")
            return
        self.received["reward"] += 1
        self._record(self.recorder.reward(msg.data, _sent(info), time.monotonic()))

    def _on_episode_info(self, msg: Float64MultiArray, info) -> None:
        if len(msg.data) < 4:
            self._bad(f"{self._get('episode_info_topic')} has {len(msg.data)} values; expected "
                      "[index, return, length, terminated]")
            return
        self._episode_ended(float(msg.data[1]), "terminated" if msg.data[3] else "truncated", _sent(info))

    def _on_episode(self, msg: Float64, info) -> None:
        self._episode_ended(float(msg.data), self._get("episode_end_kind"), _sent(info))

    def _episode_ended(self, ret: float, kind: str, sent: float) -> None:
        self._record(self.recorder.episode_end(ret, kind, sent))

    def _bad(self, reason: str) -> None:
        self.bad_inputs += 1
        self.get_logger().warning(f"ignoring input: {reason}", throttle_duration_sec=2.0)

    def _record(self, recorded: list[Recorded]) -> None:
        """Act on what the recorder completed: transitions to disk and the learner, episode ends judged."""
        for t in recorded:
            if isinstance(t, EpisodeEnded):
                self._ended(t)
                continue
            self.writer.append(t)  # durable when it returns (write-ahead log)
            self.recorded += 1
            if self.offboard:
                self._outbox.append(t)
            else:
                self._to_learner.append(("transition", t))
        if len(self._outbox) >= 50:
            self._stream_transitions()

    def _ended(self, end: EpisodeEnded) -> None:
        self.received["episode"] += 1
        if end.judged is not None:
            self._to_learner.append(("episode", end.judged))
        if not end.reset:
            return
        # The robot file's episode: ended it: log it, ask the robot to reset.
        terms = ", ".join(f"{k} {v:.2f}" for k, v in end.term_sums.items())
        self.get_logger().info(f"episode end ({end.reason}): return {end.ret:.2f} ({terms}); "
                               f"reset requested on {self._get('reset_topic')}")
        if self.episode_log is not None:
            self.episode_log.append(time.time(), self.episode_log.rows + 1, end.kind, end.ret, end.steps,
                                    end.interventions, end.version, list(end.term_sums.values()))
        self._reset_pub.publish(Empty())
        self.resets_requested += 1

    def _stream_transitions(self) -> None:
        """Off-board: send what was recorded since the last batch (one message, numbered rows)."""
        if not self._outbox:
            return
        from std_msgs.msg import MultiArrayDimension

        rows = encode_transitions(self._outbox, self._next_index)
        first = self._outbox[0]
        n_terms, n_command = len(first.reward_terms), 0 if first.command is None else len(first.command)
        self._next_index += len(self._outbox)
        self._outbox = []
        msg = Float64MultiArray()
        msg.layout.dim = [MultiArrayDimension(label="transitions", size=rows.shape[0], stride=rows.size),
                          MultiArrayDimension(label=column_names(self.obs_dim, self.action_dim, n_terms, n_command),
                                              size=rows.shape[1], stride=rows.shape[1])]
        msg.data = rows.ravel().tolist()
        self._tx_pub.publish(msg)
        self.streamed += rows.shape[0]

    def _on_tier(self, msg: UInt8) -> None:
        try:
            tier = ComputeTier.parse(msg.data)
        except ValueError as exc:
            self._bad(str(exc))
            return
        if tier != self.tier:
            self.get_logger().info(f"compute tier {tier.label}: learning "
                                   f"{'allowed' if tier == ComputeTier.FULL else 'paused'}")
        self.tier = tier

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name != diag.robot_name(diag.POLICY_STATUS, self.get_namespace()):  # ours only
                continue
            rejected = diag.swap_rejection(status, self.get_namespace())  # swap_* keys (CONTRACTS.md), not text
            if rejected is not None:
                version = self._requested.pop(rejected[0], None)
                if version is not None:
                    swap = next((kv.value for kv in status.values if kv.key == "swap"), "")
                    self._to_learner.append(("rejected", version, swap))

    # ---- publishing versions (executor thread) ----------------------------------------------
    def _housekeeping(self) -> None:
        self.writer.roll_if_due()
        # Steps whose reward never came are given up here too when no message arrives at all.
        self._record(self.recorder.timeout(time.monotonic()))
        if self.offboard:
            self._stream_transitions()
        if not self._swaps:
            return
        if not self._set_params.service_is_ready():
            self.get_logger().warning(f"waiting for {self._set_params.srv_name} to publish a version",
                                      throttle_duration_sec=5.0)
            return
        with self._lock:
            path, version, why = self._swaps[-1]  # newest wins
            self._swaps.clear()
        self._requested[path] = version
        self.recorder.swap_requested()  # the episode under way will have run two versions: not judged
        req = SetParameters.Request(parameters=[Parameter(
            name="policy_path", value=ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=path))])
        future = self._set_params.call_async(req)
        future.add_done_callback(lambda f: self._swap_answered(f, path, version))
        self.get_logger().info(f"asking {self._set_params.srv_name} to run v{version} ({why}): {path}")

    def _swap_answered(self, future, path: str, version: int) -> None:
        try:
            result = future.result().results[0]
        except Exception as exc:  # noqa: BLE001 - a failed call is retried by the next request
            self.get_logger().error(f"setting policy_path to v{version} failed: {exc}")
            return
        if not result.successful:
            self.get_logger().error(f"the policy node refused v{version}: {result.reason}")
            self._to_learner.append(("rejected", version, f"refused: {result.reason}"))

    # ---- learning (worker thread) -----------------------------------------------------------
    def _gate(self, rss_mb: float) -> LearnGate:
        self.rss_mb = rss_mb
        return LearnGate(enabled=self._get("enabled"), tier=self.tier, rss_mb=rss_mb,
                         memory_cap_mb=self.config.memory_cap_mb)

    def _log(self, level: Level, line: str) -> None:
        log = self.get_logger()
        (log.error if level == Level.ERROR else log.warning)(line, throttle_duration_sec=10.0)

    def _carry(self, events: list[Event]) -> None:
        """Carry the session's events to the robot: versions and rollbacks become swap requests."""
        for event in events:
            if isinstance(event, VersionMade):
                record = event.record
                with self._lock:
                    self._swaps.append((record.path, record.version, f"new version, parent v{record.parent_version}"))
                continue
            self.get_logger().info(event.reason)
            if isinstance(event, Rollback):
                self.get_logger().warning(f"rolling back to v{event.target.version}: {event.reason}")
                with self._lock:
                    self._swaps.append((event.target.path, event.target.version, "rollback"))
            elif isinstance(event, Paused):
                self.get_logger().error(f"learning paused: {event.reason}; set enabled:=true to resume")

    # ---- reporting ---------------------------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        t = self.tuner
        facts = FineTuneFacts(
            recorded=self.recorded, resumed=self.resumed, rebuilt_from_wal=self.resumed_from_wal,
            bad_inputs=self.bad_inputs, callback_errors=self.callback_errors,
            dropped_segments=self.writer.dropped_segments, log_dir=str(self.writer.directory),
            received=dict(self.received), offboard=t is None, streamed=self.streamed,
            transitions_topic=self._get("transitions_topic"), state=self.state, rss_mb=self.rss_mb,
            memory_cap_mb=self.config.memory_cap_mb, backlog=len(self._to_learner),
            tier=self.tier.label if self.tier is not None else "unknown", resets_requested=self.resets_requested,
            reward_terms=self.rewards.names if self.computed_reward else ())
        facts.read(self.session, self.recorder, time.monotonic(), time.time())
        statuses = diag.from_entries(finetune_status(facts, DIAG_PREFIX))
        self._diag_pub.publish(diag.array(self.get_clock().now().to_msg(), statuses, self.get_namespace()))

    def close(self) -> None:
        """Stop learning, seal the open step, close the log and save the learner."""
        self._stop.set()
        if self._worker.is_alive():
            self._worker.join(timeout=30.0)
        self._record(self.recorder.flush())
        if self.offboard:
            self._stream_transitions()
        self.writer.close()
        if self.episode_log is not None:
            self.episode_log.close()
        if self.session is not None and not self._worker.is_alive():
            drain(self._learner, self._to_learner)
            self.session.close()


def _sent(info) -> float:
    """When the publisher sent the message (s); the local clock if the middleware gives no stamp."""
    stamp = info.get("source_timestamp", 0) if info else 0
    return stamp * 1e-9 if stamp else time.time()


def main(args: list[str] | None = None) -> int:
    # The EventsExecutor only where no callback takes the message info (it fails on those in this rclpy): a
    # reward or episode topic is paired by its source timestamps, single-threaded.
    return run_node("finetune_node", FineTuneNode, args=args,
                    make_executor_fn=lambda node: make_executor(events=not node.needs_message_info))

if __name__ == "__main__":
    sys.exit(main())
