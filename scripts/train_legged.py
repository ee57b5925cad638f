#!/usr/bin/env python3
"""Train, export and evaluate the legged Ant's walking policy (lowrl/LeggedAnt-v0, core/sim/legged.py).

PPO from Stable-Baselines3 (its rollouts are cheap per sample on a small, busy CPU), then the actor
(Gaussian mean: an MLP with a linear output) is written as a lowrl artifact whose contract reads the
robot file's observation and outputs a in [-1, 1]; the robot file's action section turns a into
joint targets (default_pose + 0.5 a). Commands:

    python scripts/train_legged.py train --run-dir runs/legged_ppo --steps 2000000   # checkpoints every 100k
    python scripts/train_legged.py export runs/legged_ppo/final.zip models/legged_ant_int8.onnx --int8
    python scripts/train_legged.py eval models/legged_ant_int8.onnx --episodes 10    # tracking error table
    # real-to-sim-to-real from the robot's own transition log (finetune_node's log_dir; docs/finetune.md):
    python scripts/train_legged.py sysid WORK_DIR/transitions --gap-out identified_gap.yaml \
        --ppo models/legged_ant_ppo.zip --ppo-steps 100000 -o legged_ant_sysid_int8.onnx
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from lowrl_ros.core.sim import legged


def parse_ranges(text: str | None):
    """"VX_LO,VX_HI,VY_LO,VY_HI,WZ_LO,WZ_HI" -> ((lo, hi),) * 3; None -> the env's default."""
    if text is None:
        return None
    try:
        v = [float(x) for x in text.split(",")]
    except ValueError:
        v = []
    if len(v) != 6 or any(lo > hi for lo, hi in zip(v[0::2], v[1::2])):
        raise SystemExit(f"--command-ranges {text!r}: give 6 numbers, lo <= hi per axis: "
                         "vx_lo,vx_hi,vy_lo,vy_hi,wz_lo,wz_hi")
    return tuple(zip(v[0::2], v[1::2]))


def make_vec_env(n_envs: int, seed: int, command_ranges=None):
    from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env

    kwargs = {"max_episode_steps": 400}
    if command_ranges is not None:
        kwargs["command_ranges"] = command_ranges
    return sb3_make_vec_env(legged.make, n_envs=n_envs, seed=seed, env_kwargs=kwargs)


