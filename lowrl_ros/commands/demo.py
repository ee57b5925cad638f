"""`lowrl demo` (what `make demo` runs): a short sim-to-real session on shipped defaults.

Runs launch/sim_to_real.launch.yaml through the project's launcher: a simulated Pendulum robot
with a reality gap (real time, 100 Hz), the policy node running the shipped policy, the budget monitor, the
trainer node (streaming whatever is released into SESSION/releases, signed with a key made for the
session) and, when a fine-tune kit is given (``--kit``, with ``--policy`` its actor), the on-robot
fine-tuner; each its own process, talking over DDS, for ``--seconds``. A recorder node in this process
(lowrl_ros/ros/recorder_node.py) listens to the episode returns, the per-inference latency, the
policy node's stats and the compute tier, and writes them into the session directory beside the sim
robot's episodes.csv; the monitor node (lowrl_ros/ros/monitor_node.py) records the session's topics to
SESSION/session.mcap (``--no-record``: not; ``--record-max-mb``: its rotation size); at the end the session
report (lowrl_ros/core/session/report.py, from the recording when there is one) is written there and its
summary printed. Nothing in the summary is computed anywhere but from those messages and files.

By default the robot starts with the shipped sim policy models/pendulum_rlx2/actor_int8.onnx (RLx2
SAC, 90 % sparse int8, trained in simulation by scripts/make_demo_kit.py) and the fine-tuner
learns on the gapped robot from its kit (models/pendulum_rlx2/kit).

``--robot legged`` runs the same session on the legged example robot (launch/legged_sim_to_real.launch.yaml):
the 8-joint sim robot with config/gaps/legged_example.yaml, the walking policy's bundle models/legged_ant.lowrl
(the imported gait as full, its distilled student as lite: under load the robot file's ladder steps to
lite at the full rate, docs/budget.md) driven by config/robots/legged_ant.yaml, and the fine-tuner learning
from that file's reward terms and episode ends with the shipped kit models/legged_ant_kit (``lowrl kit
models/legged_ant_int8.onnx -o models/legged_ant_kit --env lowrl/LeggedAnt-v0``; the gait alone is its base).

Adaptive compute: halfway through, the demo makes the robot computer busy itself (``--burners``
busy-looping processes for ``--load-seconds``, announced in its output; ``--no-load`` skips it). The
budget monitor sees the CPU load (config/sim_to_real/budget_monitor.yaml), steps the policy down to a
cheaper tier, the fine-tuner pauses (it learns only on the full tier), and both come back after the
load ends and the monitor's dwell. The burners are always stopped: on the phase's end, Ctrl-C, a node
that dies, or (watching their parent) this process being killed. ``--no-finetune`` runs the
same session without the fine-tuner; ``--policy`` without ``--kit`` too (the SB3 bundle
models/pendulum_sac.lowrl, for instance, has no kit: a kit needs a `lowrl train` checkpoint).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lowrl_ros.launcher import Launcher, LaunchError, package_share, parse_launch, PACKAGE
from lowrl_ros.core.session.files import PROCESS_CPU_CSV, PROCESS_CPU_FIELDS, CsvLog, LoadPhase, write_session_info
from lowrl_ros.core.session.recorded import SESSION_MCAP

if TYPE_CHECKING:
    from lowrl_ros.ros.recorder_node import Recorder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--robot", choices=sorted(ROBOTS), default="pendulum",
                        help="pendulum (default): the gapped Pendulum-v1; legged: the 8-joint legged example robot "
                             "with config/gaps/legged_example.yaml, its robot file's rewards and episode ends; "
                             "quadruped: the 12-joint quadruped of config/robots/quadruped.yaml walking with its "
                             "rsl_rl policy (no fine-tuner)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="how long to run (default 90; --robot legged: 240, for a version to be judged on "
                             "its 20 s episodes)")
    parser.add_argument("--policy", default=None, help="artifact or bundle to run (default: the robot's shipped "
                        "policy, with its kit: models/pendulum_rlx2/actor_int8.onnx, models/legged_ant.lowrl)")
    parser.add_argument("--kit", default=None,
                        help="fine-tune kit of --policy (lowrl_ros.core.finetune.kit.write_kit); "
                        "without it the session runs without the fine-tuner")
    parser.add_argument("--no-finetune", action="store_true", help="run the session without the fine-tuner")
    parser.add_argument("--finetune-set", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="set a fine-tuner parameter (a FineTuneConfig field, docs/finetune_reference.md), e.g. "
                             "--finetune-set algorithm=residual: learn a bounded correction on the frozen policy")
    parser.add_argument("--explore-std", type=float, default=None, metavar="STD",
                        help="the policy node's explore_std: noise on the full tier's actions for the fine-tuner to "
                             "learn from, a share of the half action range (default: its config's, 0)")
    parser.add_argument("--session-dir", type=Path, default=None,
                        help="where the session's files and report go (default lowrl_sessions/<date-time>)")
    parser.add_argument("--log-dir", type=Path, default=None, help="per-node logs (default under ~/.ros/log)")
    parser.add_argument("--quiet", action="store_true", help="do not echo the nodes' output")
    parser.add_argument("--gap", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="change the sim robot's reality gap (config/sim_to_real/sim_robot_gap.yaml), e.g. "
                             "--gap joint_offset=0.3: the encoder offset of lowrl bench sim2real's Pendulum")
    parser.add_argument("--no-load", action="store_true",
                        help="skip the CPU-load phase (by default the demo busies the CPU for a while, halfway "
                             "through, so the budget monitor steps the tier down and back up)")
    parser.add_argument("--load-at", type=float, default=None, metavar="S",
                        help="when the load phase starts, seconds into the session (default: half of --seconds)")
    parser.add_argument("--load-seconds", type=float, default=None, metavar="S",
                        help="how long the load lasts (default: --seconds / 9, at most 10: 10 s of a 90 s demo)")
    parser.add_argument("--cpu-load-limit", type=float, default=None, metavar="PCT",
                        help="the budget monitor's CPU-load limit, %% (0 = off; default: config/sim_to_real/"
                             "budget_monitor.yaml's 97, turned off when the machine is busy with other work)")
    parser.add_argument("--sysid", action="store_true",
                        help="--robot legged: the fine-tuner streams the robot's transitions to the trainer node, "
                             "which identifies the gap from 4 episodes and releases the policy with the identified "
                             "sensor biases folded in, then judges it (docs/finetune.md, 'Identify the gap instead'; "
                             "default --seconds 270)")
    parser.add_argument("--retrain", action="store_true",
                        help="real-to-sim-to-real in the session (a robot with a simulator: legged, quadruped): the "
                             "fine-tuner streams the robot's transitions to the trainer node, which identifies the "
                             "gap, retrains the policy with PPO in the identified simulator, streams it, judges it "
                             "on the robot and rolls it back if worse (launch/robot_sim_to_real.launch.yaml; "
                             "docs/sim_to_real.md; default --seconds 900, no load phase)")
    parser.add_argument("--gap-file", type=Path, default=None, metavar="GAP.yaml",
                        help="--retrain: the simulated robot's reality gap, a gap file of its simulator (default: "
                             "the robot's preset, config/gaps/)")
    parser.add_argument("--rt-priority", type=int, default=0, metavar="P",
                        help="SCHED_FIFO priority of the policy node's control thread (its rt_priority parameter; "
                             "0: off; needs rtprio rights, else a WARN diagnostic and the node runs on)")
    parser.add_argument("--no-record", action="store_true",
                        help="do not record the session to SESSION/session.mcap (by default monitor_node records its "
                             "topics there, lowrl_ros/core/session/recording.py; the report reads it)")
    parser.add_argument("--record-max-mb", type=int, default=200, metavar="MB",
                        help="the recording rotates (session_001.mcap, ...) past this size (default 200)")
    parser.add_argument("--burners", type=int, default=None, metavar="N",
                        help="busy-looping processes of the load (default: one per CPU core, which fills the machine)")


@dataclass(frozen=True)
class DemoRobot:
    """What ``--robot`` picks: the launch file, the shipped policy and kit (under models/), the default length;
    ``base``: the kit's artifact when the policy is a bundle of it and a lite student ("": the policy)."""

    title: str
    launch: str
    policy: str
    kit: str  # "": none (the robot runs without the fine-tuner)
    seconds: float
    returns_note: str
    base: str = ""
    # --retrain: the robot file with its sim: section, the artifact it starts from, the gap preset ("": no simulator),
    # and the training checkpoint that artifact was imported from (its critic and std start the retraining)
    sim: tuple[str, str, str, str] = ("", "", "", "")
    # --retrain: this robot's own trainer settings over RETRAIN_PARAMS, and launch arguments (benchmarked)
    retrain_params: tuple[tuple[str, str], ...] = ()
    retrain_launch: tuple[tuple[str, str], ...] = ()


