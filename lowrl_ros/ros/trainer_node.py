"""trainer_node: streams policy bundles from the off-board computer to the robot (rclpy Node).

Out: ``/lowrl/policy_bundle`` (std_msgs/UInt8MultiArray, latched: reliable + transient_local,
depth 1; one message = one whole signed bundle version, lowrl_ros/core/stream/protocol.py), so a
robot that (re)starts later still gets the newest version at once; ``/diagnostics``
(``lowrl/trainer/stream``, ``lowrl/trainer/robot``, ``lowrl/trainer/security``).
In: ``/lowrl/policy_bundle/status`` (std_msgs/String, JSON ``BundleStatus``): the robot's answer;
a request to re-send (damage in transit) is served up to ``max_resends`` times per version.

The source is one file (``bundle_path``, live: setting it publishes the new file) or a directory
(``watch_dir``) that `lowrl compress -o DIR/vN.lowrl --version N` writes into; it is polled every
``poll_period_s`` and the newest version is published, never an older one than already published
or reported running by the robot. Bundles are validated (``load_bundle``) before they are sent.

Without a ``key_file`` the node refuses to start, unless ``insecure:=true``: then bundles go out
unsigned (all-zero HMAC, accepted only by a robot with ``require_signature:=false``), a WARN is
logged at start and an ERROR diagnostic is published every period.

Off-board fine-tuning (``finetune_kit`` set): the node also takes the robot's transitions from
``transitions_topic`` (finetune_node with ``learner: offboard`` streams them;
lowrl_ros/core/finetune/offboard.py), learns from them with the fine-tuner's core in a worker thread,
keeps every transition received and its learner under ``finetune_work_dir`` (a restart resumes),
and releases each new version (and a rollback, as a newer version carrying the best weights) as a
bundle into ``watch_dir``, from where the stream above sends it; a version the robot rejects trips
a rollback. FineTuneConfig fields are parameters named ``finetune.<field>``.
Off-board identification (``offboard_method: sysid``, the legged example robot; no kit, no torch): the
same transitions identify the robot's gap (lowrl_ros/core/finetune/offboard_sysid.py), and the base
(``base_policy_path``) is released with the identified sensor biases folded in as the next version,
judged against the base over whole episodes and rolled back if worse; ``sysid.<field>`` parameters;
a restart with the same ``finetune_work_dir`` resumes it too.
Without a kit this node imports no torch: it streams files that `lowrl train`/`lowrl compress` produced.
"""
from __future__ import annotations

import collections
import sys
import threading
from pathlib import Path
from typing import Any

from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from std_msgs.msg import Float64MultiArray, String, UInt8MultiArray

from lowrl_ros.core.finetune.config import TrainerNodeSettings
from lowrl_ros.core.finetune.wire import decode_transitions
from lowrl_ros.core.stream.protocol import BundleStatus, load_key
from lowrl_ros.core.stream.sender import BundleSender, SendEvent, StreamConfig
from lowrl_ros.core.types import Level
from lowrl_ros.ros import diagnostics as diag
from lowrl_ros.ros.params import add_post_set_callback, config_from_params, declare_config
from lowrl_ros.ros.spinning import guarded, run_node
from lowrl_ros.ros.qos import LATCHED, STATUS

DIAG_PREFIX = "lowrl/trainer"


FINETUNE_PREFIX = "finetune."  # FineTuneConfig fields appear as finetune.<field> parameters
SYSID_PREFIX = "sysid."  # offboard_method sysid: SysidSettings fields as sysid.<field>


