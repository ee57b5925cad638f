"""`lowrl demo` (what `make demo` runs): a short sim-to-real session on shipped defaults.

Runs launch/sim_to_real.launch.yaml through the project's launcher: a simulated Pendulum robot
with a reality gap (real time, 100 Hz), the policy node running the shipped policy, the budget monitor, the
trainer node (streaming whatever is released into SESSION/releases, signed with a key made for the
session) and, when a fine-tune kit is given (``--kit``, with ``--policy`` its actor), the on-robot
fine-tuner; each its own process, talking over DDS, for ``--seconds``. A recorder node in this process
(lowrl_ros/ros/recorder_node.py) listens to the episode returns, the per-inference latency, the
policy node's stats and the compute tier, and writes them into the session directory beside the sim
robot's episodes.csv; at the end the session report (lowrl_ros/core/sim/session_report.py) is written there and its
summary printed. Nothing in the summary is computed anywhere but from those messages and files.

By default the robot starts with the shipped sim policy models/pendulum_rlx2/actor_int8.onnx (RLx2
SAC, 90 % sparse int8, trained in simulation by scripts/make_demo_kit.py) and the fine-tuner
learns on the gapped robot from its kit (models/pendulum_rlx2/kit). ``--no-finetune`` runs the
same session without the fine-tuner; ``--policy`` without ``--kit`` too (the SB3 bundle
models/pendulum_sac.lowrl, for instance, has no kit: a kit needs a `lowrl train` checkpoint).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lowrl_ros.launcher import Launcher, LaunchError, package_share, parse_launch, PACKAGE

if TYPE_CHECKING:
    from lowrl_ros.ros.recorder_node import Recorder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=90.0, help="how long to run (default 90)")
    parser.add_argument("--policy", default=None, help="artifact or bundle to run (default: the shipped "
                        "models/pendulum_rlx2/actor_int8.onnx, with its kit)")
    parser.add_argument("--kit", default=None,
                        help="fine-tune kit of --policy (lowrl_ros.core.finetune.kit.write_kit); "
                        "without it the session runs without the fine-tuner")
    parser.add_argument("--no-finetune", action="store_true", help="run the session without the fine-tuner")
    parser.add_argument("--session-dir", type=Path, default=None,
                        help="where the session's files and report go (default lowrl_sessions/<date-time>)")
    parser.add_argument("--log-dir", type=Path, default=None, help="per-node logs (default under ~/.ros/log)")
    parser.add_argument("--quiet", action="store_true", help="do not echo the nodes' output")
    parser.add_argument("--gap", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="change the sim robot's reality gap (config/sim_to_real/sim_robot_gap.yaml), e.g. "
                             "--gap joint_offset=0.3: the encoder offset of lowrl bench sim2real's Pendulum")


def set_gap(nodes: list, changes: dict) -> None:
    """Give the sim robot node ``gap.<field>`` parameters after its parameter files (they win)."""
    if not changes:
        return
    sim = next(n for n in nodes if n.executable == "sim_robot_node")
    sim.params += [(f"gap.{name}", str(value) if isinstance(value, int) else repr(float(value)))
                   for name, value in changes.items()]


def summary(rec: "Recorder", seconds: float) -> str:
    from lowrl_ros.core.runtime.policy_stats import PolicyStats
    from lowrl_ros.core.runtime.tiers import ComputeTier

    lines = [f"lowrl demo: Pendulum-v1 sim robot (with a reality gap) + policy node over ROS 2, {seconds:.0f} s"]
    if rec.returns:
        lines.append(f"  episodes finished: {len(rec.returns)}, mean return {np.mean(rec.returns):.1f} "
                     f"(last {rec.returns[-1]:.1f}; Pendulum-v1: 0 is best)")
    else:
        lines.append("  episodes finished: 0 (run longer: --seconds 30)")
    if rec.latencies_us:
        p50, p99 = np.percentile(rec.latencies_us, [50, 99])
        lines.append(f"  inference latency over {len(rec.latencies_us)} calls: p50 {p50:.1f} us, p99 {p99:.1f} us")
    if rec.stats is not None:
        s = PolicyStats.from_list(rec.stats)
        lines.append(f"  control ticks {int(s.ticks)}, deadline misses {int(s.deadline_misses)} "
                     f"(deadline {s.deadline_us / 1000:.1f} ms), compute tier now {ComputeTier(int(s.tier)).label}")
    if rec.tiers:
        changes = sum(1 for a, b in zip(rec.tiers, rec.tiers[1:]) if a != b)
        lines.append(f"  budget monitor: {changes} tier changes published, tiers seen: "
                     f"{', '.join(ComputeTier(t).label for t in sorted(set(rec.tiers)))}")
    return "\n".join(lines)


def make_session_key(path: Path) -> Path:
    """A fresh HMAC key for this session's trainer node and policy node (32 random bytes, hex, mode 600)."""
    import secrets

    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
    return path


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    if args.kit and not args.policy:
        print("lowrl demo: --kit needs --policy: the artifact the kit was written for (write_kit's artifact), "
              "which the robot starts with and the fine-tuner rolls back to", file=sys.stderr)
        return 2
    session = (args.session_dir or Path("lowrl_sessions") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")).resolve()
    overrides = {"session_dir": str(session)}
    shipped = package_share(PACKAGE) / "models" / "pendulum_rlx2"
    if not args.policy and (shipped / "kit" / "kit.json").is_file():
        args.policy = str(shipped / "actor_int8.onnx")
        args.kit = None if args.no_finetune else str(shipped / "kit")
    if args.no_finetune:
        args.kit = None
    if args.policy:
        overrides["policy_path"] = str(Path(args.policy).resolve())
    if args.kit:
        overrides["kit_path"] = str(Path(args.kit).resolve())
    from lowrl_ros.core.sim.reality_gap import parse_gap_items

    try:
        nodes = parse_launch(package_share(PACKAGE) / "launch" / "sim_to_real.launch.yaml", overrides)
        set_gap(nodes, parse_gap_items(args.gap))
    except (LaunchError, ValueError) as exc:
        print(f"lowrl demo: {exc}", file=sys.stderr)
        return 2
    if not args.kit:
        nodes = [n for n in nodes if n.executable != "finetune_node"]
        finetune = ("off (--no-finetune)" if args.no_finetune else
                    "off: no fine-tune kit for this policy (give --kit KIT --policy ITS_ACTOR)")
    else:
        finetune = f"on (kit {overrides['kit_path']})"
    print(f"lowrl demo: session in {session}; fine-tuning {finetune}", flush=True)
    make_session_key(session / "bundle.key")
    (session / "releases").mkdir(exist_ok=True)  # the trainer node streams what is released here
    from lowrl_ros.core.sim.session_report import write_session_info, write_session_report

    policy = dict(next(n for n in nodes if n.executable == "policy_node").params)["policy_path"]
    write_session_info(session, {"policy_path": policy, "finetune": finetune, "started_unix": time.time()})
    from lowrl_ros.ros.recorder_node import Recorder  # rclpy only when a session runs, not for --help

    rec = Recorder(session)
    launcher = Launcher(nodes, args.log_dir, console=None if args.quiet else sys.stdout)
    died: dict[str, int] = {}
    started = time.monotonic()
    try:
        launcher.start()
        print(f"lowrl demo: running for {args.seconds:.0f} s (logs in {launcher.log_dir}) ...", flush=True)
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            died = launcher.exited()
            if died:
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        print("lowrl demo: interrupted, stopping the nodes", flush=True)
    finally:
        elapsed = time.monotonic() - started
        launcher.shutdown()
        time.sleep(0.2)  # let the last messages reach the recorder
        rec.close()
    if died:
        print(f"lowrl demo: node(s) {', '.join(died)} stopped early; see the logs in {launcher.log_dir}",
              file=sys.stderr)
        return 1
    print(summary(rec, elapsed))
    write_session_info(session, {"duration_s": round(elapsed, 1)})
    try:
        report = write_session_report(session)
    except ValueError as exc:  # no episode log at all: the sim robot never started
        print(f"lowrl demo: no session report: {exc}", file=sys.stderr)
        return 1
    print()
    print(report.read_text().split("\n![")[0].rstrip())
    print(f"\nlowrl demo: report {report} and {report.with_suffix('.png')}")
    return 0 if rec.latencies_us else 1
