"""lowrl bench loop --legged's per-thread CPU accounting (bench/loop.py), on this process's own threads, and its
children, which must not outlive it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from lowrl_ros.bench.loop import _thread_ticks, thread_group
from lowrl_ros.core.runtime.realtime import CONTROL_THREAD, name_thread


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_bench_leaves_no_busy_loop_behind():
    """A bench killed outright (a CI timeout sends SIGKILL: no finally runs) takes its burners with it."""
    from lowrl_ros.bench.loop import BURNER

    bench = subprocess.Popen([sys.executable, "-c",
                              "import sys, time\nfrom lowrl_ros.bench.loop import BURNER, spawn\n"
                              "p = spawn([sys.executable, '-c', BURNER, '0'])\nprint(p.pid, flush=True)\n"
                              "time.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    burner = int(bench.stdout.readline())
    time.sleep(0.5)  # let the burner run: it must be the busy loop itself (exec'd), not a wrapper
    with open(f"/proc/{burner}/cmdline", "rb") as f:
        assert BURNER.encode() in f.read()
    bench.send_signal(signal.SIGKILL)
    bench.wait(10)
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{burner}") and time.monotonic() < deadline:
        time.sleep(0.05)
    if os.path.exists(f"/proc/{burner}"):  # a zombie is gone already; anything else is left running
        with open(f"/proc/{burner}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state != "Z":
            os.kill(burner, signal.SIGKILL)
            pytest.fail(f"the burner outlived the bench (state {state})")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/task is Linux's")
def test_thread_ticks_name_and_charge_the_busy_thread():
    got: dict = {}

    def busy() -> None:
        name_thread(CONTROL_THREAD)
        got["tid"] = threading.get_native_id()
        before = _thread_ticks(os.getpid())
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.3:  # 0.3 s of CPU on this thread
            pass
        got["before"], got["after"] = before, _thread_ticks(os.getpid())

    t = threading.Thread(target=busy)
    t.start()
    t.join()
    tid = got["tid"]
    name, ticks = got["after"][tid]
    assert name == CONTROL_THREAD and thread_group(name) == "control"
    used = (ticks - got["before"][tid][1]) / os.sysconf("SC_CLK_TCK")
    assert 0.2 <= used <= 0.5
    assert thread_group("dds.recv") == "dds" and thread_group("policy_node") == "executor+other"


@pytest.mark.ros
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/task is Linux's")
def test_floor_process_takes_the_topics_and_commands_at_50_hz_on_the_control_thread(ros_context):
    """The floor the bench compares the policy node with really does the job's rclpy part: its thread named
    like the control thread publishes a command every 20 ms (and stays alive while the joint states flow)."""
    import json
    import subprocess

    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from lowrl_ros.bench.loop import FLOOR
    from lowrl_ros.ros.qos import CONTROL
    from rosutil import spin_for, spin_until

    node = Node("floor_test", context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(node)
    got: list = []
    node.create_subscription(Float64MultiArray, "/bench_robot/floor_cmd", got.append, CONTROL)
    js = node.create_publisher(JointState, "/bench_robot/joint_states", qos_profile_sensor_data)
    proc = subprocess.Popen([sys.executable, "-c", FLOOR, "/bench_robot/floor_cmd",
                             json.dumps([["joint_states", "joint_state", "best_effort"]])],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert spin_until(executor, lambda: len(got) > 0, 30), proc.stderr.read() if proc.poll() is not None else ""
        got.clear()
        msg = JointState(name=["a"], position=[0.0], velocity=[0.0], effort=[0.0])
        t0 = time.monotonic()
        for _ in range(100):  # joint states at up to 100 Hz while the commands are counted
            js.publish(msg)
            spin_for(executor, 0.01)
        rate = len(got) / (time.monotonic() - t0)
        assert proc.poll() is None
        assert 35 <= rate <= 65, rate  # a command every 20 ms
        assert len(got[-1].data) == 12
        names = {name for name, _ in _thread_ticks(proc.pid).values()}
        assert CONTROL_THREAD in names
    finally:
        proc.kill()
        proc.wait()
        executor.shutdown()
        node.destroy_node()
