"""Real-to-sim-to-real over ROS 2: how much of a robot's reality gap the in-session retraining recovers.

Runs real sessions (`lowrl launch launch/robot_sim_to_real.launch.yaml`: the sim robot node under a gap file, the
policy node, the budget monitor, the fine-tuner streaming transitions, the trainer node with ``offboard_method:
retrain``), one per seed, each until the trainer has decided (kept, rolled back or failed) and ``--eval-episodes``
episodes of the version the robot then runs are in. Before them, per seed, a session on the nominal robot (no
gap, nothing learned) measures the base's return there.

Per seed: R_nominal (the base on the nominal robot), R_before (the base on the gapped robot: the episodes the
trainer recorded), R_after (the version running after the decision, on the gapped robot), gap recovered % =
(R_after - R_before) / (R_nominal - R_before); the identified gap against the true one; the wall-clock from the
first robot step to the release; the policy node's deadline misses during identification and retraining. Every
return is the fine-tuner's own episode return (the robot file's reward, finetune/episode_terms.csv).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

DONE_STATES = ("kept", "rolled_back", "failed")
# Shipped robots: (robot file, base policy, gap preset, the training checkpoint the policy was imported from). The
# legged example runs as its sim: config here.
ROBOTS = {"quadruped": ("config/robots/quadruped.yaml", "models/quadruped.lowrl", "config/gaps/quadruped_example.yaml",
                        "models/quadruped_rsl_rl/model.pt"),
          "legged": ("config/robots/legged_ant.yaml", "models/legged_ant_int8.onnx",
                     "config/gaps/legged_example_sim.yaml", "models/legged_ant_ppo.zip")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--robot", default="quadruped",
                        help=f"a shipped robot ({', '.join(ROBOTS)}) or a robot file with a sim: section")
    parser.add_argument("--policy", type=Path, default=None, help="the base policy (default: the robot's shipped one)")
    parser.add_argument("--gap-file", type=Path, default=None, help="the robot's gap (default: the robot's preset)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-episodes", type=int, default=5,
                        help="episodes of the decided version (and of the base on the nominal robot) per figure")
    parser.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE",
                        help="trainer node parameters, e.g. retrain.episodes=8 ppo.total_steps=200000")
    parser.add_argument("--ray-address", default="", help="retrain on this Ray cluster (ppo.ray_address)")
    parser.add_argument("--record-steps", type=int, default=0,
                        help="the fine-tuner cuts the recorded episodes (retrain.episodes of them) after this many "
                             "policy steps (its record_time_limit_steps; 0: whole episodes)")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="per session (1800)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/bench_sim2real_session"))
    parser.add_argument("--out", type=Path, default=None, help="results root (default bench_results/)")
    parser.add_argument("--collect", action="store_true",
                        help="launch nothing: write the result from the seeds' sessions already in --runs-dir (a run "
                             "stopped after some seeds: give those seeds and the run's other options)")


def _repo() -> Path:
    return Path(__file__).resolve().parents[2]


def _episodes(session: Path) -> list[dict]:
    path = session / "finetune" / "episode_terms.csv"
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [row for row in csv.DictReader(f)]


def _status(session: Path) -> dict:
    path = session / "offboard" / "sysid" / "status.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _params_file(path: Path, items: list[str], ray_address: str, source: str = "") -> Path:
    """The trainer node's parameters: ``--set`` items over the robot's source checkpoint (``ppo.source_checkpoint``)."""
    import yaml

    params = {"ppo.source_checkpoint": source} if source else {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r}: give NAME=VALUE (a trainer node parameter)")
        params[name] = yaml.safe_load(value)
    if ray_address:
        params["ppo.ray_address"] = ray_address
    path.write_text(yaml.safe_dump({"/**/trainer_node": {"ros__parameters": params}}))
    return path


def _record_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The launch arguments that cut the recorded episodes (``--record-steps``): the trainer's ``retrain.episodes``
    and the robot's first episode before them (begun before any reset: never recorded)."""
    if not args.record_steps:
        return ()
    episodes = next((item.partition("=")[2] for item in args.set if item.startswith("retrain.episodes=")), "8")
    return f"record_episodes:={int(episodes) + 1}", f"record_time_limit_steps:={args.record_steps}"