SYSID_SECONDS = 270.0  # --sysid: 20 s skipped, 80 s recorded, ~40 s identifying, 3 judged 20 s episodes, margin
RETRAIN_SECONDS = 900.0  # --retrain: 8 episodes recorded, identified, retrained, 3 judged episodes, margin
RETRAIN_LAUNCH = "robot_sim_to_real.launch.yaml"
# --retrain's trainer settings: the benchmarked recipe (docs/sim_to_real.md, bench_results/sim2real_session/): 8
# episodes recorded, the release due 400 s after the recording (the PPO steps are what that leaves), 32 environments
# in 64-step rollouts at lr 3e-4 after 2 warm-up rollouts, the best of 16-episode evaluations released.
RETRAIN_PARAMS = (("retrain.episodes", "8"), ("retrain.release_within_s", "400.0"), ("identify.search_steps", "4000"),
                  ("ppo.total_steps", "2000000"), ("ppo.lr", "0.0003"), ("ppo.warmup_iterations", "2"),
                  ("ppo.n_envs", "32"), ("ppo.n_steps", "64"), ("ppo.eval_episodes", "16"))

ROBOTS = {
    "pendulum": DemoRobot("Pendulum-v1 sim robot (with a reality gap)", "sim_to_real.launch.yaml",
                          "pendulum_rlx2/actor_int8.onnx", "pendulum_rlx2/kit", 90.0, "Pendulum-v1: 0 is best"),
    "legged": DemoRobot("legged sim robot (8 joints, config/gaps/legged_example.yaml)",
                        "legged_sim_to_real.launch.yaml", "legged_ant.lowrl", "legged_ant_kit", 240.0,
                        "higher is better; at most 500 x 2.5 per 20 s episode", base="legged_ant_int8.onnx",
                        sim=("config/robots/legged_ant.yaml", "legged_ant_int8.onnx",
                             "config/gaps/legged_example_sim.yaml", "legged_ant_ppo.zip"),
                        # the 9 episodes before the identification cut at 10 s (its replay reads their first 250
                        # steps), so the release can be due 480 s after them; half the retraining's episodes walk at
                        # the commands the robot was given (bench_results/sim2real_session/HISTORY.md)
                        retrain_params=(("retrain.release_within_s", "480.0"), ("ppo.recorded_command_share", "0.5")),
                        retrain_launch=(("record_episodes", "9"), ("record_time_limit_steps", "250"))),
    # No kit: the quadruped runs its rsl_rl policy without the fine-tuner (docs/quadruped.md).
    "quadruped": DemoRobot("quadruped sim robot (12 joints, config/robots/quadruped.yaml's own simulator)",
                           "quadruped.launch.yaml", "quadruped.lowrl", "", 60.0,
                           "higher is better; at most 2 per step",
                           sim=("config/robots/quadruped.yaml", "quadruped.lowrl",
                                "config/gaps/quadruped_example.yaml", "quadruped_rsl_rl/model.pt"),
                           # the legged recipe; its bang-bang policy's int8 worst case is ~10 % of the action range
                           # where an output crosses the clip, so that gate allows 20 % (the return gate judges it);
                           # over ROS 2 its commands act a physics step later than the identified latency says
                           # (docs/sim_to_real.md, --latency-extra), so it trains across that step too
                           retrain_params=(("retrain.release_within_s", "480.0"), ("ppo.recorded_command_share", "0.5"),
                                           ("ppo.int8_max_error", "0.2"), ("ppo.latency_extra", "1")),
                           retrain_launch=(("record_episodes", "9"), ("record_time_limit_steps", "250"))),
}