def train(args: argparse.Namespace) -> int:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    run = Path(args.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    # Rewards normalised for the value function only; observations are already scaled by the robot file's terms.
    env = VecNormalize(make_vec_env(args.envs, args.seed, parse_ranges(args.command_ranges)), norm_obs=False,
                       norm_reward=True, gamma=0.99)
    if args.resume:
        model = PPO.load(args.resume, env=env, device="cpu")
    else:
        model = PPO("MlpPolicy", env, n_steps=256, batch_size=512, n_epochs=5, learning_rate=3e-4, gamma=0.99,
                    gae_lambda=0.95, clip_range=0.2, ent_coef=0.0, max_grad_norm=1.0, seed=args.seed, device="cpu",
                    policy_kwargs=dict(net_arch=dict(pi=[128, 128], vf=[128, 128]),
                                       activation_fn=torch.nn.ELU, log_std_init=-0.7))
    log = (run / "progress.csv").open("a")

    class Checkpoint(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_save = 0  # set in _on_training_start: a resumed model starts at its own step count
            self.t0 = time.time()

        def _on_rollout_end(self) -> None:
            eps = list(self.model.ep_info_buffer)
            mean_r = float(np.mean([e["r"] for e in eps])) if eps else float("nan")
            mean_l = float(np.mean([e["l"] for e in eps])) if eps else float("nan")
            log.write(f"{self.num_timesteps},{time.time() - self.t0:.0f},{mean_r:.2f},{mean_l:.1f}\n")
            log.flush()
            if self.num_timesteps >= self.next_save:
                self.model.save(run / f"ckpt_{self.num_timesteps // 1000}k.zip")
                self.next_save += args.save_every

        def _on_training_start(self) -> None:
            self.next_save = self.num_timesteps + args.save_every

        def _on_step(self) -> bool:
            return True

    model.learn(total_timesteps=args.steps, callback=Checkpoint(), reset_num_timesteps=not args.resume)
    model.save(run / "final.zip")
    return 0


def export(args: argparse.Namespace) -> int:
    """The PPO checkpoint through `lowrl import`'s SB3 importer, named with the robot file's entries."""
    import dataclasses

    from lowrl_ros.core.importers.registry import ImportOptions, load_source, write_imported

    imported = load_source(args.checkpoint, "sb3", ImportOptions(control_period_s=args.period))
    imported.contract = dataclasses.replace(
        imported.contract, obs_names=legged.OBS_NAMES, action_names=legged.JOINTS, env_id=legged.ENV_ID,
        provenance={**imported.contract.provenance, "trained_by": "scripts/train_legged.py (SB3 PPO)",
                    "robot_file": "config/robots/legged_ant.yaml"})
    out = write_imported(imported, args.output, int8=args.int8)
    print(f"artifact: {out} ({Path(out).stat().st_size} bytes)")
    return 0


def policy_fn(path: str):
    """obs -> a for an artifact (.onnx via the robot runtime) or an SB3 zip (deterministic predict)."""
    if path.endswith(".zip"):
        from stable_baselines3 import PPO

        model = PPO.load(path, device="cpu")
        return lambda obs: model.predict(obs, deterministic=True)[0]
    from lowrl_ros.core.runtime.engines import load_artifact

    policy = load_artifact(path)
    return lambda obs: policy.act(np.asarray(obs, dtype=np.float32))


def evaluate(path: str, episodes: int, commands, seed: int = 0, steps: int = 250) -> list[dict]:
    """Seeded episodes per command: mean forward speed, tracking error (after a 2 s start), falls."""
    policy = policy_fn(path)
    env = legged.LeggedAnt(max_episode_steps=steps)
    rows = []
    for cmd in commands:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep, options={"command": cmd})
            vel, fell, n = [], False, 0
            for _ in range(steps):
                obs, _, term, trunc, info = env.step(policy(obs))
                n += 1
                if n * env.period >= 2.0:
                    vel.append(info["velocity"])
                if term or trunc:
                    fell = bool(term)
                    break
            v = np.array(vel) if vel else np.zeros((1, 3))
            err = np.linalg.norm(v[:, :2] - np.asarray(cmd[:2]), axis=1).mean()
            rows.append({"command": list(cmd), "episode": ep, "vx": float(v[:, 0].mean()), "vy": float(v[:, 1].mean()),
                         "yaw_rate": float(v[:, 2].mean()), "lin_err": float(err), "fell": fell,
                         "seconds": n * env.period})
    return rows


def eval_cmd(args: argparse.Namespace) -> int:
    cmds = [tuple(float(x) for x in c.split(",")) for c in args.commands]
    rows = evaluate(args.policy, args.episodes, cmds, seed=args.seed, steps=args.steps)
    print(f"{'command vx,vy,wz':>18} {'mean vx':>8} {'mean vy':>8} {'mean wz':>8} {'|v-cmd| xy':>10} {'falls':>6}")
    for cmd in cmds:
        r = [x for x in rows if tuple(x["command"]) == cmd]
        print(f"{','.join(f'{c:g}' for c in cmd):>18} {np.mean([x['vx'] for x in r]):8.3f} "
              f"{np.mean([x['vy'] for x in r]):8.3f} {np.mean([x['yaw_rate'] for x in r]):8.3f} "
              f"{np.mean([x['lin_err'] for x in r]):10.3f} "
              f"{sum(x['fell'] for x in r):>3}/{len(r)}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


# The preset's fields a policy can learn to undo (sensor errors); the rest is physics.
INVERTIBLE = ("encoder_offset", "joint_offset", "gyro_bias", "tilt_bias", "imu_noise_std", "obs_noise_std")


def gap_cmd(args: argparse.Namespace) -> int:
    """The sim policy on the gap preset, its physical part and its invertible part, over the same seeded episodes
    (the bench's: 250-step episodes, seeds 10000...); recorded with bench/record.py."""
    from lowrl_ros.bench import record
    from lowrl_ros.bench.sim2real import ENV_KWARGS, LEGGED, legged_gap_preset
    from lowrl_ros.core.runtime.engines import load_artifact
    from lowrl_ros.core.sim.evaluate import episode_returns
    from lowrl_ros.core.sim.reality_gap import RealityGapConfig, make_gapped_env

    fields = legged_gap_preset(args.preset)
    gaps = {"sim": {}, "full gap": fields,
            "physical part": {k: v for k, v in fields.items() if k not in INVERTIBLE},
            "invertible part": {k: v for k, v in fields.items() if k in INVERTIBLE}}
    policy = load_artifact(args.policy, engine=args.engine)
    rows, out = [], {}
    for name, f in gaps.items():
        env = make_gapped_env(LEGGED, RealityGapConfig(**f), **ENV_KWARGS[LEGGED])
        rets, _, falls = episode_returns(lambda obs: policy.act(obs).astype(np.float32), env, args.episodes, args.seed)
        env.close()
        out[name] = {"mean": float(np.mean(rets)), "returns": rets, "falls": falls, "gap": f}
        rows.append((name, float(np.mean(rets)), falls))
    sim = out["sim"]["mean"]
    preset = args.preset or "config/gaps/legged_example.yaml"
    md = (f"The sim policy {args.policy} ({args.engine} engine) over {args.episodes} seeded episodes (seeds "
          f"{args.seed}..., {ENV_KWARGS[LEGGED]['max_episode_steps']} steps each) on the gap preset {preset} "
          "and its parts.\n\n| robot | mean return | drop vs sim | falls |\n|---|---|---|---|\n"
          + "\n".join(f"| {n} | {m:.1f} | {100 * (sim - m) / sim:.0f} % | {f}/{args.episodes} |" for n, m, f in rows)
          + "\n")
    print(md)
    command = "python scripts/train_legged.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    path = record.write_result("sim2real", out, md, setting="legged_gap_calibration", env=LEGGED, command=command,
                               headline=f"sim {sim:.1f}, gapped {out['full gap']['mean']:.1f}")
    print(f"results: {path}")
    return 0


def sysid_cmd(args: argparse.Namespace) -> int:
    """Identify the gap from a transition log, write it as sim robot node parameters, optionally improve the
    policy in the identified simulator (PPO from --ppo) and fold the identified sensor biases into it."""
    import yaml

    from lowrl_ros.bench.sim2real import ENV_KWARGS, LEGGED
    from lowrl_ros.bench.sim2real_legged import ppo_in_sim
    from lowrl_ros.core.finetune.transition_log import read_log
    from lowrl_ros.core.sim import sysid

    batch, report = read_log(args.log)
    rec = sysid.Recording.from_transitions(batch.obs, batch.action, batch.next_obs,
                                           batch.terminated | batch.truncated, first_is_start=not args.skip_first)
    print(f"{len(batch)} transitions, {len(rec.observations)} episodes from {args.log}")
    found = sysid.identify(rec, window=args.window, episodes=args.episodes, iterations=args.iterations,
                           log=print)
    print(f"identified: {found.gap().describe()}")
    # As config/gaps/legged_example.yaml: the legged robot at its 5 ms physics step, then the identified gap.
    fields = {**found.sensors, **found.physics}
    params = {"env_id": "LeggedAnt", "control_period_s": 0.005,
              **{f"gap.{k}": list(v) if isinstance(v, tuple) else v for k, v in fields.items()}}
    Path(args.gap_out).write_text(yaml.safe_dump({"/**/sim_robot": {"ros__parameters": params}}, sort_keys=False))
    print(f"gap (sim robot node parameters): {args.gap_out}")
    policy = args.policy
    if args.ppo:
        policy = str(ppo_in_sim(found.gap(biases=False), args.ppo_steps, 0, Path(args.output).with_suffix(".ppo.onnx"),
                                Path(args.ppo), ENV_KWARGS[LEGGED]))
    if args.output:
        out = sysid.fold_sensor_offsets(policy, args.output, found.sensors)
        print(f"artifact with the sensor biases folded in: {out}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="PPO on lowrl/LeggedAnt-v0 with checkpoints")
    t.add_argument("--run-dir", default="runs/legged_ppo")
    t.add_argument("--steps", type=int, default=2_000_000)
    t.add_argument("--envs", type=int, default=8)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--save-every", type=int, default=100_000)
    t.add_argument("--resume", metavar="ZIP", help="continue from a checkpoint")
    t.add_argument("--command-ranges", metavar="VX_LO,VX_HI,VY_LO,VY_HI,WZ_LO,WZ_HI",
                   help="per-episode command ranges (default the env's: 0,0.6,-0.1,0.1,-0.2,0.2)")
    e = sub.add_parser("export", help="checkpoint -> lowrl artifact")
    e.add_argument("checkpoint")
    e.add_argument("output")
    e.add_argument("--int8", action="store_true")
    e.add_argument("--period", type=float, default=0.04, help="policy period, s (the env's)")
    v = sub.add_parser("eval", help="seeded episodes: speed vs command, falls")
    v.add_argument("policy", help="artifact (.onnx/.lowrl) or SB3 checkpoint (.zip)")
    v.add_argument("--episodes", type=int, default=5)
    v.add_argument("--steps", type=int, default=250, help="policy steps per episode (0.04 s each)")
    v.add_argument("--seed", type=int, default=100)
    v.add_argument("--commands", nargs="+", default=["0,0,0", "0.3,0,0", "0.6,0,0"], metavar="VX,VY,WZ")
    v.add_argument("--json", help="write the per-episode rows here")
    g = sub.add_parser("gap", help="the sim policy on the legged gap preset and its physical / invertible parts")
    g.add_argument("--policy", default="models/legged_ant_int8.onnx")
    g.add_argument("--engine", default="numpy", choices=("numpy", "ort"), help="runtime engine (as deployed)")
    g.add_argument("--preset", default=None, help="gap params file (default config/gaps/legged_example.yaml)")
    g.add_argument("--episodes", type=int, default=20)
    g.add_argument("--seed", type=int, default=10_000)
    s = sub.add_parser("sysid", help="identify the gap from a transition log; improve off-board; fold sensor biases")
    s.add_argument("log", help="finetune_node's transition log directory (WORK_DIR/transitions)")
    s.add_argument("--gap-out", default="identified_gap.yaml", help="the identified gap as sim robot parameters")
    s.add_argument("--policy", default="models/legged_ant_int8.onnx", help="artifact to fold into without --ppo")
    s.add_argument("--ppo", metavar="ZIP", help="SB3 PPO checkpoint to continue in the identified simulator")
    s.add_argument("--ppo-steps", type=int, default=100_000)
    s.add_argument("-o", "--output", help="write the deployable artifact (sensor biases folded in) here")
    s.add_argument("--window", type=int, default=50, help="policy steps replayed per episode start")
    s.add_argument("--episodes", type=int, default=16, help="episode starts replayed")
    s.add_argument("--iterations", type=int, default=8, help="cross-entropy iterations")
    s.add_argument("--skip-first", action="store_true", help="the log's first transition is not an episode start")
    args = p.parse_args(argv)
    if args.cmd == "sysid" and args.ppo and not args.output:
        p.error("sysid --ppo needs -o OUTPUT (where the improved artifact goes)")
    return {"train": train, "export": export, "eval": eval_cmd, "gap": gap_cmd, "sysid": sysid_cmd}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
