"""`lowrl bench budget --ladder`: the legged robot walking over ROS 2 under CPU load, with its fallback ladder,
with the old decimation, and without the budget monitor, in one run (issue 31, docs/budget.md).

Each arm launches launch/legged.launch.yaml as it ships (sim robot at 200 Hz physics, policy node with the
robot file config/robots/legged_ant.yaml, budget monitor with config/budget_monitor.yaml following the same
robot file), lets the robot walk at the command ``vx`` for ``settle_s``, then runs two CPU burners (nice 0,
unpinned, like the demo's load) for ``seconds`` and measures over that window:

- **tracking**: the mean of LeggedAnt's velocity-tracking kernel ``exp(-|v_xy - cmd_xy|^2 / 0.05)`` over the
  sim robot's ground-truth base velocity (``state_estimator/twist``, 50 Hz), 1 = perfect; also the mean vx;
- **falls**: episodes the sim robot ended by a fall (``lowrl/episode`` terminated) in the window;
- **deadline misses** and ticks from the policy node's stats, and the share of the window on each tier;
- the ladder steps the policy node applied (``lowrl/policy/tier`` ``step``).

Arms: ``unloaded`` (the reference, no burners), ``ladder`` (models/legged_ant.lowrl: the robot default
``[lite, safe]``: the lite student at full rate), ``decimation`` (the old behaviour: the one-artifact gait
models/legged_ant_int8.onnx with ``fallback: [decimated:4, safe]``, as the 25 Hz gait ran at ~6 Hz before the
ladder) and ``no_monitor`` (the bundle on the full tier throughout). Tracking is reported as % of unloaded.
The sim robot shares the loaded CPU with the policy (a real robot's physics would not), the same in every arm.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[2]
ROBOT_FILE = REPO / "config" / "robots" / "legged_ant.yaml"
BUNDLE = REPO / "models" / "legged_ant.lowrl"
GAIT = REPO / "models" / "legged_ant_int8.onnx"
SIGMA2 = 0.05  # LeggedAnt's track_lin_vel_xy kernel width (config/robots/legged_ant.yaml reward terms)
ARMS = ("unloaded", "ladder", "decimation", "no_monitor")


def _burner() -> subprocess.Popen:
    """One busy-looping process (bench/budget.py's CpuBurner, unpinned; not imported: budget.py runs this bench)."""
    return subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"])


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


class _Probe:
    """A bench-side rclpy node: base velocity, episode ends, policy stats and the policy's ladder step."""

    def __init__(self) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import TwistStamped
        from rclpy.executors import SingleThreadedExecutor
        from std_msgs.msg import Float64MultiArray

        from lowrl_ros.ros.qos import CONTROL, STATS

        self.rclpy, self.ctx = rclpy, rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node("budget_ladder_bench", context=self.ctx)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.recording = False
        self.velocity: list[tuple[float, float, float]] = []
        self.episodes: list[tuple[float, float]] = []  # (time, terminated)
        self.stats: list[float] | None = None
        self.tiers: list[float] = []  # the applied tier of each stats message while recording
        self.steps: list[str] = []
        self.node.create_subscription(TwistStamped, "/state_estimator/twist", self._on_twist, CONTROL)
        self.node.create_subscription(Float64MultiArray, "/lowrl/episode", self._on_episode, STATS)
        self.node.create_subscription(Float64MultiArray, "/lowrl/policy/stats", self._on_stats, STATS)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 50)

    def _on_twist(self, msg) -> None:
        if self.recording:
            self.velocity.append((msg.twist.linear.x, msg.twist.linear.y, msg.twist.angular.z))

    def _on_episode(self, msg) -> None:
        if self.recording:
            self.episodes.append((time.monotonic(), float(msg.data[-1])))

    def _on_stats(self, msg) -> None:
        self.stats = list(msg.data)
        if self.recording:
            self.tiers.append(self.stats[6])

    def _on_diag(self, msg) -> None:
        for status in msg.status:
            if status.name == "lowrl/policy/tier":
                step = {kv.key: kv.value for kv in status.values}.get("step")
                if self.recording and step and (not self.steps or self.steps[-1] != step):
                    self.steps.append(step)

    def spin(self, seconds: float, until=None) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if until is not None and until():
                return True
            self.executor.spin_once(timeout_sec=0.01)
        return bool(until and until())

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.rclpy.try_shutdown(context=self.ctx)


def tracking(velocity: list[tuple[float, float, float]], command: tuple[float, float]) -> float:
    """Mean of ``exp(-|v_xy - cmd_xy|^2 / 0.05)`` (LeggedAnt's tracking kernel); nan without samples."""
    if not velocity:
        return math.nan
    v = np.asarray(velocity)[:, :2] - np.asarray(command)
    return float(np.mean(np.exp(-np.sum(v * v, axis=1) / SIGMA2)))


