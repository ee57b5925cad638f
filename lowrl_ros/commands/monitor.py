"""`lowrl monitor --foxglove [--port P] [--namespace NS] [--record FILE.mcap]`: watch a running robot.

``--foxglove`` serves the robot's session to Foxglove (open ws://THIS_HOST:P in Foxglove, then import
config/foxglove_layout.json): the monitor node (lowrl_ros/ros/monitor_node.py) runs in this process,
beside the robot's nodes, never in them. ``--record`` also writes the session to an MCAP file.
The same node runs from a launch file with ``foxglove:=true`` / ``record:=FILE.mcap``
(docs/monitoring_foxglove.md). Each way of watching is one branch of ``run``.
"""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--foxglove", action="store_true", help="serve a Foxglove WebSocket server (ws://HOST:PORT)")
    parser.add_argument("--port", type=int, default=8765, help="the Foxglove server's port (default 8765; 0: any)")
    parser.add_argument("--host", default="0.0.0.0", help="address to bind (default all; 127.0.0.1: this machine)")
    parser.add_argument("--namespace", default="", help="the robot's namespace (as launched with namespace:=NS)")
    parser.add_argument("--record", metavar="FILE.mcap", default="", help="also record the session to this MCAP file")
    parser.add_argument("--robot-topics", action="store_true",
                        help="also the robot's joint states, IMU and commands (off by default: with 1 kHz joint "
                             "states they cost the robot ~2 %% of a core; the step row carries every tick)")
    parser.add_argument("--robot-rate-hz", type=float, default=10.0,
                        help="cap on the robot's joint states, IMU and commands (default 10; 0: their own rate)")


def monitor_ros_args(args: argparse.Namespace) -> list[str]:
    """The monitor node's command line for these flags."""
    out = ["--ros-args", "-r", "__node:=lowrl_monitor", "-p", f"foxglove:={str(args.foxglove).lower()}",
           "-p", f"foxglove_port:={args.port}", "-p", f"foxglove_host:={args.host}",
           "-p", f"robot_rate_hz:={float(args.robot_rate_hz)}", "-p", f"robot_topics:={str(args.robot_topics).lower()}"]
    if args.record:
        out += ["-p", f"record_path:={args.record}"]
    if args.namespace.strip("/"):
        out += ["-r", f"__ns:=/{args.namespace.strip('/')}"]
    return out


def run(args: argparse.Namespace) -> int:
    if args.foxglove or args.record:
        from lowrl_ros.ros import monitor_node  # rclpy only when it runs

        return monitor_node.main(["lowrl-monitor"] + monitor_ros_args(args))
    print("lowrl monitor: say how to watch: --foxglove (and/or --record FILE.mcap)")
    return 2
