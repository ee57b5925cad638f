"""`lowrl top [--namespace NS]`: the robot's live picture in a terminal, for a person on SSH.

The tier and why it changed, inference p50/p99 against the deadline and misses per second, the
budget signals against their limits, the running and best versions with their returns, swaps,
rejections and rollbacks, the learner's state and the trainer's stage (docs/monitoring.md). A
textual app redraws :mod:`lowrl_ros.core.monitor.text`'s rows twice a second from the monitor
model, which a ROS listener (lowrl_ros/ros/monitor_listener.py) feeds on a thread of its own;
``q`` quits. It works at 80x24: one robot fills about 16 rows.
"""
from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from textual.app import App, ComposeResult
from textual.widgets import Static

from lowrl_ros.core.monitor.model import MonitorModel
from lowrl_ros.core.monitor.text import lines

REFRESH_S = 0.5  # ~2 Hz


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", default=None, metavar="NS",
                        help="watch only this robot namespace (default: every robot found, one under the other)")
    parser.add_argument("--stale-s", type=float, default=3.0,
                        help="a node not heard for this long is shown stale (default 3)")


def screen_text(model: MonitorModel, namespace: str | None = None) -> str:
    """What the screen shows: each robot's rows (or a line saying none was found yet)."""
    namespaces = [namespace] if namespace is not None else model.namespaces()
    if not namespaces:
        return "lowrl top: no lowrl node found yet (looking on ROS_DOMAIN_ID's graph) - q quits"
    blocks = ["\n".join(lines(model.snapshot(ns))) for ns in namespaces]
    return "\n\n".join(blocks) + "\n\nq quits"


class TopApp(App):
    """The terminal view over a :class:`MonitorModel` (fed by someone else)."""

    BINDINGS = [("q", "quit", "Quit")]
    CSS = "Screen { overflow-y: auto; } #picture { width: 100%; }"

    def __init__(self, model: MonitorModel, namespace: str | None = None, refresh_s: float = REFRESH_S) -> None:
        super().__init__()
        self.model = model
        self.namespace = namespace
        self.refresh_s = refresh_s

    def compose(self) -> ComposeResult:
        yield Static(screen_text(self.model, self.namespace), id="picture", markup=False)

    def on_mount(self) -> None:
        self.set_interval(self.refresh_s, self.redraw)

    def redraw(self) -> None:
        self.query_one("#picture", Static).update(screen_text(self.model, self.namespace))


def _spin(listener: Any, stop: threading.Event) -> None:
    from rclpy.executors import SingleThreadedExecutor

    executor = SingleThreadedExecutor(context=listener.node.context)
    executor.add_node(listener.node)
    while not stop.is_set():
        executor.spin_once(timeout_sec=0.1)


def run(args: argparse.Namespace) -> int:
    import rclpy

    from lowrl_ros.ros.monitor_listener import MonitorListener

    rclpy.init(args=None)
    model = MonitorModel(time.monotonic, stale_s=args.stale_s)
    listener = MonitorListener(model, namespace=args.namespace, node_name="lowrl_top")
    stop = threading.Event()
    spinner = threading.Thread(target=_spin, args=(listener, stop), name="lowrl-top-ros", daemon=True)
    spinner.start()
    try:
        TopApp(model, args.namespace).run()
    finally:
        stop.set()
        spinner.join(timeout=2.0)
        listener.close()
        rclpy.try_shutdown()
    return 0
