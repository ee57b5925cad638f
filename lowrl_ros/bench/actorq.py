"""ActorQ: fp32 actors vs int8 actors, on a 256-wide and a large (3x1024) policy.

Two parts, each a ratio against the fp32 baseline measured in the same run, interleaved:

1. collection alone (in this process, no learner): env.step + Policy.act of an fp32 and an int8
   artifact of the same weights (ORT engine, as the actors run it), in alternating rounds; env
   steps/s. This isolates what quantized actors buy.
2. training end to end (lowrl_ros.core.train.actorq): an fp32 learner with ``--num-actors`` actor
   processes running fp32 or int8 snapshots; env steps/s (overall, and per actor counting only its
   own acting + stepping time), wall-clock to ``--target-return`` of the *deployed* snapshot,
   bytes per broadcast, CPU-seconds of the learner and every actor (psutil), and energy: codecarbon
   if installed — an estimate (this machine has no RAPL/energy counters; codecarbon then models CPU
   power from TDP and load) of the learner process, extended to the actors by CPU-seconds.

    lowrl bench actorq                          # both widths, fp32 and int8 (several minutes)
    lowrl bench actorq --widths 256 --total-steps 3000 --time-limit-s 60   # quick look
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from dataclasses import fields, replace
from typing import Any

import numpy as np

from lowrl_ros.core.sim.plot import pyplot
from lowrl_ros.core.train.actorq import ActorQConfig

WIDTHS = {"256": (256, 2), "3x1024": (1024, 3)}
ENERGY_LABEL = "estimate: no RAPL/energy counters on this machine (codecarbon models CPU power from TDP x load)"


def _weights(obs_dim: int, act_dim: int, hidden: int, depth: int, seed: int):
    from lowrl_ros.core.runtime.artifact import MlpWeights

    rng = np.random.default_rng(seed)
    sizes = [obs_dim] + [hidden] * depth + [act_dim]
    layers = []
    for i, o in zip(sizes[:-1], sizes[1:]):
        bound = 1.0 / np.sqrt(i)  # torch nn.Linear's default init, as the learner starts
        layers.append((rng.uniform(-bound, bound, (o, i)).astype(np.float32),
                       rng.uniform(-bound, bound, o).astype(np.float32)))
    return MlpWeights(layers, "relu", "tanh")


def bench_collect(env_id: str, hidden: int, depth: int, steps: int, rounds: int, tmp: str) -> dict[str, Any]:
    """Interleaved env.step + act rounds for fp32 and int8 artifacts of the same weights."""
    import gymnasium as gym

    from lowrl_ros.core.runtime.artifact import PolicyContract, save_artifact
    from lowrl_ros.core.runtime.engines import load_artifact

    env = gym.make(env_id)
    space = env.action_space
    obs_dim, act_dim = env.observation_space.shape[0], space.shape[0]
    contract = PolicyContract([f"obs_{i}" for i in range(obs_dim)], [f"action_{i}" for i in range(act_dim)],
                              space.low, space.high, env_id=env_id)
    w = _weights(obs_dim, act_dim, hidden, depth, 0)
    policies = {}
    for name, int8 in (("fp32", False), ("int8", True)):
        path = save_artifact(f"{tmp}/collect_{hidden}x{depth}_{name}.onnx", w, contract, int8=int8)
        policies[name] = load_artifact(path, engine="ort")
    rates: dict[str, list[float]] = {k: [] for k in policies}
    obs, _ = env.reset(seed=0)
    for _ in range(rounds):
        for name, policy in policies.items():
            t0 = time.perf_counter()
            for _ in range(steps):
                obs, _, term, trunc, _ = env.step(policy.act(obs))
                if term or trunc:
                    obs, _ = env.reset()
            rates[name].append(steps / (time.perf_counter() - t0))
    med = {k: float(np.median(v)) for k, v in rates.items()}
    return {"hidden": hidden, "depth": depth, "steps_per_round": steps, "rounds": rounds,
            "env_steps_per_s": med, "int8_over_fp32": med["int8"] / med["fp32"],
            "bytes": {k: p.nbytes for k, p in policies.items()}}


def _tracker():
    """A codecarbon tracker of this (learner) process, or None with the reason."""
    try:
        from codecarbon import OfflineEmissionsTracker
    except ImportError:
        return None, "codecarbon is not installed (pip install codecarbon): CPU-seconds only"
    import logging

    logging.getLogger("codecarbon").setLevel(logging.ERROR)
    tracker = OfflineEmissionsTracker(country_iso_code="USA", log_level="error", save_to_file=False,
                                      tracking_mode="process", measure_power_secs=5)
    return tracker, ""


def bench_train(cfg: ActorQConfig) -> dict[str, Any]:
    """One end-to-end ActorQ run with energy estimated around it."""
    from lowrl_ros.core.train.actorq import run_actorq
    from lowrl_ros.core.train.progress import ProgressLine

    tracker, why = _tracker()
    if tracker is not None:
        tracker.start()
    bar = ProgressLine(cfg.total_steps, True)
    res = run_actorq(cfg, progress=lambda s, f: bar.update(s, f))
    bar.close()
    energy: dict[str, Any] = {"label": ENERGY_LABEL}
    if tracker is not None:
        tracker.stop()
        kwh = float(tracker.final_emissions_data.energy_consumed)
        actor_cpu = sum(a.get("cpu_s_psutil", 0.0) for a in res.actors if not math.isnan(a.get("cpu_s_psutil", 0.0)))
        energy.update({"learner_process_kwh": kwh,
                       # codecarbon's own model is power ~ CPU share; extend it to the actors by CPU-seconds.
                       "all_processes_kwh_scaled_by_cpu_s": kwh * (res.learner_cpu_s + actor_cpu)
                       / max(res.learner_cpu_s, 1e-9)})
    else:
        energy["unavailable"] = why
    actor_steps = sum(a["steps"] for a in res.actors)
    actor_busy = sum(a["act_s"] + a["env_s"] for a in res.actors)
    return {"int8": cfg.int8, "hidden": cfg.hidden, "depth": cfg.depth, "critic_hidden": cfg.critic_hidden,
            "env_steps": res.env_steps, "gradient_steps": res.gradient_steps, "wall_s": res.wall_s,
            "startup_s": res.startup_s, "env_steps_per_s": res.env_steps_per_s,
            # One actor's env steps per second of its own acting + stepping (waits excluded).
            "actor_busy_steps_per_s": actor_steps / max(actor_busy, 1e-9),
            "actor_act_us_per_step": float(np.mean([a["act_us_per_step"] for a in res.actors])),
            "wall_to_target_s": res.wall_to_target, "steps_to_target": res.steps_to_target,
            "final_return": res.final_return, "best_return": max(e["return"] for e in res.evals),
            "bytes_per_broadcast": res.bytes_per_broadcast, "versions": res.versions_published,
            "rejected_stale": res.rejected_stale, "rejected_unknown": res.rejected_unknown,
            "snapshot_max_error": res.snapshot_max_error,
            "snapshot_median_error": float(np.median(res.snapshot_errors)) if res.snapshot_errors else None,
            "snapshots_over_tolerance": res.snapshots_over_tolerance, "learner_cpu_s": res.learner_cpu_s,
            "actor_cpu_s": [a.get("cpu_s_psutil") for a in res.actors], "torch_in_actors": res.torch_in_actors,
            "energy": energy, "evals": res.evals}


def _plot(train: dict[str, Any], widths: list[str], path: Path):
    """Deployed return vs wall-clock per width, fp32 and int8 actors, to ``path`` (beside the results)."""
    try:
        plt = pyplot()
    except ImportError:
        return None
    fig, axes = plt.subplots(1, len(widths), figsize=(5 * len(widths), 3.6), squeeze=False)
    for ax, w in zip(axes[0], widths):
        for name, style in (("fp32", "-"), ("int8", "--")):
            for k, r in enumerate(train[w][name]):
                ax.plot([e["wall_s"] for e in r["evals"]], [e["return"] for e in r["evals"]], style, marker="o",
                        ms=3, label=f"{name} actors" if k == 0 else None, color="C0" if name == "fp32" else "C1")
        ax.set_title(f"{w} actor")
        ax.set_xlabel("wall-clock since actors ready (s)")
        ax.set_ylabel("return of the deployed snapshot")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--widths", nargs="+", choices=sorted(WIDTHS), default=["256", "3x1024"],
                        help="policies to compare (256: 2x256, 3x1024: 3x1024)")
    parser.add_argument("--env", default="Pendulum-v1", help="gymnasium environment id")
    parser.add_argument("--collect-steps", type=int, default=2000, help="env steps per collection round")
    parser.add_argument("--collect-rounds", type=int, default=5, help="interleaved collection rounds")
    parser.add_argument("--no-train", action="store_true", help="only the collection part")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved fp32/int8 training pairs per width")
    defaults = ActorQConfig(target_return=-400.0, time_limit_s=150.0, total_steps=8000, critic_hidden=256)
    skip = {"env_id", "int8", "hidden", "depth"}
    for f in fields(ActorQConfig):
        if f.name in skip:
            continue
        value = getattr(defaults, f.name)
        kind = type(value)
        parser.add_argument("--" + f.name.replace("_", "-"), type=kind, default=value,
                            help=f"ActorQConfig.{f.name} (default {value})")


def headline(r: dict) -> str | None:
    """The bench_results headline: int8 actors against fp32 (env steps/s, bytes per broadcast), per worker count."""
    tail = "_ratios_first_pair"
    pairs = {k[:-len(tail)]: v for k, v in r.get("train", {}).items() if k.endswith(tail)}
    return "; ".join(f"{w}: int8 actors {p['env_steps_per_s_int8_over_fp32']:.2f}x the env steps/s of fp32, "
                     f"{p['bytes_per_broadcast_fp32_over_int8']:.1f}x fewer bytes per broadcast"
                     for w, p in pairs.items())


def run(args: argparse.Namespace) -> int:
    import tempfile

    from lowrl_ros.bench import record

    where = {"env": args.env, "seed": args.seed}
    try:  # a result of another command there: refused before the measurement, not after
        record.check_free(record.result_path("actorq", **where), record.command_line())
    except record.ResultExists as exc:
        print(f"lowrl bench actorq: {exc}", file=sys.stderr)
        return 2
    try:
        base = ActorQConfig(env_id=args.env, **{f.name: getattr(args, f.name) for f in fields(ActorQConfig)
                                                 if f.name not in ("env_id", "int8", "hidden", "depth")})
        if args.collect_steps < 100 or args.collect_rounds < 1 or args.repeats < 1:
            raise ValueError("--collect-steps must be >= 100, --collect-rounds and --repeats >= 1")
    except ValueError as exc:
        print(f"lowrl bench actorq: {exc}", file=sys.stderr)
        return 2
    results: dict[str, Any] = {"env": args.env, "energy_label": ENERGY_LABEL, "collect": {}, "train": {}}
    md = [f"Environment {args.env}; actors run snapshots through load_artifact(engine='{base.engine}').", ""]
    with tempfile.TemporaryDirectory() as tmp:
        md += ["## Collection alone (env.step + act, interleaved rounds, median)", "",
               "| policy | fp32 steps/s | int8 steps/s | int8 / fp32 | fp32 bytes | int8 bytes |",
               "|---|---|---|---|---|---|"]
        for w in args.widths:
            hidden, depth = WIDTHS[w]
            print(f"collect {w}: {args.collect_rounds} rounds x {args.collect_steps} steps", file=sys.stderr)
            r = results["collect"][w] = bench_collect(args.env, hidden, depth, args.collect_steps,
                                                      args.collect_rounds, tmp)
            md.append(f"| {w} | {r['env_steps_per_s']['fp32']:.0f} | {r['env_steps_per_s']['int8']:.0f} | "
                      f"{r['int8_over_fp32']:.2f}x | {r['bytes']['fp32']} | {r['bytes']['int8']} |")
    if not args.no_train:
        md += ["", "## Training end to end (fp32 learner, actor processes)", "",
               "| policy | actors | env steps/s | steps/s per actor while busy | act µs | wall to target s "
               "| final return "
               "| bytes/broadcast | CPU-s learner + actors | energy kWh (estimate) | rejected "
               "| snapshot error max (over tol.) |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for w in args.widths:
            hidden, depth = WIDTHS[w]
            runs: dict[str, list] = {"fp32": [], "int8": []}
            for rep in range(args.repeats):
                for name in ("fp32", "int8"):  # interleaved: drift in machine speed hits both
                    cfg = replace(base, hidden=hidden, depth=depth, int8=name == "int8")
                    print(f"train {w} {name} (repeat {rep + 1}/{args.repeats})", file=sys.stderr)
                    r = bench_train(cfg)
                    runs[name].append(r)
                    cpu = r["learner_cpu_s"] + sum(c for c in r["actor_cpu_s"] if c is not None)
                    e = r["energy"].get("all_processes_kwh_scaled_by_cpu_s")
                    wt = r["wall_to_target_s"]
                    md.append(f"| {w} | {name} | {r['env_steps_per_s']:.0f} | {r['actor_busy_steps_per_s']:.0f} | "
                              f"{r['actor_act_us_per_step']:.0f} | {'not reached' if wt is None else f'{wt:.1f}'} | "
                              f"{r['final_return']:.0f} | {r['bytes_per_broadcast']:.0f} | "
                              f"{r['learner_cpu_s']:.1f} + {cpu - r['learner_cpu_s']:.1f} | "
                              f"{'n/a' if e is None else f'{e:.2e}'} | {r['rejected_stale'] + r['rejected_unknown']} | "
                              f"{r['snapshot_max_error']:.3f} ({r['snapshots_over_tolerance']}) |")
            results["train"][w] = runs
            f32, i8 = runs["fp32"][0], runs["int8"][0]
            results["train"][w + "_ratios_first_pair"] = {
                "env_steps_per_s_int8_over_fp32": i8["env_steps_per_s"] / f32["env_steps_per_s"],
                "actor_busy_steps_per_s_int8_over_fp32": i8["actor_busy_steps_per_s"] / f32["actor_busy_steps_per_s"],
                "bytes_per_broadcast_fp32_over_int8": f32["bytes_per_broadcast"] / i8["bytes_per_broadcast"],
            }
        md += ["", f"Energy: {ENERGY_LABEL}; codecarbon tracks the learner process, extended to the actors by "
               "their CPU-seconds. Returns are of the deployed snapshot (the artifact the actors ran).",
               "wall to target counts from the moment every actor had loaded version 1."]
    if results["train"]:
        png = _plot(results["train"], args.widths, record.result_path("actorq", **where).with_suffix(".png"))
        if png:
            md += ["", f"Learning curves (deployed return vs wall-clock): {png}"]
    path = record.write_result("actorq", results, "\n".join(md), **where)
    print("\n".join(md))
    print(f"wrote {path}")
    return 0
