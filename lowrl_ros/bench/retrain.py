"""Retraining on Ray vs local worker processes: the wall-clock ratio for the same work (`lowrl retrain`).

The same retraining run (same base artifact, robot file, gap, seed, settings: identical transitions and
artifacts either way, test/test_retrain.py checks that) runs with its environments in local worker processes
and as Ray actors on a local Ray instance started once by the bench (its start-up is reported apart, as a
cluster is started once and used by many runs). Rounds alternate local / Ray so that the machine's drift hits
both; the headline is the median wall-clock ratio Ray / local and each side's environment steps per second.
Without ``--base`` the policy is an untrained one of the robot file's contract (the ratio measures the
machinery, not learning).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from lowrl_ros.bench import record

ROBOT = "config/robots/quadruped.yaml"
GAP = "config/gaps/quadruped_example.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base", default=None, help="the artifact to retrain (default: an untrained policy of the "
                                                     "robot file's contract)")
    parser.add_argument("--robot", default=ROBOT)
    parser.add_argument("--gap-file", default=GAP)
    parser.add_argument("--steps", type=int, default=4096, help="environment steps per run")
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="local/Ray pairs, interleaved")
    parser.add_argument("--seed", type=int, default=0)


def untrained_policy(robot_file: str, out: Path) -> Path:
    """A small random policy of the robot file's contract (its entry names, its joints, limits +-action_clip)."""
    from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, save_artifact
    from lowrl_ros.core.runtime.observation import ObservationSpec
    from lowrl_ros.core.runtime.robot_file import load_robot_file

    robot = load_robot_file(robot_file)
    names = ObservationSpec.from_robot_file(robot, 0.02).entry_names()
    clip = float(((robot.raw.get("sim") or {}).get("control") or {}).get("action_clip", 1.0))
    rng = np.random.default_rng(0)
    m = len(robot.joints)
    w = MlpWeights([(0.1 * rng.normal(size=(64, len(names))), np.zeros(64)), (0.1 * rng.normal(size=(64, 64)),
                    np.zeros(64)), (0.1 * rng.normal(size=(m, 64)), np.zeros(m))], "elu", "none")
    return save_artifact(out, w, PolicyContract(names, robot.joints, [-clip] * m, [clip] * m, control_period_s=0.02),
                         int8=True)


def headline(r: dict) -> str:
    return (f"Ray / local wall-clock {r['ratio_median']:.2f}x; {r['local_steps_per_s']:.0f} vs "
            f"{r['ray_steps_per_s']:.0f} env steps/s ({r['envs']} envs, {r['workers']} workers)")


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from lowrl_ros.core.retrain.retrain import RetrainSettings, retrain
    from lowrl_ros.core.sim.robot_sim import load_gap_file

    gap = load_gap_file(args.gap_file)
    with tempfile.TemporaryDirectory(prefix="lowrl-bench-retrain-") as tmp:
        tmp = Path(tmp)
        base = Path(args.base) if args.base else untrained_policy(args.robot, tmp / "base.onnx")
        t0 = time.perf_counter()
        ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level="warning",
                 _node_ip_address="127.0.0.1", num_cpus=max(args.workers, 1))
        ray_start_s = time.perf_counter() - t0
        runs: dict[str, list[dict]] = {"local": [], "ray": []}
        try:
            for k in range(args.rounds):
                for where in ("local", "ray"):
                    s = RetrainSettings(total_steps=args.steps, n_envs=args.envs, workers=args.workers,
                                        seed=args.seed, ray_address="local" if where == "ray" else "",
                                        return_fraction=1e-9)  # the machinery is measured, not the learning
                    r = retrain(base, args.robot, gap, {}, s, tmp / f"{where}{k}.onnx", 2)
                    if not r.ok:
                        print(f"{where} run {k} failed: {r.reason}")
                        return 1
                    runs[where].append({"wall_s": r.wall_s, "steps": r.steps,
                                        "sha256": hashlib.sha256(
                                            (tmp / f"{where}{k}.onnx").read_bytes()).hexdigest()})
                    print(f"round {k} {where:>5}: {r.steps} steps in {r.wall_s:.1f} s "
                          f"({r.steps / r.wall_s:.0f} steps/s)", flush=True)
        finally:
            ray.shutdown()
    ratios = [b["wall_s"] / a["wall_s"] for a, b in zip(runs["local"], runs["ray"])]
    same = all(a["sha256"] == b["sha256"] for a, b in zip(runs["local"], runs["ray"]))
    med = {w: float(np.median([x["wall_s"] for x in v])) for w, v in runs.items()}
    results = {"envs": args.envs, "workers": args.workers, "steps": args.steps, "rounds": args.rounds,
               "ray_start_s": ray_start_s, "runs": runs, "ratios": ratios, "ratio_median": float(np.median(ratios)),
               "local_steps_per_s": args.steps / med["local"], "ray_steps_per_s": args.steps / med["ray"],
               "identical_artifacts": same}
    md = (f"`lowrl retrain` of {base.name if args.base else 'an untrained quadruped policy'} on {args.robot} around "
          f"{args.gap_file}: {args.steps} env steps, {args.envs} envs over {args.workers} workers, {args.rounds} "
          "interleaved rounds per side (each run's wall clock includes its evaluations and release gates).\n\n"
          "| side | median wall s | env steps/s |\n|---|---|---|\n"
          f"| local processes | {med['local']:.1f} | {results['local_steps_per_s']:.0f} |\n"
          f"| Ray actors (local instance) | {med['ray']:.1f} | {results['ray_steps_per_s']:.0f} |\n\n"
          f"Ray / local wall-clock ratio per round: {', '.join(f'{x:.2f}' for x in ratios)} (median "
          f"{results['ratio_median']:.2f}); the Ray instance took {ray_start_s:.1f} s to start (once, not in the "
          f"runs). Same artifact bytes on both sides: {'yes' if same else 'NO'}.\n")
    print(md)
    path = record.write_result("retrain", results, md, setting=f"e{args.envs}-w{args.workers}-s{args.steps}",
                               seed=args.seed, headline=headline(results))
    print(f"results: {path}")
    return 0