class TrainerNode(Node):
    """Publishes bundle versions and serves the robot's re-send requests. See the module docstring.

    Raises:
        ValueError: at construction, when the parameters make no valid StreamConfig (no key and
            not insecure, no source, ...) or the key file is unusable; the message says how to fix it.
    """

    def __init__(self, node_name: str = "trainer_node", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        declare_config(self, StreamConfig)
        declare_config(self, TrainerNodeSettings)
        config = self._stream_config()
        key = load_key(config.key_file) if config.key_file else None
        self.sender = BundleSender(config, key)
        topic = self.get_parameter("bundle_topic").value
        self._bundle_pub = self.create_publisher(UInt8MultiArray, topic, LATCHED)
        self.create_subscription(String, f"{topic.rstrip('/')}/status", self._on_status, STATUS)
        self._diag_pub = self.create_publisher(diag.DiagnosticArray, "/diagnostics", 10)
        self.publications = 0  # messages put on the wire (first sends and re-sends)
        self._stream = (Level.OK, "nothing published yet", {})
        self._robot = (Level.OK, "no answer from a robot yet", {})
        self.add_on_set_parameters_callback(self._validate_parameters)
        add_post_set_callback(self, self._apply_parameters)
        self.learner = None
        method = self.get_parameter("offboard_method").value
        if method not in ("finetune", "sysid", "retrain"):
            raise ValueError(f"offboard_method {method!r}: use finetune (with finetune_kit), sysid (the legged "
                             "example) or retrain (any robot file with a sim: section)")
        if method == "sysid":
            self._start_sysid(config)
        elif method == "retrain":
            self._start_retrain(config)
        elif self.get_parameter("finetune_kit").value:
            self._start_learner(config)
        self.create_timer(config.poll_period_s, guarded(self, self.poll))
        self.create_timer(self.get_parameter("diagnostics_period_s").value, guarded(self, self._publish_diagnostics))
        if key is None:
            self.get_logger().warning("INSECURE: no key_file, bundles go out UNSIGNED; only a robot with "
                                      "require_signature:=false accepts them. Set key_file for a real robot.")
        source = config.bundle_path or f"{config.watch_dir}/{config.pattern}"
        self.get_logger().info(f"streaming {source} on {topic} ({config.chunk_size}-byte chunks, "
                               f"{'signed' if key else 'UNSIGNED'})")

    # ---- off-board fine-tuning ----------------------------------------------------------------
    def _start_learner(self, config: StreamConfig) -> None:
        from lowrl_ros.core.finetune.kit import load_kit  # torch: only in this mode
        from lowrl_ros.core.finetune.config import FineTuneConfig
        from lowrl_ros.core.finetune.offboard import OffboardLearner

        if not config.watch_dir:
            raise ValueError("finetune_kit needs watch_dir: the directory new versions are released into and "
                             "streamed from")
        declare_config(self, FineTuneConfig, prefix=FINETUNE_PREFIX)
        ft = config_from_params(self, FineTuneConfig, prefix=FINETUNE_PREFIX)
        kit = load_kit(self.get_parameter("finetune_kit").value)
        self.learner = OffboardLearner(kit, ft, Path(self.get_parameter("finetune_work_dir").value).expanduser(),
                                       Path(config.watch_dir).expanduser(),
                                       base_path=self.get_parameter("base_policy_path").value,
                                       base_version=self.get_parameter("base_version").value or None)
        self._start_worker()
        self.get_logger().info(f"off-board fine-tuning: kit {self.get_parameter('finetune_kit').value}, "
                               f"transitions from {self.get_parameter('transitions_topic').value}, "
                               f"{self.learner.resumed} resumed from disk; versions into {config.watch_dir}")

    def _start_sysid(self, config: StreamConfig) -> None:
        from lowrl_ros.core.finetune.offboard_sysid import OffboardSysid, SysidSettings

        if not config.watch_dir:
            raise ValueError("offboard_method sysid needs watch_dir: the directory the corrected version is "
                             "released into and streamed from")
        declare_config(self, SysidSettings, prefix=SYSID_PREFIX)
        settings = config_from_params(self, SysidSettings, prefix=SYSID_PREFIX)
        self.learner = OffboardSysid(self.get_parameter("base_policy_path").value,
                                     self.get_parameter("base_version").value,
                                     Path(self.get_parameter("finetune_work_dir").value).expanduser(),
                                     Path(config.watch_dir).expanduser(), settings,
                                     log=lambda line: self.get_logger().info(f"sysid: {line}"))
        self._start_worker()
        self.get_logger().info(f"off-board identification (sysid): transitions from "
                               f"{self.get_parameter('transitions_topic').value}; after {settings.episodes} episodes "
                               f"of v{self.learner.base_version}, the corrected version goes into {config.watch_dir}; "
                               f"{self.learner.resumed} transitions resumed from disk ({self.learner.state})")

    def _start_retrain(self, config: StreamConfig) -> None:
        from lowrl_ros.core.retrain.offboard import OffboardRetrain, RetrainSessionSettings
        from lowrl_ros.core.sim.robot_sysid import IdentifySettings
        from lowrl_ros.core.retrain.retrain import RetrainSettings

        if not config.watch_dir:
            raise ValueError("offboard_method retrain needs watch_dir: the directory the retrained version is "
                             "released into and streamed from")
        settings = {}
        for prefix, cls in (("retrain.", RetrainSessionSettings), ("identify.", IdentifySettings),
                            ("ppo.", RetrainSettings)):
            declare_config(self, cls, prefix=prefix)
            settings[prefix] = config_from_params(self, cls, prefix=prefix)
        self.learner = OffboardRetrain(self.get_parameter("base_policy_path").value,
                                       self.get_parameter("base_version").value,
                                       Path(self.get_parameter("finetune_work_dir").value).expanduser(),
                                       Path(config.watch_dir).expanduser(), self.get_parameter("robot_file").value,
                                       settings["retrain."], settings["identify."], settings["ppo."],
                                       log=lambda line: self.get_logger().info(f"retrain: {line}"))
        self._start_worker()
        self.get_logger().info(f"off-board real-to-sim-to-real (retrain) of {self.learner.robot_file}: after "
                               f"{settings['retrain.'].episodes} episodes of v{self.learner.base_version}, identify, "
                               f"retrain, release into {config.watch_dir}; {self.learner.resumed} transitions resumed "
                               f"from disk ({self.learner.state})")

    def _start_worker(self) -> None:
        """Transitions in (their size from the learner's policy contract), the learner in a worker thread."""
        from lowrl_ros.core.finetune.learner_loop import ReleasingLearner, open_gate, run_learner

        self._dims = (self.learner.obs_dim, self.learner.action_dim)
        self._inbox: collections.deque = collections.deque()
        self.bad_transitions = 0
        self._loop = ReleasingLearner(self.learner, self._released)
        self.create_subscription(Float64MultiArray, self.get_parameter("transitions_topic").value,
                                 self._on_transitions, 200)
        self._stop = threading.Event()
        self._worker = threading.Thread(target=run_learner, name="offboard-learner", daemon=True,
                                        args=(self._loop, self._inbox, open_gate, self._stop),
                                        kwargs=dict(log=self._log))
        self._worker.start()

    @property
    def learner_error(self) -> str:
        return self._loop.error if self.learner is not None else ""

    def _released(self, path: Path) -> None:
        self.get_logger().info(f"released {path.name}: {self.learner.last_decision}")

    def _log(self, level: Level, line: str) -> None:
        log = self.get_logger()
        (log.error if level == Level.ERROR else log.warning)(f"off-board {line}", throttle_duration_sec=5.0)

    def _on_transitions(self, msg: Float64MultiArray) -> None:
        try:
            self._inbox.append(("batch",) + decode_transitions(msg.data, *self._dims))
        except ValueError as exc:
            self.bad_transitions += 1
            self.get_logger().warning(f"ignoring transitions: {exc}", throttle_duration_sec=5.0)

    def destroy_node(self) -> None:
        if getattr(self, "learner", None) is not None:
            self._stop.set()
            self._worker.join(timeout=30.0)
            if not self._worker.is_alive():
                self.learner.close()
        super().destroy_node()

    def _stream_config(self, overrides: dict[str, Any] | None = None) -> StreamConfig:
        return config_from_params(self, StreamConfig, overrides=overrides)

    def _validate_parameters(self, params) -> SetParametersResult:
        changes = {p.name: p.value for p in params if p.name == "bundle_path"}
        try:
            if changes:
                self._stream_config(changes)
        except ValueError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def _apply_parameters(self, params) -> None:
        if any(p.name == "bundle_path" for p in params):
            self.sender.config = self._stream_config()
            self.poll()

    # ---- streaming ---------------------------------------------------------------------------
    def poll(self) -> None:
        """Check the source; publish a newer version, or say why not."""
        for event in self.sender.poll():
            self._handle(event)

    def _handle(self, event: SendEvent) -> None:
        log = self.get_logger()
        if event.kind == "publish":
            msg = UInt8MultiArray()
            msg.data = event.wire
            self._bundle_pub.publish(msg)
            self.publications += 1
            log.info(f"published {event.message}")
            self._stream = (Level.OK, f"published v{event.version}", {
                "version": event.version, "path": event.path, "bytes": len(event.wire),
                "chunks": self.sender.n_chunks, "resends": self.sender.resends, "publications": self.publications})
        else:  # refused / unreadable: nothing goes out, the robot keeps what it runs
            log.warning(event.message) if event.kind == "unreadable" else log.error(event.message)
            self._stream = (Level.WARN if event.kind == "unreadable" else Level.ERROR, event.message,
                            {"version": self.sender.published_version, "refused": event.path})
        self._publish_diagnostics()

    def _on_status(self, msg: String) -> None:
        try:
            status = BundleStatus.from_json(msg.data)
        except ValueError as exc:
            self.get_logger().warning(f"ignoring a status reply: {exc}")
            return
        mine = status.version == self.sender.published_version
        values = {"version": status.version, "code": status.code, "running_version": status.running_version}
        if status.accepted:
            self.get_logger().info(f"robot accepted v{status.version}")
            self._robot = (Level.OK, f"robot accepted v{status.version}", values)
        elif status.code == "duplicate":
            self._robot = (Level.OK, f"robot already runs v{status.version}", values)
        elif mine or status.version is None:
            level = Level.WARN if status.resend else Level.ERROR
            self.get_logger().error(f"robot rejected v{status.version}: [{status.code}] {status.reason}")
            self._robot = (level, f"robot rejected v{status.version}: [{status.code}] {status.reason}", values)
        if (self.learner is not None and not status.accepted and not status.resend and status.code != "duplicate"
                and status.version is not None):
            self._inbox.append(("rejected", status.version, f"[{status.code}] {status.reason}"))
        event = self.sender.on_status(status)
        if event is not None:
            self._handle(event)
        else:
            self._publish_diagnostics()

    # ---- reporting ---------------------------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        signed = self.sender.key is not None
        statuses = [
            diag.status(f"{DIAG_PREFIX}/stream", *self._stream),
            diag.status(f"{DIAG_PREFIX}/robot", *self._robot),
            diag.status(f"{DIAG_PREFIX}/security", Level.OK if signed else Level.ERROR,
                        "bundles signed (HMAC-SHA256)" if signed else
                        "INSECURE: bundles are UNSIGNED (insecure:=true, no key_file); set key_file",
                        {"signed": signed, "key_file": self.sender.config.key_file or "none"}),
        ]
        if self.learner is not None:
            lr = self.learner
            level = (Level.ERROR if self.learner_error or lr.paused_reason
                     else Level.WARN if lr.judge.lost else Level.OK)
            values = {"received": lr.received, "resumed": lr.resumed, "lost": lr.judge.lost,
                      "bad_messages": self.bad_transitions,
                      "released": ",".join(map(str, lr.released))}
            if hasattr(lr, "tuner"):  # the kit's learner (sysid has no updates, versions are its releases)
                values.update(updates=lr.tuner.updates, current=lr.tuner.tracker.current, best=lr.tuner.tracker.best,
                              rejections=lr.session.rejections, rollbacks=lr.session.rollbacks)
            else:
                values.update(state=lr.state, **{f"progress.{k}": v for k, v in getattr(lr, "progress", {}).items()})
            statuses.append(diag.status(f"{DIAG_PREFIX}/finetune", level,
                                        self.learner_error or lr.paused_reason or lr.last_decision, values))
        self._diag_pub.publish(diag.array(self.get_clock().now().to_msg(), statuses, self.get_namespace()))


def main(args: list[str] | None = None) -> int:
    return run_node("trainer_node", TrainerNode, args=args, bad_config_rc=1)

if __name__ == "__main__":
    sys.exit(main())