# A burner busy-loops until killed; it also exits by itself when its parent (the demo) is gone, so a
# killed demo (SIGKILL, no finally) never leaves the robot computer loaded.
_BURNER_CODE = """\
import os, sys
parent = int(sys.argv[1])
while os.getppid() == parent:
    for _ in range(200000):
        pass
"""


class CpuLoad:
    """``n`` busy-looping processes (real CPU load on this machine), started and always stopped by the demo.

    Args:
        n: how many processes (one per core fills the machine).
    """

    def __init__(self, n: int) -> None:
        import subprocess

        self.n = n
        self.procs: list = []
        for _ in range(n):
            self.procs.append(subprocess.Popen([sys.executable, "-c", _BURNER_CODE, str(os.getpid())],
                                               stdin=subprocess.DEVNULL))

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    @property
    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        """Kill every burner and reap it (idempotent)."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait(timeout=10)


class ProcessCpu:
    """Each node's (and burner's) CPU use, % of one core, sampled about once a second from /proc (psutil)
    into the session's process_cpu.csv: what the fine-tuner's pause and the cheaper tier really saved."""

    def __init__(self, session: Path, period_s: float = 1.0) -> None:
        self._log = CsvLog(session / PROCESS_CPU_CSV, PROCESS_CPU_FIELDS)
        self._procs: dict[str, object] = {}
        self._period_s = period_s
        self._next = 0.0

    def watch(self, pids: dict[str, int]) -> None:
        import psutil

        for name, pid in pids.items():
            try:
                proc = psutil.Process(pid)
                proc.cpu_percent(None)  # the first call only sets the baseline
                self._procs[name] = proc
            except psutil.Error:
                pass

    def sample(self) -> None:
        import psutil

        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self._period_s
        for name, proc in list(self._procs.items()):
            try:
                pct = proc.cpu_percent(None)
            except psutil.Error:  # gone (a stopped burner): stop watching it
                del self._procs[name]
                continue
            self._log.append([f"{time.time():.4f}", name, f"{pct:.1f}"])

    def close(self) -> None:
        self._log.close()


# The demo's robot stack keeps a 2-core machine 70-90 % busy; config/sim_to_real/budget_monitor.yaml's
# CPU-load limit (97 % for 1.5 s) sits between that and the load phase's 100 %. Other work already using more
# than this much of the machine before the session would trip it without the demo's load (and pause
# the fine-tuner with it), so the demo then runs with that limit off and says so.
BUSY_MACHINE_PCT = 10.0


def machine_cpu_load(seconds: float = 2.0) -> float:
    """System CPU load (%) over ``seconds``, measured as the budget monitor measures it (core.budget.probes)."""
    from lowrl_ros.core.budget.probes import CpuLoadProbe

    probe = CpuLoadProbe()
    time.sleep(seconds)
    return float(probe.read().value)


def session_seconds(args: argparse.Namespace) -> float:
    """--seconds, else the robot's default length (--sysid: SYSID_SECONDS)."""
    if args.seconds is not None:
        return float(args.seconds)
    if getattr(args, "retrain", False):
        return RETRAIN_SECONDS
    return SYSID_SECONDS if getattr(args, "sysid", False) else ROBOTS[getattr(args, "robot", "pendulum")].seconds


