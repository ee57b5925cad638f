"""Baseline node for `lowrl bench loop`: the same policy run with torch. BENCH ONLY, never on a robot.

What a typical ROS 2 RL deployment does: a plain rclpy node that turns each JointState into a
tensor and calls a torch MLP in eager mode. It reads the same artifact (dequantised weights,
lowrl_ros.core.runtime.artifact.load_weights) and the same observation adapter as the policy node, so the
two differ only in the runtime. torch is fine here: this file is not part of the on-robot runtime.

Run: ``python -m lowrl_ros.ros.torch_policy_node --ros-args -p policy_path:=... -p command_topic:=...``
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading

import numpy as np


def build_torch_policy(path: str):
    """(torch module, contract) from an artifact: normalise -> MLP -> tanh rescale -> clamp."""
    import torch

    from lowrl_ros.core.runtime.artifact import load_weights

    weights, contract = load_weights(path)
    layers: list[torch.nn.Module] = []
    for i, (w, b) in enumerate(weights.layers):
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(np.asarray(w)))
            lin.bias.copy_(torch.from_numpy(np.asarray(b)))
        layers.append(lin)
        if i < len(weights.layers) - 1:
            layers.append(torch.nn.ReLU() if weights.hidden_activation == "relu" else torch.nn.Tanh())
    net = torch.nn.Sequential(*layers).eval()
    offset = torch.tensor(contract.obs_offset or [0.0] * contract.obs_dim, dtype=torch.float32)
    scale = torch.tensor(contract.obs_scale or [1.0] * contract.obs_dim, dtype=torch.float32)
    low = torch.tensor(contract.action_low, dtype=torch.float32)
    high = torch.tensor(contract.action_high, dtype=torch.float32)
    tanh_out = weights.output_activation == "tanh"

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        x = (torch.as_tensor(obs, dtype=torch.float32) - offset) * scale
        y = net(x.unsqueeze(0))[0]
        if tanh_out:
            y = low + (torch.tanh(y) + 1.0) * 0.5 * (high - low)
        return torch.clamp(y, low, high).numpy().astype(np.float64)

    return act, contract


def main(argv: list[str] | None = None) -> int:
    import rclpy
    import torch
    from rclpy.node import Node
    from rclpy.signals import SignalHandlerOptions
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from lowrl_ros.core.runtime.obs_adapter import ObsAdapterConfig, ObservationAdapter, ObservationError
    from lowrl_ros.ros.spinning import make_executor
    from lowrl_ros.ros.qos import CONTROL

    torch.set_num_threads(1)  # like the policy node's single intra-op thread; batch 1 gains nothing from more
    rclpy.init(args=argv if argv is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    node = Node("torch_policy_node")
    path = node.declare_parameter("policy_path", "").value
    topic = node.declare_parameter("command_topic", "/bench/torch/commands").value
    fields = node.declare_parameter("obs_fields", ["pendulum_joint.cos_position", "pendulum_joint.sin_position",
                                                   "pendulum_joint.velocity"]).value
    act, contract = build_torch_policy(path)
    adapter = ObservationAdapter(ObsAdapterConfig(obs_fields=tuple(fields)))
    act(np.zeros(contract.obs_dim))  # warm-up, as the policy node does
    pub = node.create_publisher(Float64MultiArray, topic, CONTROL)
    msg = Float64MultiArray()

    def on_joint_state(js: JointState) -> None:
        try:
            obs = adapter.from_joint_state(js.name, js.position, js.velocity, js.effort)
            msg.data = act(obs).tolist()
        except ObservationError:
            msg.data = [0.0] * contract.action_dim
        pub.publish(msg)

    node.create_subscription(JointState, "/joint_states", on_joint_state, CONTROL)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    executor = make_executor()  # the same executor as the policy node: only the runtime differs
    executor.add_node(node)
    node.get_logger().info(f"torch baseline running {path} -> {topic}")
    while not stop.is_set() and rclpy.ok():
        executor.spin_once(timeout_sec=0.1)
    node.destroy_node()
    rclpy.shutdown()
    return 0


# `lowrl bench` lists every module of lowrl_ros/bench; this one is a helper node, so its "run" just
# starts the node (what `lowrl bench loop` does in a subprocess).
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", required=True, help="artifact (.onnx) to run with torch")
    parser.add_argument("--command-topic", default="/bench/torch/commands")


def run(args: argparse.Namespace) -> int:
    return main(["torch_policy_node", "--ros-args", "-p", f"policy_path:={args.policy}",
                 "-p", f"command_topic:={args.command_topic}"])


if __name__ == "__main__":
    sys.exit(main())
