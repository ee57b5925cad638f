"""Test fakes shared by the node tests: the robot on the other side of the wire, a policy whose
action says which policy acted, and a bundle key file.

``FakeRobot`` is one rclpy node that plays what the project's nodes talk to: it publishes joint
states (and, where a test asks, rewards, episode ends, tiers, scripted commands or bundles) and
records what comes back (commands, diagnostics, policy stats, bundle replies or bundles). Its
``exchange`` publishes one joint state and spins until the command for it arrives.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, Float64MultiArray, String, UInt8, UInt8MultiArray

from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, save_artifact
from lowrl_ros.core.stream.protocol import BundleStatus
from lowrl_ros.ros.diagnostics import level_of
from lowrl_ros.core.runtime.step_row import encode_step, row_size
from lowrl_ros.ros.qos import CONTROL, LATCHED, RECORD, STATS
from rosutil import spin_until

JOINT = "pendulum_joint"
COMMANDS = "/forward_command_controller/commands"
STEP_TOPIC = "/lowrl/policy/step"
BUNDLE_TOPIC = "/lowrl/policy_bundle"
BUNDLE_STATUS_TOPIC = "/lowrl/policy_bundle/status"
KEY = bytes(range(32))  # the bundle key the tests sign with


def theta(k: int) -> float:
    """The joint position of scripted step ``k`` (``FakeRobot.step``)."""
    return 0.01 * k


class FakeRobot:
    """The other side of the wire, as one node.

    Always: publishes ``/joint_states`` (``js_pub``) and the robot's reward signals (``reward``,
    ``episode`` for the return, ``episode_info``, the latched ``tier``), and records commands
    (``commands``, each command's first value), every diagnostic status (``diags``) and the policy
    stats messages (``stats``).

    Args:
        context: the rclpy context.
        name: the node name.
        scripted_commands: also publish commands (``cmd``), as a scripted controller would. Off by
            default: the robot's own publisher would then count as the match ``wait_for_match`` waits for.
        step_rows: play the policy node for the fine-tuner: :meth:`step` publishes the step row of step k
            (``step_pub``: observation k, executed action k/1000, policy version 1) after the joint state.
        bundles: "send" to play the trainer (publish bundles on ``bundle_pub``, record the policy
            node's JSON replies in ``replies``), "receive" to play the policy node (record bundle
            messages in ``bundles``), or None. One role, for the same reason. Either role can
            answer on ``status_pub``.
    """

    def __init__(self, context, name: str = "fake_robot", *, scripted_commands: bool = False,
                 bundles: str | None = None, step_rows: bool = False) -> None:
        if bundles not in (None, "send", "receive"):
            raise ValueError(f"bundles={bundles!r}: one of None, 'send', 'receive'")
        self.node = Node(name, context=context)
        self.js_pub = self.node.create_publisher(JointState, "/joint_states", CONTROL)
        self.reward = self.node.create_publisher(Float64, "/lowrl/reward", STATS)
        self.episode = self.node.create_publisher(Float64, "/lowrl/episode_return", STATS)
        self.episode_info = self.node.create_publisher(Float64MultiArray, "/lowrl/episode", STATS)
        self.tier = self.node.create_publisher(UInt8, "/lowrl/compute_tier", LATCHED)
        self.cmd = (self.node.create_publisher(Float64MultiArray, COMMANDS, CONTROL) if scripted_commands
                    else None)
        self.step_pub = self.node.create_publisher(Float64MultiArray, STEP_TOPIC, RECORD) if step_rows else None
        self.commands: list[float] = []
        self.diags: list = []
        self.stats: list = []
        self.observations = 0  # joint states sent by exchange()
        self.episodes = 0  # episode ends sent by step()
        self.cmd_sub = self.node.create_subscription(Float64MultiArray, COMMANDS,
                                                     lambda m: self.commands.append(m.data[0]), CONTROL)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: self.diags.extend(m.status), 100)
        self.node.create_subscription(Float64MultiArray, "/lowrl/policy/stats", self.stats.append, STATS)
        self.replies: list[dict] = []
        self.bundles: list[bytes] = []
        if bundles == "send":
            self.bundle_pub = self.node.create_publisher(UInt8MultiArray, BUNDLE_TOPIC, LATCHED)
            self.status_sub = self.node.create_subscription(
                String, BUNDLE_STATUS_TOPIC, lambda m: self.replies.append(json.loads(m.data)), STATS)
        elif bundles == "receive":
            self.bundle_sub = self.node.create_subscription(
                UInt8MultiArray, BUNDLE_TOPIC, lambda m: self.bundles.append(m.data.tobytes()), LATCHED)
        if bundles is not None:  # both roles answer (a sender may forge a reply to ask a trainer to re-send)
            self.status_pub = self.node.create_publisher(String, BUNDLE_STATUS_TOPIC, STATS)

    # -- joint states and commands -------------------------------------------------------------

    def joint_state(self, position=0.1, velocity=0.0, names=(JOINT,)) -> JointState:
        """A joint state message: one value for every joint, or a list per joint."""
        msg = JointState(name=list(names))
        msg.position = [position] * len(names) if not isinstance(position, list) else position
        msg.velocity = [velocity] * len(names) if not isinstance(velocity, list) else velocity
        return msg

    def exchange(self, executor, msg: JointState | None = None, timeout: float = 5.0) -> float:
        """Publish one joint state (default: ``joint_state()``) and spin until its command comes; return it."""
        n = len(self.commands)
        self.js_pub.publish(self.joint_state() if msg is None else msg)
        self.observations += 1
        assert spin_until(executor, lambda: len(self.commands) > n, timeout), \
            f"observation {self.observations} got no command"
        return self.commands[-1]

    def step(self, k: int, *, episode_return: float | None = None, terminated: bool = False) -> None:
        """Scripted step ``k`` in the sim robot's order: the reward of step k-1 (``-(k-1)``), [its episode
        end], then observation k (position ``theta(k)``, velocity k). Waits for nothing."""
        if k > 0:
            self.reward.publish(Float64(data=-float(k - 1)))
            if episode_return is not None:
                self.episodes += 1
                self.episode.publish(Float64(data=episode_return))
                self.episode_info.publish(Float64MultiArray(data=[float(self.episodes), episode_return, 10.0,
                                                                  float(terminated)]))
        self.js_pub.publish(JointState(name=[JOINT], position=[theta(k)], velocity=[float(k)], effort=[0.0]))
        if self.step_pub is not None:
            row = np.empty(row_size(3, 1))
            action = np.array([k / 1000.0])
            encode_step(row, stamp=time.time(), safe=False, intervention=False, estop=False, policy_version=1,
                        obs=np.array([math.cos(theta(k)), math.sin(theta(k)), float(k)]), policy_action=action,
                        action=action, command=action)
            self.step_pub.publish(Float64MultiArray(data=row.tolist()))

    # -- diagnostics -----------------------------------------------------------------------------

    def statuses(self, name: str) -> list:
        """Every status named ``name`` received so far, oldest first."""
        return [s for s in self.diags if s.name == name]

    def latest(self, name: str) -> dict[str, str]:
        """The key-values of the newest status named ``name`` ({} before the first)."""
        found = self.statuses(name)
        return {kv.key: kv.value for kv in found[-1].values} if found else {}

    def value(self, name: str, key: str, default: float = -1.0) -> float:
        """``key`` of the newest ``name`` status as a number (``default`` if absent or not a number)."""
        try:
            return float(self.latest(name).get(key, default))
        except ValueError:
            return default

    def has_diag(self, name: str, level: int, text: str) -> bool:
        """A status ``name`` at ``level`` whose message holds ``text`` came in."""
        return any(s.name == name and level_of(s) == level and text in s.message for s in self.diags)

    # -- bundles ---------------------------------------------------------------------------------

    def send(self, message: bytes) -> None:
        """Publish one bundle message (``bundles="send"``)."""
        msg = UInt8MultiArray()
        msg.data = message
        self.bundle_pub.publish(msg)

    def reply(self, version: int) -> dict | None:
        """The newest reply about ``version`` (``bundles="send"``)."""
        return next((r for r in reversed(self.replies) if r["version"] == version), None)

    def accepted(self, version: int) -> bool:
        """The newest reply about ``version`` says accepted (replies land on their own topic, a
        little after the commands show the new policy, so callers spin until this is true)."""
        reply = self.reply(version)
        return reply is not None and reply["accepted"]

    def answer(self, status: BundleStatus) -> None:
        """Answer on the status topic as the policy node does (``bundles="receive"``)."""
        self.status_pub.publish(String(data=status.to_json()))


def constant_policy(path: Path, action: float, *, version: int = 1, tier: str = "full", hidden: int = 8,
                    obs_dim: int = 3) -> Path:
    """A Pendulum-v1 artifact acting ``action`` whatever the observation (zero output weights, output
    bias only), so a test can tell the policy's output from the safe action (0.0) and one policy from
    another. Observations past the pendulum's three are named "x"."""
    rng = np.random.default_rng(version)
    y = np.arctanh((action + 2.0) / 4.0 * 2.0 - 1.0)  # tanh output over limits [-2, 2]
    weights = MlpWeights([(rng.normal(size=(hidden, obs_dim)).astype(np.float32) * 0.1, np.zeros(hidden, np.float32)),
                          (np.zeros((1, hidden), np.float32), np.array([y], np.float32))])
    contract = PolicyContract(obs_names=("cos_theta", "sin_theta", "theta_dot")[:obs_dim] + ("x",) * (obs_dim - 3),
                              action_names=("torque",), action_low=(-2.0,), action_high=(2.0,), control_period_s=0.01,
                              version=version, tier=tier, env_id="Pendulum-v1")
    return save_artifact(path, weights, contract)


def write_key_file(directory: Path, key: bytes = KEY) -> Path:
    """``directory``/bundle.key holding ``key`` in hex, readable by its owner only (the key-file rules)."""
    path = Path(directory) / "bundle.key"
    path.write_text(key.hex())
    path.chmod(0o600)
    return path
