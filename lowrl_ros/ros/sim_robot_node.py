"""sim_robot_node: a gymnasium env as a robot: `/joint_states` out, `<controller>/commands` in.

Modes (parameter ``mode``):

- ``realtime``: steps the env once per control period on a wall-clock timer, with the newest
  command (zero until the first one; a malformed one is ignored with a warning and zero applied).
- ``lockstep``: steps exactly once per command received, then publishes the next joint state at
  once. It starts by publishing the first joint state when both its joint-state subscriber and its
  command publisher have matched, and re-publishes the current one (without stepping) after
  ``lockstep_resend_s`` without a command, so a policy that starts late or a lost message never
  stalls the session.

Each step publishes the reward (`/lowrl/reward`, std_msgs/Float64) before the next joint state;
each finished episode its return (`/lowrl/episode_return`, std_msgs/Float64, what the fine-tuner
reads) and `/lowrl/episode` (std_msgs/Float64MultiArray ``[episode index, return, length,
terminated (1/0)]``, index from 1). The robot may differ from the simulation by a reality gap
(parameters ``gap.*``, lowrl_ros/core/sim/reality_gap.py). With ``session_dir`` set it appends each
episode to ``session_dir/episodes.csv`` with the policy version that ran it (read from the policy
node's ``lowrl/policy/policy`` diagnostic; used for the session log only).

A reset request on ``reset_topic`` (``/lowrl/reset``, std_msgs/Empty, from the fine-tuner at an
episode end of the robot file's ``episode:`` section) starts a new episode at once and publishes
``true`` on ``ready_topic`` (``/lowrl/ready``, std_msgs/Bool, latched) with the new episode's first
joint state, as a stand-up routine would: the reset state itself, at the next tick (the physics then
catches that period up), as a training env's reset returns it.

``env_id: LeggedAnt`` is a legged robot run like a ros2_control robot (lowrl_ros/core/sim/legged.py):
one physics step per tick (``control_period_s`` 0.005: JointState at 200 Hz, PD position control
inside), position targets in the controller's joint order on ``command_topic``, sensor_msgs/Imu of
the torso on ``imu_topic`` (frame ``imu_link``), the velocity command from ``cmd_vel_topic``
(geometry_msgs/Twist) for its tracking reward, and the base velocity on ``state_estimate_topic``
(geometry_msgs/TwistStamped, ground truth at 50 Hz: a state estimator's stand-in, the reward-only input of
config/robots/legged_ant.yaml). With ``truth_topic`` set it publishes, with each joint state, what the
simulator itself knows (core/sim/sim_robot.py ``TrueState``: `lowrl sim2sim`'s reference). With
``command_velocity`` set ([vx, vy, yaw rate]) it also publishes that Twist on ``cmd_vel_topic`` at 20 Hz:
a stand-in for a joystick in demos.

``env_id: robot_file`` runs the ``sim:`` section of the robot file named by ``robot_file``
(core/sim/robot_file_sim.py) the same way, on that robot file's own topics (they replace the topic
parameters): JointState and Imu every ``control_period_s``, physics at the sim's own step, the command
in ``output.joints`` order; ``truth_topic`` carries that robot's training observation (RobotSimEnv's).

Benchmarks hook into it in-process: ``on_published`` callables get the time of each joint state
(`lowrl bench loop` measures round trips from it), and ``redirect_joint_states`` moves the output.
"""
from __future__ import annotations

import math
import sys
import threading
import time
from pathlib import Path

import numpy as np
from geometry_msgs.msg import Twist, TwistStamped
from rclpy.node import Node
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Bool, Empty, Float64, Float64MultiArray

from lowrl_ros.core.runtime.step_row import peek_version
from lowrl_ros.core.sim.reality_gap import RealityGapConfig
from lowrl_ros.core.session.files import EPISODE_FIELDS, EPISODES_CSV, CsvLog, write_session_info
from lowrl_ros.core.sim.legged import LeggedSim
from lowrl_ros.core.sim.robot_file_sim import RobotFileSim
from lowrl_ros.core.sim.sim_robot import LEGGED, ROBOT_FILE, SimRobot, SimRobotConfig, SimRobotTopics
from lowrl_ros.ros.qos import CONTROL, LATCHED, RECORD, STATS, STATUS
from lowrl_ros.ros.params import config_from_params, declare_config
from lowrl_ros.ros.spinning import run_node

GAP_PREFIX = "gap."  # RealityGapConfig fields appear as gap.<field> parameters


