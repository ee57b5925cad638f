"""The policy node's own parameters and the robot file it reads (ROS-free).

One input path: the policy node reads every robot through a robot file (core/runtime/robot_file.py).
With ``robot_file`` set it is that file; without one, :meth:`PolicyNodeSettings.robot` builds the
file the old observation parameters describe (``input``, ``obs_fields``, ``obs_offset``,
``obs_scale``, ``extra_obs_dim`` and their topics: :func:`legacy_robot_file`) and returns its YAML,
which the node logs so the user can keep it.
"""
from __future__ import annotations

from dataclasses import dataclass

from lowrl_ros.core.config import field, require
from lowrl_ros.core.runtime.actions import ActionProcessor
from lowrl_ros.core.runtime.control import ROBOT_TIMINGS, ControlTiming, EStopLatch
from lowrl_ros.core.runtime.artifact import last_action_convention
from lowrl_ros.core.runtime.deploy_check import DEPLOY_CHECKS, DeployReport, check_deployment, recorded_training
from lowrl_ros.core.runtime.ladder import FallbackLadder
from lowrl_ros.core.runtime.obs_adapter import ObsAdapterConfig
from lowrl_ros.core.runtime.observation import ObservationSpec
from lowrl_ros.core.runtime.realtime import parse_cpus
from lowrl_ros.core.runtime.robot_file import (RobotFile, legacy_robot_file, load_robot_file, parse_robot_file,
                                               robot_file_yaml)
from lowrl_ros.core.types import ContractLike, Level

INPUTS = ("joint_states", "observation")
ENGINES = ("auto", "ort", "numpy")


@dataclass(frozen=True)
class PolicyNodeSettings:
    """The policy node's own parameters (the core configs bring the rest)."""

    policy_path: str = field("", "artifact (.onnx) or bundle (.lowrl); a change hot-swaps it", live=True)
    engine: str = field("auto", "inference engine: " + " | ".join(ENGINES))
    autostart: bool = field(True, "configure and activate at start (no lifecycle manager needed)")
    input: str = field("joint_states", "without robot_file: observation source: " + " | ".join(INPUTS))
    joint_states_topic: str = field("joint_states", "sensor_msgs/JointState input")
    observation_topic: str = field("lowrl/observation", "std_msgs/Float32MultiArray input")
    extra_observation_topic: str = field("lowrl/extra_observation",
                                         "Float32MultiArray appended to the joint observation")
    controller_name: str = field("forward_command_controller", "commands go to <controller_name>/commands")
    stats_rate_hz: float = field(10.0, "rate of /lowrl/policy/stats", range=(0.1, 100.0))
    latency_rate_hz: float = field(10.0, "cap on /lowrl/policy/latency_us: the largest inference latency of each "
                                   "period (0: one message per inference)", range=(0.0, 1000.0))
    diagnostics_period_s: float = field(1.0, "period of /diagnostics", range=(0.05, 60.0))
    bundle_topic: str = field("lowrl/policy_bundle",
                              "signed bundles from the trainer (UInt8MultiArray, latched); replies on <topic>/status")
    key_file: str = field("", "HMAC key shared with the trainer (chmod 600); empty: no bundle is accepted unless "
                              "require_signature is false")
    robot_file: str = field("", "robot YAML: observation terms, joints, actions (docs/robot_file.md); empty: "
                                "the robot file obs_fields/extra_obs_dim and input describe (logged at configure)")
    deploy_check: str = field("refuse", "with robot_file, the deploy check at configure (lowrl check, "
                                        "docs/deploy_check.md): refuse (a hard mismatch fails configure; soft ones "
                                        "warn) | warn (every mismatch is logged and diagnosed, configure goes on)")
    robot_timing: str = field("contract", "contract (fixed_rate at the policy contract's control period) | "
                                          "parameters (mode and control_period_s as set; a WARN if not the contract's)")
    rt_priority: int = field(0, "SCHED_FIFO priority of the control thread, 1..99 (0: normal scheduling); "
                                "refused without rtprio/CAP_SYS_NICE: then a WARN and the node runs on",
                             range=(0, 99))
    # dynamic: `-p rt_cpus:=3` arrives as an integer, "2,3" as a string; parse_cpus reads both.
    rt_cpus: str = field("", "CPUs for the control thread, e.g. '3' or '2-3' (empty: any)", dynamic=True)
    rt_lock_memory: bool = field(False, "mlockall the process at activation (needs memlock rights)")
    publish_step: bool = field(True, "publish what the policy saw and did on step_topic (the fine-tuner reads it)")
    step_topic: str = field("lowrl/policy/step", "Float64MultiArray per policy/safe tick: stamp, flags, obs, "
                                                  "policy action, executed action, command")
    teleop_topic: str = field("", "Float64MultiArray in the policy's action units and order that replaces the "
                                  "policy's output while held (an intervention); empty: no teleop")
    teleop_timeout_s: float = field(0.2, "a teleop message holds the override this long", range=(0.001, 10.0))
    reset_topic: str = field("lowrl/reset", "std_msgs/Empty: a reset request (episode end); used with ready_topic")
    ready_topic: str = field("", "std_msgs/Bool: true = the robot is ready again after a reset; set: a reset holds "
                                 "the safe action until then; empty: resets are not waited for")

    def __post_init__(self) -> None:
        for name, allowed in (("input", INPUTS), ("engine", ENGINES), ("robot_timing", ROBOT_TIMINGS),
                              ("deploy_check", DEPLOY_CHECKS)):
            require(getattr(self, name) in allowed,
                    f"{name} {getattr(self, name)!r} is unknown; use one of {', '.join(allowed)}")
        parse_cpus(self.rt_cpus)  # a bad CPU list fails here, with the fix

    @property
    def reads_obs_fields(self) -> bool:
        """The old joint parameters (obs_fields, obs_offset, obs_scale, extra_obs_dim) describe the input."""
        return not self.robot_file and self.input == "joint_states"

    def robot(self, legacy: ObsAdapterConfig | None, obs_dim: int, timeout_s: float) -> tuple[RobotFile, str]:
        """The robot file the node reads, and "" or (without ``robot_file``) the YAML of the one built from
        the old observation parameters.

        Args:
            legacy: the old joint parameters, needed only where :attr:`reads_obs_fields` (else None).
            obs_dim: the policy's observation size (``input: observation`` reads one array of it).
            timeout_s: each built term's staleness limit (the node's ``watchdog_timeout_s``, as before).

        Only a robot file given as a file describes the output side (``interface``, ``action``, ``output``,
        ``safety``); the one built here has none, so the command parameters (``controller_name``,
        ``safe_action``, ``default_pose``, ``soft_start_steps``) apply as before.
        """
        if self.robot_file:
            return load_robot_file(self.robot_file), ""
        joints = legacy if legacy is not None else ObsAdapterConfig(extra_obs_dim=1)  # unread (input: observation)
        data = legacy_robot_file(joints.obs_fields, joints.obs_offset, joints.obs_scale, joints.extra_obs_dim,
                                 input=self.input, obs_dim=obs_dim, joint_states_topic=self.joint_states_topic,
                                 observation_topic=self.observation_topic,
                                 extra_observation_topic=self.extra_observation_topic, timeout_s=timeout_s)
        return parse_robot_file(data), robot_file_yaml(data)