def load_phase(args: argparse.Namespace) -> LoadPhase | None:
    """When the load runs, from the flags: by default it starts halfway and lasts a ninth of the
    session (at most 10 s): the fine-tuner pauses for the load plus ~1.5 s to step down and the 3 s dwell
    to come back, which leaves it most of the session on the full tier; None
    with ``--no-load``. ValueError (with the fix) when the phase does not fit in the session."""
    if args.no_load:
        return None
    seconds = session_seconds(args)
    at = seconds / 2 if args.load_at is None else float(args.load_at)
    length = min(10.0, seconds / 9) if args.load_seconds is None else float(args.load_seconds)
    burners = (os.cpu_count() or 2) if args.burners is None else int(args.burners)
    if burners < 1 or length <= 0 or at < 0 or at + length > seconds:
        raise ValueError(f"the load phase ({burners} burners from t={at:g} s for {length:g} s) does not fit in "
                         f"--seconds {seconds:g}: give --burners >= 1, --load-seconds > 0 and --load-at + "
                         "--load-seconds <= --seconds, or --no-load")
    return LoadPhase(at, length, burners)


def set_gap(nodes: list, changes: dict) -> None:
    """Give the sim robot node ``gap.<field>`` parameters after its parameter files (they win)."""
    if not changes:
        return
    sim = next(n for n in nodes if n.executable == "sim_robot_node")
    def text(value) -> str:  # an int stays an int, a float a float, a per-joint tuple a list
        if isinstance(value, (tuple, list)):
            return "[" + ", ".join(repr(float(v)) for v in value) + "]"
        return str(value) if isinstance(value, int) else repr(float(value))

    sim.params += [(f"gap.{name}", text(value)) for name, value in changes.items()]