class SimRobotNode(Node):
    """Wraps :class:`lowrl_ros.core.sim.sim_robot.SimRobot` in topics and a timer."""

    def __init__(self, node_name: str = "sim_robot", **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        declare_config(self, SimRobotConfig)
        declare_config(self, SimRobotTopics)
        declare_config(self, RealityGapConfig, prefix=GAP_PREFIX)
        self.config = config_from_params(self, SimRobotConfig)
        self.gap = config_from_params(self, RealityGapConfig, prefix=GAP_PREFIX)
        gap_text, gap_config = self.gap.describe(), self.gap.to_dict()
        if self.config.env_id == ROBOT_FILE:  # a robot file's sim: robot, on the robot file's own topics
            self.robot = RobotFileSim.from_config(self.config, self.gap)
            gap_text, gap_config = self.robot.describe_gap(), self.robot.gap  # its gap_file's, in full
        elif self.config.env_id == LEGGED:
            self.robot = LeggedSim.from_config(self.config, self.gap)
        else:
            self.robot = SimRobot(self.config, self.gap)
        topics = getattr(self.robot, "topics", {})
        get = lambda name: topics[name] if name in topics else self.get_parameter(name).value  # noqa: E731
        # A position-controlled robot holds its pose until the first command (zero would fold its legs).
        self._hold = getattr(self.robot, "hold_command", np.zeros(self.robot.action_dim))
        self._command, self._command_at = self._hold.copy(), None
        self._pub_js = self.create_publisher(JointState, get("joint_states_topic"), CONTROL)
        self._js_pubs = {get("joint_states_topic"): self._pub_js}
        self._pub_reward = self.create_publisher(Float64, "lowrl/reward", STATS)
        self._pub_return = self.create_publisher(Float64, "lowrl/episode_return", STATS)
        self._pub_episode = self.create_publisher(Float64MultiArray, "lowrl/episode", STATS)
        self._cmd_sub = self.create_subscription(Float64MultiArray, get("command_topic"), self._on_command, CONTROL)
        self.create_subscription(Empty, get("reset_topic"), self._on_reset, STATUS)
        self._pub_ready = self.create_publisher(Bool, get("ready_topic"), LATCHED)
        self.resets = 0
        self._ready_due = False
        self._reset_due = False  # legged physics thread: a reset request it applies before its next tick

        self._pub_imu = None
        if hasattr(self.robot, "imu"):  # a legged robot (LeggedAnt, robot_file): an IMU, a velocity command
            self._pub_imu = self.create_publisher(Imu, get("imu_topic"), CONTROL)
            self._imu_msg = Imu()
            self._imu_msg.header.frame_id = "imu_link"
            self.create_subscription(Twist, get("cmd_vel_topic"), self._on_cmd_vel, CONTROL)
            self._walk_from = self._walk_mark()
            self._walk_timer = self.create_timer(5.0, self._log_walk)
            self._setup_state_estimate(get("state_estimate_topic"))
            self._pub_truth = (self.create_publisher(Float64MultiArray, get("truth_topic"), RECORD)
                               if get("truth_topic") else None)  # lowrl sim2sim's reference (TrueState)
            velocity = [float(v) for v in (get("command_velocity") or [])]  # an empty YAML list: NOT_SET
            if len(velocity) == 3:
                self._twist = Twist()
                self._twist.linear.x, self._twist.linear.y, self._twist.angular.z = velocity
                self._cmd_vel_pub = self.create_publisher(Twist, get("cmd_vel_topic"), CONTROL)
                self._cmd_vel_timer = self.create_timer(0.05, lambda: self._cmd_vel_pub.publish(self._twist))
            elif velocity:
                raise ValueError(f"command_velocity must be [vx, vy, yaw_rate] or [] (none); got {velocity}")
        self._published_at: float | None = None
        self.steps = 0
        self.on_published: list = []  # callables(perf_counter time) run after each joint state: bench hooks
        self._warned = 0.0
        self._msg = JointState(name=list(self.robot.joint_names))
        # Session log: the version the policy node reports, at each episode's start and end.
        self.policy_version = 0
        self._episode_version = 0
        self._log: CsvLog | None = None
        if self.config.session_dir:
            session = Path(self.config.session_dir).expanduser()
            self._log = CsvLog(session / EPISODES_CSV, EPISODE_FIELDS)
            write_session_info(session, {"env_id": self.config.env_id, "gap": gap_text,
                                         "gap_config": gap_config, "mode": self.config.mode,
                                         "started_unix": time.time()})
            self.create_subscription(Float64MultiArray, get("policy_step_topic"), self._on_step, RECORD)
        self._lockstep = self.config.mode == "lockstep"
        self._started = False  # lockstep: the first joint state has gone out
        self._last_command_at = time.monotonic()
        if self._lockstep:
            self._timer = self.create_timer(min(0.05, self.config.lockstep_resend_s / 2), self._lockstep_watch)
        elif self._pub_imu is not None:
            # The legged robot's physics (200 Hz) runs on its own thread, not as an executor timer: rclpy's
            # executor costs ~0.5 ms per callback, which at 200 Hz on a busy small computer drops ticks. The
            # thread sleeps to absolute deadlines; the executor only delivers commands.
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._physics_loop, name="sim_physics", daemon=True)
            self._thread.start()
        else:
            self._timer = self.create_timer(self.config.control_period_s, self._tick)
        rate = "lockstep (a step per command)" if self._lockstep else f"{1 / self.config.control_period_s:.0f} Hz"
        self.get_logger().info(f"sim robot {self.config.env_id}, {rate}, joints {', '.join(self.robot.joint_names)}, "
                               f"reality gap: {gap_text}")

    # ---- the state estimate (LeggedAnt): ground truth standing in for a real robot's estimator ----
    STATE_ESTIMATE_PERIOD_S = 0.02  # 50 Hz: a Python callback per message in the fine-tuner is the cost

    def _setup_state_estimate(self, topic: str) -> None:
        self._pub_state = None
        if topic:
            self._pub_state = self.create_publisher(TwistStamped, topic, CONTROL)
            self._state_msg = TwistStamped()
            self._state_msg.header.frame_id = "base_heading"  # x forward, y left, z up; yaw-aligned with the base
            self._state_due = 0.0

    def _publish_state_estimate(self, stamp) -> None:
        """The base velocity in the heading frame and the yaw rate (LeggedRobot.base_velocity_yaw_frame)."""
        now = time.monotonic()
        if self._pub_state is None or now < self._state_due:
            return
        self._state_due = now + self.STATE_ESTIMATE_PERIOD_S
        v, w = self.robot.state_estimate()
        m = self._state_msg
        m.header.stamp = stamp
        m.twist.linear.x, m.twist.linear.y, m.twist.linear.z = (float(x) for x in v)
        m.twist.angular.x, m.twist.angular.y, m.twist.angular.z = (float(x) for x in w)
        self._pub_state.publish(m)

    def redirect_joint_states(self, topic: str) -> None:
        """Publish joint states on ``topic`` from the next tick on (benchmarks alternate receivers)."""
        if topic not in self._js_pubs:
            self._js_pubs[topic] = self.create_publisher(JointState, topic, CONTROL)
        self._pub_js = self._js_pubs[topic]

    def _on_command(self, msg: Float64MultiArray) -> None:
        now = time.perf_counter()
        self._command_at = time.monotonic()  # the physics steps begun before it keep the previous command
        try:
            self._command = self.robot.check_action(msg.data)
        except ValueError as exc:
            self._command = self._hold.copy()
            if now - self._warned > 1.0:  # a stream of bad commands must not flood the log
                self._warned = now
                what = "zero" if self._pub_imu is None else "the default pose"
                self.get_logger().warning(f"ignoring command, applying {what}: {exc}")
        if self._lockstep and self._started:
            self._last_command_at = time.monotonic()
            self._tick()

    def _on_reset(self, _msg: Empty) -> None:
        """A reset request: a new episode from the env's initial state, then ready (a simulator stands up at once)."""
        if getattr(self, "_thread", None) is not None:
            # The legged physics steps on its own thread (MuJoCo releases the GIL in mj_step): resetting the
            # model from here could interleave with a step, so the physics thread resets before its next tick.
            self._reset_due = True
            return
        self._reset_now()

    def _reset_now(self) -> None:
        self.robot.reset()
        # Put back at the default pose, the robot holds it until the policy's next command (as a robot set down
        # and enabled would), not the last episode's final command.
        self._command, self._command_at = self._hold.copy(), None
        self.resets += 1
        self._episode_version = self.policy_version
        if self._pub_imu is not None:  # the walk log's window starts again where the robot was put back
            self._walk_from = self._walk_mark()
        self.get_logger().info(f"reset requested: new episode (reset {self.resets})")
        # Ready goes out with the new episode's first joint state (the reset state, at the next tick), not at once:
        # the policy node gets the same reset request from the fine-tuner, and a ready that overtook it would be
        # taken for the previous one.
        self._ready_due = True

    def _walk_mark(self) -> tuple[float, np.ndarray, float]:
        """(time, torso xy, heading): where the walk log's window starts."""
        return time.monotonic(), self.robot.position_xy(), self.robot.heading()

    def _log_walk(self) -> None:
        """Every 5 s: how far and how fast the torso went and turned, against the command (what a user watches for)."""
        t0, xy0, yaw0 = self._walk_from
        self._walk_from = now, xy, yaw = self._walk_mark()
        dt = max(now - t0, 1e-9)
        v, turned = (xy - xy0) / dt, (yaw - yaw0 + math.pi) % (2.0 * math.pi) - math.pi
        cmd = self.robot.command
        self.get_logger().info(f"torso moved {np.linalg.norm(xy - xy0):.2f} m in {dt:.1f} s: v = ({v[0]:.2f}, "
                               f"{v[1]:.2f}) m/s (world), turned {turned:+.2f} rad ({turned / dt:+.2f} rad/s); "
                               f"command vx {cmd[0]:.2f} m/s, yaw rate {cmd[2]:+.2f} rad/s; falls {self.robot.falls}")

    def _on_cmd_vel(self, msg: Twist) -> None:
        self.robot.set_velocity_command(msg.linear.x, msg.linear.y, msg.angular.z)

    def _on_step(self, msg: Float64MultiArray) -> None:
        version = peek_version(msg.data)
        if version:
            self.policy_version = version

    def _lockstep_watch(self) -> None:
        """Lockstep: send the first joint state once matched; re-send it when the policy went quiet."""
        if not self._started:
            if self._pub_js.get_subscription_count() > 0 and self._cmd_sub.get_publisher_count() > 0:
                self._started = True
                self._last_command_at = time.monotonic()
                self._episode_version = self.policy_version
                self._publish_joints()
            return
        if time.monotonic() - self._last_command_at > self.config.lockstep_resend_s:
            self._last_command_at = time.monotonic()
            self._publish_joints()  # the same state again: nothing stepped, so no reward is due

    def _tick(self) -> None:
        if self._ready_due:  # the first tick after a reset: the reset state itself goes out with the ready (the
            self._publish_joints()  # episode's first observation, as a training env's reset returns it), no physics
            return
        outcome = self.robot.step(self._command, received_at=self._command_at)
        self.steps += 1
        self._pub_reward.publish(Float64(data=outcome.reward))
        if outcome.episode_done:
            self._end_episode(outcome)
        self._publish_joints()

    def _physics_loop(self) -> None:
        period = self.config.control_period_s
        deadline = time.monotonic()
        while not self._stop.is_set():
            deadline += period
            delay = deadline - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            elif delay < -10 * period:  # a long stall: start over from now (the robot catches its physics up)
                deadline = time.monotonic()
            try:
                if self._reset_due:
                    self._reset_due = False
                    self._reset_now()
                self._tick()
            except Exception as exc:  # noqa: BLE001 - e.g. a publisher gone at shutdown: say it and stop
                if not self._stop.is_set():
                    self.get_logger().error(f"physics thread stopped: {type(exc).__name__}: {exc}")
                return

    def _end_episode(self, outcome) -> None:
        index = self.robot.episodes
        self._pub_return.publish(Float64(data=outcome.episode_return))
        self._pub_episode.publish(Float64MultiArray(data=[float(index), outcome.episode_return,
                                                          float(outcome.episode_steps), float(outcome.terminated)]))
        self.get_logger().info(f"episode {index}: return {outcome.episode_return:.1f} "
                               f"over {outcome.episode_steps} steps (policy v{self.policy_version})")
        if self._log is not None:
            self._log.append([f"{time.time():.3f}", index, f"{outcome.episode_return:.4f}", outcome.episode_steps,
                              int(outcome.terminated), self._episode_version, self.policy_version])
        self._episode_version = self.policy_version

    def _publish_joints(self) -> None:
        joints = self.robot.joints()
        msg = self._msg
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.position, msg.velocity = joints.position.tolist(), joints.velocity.tolist()
        msg.effort = joints.effort.tolist()
        self._published_at = time.perf_counter()
        self._pub_js.publish(msg)
        if self._pub_imu is not None:
            quat, gyro, acc = self.robot.imu()
            m = self._imu_msg
            m.header.stamp = msg.header.stamp
            m.orientation.x, m.orientation.y, m.orientation.z, m.orientation.w = (float(v) for v in quat)
            m.angular_velocity.x, m.angular_velocity.y, m.angular_velocity.z = (float(v) for v in gyro)
            m.linear_acceleration.x, m.linear_acceleration.y, m.linear_acceleration.z = (float(v) for v in acc)
            self._pub_imu.publish(m)
            self._publish_state_estimate(msg.header.stamp)
            if self._pub_truth is not None:
                stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
                self._pub_truth.publish(Float64MultiArray(data=self.robot.true_state(stamp).tolist()))
        for hook in self.on_published:
            hook(self._published_at)
        if self._ready_due:
            self._ready_due = False
            self._pub_ready.publish(Bool(data=True))

    def destroy_node(self) -> None:
        if getattr(self, "_thread", None) is not None:
            self._stop.set()
            self._thread.join(timeout=2.0)
            self._thread = None
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None
        if getattr(self, "robot", None) is not None:
            self.robot.close()
            self.robot = None
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    return run_node("sim_robot_node", SimRobotNode, args=args)

if __name__ == "__main__":
    sys.exit(main())
