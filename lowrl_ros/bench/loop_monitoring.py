"""``lowrl bench loop --monitoring``: what watching a robot costs it (issue 30 item 6).

The legged bench robot of ``--legged`` (12-joint JointState at 1 kHz, Imu at 200 Hz, from this process) and
the policy node at 50 Hz on its robot file; phases alternate monitoring off and on in the same run
(off, on, off, on, ...), so both see the same machine. "On" is lowrl_ros/ros/monitor_node.py beside the
policy node with its defaults, as ``lowrl launch robot.launch.yaml foxglove:=true record:=FILE`` starts
it: the Foxglove server with a client subscribed to every channel (in this process) and the MCAP recording
of the session's topics (the robot's own topics only with robot_topics:=true, left off here). Measured per
phase: the policy node's CPU and the monitor's (% of one core, psutil), the policy node's command
periods (missed periods, late by > 1 ms) and the rate of each monitoring topic the robot side publishes.
The cost is monitor CPU + (policy node CPU on - off); the target: <= 1 % of a core, 0 missed periods.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time

from lowrl_ros.bench.loop import (LEGGED_ROBOT, RobotPublisher, _cpu_percent, _period_stats, _periods,
                                  legged_bench_robot, spawn)

TARGET_CPU_PERCENT = 1.0


def _foxglove_client(port: int, stop: threading.Event, counts: dict) -> None:
    """Subscribe to every advertised channel and count messages until ``stop`` (a viewer on another machine)."""
    import websockets

    async def go() -> None:
        async with websockets.connect(f"ws://127.0.0.1:{port}", subprotocols=["foxglove.sdk.v1"],
                                      max_size=None) as ws:
            while not stop.is_set():
                try:
                    frame = await asyncio.wait_for(ws.recv(), 0.2)
                except asyncio.TimeoutError:
                    continue
                if isinstance(frame, str) and json.loads(frame)["op"] == "advertise":
                    subs = [{"id": ch["id"], "channelId": ch["id"]} for ch in json.loads(frame)["channels"]]
                    await ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))
                elif isinstance(frame, bytes):
                    counts["messages"] = counts.get("messages", 0) + 1

    try:
        asyncio.run(go())
    except OSError as exc:
        counts["error"] = str(exc)


def run_monitoring(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.node import Node
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import Float64, Float64MultiArray

    from lowrl_ros.bench import record
    from lowrl_ros.core.runtime.actions import OutputConfig

    try:
        share, robot_path, robot, _spec, policy = legged_bench_robot(args, "monitoring")
    except record.ResultExists as exc:
        print(f"lowrl bench loop: {exc}", file=sys.stderr)
        return 2
    tmp = policy.parent
    ns = ["-r", "__ns:=/bench_robot"]
    proc = spawn([sys.executable, "-m", "lowrl_ros.ros.policy_node", "--ros-args", "--params-file",
                  str(share / "config/policy_node.yaml"), *ns, "-p", f"policy_path:={policy}",
                  "-p", f"robot_file:={robot_path}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = Node("monitoring_bench", context=ctx)
    pub = RobotPublisher(node, list(robot.joints))
    command_topic = "/bench_robot/" + OutputConfig.from_dict(robot.raw.get("output"), robot.raw.get("interface")).topic
    deep = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10000, reliability=ReliabilityPolicy.RELIABLE)
    cmd_sub = node.create_subscription(Float64MultiArray, command_topic, lambda _m: None, deep)
    # The robot side's monitoring topics, counted (never spun: taken at the end of each phase).
    rate_subs = {t: node.create_subscription(kind, "/bench_robot/" + t, lambda _m: None, deep)
                 for t, kind in (("lowrl/policy/latency_us", Float64), ("lowrl/policy/stats", Float64MultiArray))}
    seconds, phases = args.phase_seconds, ["off", "on"] * max(1, args.phase_pairs)
    results: dict = {"robot_file": LEGGED_ROBOT, "phase_seconds": seconds, "phases": [],
                     "cpu_count": os.cpu_count(), "loadavg_1min_before": os.getloadavg()[0]}
    try:
        t0 = time.monotonic()
        while cmd_sub.get_publisher_count() == 0 or len(_periods(cmd_sub)) < 10:
            if proc.poll() is not None or time.monotonic() - t0 > 60:
                raise RuntimeError(f"the policy node did not command within 60 s: {proc.stderr.read()[-2000:]}")
            time.sleep(0.5)
        for i, phase in enumerate(phases):
            monitor, client, stop, counts = None, None, threading.Event(), {}
            if phase == "on":
                port_file = tmp / f"port{i}"
                monitor = spawn([sys.executable, "-c", MONITOR, str(port_file), "--ros-args", *ns,
                                 "-p", "foxglove:=true", "-p", "foxglove_port:=0", "-p", "foxglove_host:=127.0.0.1",
                                 "-p", f"record_path:={tmp / f'phase{i}.mcap'}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                t1 = time.monotonic()
                while not port_file.is_file():
                    if monitor.poll() is not None or time.monotonic() - t1 > 60:
                        raise RuntimeError(f"the monitor did not start: {monitor.stderr.read()[-2000:]}")
                    time.sleep(0.2)
                client = threading.Thread(target=_foxglove_client, args=(int(port_file.read_text()), stop, counts))
                client.start()
                time.sleep(3.0)  # start-up and discovery, not counted
            _periods(cmd_sub)
            for sub in rate_subs.values():
                _periods(sub)
            cpu_box: dict = {}
            if monitor is not None:
                th = threading.Thread(target=lambda: cpu_box.update(monitor=_cpu_percent(monitor, seconds)[0]))
                th.start()
            cpu, rss, _ = _cpu_percent(proc, seconds)
            if monitor is not None:
                th.join()
            row = {"phase": phase, "policy_cpu_percent": cpu, "policy_rss_mb": rss,
                   "monitor_cpu_percent": cpu_box.get("monitor", 0.0), **_period_stats(_periods(cmd_sub)),
                   "topic_hz": {t: (len(_periods(s)) + 1) / seconds for t, s in rate_subs.items()}}
            stop.set()
            if client is not None:
                client.join(5)
                row["foxglove_messages"] = counts.get("messages", 0)
            if monitor is not None:
                monitor.send_signal(2)
                try:
                    monitor.wait(15)
                except subprocess.TimeoutExpired:
                    monitor.kill()
                row["mcap_bytes"] = (tmp / f"phase{i}.mcap").stat().st_size if (tmp / f"phase{i}.mcap").is_file() else 0
            results["phases"].append(row)
            print(f"  {phase}: policy node {cpu:.1f} %, monitor {row['monitor_cpu_percent']:.1f} %, "
                  f"missed periods {row.get('missed_periods')}", file=sys.stderr)
    finally:
        pub.stop()
        proc.send_signal(2)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        node.destroy_node()
        ctx.shutdown()
    results["loadavg_1min_after"] = os.getloadavg()[0]
    off = [p for p in results["phases"] if p["phase"] == "off"]
    on = [p for p in results["phases"] if p["phase"] == "on"]

    def mean(rows, key):
        return sum(r[key] for r in rows) / len(rows)

    policy_delta = mean(on, "policy_cpu_percent") - mean(off, "policy_cpu_percent")
    cost = mean(on, "monitor_cpu_percent") + policy_delta
    missed_on = sum(r.get("missed_periods", 0) for r in on)
    max_hz = max(hz for r in results["phases"] for hz in r["topic_hz"].values())
    results["summary"] = {"monitor_cpu_percent": mean(on, "monitor_cpu_percent"),
                          "policy_cpu_delta_percent": policy_delta, "cost_percent_of_a_core": cost,
                          "missed_periods_on": missed_on, "missed_periods_off": sum(r.get("missed_periods", 0)
                                                                                    for r in off),
                          "max_monitoring_topic_hz": max_hz}
    results["targets_met"] = {f"cost <= {TARGET_CPU_PERCENT:g} % of a core": cost <= TARGET_CPU_PERCENT,
                              "0 missed periods with monitoring on": missed_on == 0,
                              "monitoring topics <= 10 Hz": max_hz <= 10.5}
    s = results["summary"]
    line = (f"monitoring on (monitor defaults: Foxglove + client + MCAP of the session topics; robot at 1 kHz joint "
            f"states): {s['cost_percent_of_a_core']:.1f} % of "
            f"a core (monitor {s['monitor_cpu_percent']:.1f} %, policy node {policy_delta:+.1f} %), missed periods "
            f"{missed_on}, monitoring topics <= {max_hz:.1f} Hz")
    rows = "\n".join(f"| {p['phase']} | {p['policy_cpu_percent']:.1f} | {p['monitor_cpu_percent']:.1f} | "
                     f"{p.get('missed_periods', '-')} | {p.get('period_error_p99_ms', float('nan')):.2f} | "
                     f"{', '.join(f'{t.rsplit(chr(47), 1)[-1]} {hz:.1f}' for t, hz in p['topic_hz'].items())} |"
                     for p in results["phases"])
    md = (f"# Monitoring cost (lowrl bench loop --monitoring)\n\n{line}.\n\n"
          "| phase | policy node CPU % | monitor CPU % | missed periods | period error p99 ms | topic Hz |\n"
          f"|---|---|---|---|---|---|\n{rows}\n\nTargets: "
          + ", ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in results["targets_met"].items()) + "\n")
    path = record.write_result("loop", results, md, name="monitoring", headline=line, root=args.out)
    print(md)
    print(f"written: {path}")
    return 0


# The monitor node, writing its Foxglove port to a file once it serves (foxglove_port:=0 picks a free one).
MONITOR = (
    "import sys, rclpy\n"
    "from pathlib import Path\n"
    "from rclpy.executors import SingleThreadedExecutor\n"
    "from lowrl_ros.ros.monitor_node import MonitorNode\n"
    "rclpy.init(args=sys.argv)\n"
    "node = MonitorNode()\n"
    "Path(sys.argv[1]).write_text(str(node.foxglove.port))\n"
    "ex = SingleThreadedExecutor(); ex.add_node(node)\n"
    "try:\n    ex.spin()\nexcept BaseException:\n    pass\nfinally:\n    node.close()\n"
)
