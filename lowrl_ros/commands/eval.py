"""`lowrl eval ARTIFACT --env Pendulum-v1 --episodes N`: the return of a deployed artifact or bundle tier.

The artifact runs through the robot's runtime (``load_bundle``/``load_artifact``: validation, the
chosen engine, int8 exactly as stored), in the gymnasium environment, on seeded episodes, so two
artifacts evaluated with the same ``--seed`` see the same initial states.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lowrl_ros.core.runtime.artifact import ArtifactError
from lowrl_ros.core.sim.evaluate import EVAL_SEED, evaluate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("artifact", type=Path, help="artifact (.onnx) or bundle (.lowrl)")
    parser.add_argument("--env", default=None, help="gymnasium id (default: the contract's env_id)")
    parser.add_argument("--episodes", type=int, default=10, help="seeded episodes (default 10)")
    parser.add_argument("--seed", type=int, default=EVAL_SEED, help=f"seed of the first episode (default {EVAL_SEED})")
    parser.add_argument("--tier", default=None, help="bundle tier to run (default: every tier)")
    parser.add_argument("--engine", choices=["auto", "ort", "numpy"], default="auto", help="inference engine")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")


def run(args: argparse.Namespace) -> int:
    from lowrl_ros.core.runtime.bundle import load_bundle

    try:
        bundle = load_bundle(args.artifact, engine=args.engine)
        tiers = bundle.policies
        if args.tier is not None:
            if args.tier not in tiers:
                raise ValueError(f"{args.artifact} has tiers {sorted(tiers)}, not {args.tier!r}; pick one of them")
            tiers = {args.tier: tiers[args.tier]}
        env_id = args.env or bundle.contract.env_id
        if not env_id:
            raise ValueError(f"{args.artifact} does not name its environment; pass --env (e.g. Pendulum-v1)")
        results = {}
        # On a terminal one line per tier, redrawn; in a log (not a terminal) one line per episode.
        # Either way every line ends: a tier's progress never runs into the next tier's.
        tty = sys.stderr.isatty()
        for name, policy in tiers.items():
            def tick(k: int, name: str = name) -> None:
                line = f"{name}: episode {k}/{args.episodes}"
                print(f"\r{line}" if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)

            res = evaluate(policy.act, env_id, args.episodes, args.seed, progress=tick)
            if tty:
                print(file=sys.stderr)
            results[name] = {"mean": res.mean, "std": res.std, "returns": list(res.returns), "bytes": policy.nbytes,
                             "macs": policy.macs, "engine": policy.engine}
            print(f"{args.artifact}:{name} ({policy.engine}, {policy.nbytes} bytes): return {res}")
    except (ValueError, ArtifactError, ImportError) as exc:
        print(f"lowrl eval: {exc}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps({"artifact": str(args.artifact), "env_id": env_id, "episodes": args.episodes,
                                         "seed": args.seed, "tiers": results}, indent=2) + "\n")
    return 0
