"""How every lowrl node spins: the executor choice, a spin loop that owns SIGINT/SIGTERM, and the
one ``main`` they all share (``run_node``)."""
from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import rclpy
import rclpy.executors
from rclpy.executors import ExternalShutdownException
from rclpy.signals import SignalHandlerOptions


# Set by `lowrl launch` / `lowrl demo` (lowrl_ros/launcher.py) for the nodes it starts: its own pid.
LAUNCHER_PID_ENV = "LOWRL_LAUNCHER_PID"


def exit_with_launcher(poll_s: float = 0.5) -> bool:
    """Stop this node as on SIGTERM once the `lowrl launch` process that started it is gone.

    The launcher starts each node in its own session (a terminal's Ctrl-C reaches the launcher only,
    which stops the nodes in order), so a launcher that is killed (SIGKILL, a crash) would leave them
    running: a policy node still commanding a robot nobody watches. Only a direct child of the process
    named by LOWRL_LAUNCHER_PID watches it (a node started by `ros2 launch` or by hand never does);
    returns whether this one does.
    """
    pid = os.environ.get(LAUNCHER_PID_ENV, "")
    if not pid.isdigit() or os.getppid() != int(pid):
        return False

    def watch() -> None:
        while os.getppid() == int(pid):
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)  # the node's own shutdown: safe action, files closed

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()
    return True


def make_executor(context=None, events: bool = True):
    """rclpy's EventsExecutor where present (measured ~2x lower pub->sub latency here), else single-threaded.

    ``events=False`` for nodes whose callbacks take the message info (source timestamps): the
    EventsExecutor of this rclpy fails on those.
    """
    if events:
        try:
            from rclpy.experimental import EventsExecutor

            return EventsExecutor(context=context)
        except ImportError:
            pass
    return rclpy.executors.SingleThreadedExecutor(context=context)


def spin_until_signal(node, executor=None) -> None:
    """Spin until SIGINT/SIGTERM, keeping the context alive so the node can still say goodbye.

    rclpy's own handler shuts the context down on Ctrl-C, after which a safe action can no longer
    be published, and EventsExecutor.spin() does not return on it here; so the node owns the
    signals (``rclpy.init(..., signal_handler_options=SignalHandlerOptions.NO)``) and spins with
    spin_once.
    """
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    executor = executor or make_executor()
    executor.add_node(node)
    while not stop.is_set() and rclpy.ok():
        executor.spin_once(timeout_sec=0.1)


def guarded(node, fn: Callable[[], Any], *, on_error: Callable[[Exception], None] | None = None,
            throttle_s: float = 0.0) -> Callable[[], None]:
    """Wrap a timer callback so an exception is logged on ``node``'s logger instead of stopping the executor.

    The wrapper takes no arguments (rclpy passes TimerInfo to a callback that takes any).
    ``on_error`` runs after logging (e.g. to count errors); ``throttle_s`` throttles the log line.
    """
    def run() -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - a callback failing must never take the node down
            throttle = {"throttle_duration_sec": throttle_s} if throttle_s > 0 else {}
            node.get_logger().error(f"{getattr(fn, '__name__', fn)} failed: {type(exc).__name__}: {exc}", **throttle)
            if on_error is not None:
                on_error(exc)
    return run


def locked(method: Callable) -> Callable:
    """Run a node method under the node's ``_lock`` (a node whose own thread and executor callbacks share state:
    the policy node's control thread). ``method.__wrapped__`` is the bare method, for a caller holding the lock."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return run


def autostart(node: Any) -> int:
    """``run_node``'s ``start`` for a LifecycleNode with an ``autostart`` parameter: configure and activate it
    (no lifecycle manager needed); 1 when configure fails (its error is logged), so ``main`` ends."""
    from rclpy.lifecycle import TransitionCallbackReturn

    if not node.get_parameter("autostart").value:
        return 0
    if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
        print(f"{node.get_name()}: configure failed (see the error above); fix the parameters and restart",
              file=sys.stderr)
        return 1
    node.trigger_activate()
    return 0


def run_node(name: str, make_node: Callable[[], object], *, args: list[str] | None = None,
             make_executor_fn: Callable[[object], object] | None = None,
             bad_config_rc: int = 2, start: Callable[[object], int] | None = None,
             stop: Callable[[object], None] | None = None) -> int:
    """A node's ``main``: init (the node owns the signals), build, spin until SIGINT/SIGTERM, clean up.

    Args:
        name: for the one-line error when ``make_node`` raises ValueError (bad parameters, a bad
            kit or key: the message says how to fix it), then the exit code is ``bad_config_rc``.
        make_executor_fn: builds the node's executor from the built node (default: ``make_executor()``).
        start: run after the node is built; a non-zero return ends ``main`` with that code.
        stop: run after spinning, while the context still lives (e.g. publish the safe action).
    The node's ``close()`` (if it has one) runs before ``destroy_node()``.
    """
    rclpy.init(args=args if args is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    exit_with_launcher()
    node = None
    try:
        try:
            node = make_node()
        except ValueError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return bad_config_rc
        if start is not None:
            rc = start(node)
            if rc:
                return rc
        spin_until_signal(node, make_executor_fn(node) if make_executor_fn is not None else None)
        if stop is not None:
            stop(node)
    except (KeyboardInterrupt, SystemExit, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            if callable(getattr(node, "close", None)):
                node.close()
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0
