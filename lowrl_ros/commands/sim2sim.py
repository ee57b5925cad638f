"""`lowrl sim2sim POLICY ROBOT_FILE`: the step before the real robot, in simulation, over ROS 2.

First the deploy check (`lowrl check`'s table). Then the robot's simulator (core/sim/sim2sim.py
``simulator_for``: a robot file's own ``sim:`` section, launch/sim2sim.launch.yaml, or the legged example's
MuJoCo robot, launch/legged.launch.yaml) runs with the policy node
driven by the robot file, each its own process through the project's launcher, for ``--seconds`` of policy
control (counted from the first policy tick). The sim robot publishes its own state with each joint state
(``truth_topic``); a recorder in this process (ros/recorder_node.py) keeps those, the policy node's step rows
and its stats. core/sim/sim2sim.py then compares each observation term with the training definition, measures
tracking and falls, and decides.

Exit 0 when every term is within tolerance and the robot did not fall; 1 otherwise (or when the deploy
check refuses, unless ``--deploy-check warn``); 2 when an input cannot be read or the run did not start.
The JSON report goes to ``--out DIR``/sim2sim.json, the raw rows beside it (rows.npz: ``step_rows``,
``truth_rows``, to judge again). docs/deploy_check.md, "lowrl sim2sim".
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path

TRUTH_TOPIC = "/lowrl/sim/truth"
STARTUP_TIMEOUT_S = 90.0  # processes, DDS discovery, the policy node's configure (2 shared cores: slow)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("policy", help="the artifact (.onnx) or bundle (.lowrl) the robot will run")
    parser.add_argument("robot_file", help="the robot file the policy node will read (docs/robot_file.md)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="seconds of policy control to judge, from the first policy tick once the simulator's "
                             "truth is heard (default 10)")
    parser.add_argument("--vx", type=float, default=0.3, help="forward velocity command, m/s (default 0.3)")
    parser.add_argument("--yaw-rate", type=float, default=0.0, help="yaw-rate command, rad/s (default 0)")
    parser.add_argument("--deploy-check", choices=("refuse", "warn"), default="refuse",
                        help="refuse (default): stop before the run on a hard deploy-check mismatch; warn: print it "
                             "and run anyway (the policy node's deploy_check parameter too), to see what it does")
    parser.add_argument("--out", type=Path, default=None,
                        help="where sim2sim.json and the node logs go (default lowrl_sessions/sim2sim-<date-time>)")
    parser.add_argument("--verbose", action="store_true", help="echo the nodes' output")


def run(args: argparse.Namespace) -> int:
    from lowrl_ros.commands.check import deploy_check, print_deploy_check
    from lowrl_ros.core.runtime.artifact import ArtifactError, last_action_convention
    from lowrl_ros.core.sim.sim2sim import simulator_for

    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    if args.seconds <= 0:
        print("lowrl sim2sim: --seconds must be > 0", file=sys.stderr)
        return 2
    try:
        contract, robot, training, deploy = deploy_check(args.policy, args.robot_file)
        simulator = simulator_for(robot)
    except (ArtifactError, ValueError, OSError) as exc:
        print(f"lowrl sim2sim: {exc}", file=sys.stderr)
        return 2
    print_deploy_check(deploy, args.policy, args.robot_file, training)
    if deploy.hard and args.deploy_check == "refuse":
        print(f"lowrl sim2sim: the deploy check refuses ({len(deploy.hard)} mismatch(es)); fix the robot file, or "
              "--deploy-check warn to run it anyway", file=sys.stderr)
        return 1
    out = (args.out or Path("lowrl_sessions") / f"sim2sim-{_dt.datetime.now():%Y%m%d-%H%M%S}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows, truths, stats, error = _run_simulation(args, simulator, out)
    if error:
        print(f"lowrl sim2sim: {error}; node logs in {out / 'logs'}", file=sys.stderr)
        return 2
    import numpy as np

    from lowrl_ros.core.runtime.step_row import StepRowError, decode_step
    from lowrl_ros.core.sim.sim2sim import evaluate
    from lowrl_ros.core.sim.sim_robot import decode_truth

    try:
        n, m = len(contract.obs_names), len(contract.action_names)
        steps = [decode_step(r, n, m) for r in rows]
        states = [decode_truth(t) for t in truths]
    except (StepRowError, ValueError) as exc:
        print(f"lowrl sim2sim: {exc}", file=sys.stderr)
        return 2
    np.savez_compressed(out / "rows.npz", step_rows=np.array(rows), truth_rows=np.array(truths))  # to re-judge
    convention = last_action_convention(contract)
    raw_of = None
    if convention == "raw":  # the network's own output for the previous tick's observation (the deployed artifact)
        from lowrl_ros.core.runtime.bundle import load_bundle

        full = load_bundle(args.policy, engine="numpy").policies["full"]

        def raw_of(obs):
            full.act(obs)
            return full.raw_output
    report = evaluate(steps, states, contract, simulator, convention, stats, raw_of=raw_of)
    print(f"\nobservation parity, policy node against {simulator.env_id}'s training observation of the same "
          "simulator state (|err| in observation units):")
    print(report.table())
    print(report.summary())
    (out / "sim2sim.json").write_text(json.dumps(
        dict(report.to_dict(), policy=str(args.policy), robot_file=str(args.robot_file), simulator=simulator.env_id,
             deploy_check_mismatches=[f"{r.what}: {r.why}" for r in deploy.hard],
             command=[args.vx, 0.0, args.yaw_rate]), indent=1, default=float))
    print(f"lowrl sim2sim: report {out / 'sim2sim.json'}")
    return 0 if report.ok else 1


def _run_simulation(args: argparse.Namespace, simulator, out: Path):
    """Run the simulator's launch file with the policy for ``args.seconds`` of policy ticks, counted from the first
    one heard after the simulator's truth (ticks before it cannot be matched).

    Returns (step rows, truth rows, the last stats values or None, an error or "")."""
    from lowrl_ros.launcher import Launcher, LaunchError, PACKAGE, package_share, parse_launch

    overrides = {"policy_path": str(Path(args.policy).resolve()), "robot_file": str(Path(args.robot_file).resolve()),
                 "vx": repr(float(args.vx)), "yaw_rate": repr(float(args.yaw_rate)),
                 "budget_monitor": "false"}  # the policy on the full tier throughout: parity, not the budget
    try:
        nodes = parse_launch(package_share(PACKAGE) / "launch" / simulator.launch, overrides)
    except LaunchError as exc:
        return [], [], None, str(exc)
    next(n for n in nodes if n.executable == "sim_robot_node").params.append(("truth_topic", TRUTH_TOPIC))
    next(n for n in nodes if n.executable == "policy_node").params.append(("deploy_check", args.deploy_check))
    from lowrl_ros.ros.recorder_node import Recorder  # rclpy only when a run starts, not for --help

    rec = Recorder(keep_rows=True, truth_topic=TRUTH_TOPIC)
    launcher = Launcher(nodes, out / "logs", console=sys.stdout if args.verbose else None)
    error = ""
    try:
        launcher.start()
        print(f"lowrl sim2sim: {simulator.env_id} + policy node over ROS 2, {args.seconds:g} s of policy control "
              f"(logs in {launcher.log_dir}) ...", flush=True)
        started, first = time.monotonic(), None
        while True:
            died = launcher.exited()
            if died:
                error = f"node(s) {', '.join(died)} stopped early"
                break
            ticking = any(len(r) > 2 and r[2] == 0.0 for r in rec.step_rows[-5:])  # a policy tick (safe flag 0)
            if first is None and ticking and rec.truth_rows:
                first = time.monotonic()  # the clock starts once ticks can be matched: the truth is heard too
            if first is None and time.monotonic() - started > STARTUP_TIMEOUT_S:
                error = (f"no policy tick within {STARTUP_TIMEOUT_S:g} s" if not ticking else
                         f"the sim robot's truth ({TRUTH_TOPIC}) not heard within {STARTUP_TIMEOUT_S:g} s")
                break
            if first is not None and time.monotonic() - first >= args.seconds:
                break
            time.sleep(0.1)
    except KeyboardInterrupt:
        error = "interrupted"
    finally:
        launcher.shutdown()
        rec.close()
    return list(rec.step_rows), list(rec.truth_rows), rec.stats, error