def move_aside(run_dir: Path) -> Path | None:
    """An earlier session in ``run_dir`` renamed to ``<name>.earlier-<its time>`` (kept, not reused: its decision
    would end the new session at once and be reported as the new one's); returns the new name, None if none."""
    if not run_dir.is_dir() or not any(run_dir.iterdir()):
        return None
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(run_dir.stat().st_mtime))
    target, k = run_dir.with_name(f"{run_dir.name}.earlier-{stamp}"), 1
    while target.exists():
        k += 1
        target = run_dir.with_name(f"{run_dir.name}.earlier-{stamp}-{k}")
    run_dir.rename(target)
    return target


def session(run_dir: Path, robot_file: Path, policy: Path, gap_file: str, seed: int, trainer_params: Path,
            done, timeout_s: float, method: str = "retrain", extra: tuple[str, ...] = ()) -> tuple[Path, float]:
    """One `lowrl launch` session until ``done(session_dir)`` or the timeout; returns its directory and seconds."""
    from lowrl_ros.commands.demo import make_session_key

    earlier = move_aside(run_dir)
    if earlier is not None:
        print(f"  {run_dir} held an earlier session: moved to {earlier.name}", flush=True)
    key = make_session_key(run_dir / "bundle.key")
    cmd = [sys.executable, "-m", "lowrl_ros.cli", "launch", str(_repo() / "launch/robot_sim_to_real.launch.yaml"),
           f"robot_file:={robot_file}", f"policy_path:={policy}", f"gap_file:={gap_file}", f"seed:={seed}",
           f"session_dir:={run_dir}", f"key_file:={key}", f"trainer_params:={trainer_params}",
           f"offboard_method:={method}", *extra,
           "--log-dir", str(run_dir / "logs")]
    print("  $ " + " ".join(cmd[2:]), flush=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while time.monotonic() - t0 < timeout_s and proc.poll() is None and not done(run_dir):
            time.sleep(2.0)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return run_dir, time.monotonic() - t0


def _session_s(session_dir: Path) -> float:
    """A finished session's seconds from its files: its start (session.json) to its recording's last write."""
    try:
        return (session_dir / "session.mcap").stat().st_mtime - (session_dir / "session.json").stat().st_mtime
    except OSError:
        return float("nan")


def _returns(rows: list[dict], version: int) -> list[float]:
    """The returns of ``version``'s whole episodes (not those cut for the identification's recording)."""
    return [float(r["return"]) for r in _whole(rows) if int(float(r["version"])) == version]


def _whole(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("end") != "cut"]


def _misses(session_dir: Path) -> dict:
    """The policy node's deadline misses and ticks over the session (its 10 Hz stats in the recording)."""
    from lowrl_ros.core.session.files import read_session

    try:
        st = read_session(session_dir).stats
    except (ValueError, OSError) as exc:
        return {"error": str(exc)}
    if not len(st.get("ticks", ())):
        return {"error": "no policy stats recorded"}
    return {"deadline_misses": int(st["deadline_misses"][-1] - st["deadline_misses"][0]),
            "ticks": int(st["ticks"][-1] - st["ticks"][0])}


PHYSICS = ("mass_scale", "friction", "motor_strength", "kp_scale", "kd_scale", "latency_steps")


def identified_vs_true(status: dict, gap_file: Path) -> dict:
    """Per physics value: identified, true (the gap file's), % error (latency: in physics steps), identified or not."""
    from lowrl_ros.core.sim.robot_sim import load_gap_file

    true, found = load_gap_file(gap_file).as_dict(), status.get("identified", {})
    out = {}
    for key in PHYSICS:
        if key not in found.get("gap", {}):
            continue
        got = found["gap"][key]
        if key == "latency_steps":
            got = found.get("details", {}).get("latency_physics_steps", got)
        err = abs(got - true[key]) if key == "latency_steps" else 100.0 * abs(got - true[key]) / abs(true[key])
        out[key] = {"identified": got, "true": true[key], "error": err,
                    "identifiable": bool(found.get("identifiable", {}).get(key, False))}
    return out


def _release_s(session_dir: Path, rows: list[dict], period_s: float) -> float:
    """Seconds from the first robot step to the first release (the bundle's write time), nan without one."""
    bundles = sorted((session_dir / "releases").glob("v*.lowrl"))
    if not bundles or not rows:
        return float("nan")
    first = float(rows[0]["time_s"]) - int(float(rows[0]["steps"])) * period_s
    return bundles[0].stat().st_mtime - first


def run_seed(args: argparse.Namespace, robot_file: Path, policy: Path, gap_file: Path, seed: int,
             base_version: int, period_s: float, source: str = "") -> dict:
    root = args.runs_dir / f"seed{seed}"
    params = root / "trainer_params.yaml"
    if not args.collect:  # --collect reads the run's sessions and writes nothing there
        root.mkdir(parents=True, exist_ok=True)
        _params_file(params, args.set, args.ray_address, source)
    n = args.eval_episodes
    if args.collect:
        nominal = root / "nominal"
    else:
        print(f"seed {seed}: the base on the nominal robot ({n} episodes)", flush=True)
        nominal, _ = session(root / "nominal", robot_file, policy, "", seed, params,
                             lambda d: len(_returns(_episodes(d), base_version)) >= n, args.timeout_s,
                             method="finetune")  # without a kit: nothing learned, the robot's episodes recorded
    r_nominal = _returns(_episodes(nominal), base_version)

    def decided(d: Path) -> bool:
        status = _status(d)
        if status.get("state") not in DONE_STATES:
            return False
        running = status["released"][-1] if status.get("released") else base_version
        return status["state"] == "failed" or len(_returns(_episodes(d), running)) >= n + 1

    if args.collect:
        gapped, wall = root / "gapped", _session_s(root / "gapped")
        if not r_nominal or not decided(gapped):
            raise SystemExit(f"lowrl bench sim2real_session --collect: {root} holds no finished seed {seed} "
                             f"(nominal episodes: {len(r_nominal)}, gapped state: {_status(gapped).get('state')})")
    else:
        print(f"seed {seed}: retraining on the robot under {gap_file}", flush=True)
        gapped, wall = session(root / "gapped", robot_file, policy, str(gap_file), seed, params, decided,
                               args.timeout_s, extra=_record_args(args))
    status, rows = _status(gapped), _episodes(gapped)
    r_before = _returns(rows, base_version)
    running = status["released"][-1] if status.get("released") else base_version
    after_rows = [r for r in _whole(rows) if int(float(r["version"])) == running]
    r_after = [float(r["return"]) for r in after_rows[1:]]  # the first one may be the judge's, or partly earlier
    mean = lambda xs: float(np.mean(xs)) if xs else float("nan")  # noqa: E731
    gap = mean(r_nominal) - mean(r_before)
    recovered = 100.0 * (mean(r_after) - mean(r_before)) / gap if gap > 0 else float("nan")
    result = {"seed": seed, "state": status.get("state", "no decision"), "decision": status.get("decision", ""),
              "released": status.get("released", []), "nominal_return": mean(r_nominal),
              "before_return": mean(r_before), "after_return": mean(r_after), "recovered_pct": recovered,
              "episodes": {"nominal": len(r_nominal), "before": len(r_before), "after": len(r_after)},
              "identified": status.get("identified", {}), "progress": status.get("progress", {}),
              "identified_vs_true": identified_vs_true(status, gap_file),
              "first_step_to_release_s": _release_s(gapped, rows, period_s), "session_s": wall, **_misses(gapped)}
    print(f"seed {seed}: {result['state']}; nominal {mean(r_nominal):.1f}, before {mean(r_before):.1f}, after "
          f"{mean(r_after):.1f}: {recovered:.0f} % of the gap recovered", flush=True)
    result["in_process"] = in_process(robot_file, policy, gap_file, gapped, seed, n)
    if result["in_process"].get("recovered_pct") is not None:
        print(f"seed {seed}: in-process, the retrained v{result['in_process']['version']} recovers "
              f"{result['in_process']['recovered_pct']:.0f} % of the true gap", flush=True)
    return result


def _launch_command(launch: Path) -> tuple[float, float, float]:
    """The sim robot's velocity command in the session launch (its ``command_velocity`` argument's default)."""
    import yaml

    for entry in yaml.safe_load(launch.read_text())["launch"]:
        arg = entry.get("arg") if isinstance(entry, dict) else None
        if arg and arg.get("name") == "command_velocity":
            return tuple(float(v) for v in yaml.safe_load(arg["default"]))
    raise ValueError(f"{launch}: no command_velocity argument")


def in_process(robot_file: Path, policy: Path, gap_file: Path, gapped: Path, seed: int, episodes: int) -> dict:
    """The same figure without ROS 2 timing: the base on the nominal model and under the true gap, and the first
    retrained release under the true gap, as deployed (int8, the runtime's engine) in RobotSimEnv, on the same
    seeded episodes at the session's velocity command. Over ROS 2 the effective actuation delay depends on the phase
    of the policy node's ticks against the robot's control loop, which is set at each launch and shifted by load,
    so the base itself can return differently before and after a release (bench_results/sim2real_session/HISTORY.md,
    2026-11-29); this figure holds the robot's timing fixed."""
    from lowrl_ros.core.finetune.sim_env import artifact_episodes
    from lowrl_ros.core.sim.evaluate import EVAL_SEED

    releases = sorted((gapped / "releases").glob("v*.lowrl"))
    if not releases:
        return {"note": "nothing was released"}
    command = _launch_command(_repo() / "launch" / "robot_sim_to_real.launch.yaml")
    first = EVAL_SEED + 1000 * seed

    def mean_return(path: Path, gap: Path | None) -> float:
        return float(np.mean([r["return"] for r in artifact_episodes(path, robot_file, episodes, first, gap,
                                                                       command)]))

    try:
        nominal, before = mean_return(policy, None), mean_return(policy, gap_file)
        after = mean_return(releases[0], gap_file)
    except (ValueError, OSError) as exc:  # an ArtifactError is a ValueError: the sessions' figures still count
        return {"note": f"not evaluated: {exc}"}
    gap = nominal - before
    return {"version": int(releases[0].stem.lstrip("v")), "episodes": episodes, "command": list(command),
            "nominal_return": nominal, "before_return": before, "after_return": after,
            "recovered_pct": 100.0 * (after - before) / gap if gap > 0 else None}


def headline(r: dict) -> str:
    seeds = r.get("seeds", [])
    each = " / ".join(f"{s['recovered_pct']:.0f}" for s in seeds)
    release = [s["first_step_to_release_s"] for s in seeds if np.isfinite(s.get("first_step_to_release_s", np.nan))]
    when = f", first step to release {min(release):.0f}-{max(release):.0f} s" if release else ""
    inproc = r.get("in_process_recovered_pct_mean")
    also = f"; in-process without ROS timing {inproc:.0f} %" if inproc is not None else ""
    return (f"gap recovered over ROS 2 {r.get('recovered_pct_mean', float('nan')):.0f} % (mean of {len(seeds)} seeds: "
            f"{each} %){when}, deadline misses {r.get('deadline_misses_total', 'n/a')}{also}")


def result_setting(args: argparse.Namespace) -> str:
    """The result's setting: the flags that differ from their defaults, seeds other than 0 1 2 included (a second
    run on new seeds is a result of its own)."""
    from lowrl_ros.bench import record

    return record.setting_of(args, add_arguments, skip=("out", "runs_dir", "collect"))


def run(args: argparse.Namespace) -> int:
    from lowrl_ros.bench import record
    from lowrl_ros.core.runtime.artifact import parse_artifact, read_artifact_bytes

    robot_file, policy, gap, source = ROBOTS.get(args.robot, (args.robot, "", "", ""))
    robot_file, policy, gap = Path(robot_file), Path(policy), Path(gap)
    # the shipped policy's own checkpoint, unless another policy is given (then: a fresh critic, or --set it)
    source = str(_repo() / source) if source and not args.policy else ""
    policy, gap = (_repo() / p if not p.is_absolute() and not p.is_file() else p
                   for p in (args.policy or policy, args.gap_file or gap))
    robot_file = robot_file if robot_file.is_file() else _repo() / robot_file
    for what, p in (("robot file", robot_file), ("policy", policy), ("gap file", gap)):
        if not p.is_file():
            print(f"lowrl bench sim2real_session: the {what} {p} does not exist", file=sys.stderr)
            return 2
    # A result another command wrote there is refused now, not after the sessions (a 3-seed run takes ~50 minutes).
    setting = result_setting(args)
    try:
        record.check_free(record.result_path("sim2real_session", setting=setting, env=robot_file.stem,
                                             root=args.out), record.command_line())
    except record.ResultExists as exc:
        print(f"lowrl bench sim2real_session: {exc}", file=sys.stderr)
        return 2
    contract = parse_artifact(read_artifact_bytes(policy), str(policy)).contract
    seeds = [run_seed(args, robot_file.resolve(), policy.resolve(), gap.resolve(), s, contract.version,
                      contract.control_period_s, source) for s in args.seeds]
    pct = [s["recovered_pct"] for s in seeds if np.isfinite(s["recovered_pct"])]
    results = {"robot": str(robot_file), "policy": str(policy), "gap_file": str(gap), "seeds": seeds,
               "recovered_pct_mean": float(np.mean(pct)) if pct else float("nan"),
               "deadline_misses_total": sum(int(s.get("deadline_misses", 0)) for s in seeds)}
    inproc = [s["in_process"]["recovered_pct"] for s in seeds
              if s.get("in_process", {}).get("recovered_pct") is not None]
    if inproc:
        results["in_process_recovered_pct_mean"] = float(np.mean(inproc))
    md = ["| seed | decision | nominal | before | after | recovered | first step to release s | session s | "
          "deadline misses / ticks |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    md += [f"| {s['seed']} | {s['state']} | {s['nominal_return']:.1f} | {s['before_return']:.1f} | "
           f"{s['after_return']:.1f} | {s['recovered_pct']:.0f} % | {s['first_step_to_release_s']:.0f} | "
           f"{s['session_s']:.0f} | {s.get('deadline_misses', '-')} / {s.get('ticks', '-')} |" for s in seeds]
    md += ["", "Identified physics over ROS 2 against the gap file (% error; latency: physics steps, the DDS delay "
           "counts in the identified one; (prior): flagged, left at the prior centre):", "",
           "| seed | " + " | ".join(PHYSICS) + " |", "|---" * (len(PHYSICS) + 1) + "|"]
    for s in seeds:
        cells = []
        for key in PHYSICS:
            v = s["identified_vs_true"].get(key)
            cells.append("-" if v is None else f"{v['identified']:.2f} vs {v['true']:g} ({v['error']:.1f}"
                         f"{'' if key == 'latency_steps' else ' %'}){'' if v['identifiable'] else ' (prior)'}")
        md.append(f"| {s['seed']} | " + " | ".join(cells) + " |")
    md += ["", "The same, in-process without ROS 2 timing (`in_process`): the base and the first retrained release, "
           "int8 as deployed, on the same seeded episodes at the session's command, nominal and under the true gap:",
           "", "| seed | release | nominal | before | after | recovered |", "|---|---|---|---|---|---|"]
    for s in seeds:
        ip = s.get("in_process", {})
        md.append(f"| {s['seed']} | " + (f"v{ip['version']} | {ip['nominal_return']:.1f} | {ip['before_return']:.1f} | "
                                         f"{ip['after_return']:.1f} | {ip['recovered_pct']:.0f} % |"
                                         if ip.get("recovered_pct") is not None else f"{ip.get('note', '-')} |||||"))
    path = record.write_result("sim2real_session", results, "\n".join(md) + "\n", setting=setting,
                               env=robot_file.stem, root=args.out)
    print(f"written: {path}")
    return 0