def summary(rec: "Recorder", seconds: float, robot: DemoRobot = ROBOTS["pendulum"]) -> str:
    from lowrl_ros.core.runtime.policy_stats import PolicyStats
    from lowrl_ros.core.runtime.tiers import ComputeTier

    lines = [f"lowrl demo: {robot.title} + policy node over ROS 2, {seconds:.0f} s"]
    if rec.returns:
        lines.append(f"  episodes finished: {len(rec.returns)}, mean return {np.mean(rec.returns):.1f} "
                     f"(last {rec.returns[-1]:.1f}; {robot.returns_note})")
    else:
        lines.append("  episodes finished on the sim robot's count: 0 (run longer; with a robot file's episode: "
                     "section the fine-tuner ends the episodes: they are in the report below)")
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
    if rec.steps:  # what the robot's ladder made of them (lowrl/policy/tier)
        lines.append(f"  policy node's ladder steps: {' -> '.join(rec.steps)}")
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


def _param_text(value) -> str:
    """A parameter value as a launch file writes it (a float stays a float: 5000.0, not 5000)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    robot = ROBOTS[getattr(args, "robot", "pendulum")]
    retrain = getattr(args, "retrain", False)
    if retrain and (not robot.sim[0] or getattr(args, "sysid", False)):
        print("lowrl demo: --retrain needs a robot with a simulator (--robot legged or quadruped), without --sysid",
              file=sys.stderr)
        return 2
    if getattr(args, "gap_file", None) is not None and not retrain:
        print("lowrl demo: --gap-file is the simulated robot's gap of --retrain; without it use --gap FIELD=VALUE",
              file=sys.stderr)
        return 2
    if retrain:
        args.no_load = args.no_load or args.load_at is None  # the session is about the retraining, not the tiers
    args.seconds = session_seconds(args)
    try:
        phase = load_phase(args)
    except ValueError as exc:
        print(f"lowrl demo: {exc}", file=sys.stderr)
        return 2
    if args.kit and not args.policy:
        print("lowrl demo: --kit needs --policy: the artifact the kit was written for (write_kit's artifact), "
              "which the robot starts with and the fine-tuner rolls back to", file=sys.stderr)
        return 2
    session = (args.session_dir or Path("lowrl_sessions") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")).resolve()
    overrides = {"session_dir": str(session)}
    # The launch file records the session's topics to SESSION/session.mcap (SESSION_MCAP), beside the recorder's CSVs.
    overrides.update(record="" if getattr(args, "no_record", False) else str(session / SESSION_MCAP),
                     record_max_mb=str(getattr(args, "record_max_mb", 200)))
    models = package_share(PACKAGE) / "models"
    base = None  # the fine-tuner's base version: the policy, or the kit's artifact of a shipped bundle
    launch = robot.launch
    retrain_params = list({**dict(RETRAIN_PARAMS), **dict(robot.retrain_params)}.items())
    if retrain:  # any robot file with a simulator: the robot file, its gap, the trainer node identifies and retrains
        robot_file, policy, gap, source = robot.sim
        share = package_share(PACKAGE)
        if not args.policy and source:  # the shipped policy: its own training checkpoint starts the retraining
            retrain_params.append(("ppo.source_checkpoint", str(models / source)))
        args.policy, args.kit = args.policy or str(models / policy), None
        overrides.update(robot_file=str(share / robot_file), policy_path=str(Path(args.policy).resolve()),
                         gap_file=str(Path(args.gap_file or share / gap).resolve()), **dict(robot.retrain_launch))
        launch = RETRAIN_LAUNCH
    elif not args.policy and robot.kit and (models / robot.kit / "kit.json").is_file():
        args.policy = str(models / robot.policy)
        args.kit = None if args.no_finetune else str(models / robot.kit)
        base = str(models / robot.base) if robot.base else None
    if args.no_finetune:
        args.kit = None
    if args.policy:
        overrides["policy_path"] = str(Path(args.policy).resolve())
    if robot.base and not retrain:  # a launch file with a base_policy_path argument
        overrides["base_policy_path"] = str(Path(base or args.policy or models / robot.base).resolve())
    if args.kit:
        overrides["kit_path"] = str(Path(args.kit).resolve())
    if getattr(args, "sysid", False):
        if robot is not ROBOTS["legged"] or not args.kit:
            print("lowrl demo: --sysid identifies the legged robot's gap: use it with --robot legged and the "
                  "fine-tuner on (no --no-finetune)", file=sys.stderr)
            return 2
        overrides.update(learner="offboard", offboard_method="sysid")

    from lowrl_ros.core.finetune.config import finetune_items
    from lowrl_ros.core.runtime.control import ControlConfig
    from lowrl_ros.core.sim.reality_gap import parse_gap_items

    try:
        finetune_values = finetune_items(getattr(args, "finetune_set", []), "--finetune-set")
        if getattr(args, "explore_std", None) is not None:
            ControlConfig(explore_std=args.explore_std)  # its range, before any node starts
        nodes = parse_launch(package_share(PACKAGE) / "launch" / launch, overrides)
        set_gap(nodes, parse_gap_items(args.gap))
    except (LaunchError, ValueError) as exc:
        print(f"lowrl demo: {exc}", file=sys.stderr)
        return 2
    if retrain:
        finetune = f"off-board: real-to-sim-to-real of {overrides['robot_file']} under {overrides['gap_file']}"
        next(n for n in nodes if n.executable == "trainer_node").params.extend(retrain_params)
    elif not args.kit:
        nodes = [n for n in nodes if n.executable != "finetune_node"]
        finetune = ("off (--no-finetune)" if args.no_finetune else
                    "off: no fine-tune kit for this policy (give --kit KIT --policy ITS_ACTOR)")
    else:
        finetune = f"on (kit {overrides['kit_path']})"
    if args.kit and args.finetune_set:
        finetune_node = next(n for n in nodes if n.executable == "finetune_node")
        finetune_node.params.extend((name, _param_text(value)) for name, value in finetune_values.items())
        finetune += ", " + " ".join(args.finetune_set)
    print(f"lowrl demo: session in {session}; fine-tuning {finetune}", flush=True)
    if getattr(args, "sysid", False):  # 4 whole 20 s episodes (2000 robot steps), then about 40 s to identify
        next(n for n in nodes if n.executable == "trainer_node").params.append(("sysid.episodes", "4"))
    policy_node = next(n for n in nodes if n.executable == "policy_node")
    if args.rt_priority:
        policy_node.params.append(("rt_priority", str(args.rt_priority)))
    if getattr(args, "explore_std", None) is not None:
        policy_node.params.append(("explore_std", repr(float(args.explore_std))))
    monitor = next(n for n in nodes if n.executable == "budget_monitor_node")
    busy = machine_cpu_load()
    if args.cpu_load_limit is not None:
        monitor.params.append(("cpu_load_limit_pct", repr(float(args.cpu_load_limit))))
        limit = (f"{args.cpu_load_limit:g} % (--cpu-load-limit; the machine was {busy:.0f} % busy before the "
                 "session)")
    elif busy > BUSY_MACHINE_PCT:
        limit = (f"off: the machine was {busy:.0f} % busy before the session (other work), above "
                 f"{BUSY_MACHINE_PCT:.0f} %, so the limit would trip without the demo's load")
        monitor.params.append(("cpu_load_limit_pct", "0.0"))
        print(f"lowrl demo: budget monitor's CPU-load limit {limit}; the load phase still runs, the monitor "
              "acts on it only through the policy's latency and misses (--cpu-load-limit 97 to force it)",
              flush=True)
    else:
        limit = f"as configured (the machine was {busy:.0f} % busy before the session)"
    make_session_key(session / "bundle.key")
    (session / "releases").mkdir(exist_ok=True)  # the trainer node streams what is released here
    from lowrl_ros.core.session.report import write_session_report

    policy = dict(next(n for n in nodes if n.executable == "policy_node").params)["policy_path"]
    started_unix = time.time()  # t=0 of the session: the load phase and the report count from here
    write_session_info(session, {"policy_path": policy, "finetune": finetune, "demo_started_unix": started_unix,
                                 "load": None if phase is None else phase.planned(), "cpu_load_limit": limit})
    from lowrl_ros.ros.recorder_node import Recorder  # rclpy only when a session runs, not for --help

    rec = Recorder(session)
    launcher = Launcher(nodes, args.log_dir, console=None if args.quiet else sys.stdout)
    died: dict[str, int] = {}
    load: CpuLoad | None = None
    load_info = {} if phase is None else phase.planned()
    cpu = ProcessCpu(session)
    started = time.monotonic()

    def interrupted(*_) -> None:
        raise KeyboardInterrupt

    # Ctrl-C and SIGTERM stop the session cleanly (nodes stopped, report written), also where the demo started
    # with SIGINT ignored (`lowrl demo &` from a script: Python then installs no KeyboardInterrupt of its own).
    previous = {s: signal.signal(s, interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        launcher.start()
        cpu.watch({name: p.pid for name, p in launcher.procs.items()})
        plan = "no CPU-load phase (--no-load)" if phase is None else (
            f"CPU-load phase at t={phase.at_s:.0f} s for {phase.seconds:.0f} s")
        print(f"lowrl demo: running for {args.seconds:.0f} s, {plan} (logs in {launcher.log_dir}) ...", flush=True)
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            died = launcher.exited()
            if died:
                break
            t = time.time() - started_unix
            if phase is not None and load is None and t >= phase.at_s:
                print(f"lowrl demo: t={t:.0f} s: loading the CPU ({phase.burners} burner processes, "
                      f"{phase.seconds:.0f} s) ...", flush=True)
                load = CpuLoad(phase.burners)
                load_info["start_unix"] = time.time()
                cpu.watch({f"burner{i}": pid for i, pid in enumerate(load.pids)})
                write_session_info(session, {"load": load_info})
            elif load is not None and load.running and t >= phase.at_s + phase.seconds:
                load.stop()
                load_info["end_unix"] = time.time()
                write_session_info(session, {"load": load_info})
                print(f"lowrl demo: t={t:.0f} s: CPU load stopped (a tier the monitor stepped down comes back "
                      "after its dwell)", flush=True)
            cpu.sample()
            time.sleep(0.2)
    except KeyboardInterrupt:
        print("lowrl demo: interrupted, stopping the nodes", flush=True)
    finally:
        if load is not None and load.running:  # Ctrl-C or a dead node during the load: never leave it running
            load.stop()
            load_info.update(end_unix=time.time(), cut_short=True)
            write_session_info(session, {"load": load_info})
        elapsed = time.monotonic() - started
        cpu.close()
        launcher.shutdown()
        time.sleep(0.2)  # let the last messages reach the recorder
        rec.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if died:
        print(f"lowrl demo: node(s) {', '.join(died)} stopped early; see the logs in {launcher.log_dir}",
              file=sys.stderr)
        return 1
    print(summary(rec, elapsed, robot))
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