@dataclass(frozen=True)
class PolicySetup:
    """What the policy node's configure decides from its settings and the loaded policy's contract.

    Attributes:
        spec: the observation (checked against the contract: by name for a given robot file, by size for
            the one built from the old parameters, which never compared names).
        actions: the robot file's output side (None without ``robot_file``: the command parameters).
        estop: the e-stop latch (the old one kept, still latched, unless its topic changed; None: no e-stop).
        timing: robot_timing against the contract's control period.
        legacy_yaml: the robot file built from the old parameters, as YAML ("" with ``robot_file``).
        last_action: the policy's last-action convention ("raw" | "action", artifact.last_action_convention),
            which the observation builder follows unless a last_action term states its own.
        deploy: the deploy check of a given robot file against the contract (None without ``robot_file``: the
            old parameters describe no output side and name no terms to compare).
        ladder: the robot file's declared ``fallback`` ladder (None: the robot's default, chosen per bundle
            by the controller); checked against the bundle by ``PolicyController``.
    """

    spec: ObservationSpec
    actions: ActionProcessor | None
    estop: EStopLatch | None
    timing: ControlTiming
    legacy_yaml: str
    last_action: str = "action"
    deploy: DeployReport | None = None
    ladder: FallbackLadder | None = None

    @classmethod
    def plan(cls, settings: PolicyNodeSettings, contract: ContractLike, *, legacy: ObsAdapterConfig | None,
             mode: str, control_period_s: float, watchdog_timeout_s: float,
             estop: EStopLatch | None) -> "PolicySetup":
        """Raises ValueError (RobotFileError included) saying what to fix; configure then fails."""
        robot, legacy_yaml = settings.robot(legacy, contract.obs_dim, watchdog_timeout_s)
        timing = ControlTiming.choose(settings.robot_timing, contract.control_period_s, mode, control_period_s)
        deploy = None
        if settings.robot_file:  # every mismatch at once (the checks below stop at the first)
            loop = timing.overrides.get("control_period_s", control_period_s if mode == "fixed_rate" else None)
            deploy = check_deployment(contract, robot, training=recorded_training(contract), loop_period_s=loop)
            if deploy.hard and settings.deploy_check == "refuse":
                raise ValueError("the robot file does not match the policy (deploy_check: refuse; `lowrl check "
                                 "POLICY ROBOT_FILE` prints the table): " + "; ".join(deploy.mismatches()))
        spec = ObservationSpec.from_robot_file(robot, contract.control_period_s)
        spec.check_against(contract, by_name=not legacy_yaml)
        actions = ActionProcessor.from_robot_dict(robot.raw, contract) if settings.robot_file else None
        safety = actions.safety if actions is not None else None
        latch = EStopLatch.keep(estop, safety.estop_topic if safety else "", safety.reset_topic if safety else "")
        ladder = None
        if settings.robot_file and "fallback" in robot.raw:
            ladder = FallbackLadder.for_robot(robot.raw, where=robot.path or "robot file")
        return cls(spec, actions, latch, timing, legacy_yaml, last_action_convention(contract), deploy,
                   ladder)

    def log_lines(self, robot_file: str) -> list[tuple[Level, str]]:
        """What configure logs: the robot file built from the old parameters (to keep), the timing WARN, the
        output side of a given robot file."""
        lines = []
        if self.legacy_yaml:
            lines.append((Level.OK, "no robot_file: the input/obs_fields/extra_obs_dim parameters are this robot "
                                    "file (save it and set robot_file to keep it; docs/policy_node.md):\n"
                                    + self.legacy_yaml))
        if self.timing.warning:
            lines.append((Level.WARN, self.timing.warning))
        if self.actions is not None:
            lines.append((Level.OK, f"robot file {robot_file}: {self.actions.describe()}"))
        if self.deploy is not None:
            lines += [(Level.ERROR if line.startswith("MISMATCH") else Level.WARN, f"deploy check: {line}")
                      for line in self.deploy.mismatches()]
        return lines
