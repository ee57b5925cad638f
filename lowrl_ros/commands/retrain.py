"""`lowrl retrain`: continue the deployed policy with PPO in the identified simulator; release the next int8 version.

    lowrl retrain --base models/quadruped_v1.onnx --robot config/robots/quadruped.yaml \\
        --gap-file identified_gap.yaml --steps 200000 [--ray-address auto] --out quadruped_v2.onnx

One progress line per iteration (stage, steps, the mean return of recent simulated episodes, the time left),
then each release gate's verdict. Exit 0 when the artifact was written, 1 when the run stopped (a gate, a
divergence, a dead worker: the reason is printed and nothing is written), 2 for inputs that cannot work together.
docs/sim_to_real.md ("Retrain off-board from a gap file") walks through it.
"""
from __future__ import annotations

import argparse
import sys

from lowrl_ros.commands._config_flags import add_config_flags, config_from, read_preset

OWN = ("total_steps", "n_envs", "ray_address", "spread")  # flags of their own below (the names the docs use)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base", required=True, help="the deployed artifact (.onnx) to continue")
    parser.add_argument("--robot", required=True, help="the robot file, with its sim: section and gap_priors")
    parser.add_argument("--gap-file", required=True, help="the identified gap (YAML gap: {...})")
    parser.add_argument("--out", required=True, help="where the released int8 artifact goes (written only if it "
                                                     "passes every gate)")
    parser.add_argument("--version", type=int, default=None, help="the released version (default: the base's + 1)")
    parser.add_argument("--steps", type=float, default=None, dest="total_steps",
                        help="environment steps in all (default 200000)")
    parser.add_argument("--envs", type=int, default=None, dest="n_envs",
                        help="simulated robots in parallel (default 32)")
    parser.add_argument("--ray-address", default=None, dest="ray_address",
                        help="run the environments as Ray actors: 'local' (a new local Ray), 'auto' (the running "
                             "cluster), 'ray://HOST:10001'; default: local worker processes")
    parser.add_argument("--spread", default=None, metavar="SHARE|KEY=SHARE,...",
                        help="randomization around the identified gap, a share of each gap_priors range: one number "
                             "for every ranged parameter (default 0.1), and/or KEY=SHARE per parameter, e.g. "
                             "'0.1,friction=0.3,latency_steps=0'")
    parser.add_argument("--config", default=None, help="preset YAML (its retrain: section); flags override it")
    add_config_flags(parser, _settings_cls(), skip=OWN, title="retraining settings")


def _settings_cls():
    from lowrl_ros.core.retrain.retrain import RetrainSettings

    return RetrainSettings


def parse_spread(text: str | None) -> tuple[float | None, dict[str, float]]:
    """'0.1,friction=0.3' -> (0.1, {"friction": 0.3}); ValueError naming the bad item."""
    default, per = None, {}
    for item in (text or "").replace(" ", "").split(","):
        if not item:
            continue
        key, sep, value = item.partition("=")
        try:
            number = float(value if sep else key)
        except ValueError:
            raise ValueError(f"--spread: {item!r} is not SHARE or KEY=SHARE (e.g. 0.1 or friction=0.3)") from None
        if sep:
            per[key] = number
        else:
            default = number
    return default, per


def run(args: argparse.Namespace) -> int:
    from lowrl_ros.core.retrain.retrain import RetrainRefused, retrain
    from lowrl_ros.core.runtime.artifact import ArtifactError, parse_artifact, read_artifact_bytes
    from lowrl_ros.core.sim.robot_sim import SimConfigError, load_gap_file

    try:
        default_spread, spread = parse_spread(args.spread)
        preset = read_preset(args.config, "retrain")
        for name in OWN:
            value = getattr(args, name, None)
            if name == "spread":
                value = default_spread
            if value is not None:
                preset[name] = int(value) if name == "total_steps" else value
        settings = config_from(_settings_cls(), argparse.Namespace(**{k: v for k, v in vars(args).items()
                                                                      if k not in OWN}), preset)
        gap = load_gap_file(args.gap_file)
        version = args.version
        if version is None:
            version = parse_artifact(read_artifact_bytes(args.base), args.base).contract.version + 1
    except (ValueError, SimConfigError, ArtifactError) as exc:
        print(f"lowrl retrain: {exc}", file=sys.stderr)
        return 2

    where = f"Ray at {settings.ray_address}" if settings.ray_address else "local processes"
    print(f"retraining {args.base} in {args.robot}'s simulator around {args.gap_file}: {settings.total_steps} steps, "
          f"{settings.n_envs} envs over {settings.workers} workers ({where}); version {version}", flush=True)

    def progress(p: dict) -> None:
        ret = "   n/a" if p["sim_return"] is None else f"{p['sim_return']:8.2f}"
        best = ("" if p.get("best_return") is None else
                f"  best eval {p['best_return']:8.2f} at {p['best_steps']} (base {p['base_return']:.2f})")
        reach = "" if p.get("beyond_reach") is None else f"  past the clip {100 * p['beyond_reach']:3.0f} %"
        print(f"[{p['stage']:>8}] steps {p['steps']:>9}/{p['total_steps']}  sim return {ret}  "
              f"eta {p['eta_s']:6.0f} s{best}{reach}", flush=True)

    try:
        result = retrain(args.base, args.robot, gap, spread, settings, args.out, version, progress=progress)
    except (RetrainRefused, ValueError, SimConfigError, ArtifactError) as exc:
        print(f"lowrl retrain: {exc}", file=sys.stderr)
        return 2
    for g in result.gates:
        print(g.line())
    before = "n/a" if result.sim_return_before is None else f"{result.sim_return_before:.2f}"
    after = "n/a" if result.sim_return_after is None else f"{result.sim_return_after:.2f}"
    print(f"sim return (identified gap, seeded episodes): deployed {before}, retrained int8 {after}; "
          f"{result.steps} steps in {result.wall_s:.0f} s")
    if result.ok:
        print(f"released: {result.path} (version {version})" + (f"; {result.reason}" if result.reason else ""))
        return 0
    print(f"not released: {result.reason}", file=sys.stderr)
    return 1
