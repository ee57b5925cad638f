"""The fixed_rate control thread of the policy node (core/runtime/realtime.py ControlLoop), with real rclpy.

The ticks must come from the node's own thread (not the executor), on an absolute schedule: a stall
counts the periods it cost as deadline misses and the loop goes on; the RT settings go to that
thread only; deactivate stops it.
"""
from __future__ import annotations

import os
import threading
import time

import pytest
from rclpy.executors import SingleThreadedExecutor

from fakes import FakeRobot, constant_policy
from rosutil import active_policy_node, spin_until, wait_for_match

pytestmark = pytest.mark.ros


@pytest.fixture
def fixed_rate(ros_context, tmp_path):
    """An active fixed_rate policy node at 100 Hz that has seen one joint state, and its executor."""
    executor = SingleThreadedExecutor(context=ros_context)
    robot = FakeRobot(ros_context)
    executor.add_node(robot.node)
    made = []

    def build(**params):
        node = active_policy_node(ros_context, constant_policy(tmp_path / "a.onnx", 0.5), executor=executor,
                                  **{"mode": "fixed_rate", "control_period_s": 0.01, "watchdog_timeout_s": 5.0,
                                     **params})
        made.append(node)
        assert wait_for_match(executor, robot.js_pub)
        robot.js_pub.publish(robot.joint_state())
        assert spin_until(executor, lambda: len(robot.commands) >= 3)
        return node

    build.robot = robot
    yield build, executor
    for node in made:
        node.destroy_node()
    robot.node.destroy_node()
    executor.shutdown()


def test_ticks_come_from_the_control_thread_without_the_executor(fixed_rate):
    build, _executor = fixed_rate
    node = build()
    assert node._loop is not None and node._loop._thread.name == "policy_node_control"
    tid = node._loop._thread.native_id
    with open(f"/proc/self/task/{tid}/comm") as f:  # the OS name a user sees in top -H
        assert f.read().strip() == "lowrl_control"
    ticks = node.controller.ticks
    time.sleep(0.3)  # nobody spins: only the control thread can tick
    assert 20 <= node.controller.ticks - ticks <= 40  # 100 Hz for 0.3 s (a loaded CI machine: wide margins)


def test_a_stall_counts_the_skipped_periods_and_keeps_the_schedule(fixed_rate):
    build, _executor = fixed_rate
    node = build()
    misses, ticks, schedule = node.controller.deadline_misses, node.controller.ticks, node._loop.schedule
    with node._lock:  # a 55 ms stall of the control path: 5 periods of 10 ms cannot be served
        time.sleep(0.055)
    time.sleep(0.1)
    assert node.controller.deadline_misses - misses >= 4
    assert node.controller.ticks - ticks >= 5  # and the loop went on
    assert node._loop.schedule is schedule  # the schedule was kept (its grid: test_control.py), not restarted


def test_rt_cpus_pin_the_control_thread_only(fixed_rate):
    allowed = sorted(os.sched_getaffinity(0))
    build, executor = fixed_rate
    node = build(rt_cpus=str(allowed[-1]))
    tid = node._loop._thread.native_id
    assert spin_until(executor, lambda: node._realtime is not None, 2.0)
    assert os.sched_getaffinity(tid) == {allowed[-1]}
    assert os.sched_getaffinity(threading.get_native_id()) == set(allowed)  # the executor's thread: untouched


def test_deactivate_stops_the_control_thread(fixed_rate):
    build, executor = fixed_rate
    node = build()
    thread = node._loop._thread
    node.trigger_deactivate()
    assert node._loop is None and not thread.is_alive()
    ticks = node.controller.ticks
    time.sleep(0.05)
    assert node.controller.ticks == ticks
    node.trigger_activate()
    assert node._loop is not None and node._loop._thread.is_alive()
    assert spin_until(executor, lambda: node.controller.ticks > ticks + 3)


def test_the_ticks_lock_on_just_after_the_robots_joint_states(fixed_rate):
    """A robot publishing joint states at 200 Hz, each ~4 ms before a 100 Hz tick (a phase a launch can give): the
    policy node moves its schedule until each tick comes ~1 ms (tick_phase_s) after a sample arrives. Without
    the lock the lag stays ~4 ms for good (test_realtime.py). A wall-clock publisher: realtime tier."""
    build, _executor = fixed_rate
    node, robot = build(), build.robot
    stop, first = threading.Event(), node._loop.schedule.next_due + 0.001  # 4 ms before a tick (mod 5 ms)

    def publish():  # on an absolute schedule, as a robot's loop
        k = 0
        while not stop.is_set():
            time.sleep(max(0.0, first + 0.005 * k - time.perf_counter()))
            robot.js_pub.publish(robot.joint_state())
            k += 1

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    try:
        lags = []
        for _ in range(30):  # 1.5 s: 0.5 s of new samples before the lock acts, then ~3 ms of shift at <= 0.5 ms a tick
            time.sleep(0.05)
            lags.append(node._loop.phase.lag_s)
    finally:
        stop.set()
        thread.join()
    assert 0.0025 < lags[2] < 0.0055  # the launch's phase: the sample ~4 ms old at each tick
    assert sorted(lags[-6:])[3] < 0.0015  # locked: ~1 ms
    assert -0.0045 < node._loop.phase.shifted_s < -0.0015