def decimation_robot_file(directory: Path, k: int = 4) -> Path:
    """The legged robot file with the old behaviour declared: ``fallback: [decimated:k, safe]``."""
    raw = yaml.safe_load(ROBOT_FILE.read_text())
    raw["fallback"] = [f"decimated:{k}", "safe"]
    path = directory / "legged_ant_decimated.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def run_arm(arm: str, probe: _Probe, *, seconds: float, settle_s: float, vx: float, log_dir: Path,
            robot_file: Path) -> dict[str, Any]:
    """Launch the legged robot for one arm, walk, load (unless unloaded), measure; always stop everything."""
    from lowrl_ros.launcher import Launcher, parse_launch

    overrides = {"vx": str(vx), "policy_path": str(GAIT if arm == "decimation" else BUNDLE),
                 "robot_file": str(robot_file), "budget_monitor": "false" if arm == "no_monitor" else "true"}
    nodes = parse_launch(REPO / "launch" / "legged.launch.yaml", overrides)
    launcher = Launcher(nodes, log_dir / arm, console=None)
    # The previous arm's policy node must be gone, and its last stats drained, before this arm's are read: a
    # late message of the old node (its tick count, not this one's) once made an arm's ticks negative.
    probe.spin(15.0, lambda: probe.node.count_publishers("/lowrl/policy/stats") == 0)
    probe.spin(0.3)
    probe.stats, probe.velocity, probe.episodes, probe.tiers, probe.steps = None, [], [], [], []
    burners: list[subprocess.Popen] = []
    try:
        launcher.start()
        if not probe.spin(90.0, lambda: probe.stats is not None and probe.stats[3] > 25 or bool(launcher.exited())):
            raise RuntimeError(f"{arm}: the policy node did not tick within 90 s (logs in {log_dir / arm})")
        if launcher.exited():
            raise RuntimeError(f"{arm}: node(s) {', '.join(launcher.exited())} stopped (logs in {log_dir / arm})")
        probe.spin(settle_s)
        m0, k0 = probe.stats[2], probe.stats[3]
        probe.recording = True
        if arm != "unloaded":
            burners = [_burner(), _burner()]
        t0 = time.monotonic()
        probe.spin(seconds)
        window = time.monotonic() - t0
        probe.recording = False
        for b in burners:
            _stop(b)
        burners = []
        probe.spin(0.3)  # the stats of the window's last ticks
        m1, k1 = probe.stats[2], probe.stats[3]
        died = launcher.exited()
    finally:
        for b in burners:
            _stop(b)
        launcher.shutdown()
    tiers = np.asarray(probe.tiers) if probe.tiers else np.zeros(1)
    v = np.asarray(probe.velocity) if probe.velocity else np.zeros((1, 3))
    return {"tracking": tracking(probe.velocity, (vx, 0.0)), "vx_mean": float(v[:, 0].mean()),
            "velocity_samples": len(probe.velocity), "falls": int(sum(t for _, t in probe.episodes)),
            "episodes_ended": len(probe.episodes), "deadline_misses": int(m1 - m0), "ticks": int(k1 - k0),
            "window_s": round(window, 2), "tier_share": {name: float(np.mean(tiers == i)) for i, name in
                                                         enumerate(("full", "lite", "decimated", "safe"))},
            "steps": probe.steps, "nodes_died": sorted(died), "loadavg_1min": os.getloadavg()[0]}


def bench_ladder(seconds: float, settle_s: float = 8.0, vx: float = 0.3, arms: tuple[str, ...] = ARMS,
                 log_dir: Path | None = None) -> dict[str, Any]:
    """Every arm once, in ``arms`` order, one probe node for all; tracking also as % of the unloaded arm."""
    out: dict[str, Any] = {"arms": {}, "seconds": seconds, "settle_s": settle_s, "vx": vx,
                           "loadavg_before": list(os.getloadavg()), "cpus": os.cpu_count()}
    probe = _Probe()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            logs = Path(log_dir or tmp)
            old = decimation_robot_file(Path(tmp))
            for arm in arms:
                out["arms"][arm] = run_arm(arm, probe, seconds=seconds, settle_s=settle_s, vx=vx, log_dir=logs,
                                           robot_file=old if arm == "decimation" else ROBOT_FILE)
    finally:
        probe.close()
    ref = out["arms"].get("unloaded", {}).get("tracking", math.nan)
    for r in out["arms"].values():
        r["tracking_pct_of_unloaded"] = 100.0 * r["tracking"] / ref if ref and ref == ref else math.nan
    ladder = out["arms"].get("ladder")
    if ladder is not None:
        out["goal_met"] = {"tracking >= 90 % of unloaded": ladder["tracking_pct_of_unloaded"] >= 90.0,
                           "0 falls": ladder["falls"] == 0, "0 deadline misses": ladder["deadline_misses"] == 0}
    out["loadavg_after"] = list(os.getloadavg())
    return out


def markdown(r: dict[str, Any]) -> list[str]:
    md = [f"## The legged robot walking (vx {r['vx']:g} m/s) with 2 CPU burners for {r['seconds']:g} s, over ROS 2",
          "", f"Load average before / after: {', '.join(f'{x:.2f}' for x in r['loadavg_before'])} / "
          f"{', '.join(f'{x:.2f}' for x in r['loadavg_after'])} on {r['cpus']} CPUs.", "",
          "| arm | tracking | % of unloaded | mean vx (m/s) | falls | deadline misses / ticks | time on full / lite / "
          "decimated / safe | ladder steps |", "|---|---|---|---|---|---|---|---|"]
    for arm, a in r["arms"].items():
        share = " / ".join(f"{100 * a['tier_share'][k]:.0f} %" for k in ("full", "lite", "decimated", "safe"))
        md.append(f"| {arm} | {a['tracking']:.3f} | {a['tracking_pct_of_unloaded']:.1f} % | {a['vx_mean']:.3f} | "
                  f"{a['falls']} | {a['deadline_misses']} / {a['ticks']} | {share} | "
                  f"{' -> '.join(a['steps']) or '—'} |")
    if "goal_met" in r:
        md += ["", "Goal with the ladder: " + "; ".join(f"{k}: {'met' if v else '**not met**'}"
                                                        for k, v in r["goal_met"].items())]
    return md
