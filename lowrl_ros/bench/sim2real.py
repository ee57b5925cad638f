"""Sim-to-real: how much of the reality gap on-robot fine-tuning recovers, and what an update costs.

For each environment and seed:

1. the sim policy: a `lowrl train` run (config/train_*.yaml, this seed; cached under
   ``--runs-dir`` and reused), its int8 actor and a fine-tune kit (lowrl_ros.core.finetune.kit);
2. its return in simulation and on the gapped robot (lowrl_ros.core.sim.reality_gap: mass +30 %,
   actuator gain −20 %, observation noise, one step of action delay; Pendulum-v1 also a 0.3 rad
   encoder zero offset, see ENV_GAP), over the same seeded episodes;
3. ``--robot-steps`` K steps on the gapped robot, in lockstep and in-process, with the fine-tuner's
   own loop (``FineTuneSession``: updates, int8 versions every N updates, judging and rollback exactly
   as finetune_node uses them; the ROS transport is what test/test_session.py and `lowrl demo` run):
   the robot always acts with the version deployed at that moment (the int8 artifact, numpy engine);
4. the best version's return on the gapped robot, same episodes as in 2.

Steps 3-4 run once per ``--methods`` entry (FineTuneConfig.algorithm: kit, crossq, rlpd, ...) on the
same sim policy, gap and episodes; per method also: robot steps until the mean of the last
``--judge-episodes`` robot episodes first reaches half the gap, and updates per second of the
fine-tuner's step time (versions included) on this machine.

Reported: gap recovered % = (after − before) / (sim − before); resident memory of this process
during fine-tuning (torch + learner + the simulated robot + the int8 policy: an upper bound of the
fine-tuner process, which has no simulator); bytes per update = the
size of one new version's artifact (what reaches the policy node) against an fp32 dense
state_dict of the same actor. Targets: ≥ 50 % recovered within 10k robot steps; ≥ 10× fewer bytes per
update. How to read it: docs/sim_to_real.md, "Benchmark: `lowrl bench sim2real`".
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from lowrl_ros.core.train.config import TrainConfig, parse_overrides

ENVS = {"Pendulum-v1": "config/train_pendulum_sac.yaml",
        "InvertedPendulum-v5": "config/train_invertedpendulum_td3.yaml",
        # The legged example (issue 19): its sim policy is the shipped imported artifact, not a lowrl train run.
        "LeggedAnt": "models/legged_ant_int8.onnx"}
LEGGED = "LeggedAnt"
LEGGED_PPO = "models/legged_ant_ppo.zip"  # the SB3 PPO checkpoint the shipped artifact was imported from
LEGGED_GAP = "config/gaps/legged_example.yaml"  # the legged gap preset (also a sim robot node params file)
# Legged fine-tuning within 20k robot steps: 250-step episodes (10 s at 0.04 s) give 80 episodes, so a
# version made every 1000 updates (one per ~4 episodes at 1 update per step) is judged on its 3 episodes
# before the next one is made, ~20 versions in all; the kit's 500-step default would leave ~13 versions
# judged on noisier, fewer episodes. Evaluation uses the same 250-step episodes, so the fine-tuner's episode
# returns (robot steps to 50 % of the gap) and the evaluation's are on one scale.
ENV_KWARGS = {LEGGED: {"max_episode_steps": 250}}
# A version worse than the best by more than this (return units) is rolled back: per env, as its returns' scale.
ROLLBACK_MARGIN = {"Pendulum-v1": 150.0, "InvertedPendulum-v5": 300.0, LEGGED: 40.0}
# Where the fine-tuned policy comes from: our own `lowrl train` run, or a policy trained elsewhere and
# imported (issue 17: bring your own policy): an SB3 PPO actor made into a kit by `lowrl kit`.
START = ("train", "sb3-ppo")
# RL Zoo's PPO hyperparameters for Pendulum-v1 (rl-baselines3-zoo hyperparams/ppo.yml) without gSDE, so
# the deployed actor is the plain Gaussian mean: tanh hidden [64, 64], output unsquashed, clipped to the Box.
PPO_PENDULUM = dict(n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0, learning_rate=1e-3,
                    clip_range=0.2)

# The example gap, on both robots.
BENCH_GAP = dict(mass_scale=1.3, actuator_gain=0.8, obs_noise_std=0.01, action_delay_steps=1)
# Pendulum-v1 adds a 0.3 rad encoder zero offset. With the example gap alone its gap is mostly physics:
# a policy trained 30k steps on the gapped pendulum from scratch recovers only 22/40/3 % of
# sim - before (bench_results/sim2real/all_versions_eval_episodes50_oracle_oracle_steps30000/Pendulum-v1/),
# so "recovered" measured the torque the gap takes away, not the fine-tuning. An offset is an
# invertible change of the observation: the best return under example gap + offset is exactly the
# best under the example gap, and the part the offset costs can all be won back.
# `--gap joint_offset=0` runs the example gap alone.
ENV_GAP = {"Pendulum-v1": dict(joint_offset=0.3)}


# FineTuneConfig.algorithm values compared in one run: kit = the kit's own SAC/TD3 (finetune_node's default).
METHODS = ("kit", "crossq", "rlpd")
# The second episode set of the evaluation noise (docs/sim_to_real.md): seeds apart from the first set's
# (10000 + 100 * seed + i) and from the robot's own episodes (seed + 50000).
NOISE_SEED_OFFSET = 5_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lowrl_ros.core.finetune.config import ALGORITHMS

    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=[*ALGORITHMS, "sysid"],
                        help="fine-tuning algorithms compared on the same sim policy, gap and episodes "
                             "(FineTuneConfig.algorithm; default: kit crossq rlpd); sysid (LeggedAnt): identify the "
                             "gap from the robot's steps, improve the policy off-board (bench/sim2real_legged.py)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--robot-steps", type=int, default=10_000, help="K: robot steps of fine-tuning (10000)")
    parser.add_argument("--eval-episodes", type=int, default=10, help="episodes per return figure (10)")
    parser.add_argument("--train-steps", type=int, default=0, help="override the training configs' total_steps")
    parser.add_argument("--train-set", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="override a field of the sim policies' (and oracles') training config, e.g. "
                             "--train-set batch_size=256 (cached policies are keyed by the whole config)")
    parser.add_argument("--version-every", type=int, default=1000, help="updates between versions (N)")
    parser.add_argument("--lr", type=float, default=None,
                        help="fine-tuning learning rate (default: FineTuneConfig.lr, finetune_node's default)")
    parser.add_argument("--judge-episodes", type=int, default=3,
                        help="episodes a version runs before it is judged (3: finetune_node's default eval_episodes)")
    parser.add_argument("--gap", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="change the benchmark's gap, e.g. --gap action_delay_steps=0 (an ablation)")
    parser.add_argument("--nstep", type=int, default=1,
                        help="n-step TD targets while fine-tuning (finetune_node uses 1; >1 is an experiment: "
                             "the bench then feeds the learner's buffer itself, truncations as n-step cuts)")
    parser.add_argument("--explore-std", type=float, default=0.0,
                        help="Gaussian exploration noise on the robot's actions while fine-tuning, as a fraction "
                             "of the half action range (the policy node acts deterministically: 0)")
    parser.add_argument("--critic-warmup", type=int, default=0,
                        help="updates that train the critics only before the actor moves (FineTuneConfig."
                             "critic_warmup_updates)")
    parser.add_argument("--updates-per-step", type=int, default=1,
                        help="fine-tuner updates per robot step (FineTuneConfig.updates_per_transition; 1)")
    parser.add_argument("--bc-weight", type=float, default=0.0,
                        help="behaviour-cloning weight in the actor loss (FineTuneConfig.bc_weight; 0: off)")
    parser.add_argument("--finetune-set", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="set another FineTuneConfig field of the fine-tuner, e.g. --finetune-set "
                             "residual_scale=0.1 residual_critic_updates=500 (the fields with a flag of their own "
                             "take the flag)")
    parser.add_argument("--oracle", action="store_true",
                        help="also train a policy on the gapped robot from scratch (same config and steps): the "
                             "return achievable under the gap, and the gap recovered against it")
    parser.add_argument("--oracle-steps", type=int, default=0,
                        help="the oracle's training steps (default: the sim policy's): a longer-trained oracle is "
                             "a firmer estimate of the best return the gapped robot allows; LeggedAnt: PPO steps "
                             "continued from models/legged_ant_ppo.zip on the gapped robot (default 200000)")
    parser.add_argument("--all-versions", action="store_true",
                        help="also evaluate every version the fine-tuner made on the same episodes: the best one "
                             "made against the one kept tells learning from selection")
    parser.add_argument("--plain-judging", action="store_true",
                        help="judge versions by plain mean returns (FineTuneConfig.judge_baseline false) instead of "
                             "returns adjusted for each episode's start state")
    parser.add_argument("--start", choices=START, default="train",
                        help="the sim policy: train (a lowrl train run of the preset) or sb3-ppo (a Stable-Baselines3 "
                             "PPO trained here for --ppo-steps, imported by `lowrl import`, its kit made by "
                             "`lowrl kit` with critics warmed up in the simulator; Pendulum-v1)")
    parser.add_argument("--ppo-steps", type=int, default=60_000,
                        help="--start sb3-ppo: PPO's training steps (60000; RL Zoo trains 100000, 60000 reach "
                             "about -130 in sim here)")
    from lowrl_ros.bench import sim2real_legged
    from lowrl_ros.commands.kit import add_warmup_arguments

    sim2real_legged.add_arguments(parser)

    add_warmup_arguments(parser, prefix="kit-", help_prefix="--start sb3-ppo and LeggedAnt: lowrl kit ")
    parser.add_argument("--kit-gap-file", type=Path, default=None,
                        help="LeggedAnt: lowrl kit --gap-file: the kit's critics and prior data from the simulator "
                             "with this gap (an identified simulator; the preset's own file is a perfectly "
                             "identified one)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/bench_sim2real"),
                        help="sim policies are trained (once) and fine-tuned here")
    parser.add_argument("--out", type=Path, default=None,
                        help="results root (default bench_results/); the result goes to "
                             "<root>/sim2real/<setting>/<envs>/result.*")


def _preset(env_id: str) -> Path:
    """The training preset of ``env_id``'s sim policy (config/train_*.yaml in the repository)."""
    return _repo() / ENVS[env_id]


def _repo() -> Path:
    return Path(__file__).resolve().parents[2]


def legged_gap_preset(path: str | Path | None = None) -> dict:
    """The gap.* entries of a sim robot node params file (default: config/gaps/legged_example.yaml) as
    RealityGapConfig fields; ValueError naming the file if it holds none or a bad one."""
    from lowrl_ros.core.sim.reality_gap import gap_file_fields

    return gap_file_fields(Path(path) if path else _repo() / LEGGED_GAP)


def _train_set(args: argparse.Namespace) -> dict[str, str]:
    """--train-set FIELD=VALUE items as TrainConfig overrides (TrainConfig checks the names and values)."""
    return parse_overrides(args.train_set, "--train-set")


def _gaps(args: argparse.Namespace) -> dict:
    """Each env's gap: BENCH_GAP, then ENV_GAP's additions, then --gap FIELD=VALUE (ValueError if bad)."""
    from lowrl_ros.core.sim.reality_gap import RealityGapConfig, parse_gap_items

    changes = parse_gap_items(args.gap)
    return {env_id: RealityGapConfig(**{**(legged_gap_preset() if env_id == LEGGED else BENCH_GAP),
                                        **ENV_GAP.get(env_id, {}), **changes}) for env_id in args.envs}


# FineTuneConfig fields the benchmark sets from flags of their own (--finetune-set refuses them).
_FLAGGED = {"version_every_updates": "--version-every", "eval_episodes": "--judge-episodes", "seed": "--seeds",
            "lr": "--lr", "critic_warmup_updates": "--critic-warmup", "updates_per_transition": "--updates-per-step",
            "bc_weight": "--bc-weight", "judge_baseline": "--plain-judging", "algorithm": "--methods"}


def finetune_set(args: argparse.Namespace) -> dict:
    """--finetune-set FIELD=VALUE items as FineTuneConfig values (ValueError naming a bad or flagged field)."""
    from lowrl_ros.core.finetune.config import finetune_items

    return finetune_items(args.finetune_set, "--finetune-set", _FLAGGED)


def _config_tag(cfg) -> str:
    """Short hash of a training config: a cached policy is reused only for the config that made it."""
    return hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:8]


def sim_policy(env_id: str, seed: int, args: argparse.Namespace) -> Path:
    """Train (or reuse) the sim policy; return its run directory (checkpoint.pt, actor_int8.onnx, kit/)."""
    from lowrl_ros.core.finetune.kit import write_kit
    from lowrl_ros.core.finetune.prior import PRIOR_FILE
    from lowrl_ros.core.train.export import export_actor
    from lowrl_ros.core.train.trainer import Trainer

    cfg = _sim_config(env_id, seed, args)
    run_dir = args.runs_dir / f"{env_id}-s{seed}-{cfg.total_steps}-{_config_tag(cfg)}"
    if (run_dir / "kit" / "kit.json").is_file() and not (run_dir / "kit" / PRIOR_FILE).is_file() \
            and (run_dir / "checkpoint.pt").is_file():  # a kit cached before kits carried prior data
        write_kit(run_dir, run_dir / "kit", artifact=run_dir / "actor_int8.onnx")
    if not (run_dir / "kit" / "kit.json").is_file():
        print(f"  training the sim policy: {env_id}, {cfg.algo} {cfg.variant}, {cfg.total_steps} steps, seed {seed}",
              flush=True)
        trainer = Trainer(cfg, run_dir)
        result = trainer.run()
        export_actor(trainer.agent, trainer.env, run_dir, result.env_steps)
        write_kit(run_dir, run_dir / "kit", artifact=run_dir / "actor_int8.onnx")
    return run_dir


def imported_policy(env_id: str, seed: int, args: argparse.Namespace) -> Path:
    """Train (or reuse) an SB3 PPO on ``env_id``, import it (`lowrl import --int8`), make its kit (`lowrl kit`).

    Returns a run directory laid out like :func:`sim_policy`'s (``actor_int8.onnx``, ``kit/``).
    """
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from lowrl_ros.commands import import_policy
    from lowrl_ros.core.runtime.artifact import load_weights, reference_action

    if env_id != "Pendulum-v1":
        raise ValueError(f"--start sb3-ppo runs on Pendulum-v1 (RL Zoo's PPO settings); not {env_id}")
    ppo_dir = args.runs_dir / f"sb3-ppo-{env_id}-s{seed}-{args.ppo_steps}"
    # One PPO and its artifact per seed and budget; one kit (and fine-tuning runs) per kit setting beside them.
    run_dir = ppo_dir / f"kit-w{args.kit_warmup_steps}-u{args.kit_critic_updates}-n{args.kit_explore_noise:g}"
    if (run_dir / "kit" / "kit.json").is_file():
        return run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (ppo_dir / "ppo.zip").is_file():
        print(f"  training SB3 PPO: {env_id}, {args.ppo_steps} steps, seed {seed}", flush=True)
        torch.set_num_threads(1)
        model = PPO("MlpPolicy", make_vec_env(env_id, n_envs=4, seed=seed), seed=seed, device="cpu", verbose=0,
                    **PPO_PENDULUM)
        model.learn(args.ppo_steps)
        model.save(ppo_dir / "ppo.zip")
    # What a user runs: lowrl import PPO.zip -o actor_int8.onnx --int8 --env-id Pendulum-v1, then lowrl kit.
    # Parsed by the command's own parser, so a flag `lowrl import` gains never goes missing here.
    import_parser = argparse.ArgumentParser()
    import_policy.add_arguments(import_parser)
    import_args = import_parser.parse_args([str(ppo_dir / "ppo.zip"), "-o", str(run_dir / "actor_int8.onnx"),
                                            "--int8", "--env-id", env_id])
    if import_policy.run(import_args) != 0:
        raise ValueError("lowrl import refused the PPO model (see above)")
    weights, contract = load_weights(run_dir / "actor_int8.onnx")
    model = PPO.load(ppo_dir / "ppo.zip", device="cpu")
    probe = np.random.default_rng(seed).uniform(-1, 1, (32, contract.obs_dim)) * [1, 1, 8]
    want = model.predict(probe.astype(np.float32), deterministic=True)[0]  # SB3 clips PPO's mean to the Box
    err = float(np.max(np.abs(reference_action(weights, contract, probe) - want)))
    if err > 0.05:  # int8 weights: a few hundredths of a 4 N m range
        raise ValueError(f"the imported PPO actor differs from model.predict by {err:.3f}")
    _make_kit(run_dir, env_id, seed, args, "the imported PPO artifact")
    return run_dir


def _file_tag(path: Path) -> str:
    """A short name of a file's contents for cache directories."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:8]


def _make_kit(run_dir: Path, env_id: str, seed: int, args: argparse.Namespace, what: str) -> None:
    """`lowrl kit run_dir/actor_int8.onnx -o run_dir/kit --env env_id` with the --kit-* warm-up flags (TD3)."""
    from lowrl_ros.commands import kit as kit_command

    # Parsed by the command's own parser, as the import above: a flag `lowrl kit` gains never goes missing here.
    parser = argparse.ArgumentParser()
    kit_command.add_arguments(parser)
    argv = [str(run_dir / "actor_int8.onnx"), "-o", str(run_dir / "kit"), "--env", env_id, "--seed", str(seed),
            "--explore-noise", str(args.kit_explore_noise), "--warmup-steps", str(args.kit_warmup_steps),
            "--critic-updates", str(args.kit_critic_updates)]
    if getattr(args, "kit_gap_file", None) is not None:
        argv += ["--gap-file", str(args.kit_gap_file)]
    if kit_command.run(parser.parse_args(argv)) != 0:
        raise ValueError(f"lowrl kit refused {what} (see above)")


def _sim_config(env_id: str, seed: int, args: argparse.Namespace):
    """The sim policy's TrainConfig: the preset, --train-set, this seed, --train-steps."""
    overrides = {**_train_set(args), "seed": seed, "progress": False}
    if args.train_steps:
        overrides["total_steps"] = args.train_steps
    return TrainConfig.from_yaml(_preset(env_id), **overrides)


def _oracle_config(env_id: str, seed: int, args: argparse.Namespace):
    """The oracle's TrainConfig: the sim policy's, with --oracle-steps' budget and a buffer to match."""
    cfg = _sim_config(env_id, seed, args)
    if not args.oracle_steps:
        return cfg
    # A longer run keeps all its data too, as the presets' buffers (sized to the run) do,
    # unless --train-set buffer_size=... says otherwise.
    buffer = cfg.buffer_size if "buffer_size" in _train_set(args) else max(args.oracle_steps, cfg.buffer_size)
    return cfg.replace(total_steps=args.oracle_steps, buffer_size=buffer)


def _gap_tag(gap) -> str:
    """A short name of a gap for cache directories (a hash: the legged gap has many fields)."""
    return hashlib.sha256(json.dumps(gap.to_dict(), sort_keys=True).encode()).hexdigest()[:8]


def legged_kit_dir(seed: int, args: argparse.Namespace) -> Path:
    """Where the legged kit of ``seed`` and the --kit-* settings is cached (one per gap file's contents)."""
    gap_file = getattr(args, "kit_gap_file", None)
    tag = f"-gap{_file_tag(gap_file)}" if gap_file else ""
    return args.runs_dir / (f"legged-s{seed}-kit-w{args.kit_warmup_steps}-u{args.kit_critic_updates}"
                            f"-n{args.kit_explore_noise:g}{tag}")


def legged_policy(seed: int, args: argparse.Namespace, kit: bool = True) -> Path:
    """The legged sim policy: the shipped imported artifact and its kit, made as `lowrl kit` makes it.

    The kit's critics are warmed up in the UNGAPPED simulator (``--env lowrl/LeggedAnt-v0``), on
    ``--kit-warmup-steps`` steps of the policy with ``--kit-explore-noise``; what that warm-up collected
    is the kit's prior data (RLPD's). Returns a run directory laid out like :func:`sim_policy`'s.
    ``kit=False`` (``--methods sysid`` alone, which needs no kit): the artifact only, in its own directory.
    """
    import shutil

    from lowrl_ros.core.sim import legged

    if not kit:
        run_dir = args.runs_dir / f"legged-s{seed}"
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_repo() / ENVS[LEGGED], run_dir / "actor_int8.onnx")
        return run_dir
    run_dir = legged_kit_dir(seed, args)
    if (run_dir / "kit" / "kit.json").is_file():
        return run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_repo() / ENVS[LEGGED], run_dir / "actor_int8.onnx")
    _make_kit(run_dir, legged.ENV_ID, seed, args, "the legged artifact")
    return run_dir


def legged_oracle(seed: int, gap, args: argparse.Namespace) -> Path:
    """The legged oracle: the sim policy's SB3 PPO (models/legged_ant_ppo.zip) trained on, from that checkpoint,
    on the gapped robot for ``--oracle-steps`` (scripts/train_legged.py's settings: 8 envs, rewards
    normalised), imported to int8 as the shipped artifact was; cached under ``--runs-dir``, one for all seeds."""
    import dataclasses

    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from lowrl_ros.core.importers.registry import ImportOptions, load_source, write_imported
    from lowrl_ros.core.sim import legged

    steps = args.oracle_steps or 200_000
    # One oracle for every seed (trained with seed 0): PPO over 100k+ steps costs more than a seed's fine-tuning
    # runs together on a 2-core machine, and the yardstick is the same robot and gap for every seed.
    seed = 0
    run_dir = args.runs_dir / f"oracle-legged-ppo-s{seed}-{steps}-{_gap_tag(gap)}"
    out = run_dir / "actor_int8.onnx"
    if out.is_file():
        return out
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"  training the oracle: PPO from {LEGGED_PPO} on the gapped robot, {steps} steps", flush=True)
    torch.set_num_threads(1)
    env = VecNormalize(make_vec_env(legged.make, n_envs=8, seed=seed,
                                    env_kwargs={**ENV_KWARGS[LEGGED], "gap": gap}),
                       norm_obs=False, norm_reward=True, gamma=0.99)
    model = PPO.load(_repo() / LEGGED_PPO, env=env, device="cpu", seed=seed)
    model.learn(total_timesteps=steps)
    model.save(run_dir / "ppo.zip")
    imported = load_source(run_dir / "ppo.zip", "sb3", ImportOptions(control_period_s=0.04))
    imported.contract = dataclasses.replace(imported.contract, obs_names=legged.OBS_NAMES,
                                            action_names=legged.JOINTS, env_id=legged.ENV_ID)
    write_imported(imported, out, int8=True)
    return out


def oracle_policy(env_id: str, seed: int, gap, args: argparse.Namespace) -> Path:
    """Train (or reuse) a policy on the gapped robot itself; return its int8 artifact.

    The trainer's environments are replaced by gapped ones before it runs (its ``env`` and
    ``eval_env`` attributes), so this is the same algorithm, config and step budget as the sim policy.
    """
    from lowrl_ros.core.sim.reality_gap import make_gapped_env
    from lowrl_ros.core.train.export import export_actor
    from lowrl_ros.core.train.trainer import Trainer

    cfg = _oracle_config(env_id, seed, args)
    tag = _gap_tag(gap)
    run_dir = args.runs_dir / f"oracle-{env_id}-s{seed}-{cfg.total_steps}-{tag}-{_config_tag(cfg)}"
    if not (run_dir / "actor_int8.onnx").is_file():
        print(f"  training the oracle on the gapped robot: {cfg.total_steps} steps", flush=True)
        trainer = Trainer(cfg, run_dir)
        trainer.env, trainer.eval_env = make_gapped_env(env_id, gap), make_gapped_env(env_id, gap)
        result = trainer.run()
        export_actor(trainer.agent, trainer.env, run_dir, result.env_steps)
    return run_dir / "actor_int8.onnx"


def gap_returns(path: str | Path, env_id: str, gap, episodes: int, seed: int) -> list[float]:
    """Returns of the artifact at ``path`` over seeded episodes of ``env_id`` with ``gap``."""
    from lowrl_ros.core.runtime.engines import load_artifact
    from lowrl_ros.core.sim.evaluate import episode_returns
    from lowrl_ros.core.sim.reality_gap import make_gapped_env

    policy = load_artifact(path, engine="numpy")
    env = make_gapped_env(env_id, gap, **ENV_KWARGS.get(env_id, {}))
    try:
        return episode_returns(lambda obs: policy.act(obs).astype(np.float32), env, episodes, seed)[0]
    finally:
        env.close()


def fine_tune(run_dir: Path, env_id: str, gap, steps: int, version_every: int, seed: int, lr: float | None = None,
              judge_episodes: int = 2, nstep: int = 1, explore_std: float = 0.0, critic_warmup: int = 0,
              updates_per_step: int = 1, **config) -> dict:
    """K lockstep robot steps with the fine-tuner's loop (FineTuneSession); returns the versions, the best,
    memory and sizes."""
    import psutil
    import torch

    from lowrl_ros.core.runtime.engines import load_artifact
    from lowrl_ros.core.finetune.kit import load_kit
    from lowrl_ros.core.finetune.config import FineTuneConfig
    from lowrl_ros.core.finetune.session import FineTuneSession, Rollback, VersionMade
    from lowrl_ros.core.finetune.transition_log import Transition
    from lowrl_ros.core.finetune.versions import EpisodeJudge
    from lowrl_ros.core.sim.reality_gap import make_gapped_env

    # A fresh directory per call: FineTuner resumes one that holds a learner, and two calls in the
    # same second once shared a time-stamped name (the second resumed the first's update count).
    out_dir = Path(tempfile.mkdtemp(prefix=f"finetune-{steps}-{time.strftime('%Y%m%dT%H%M%S')}-", dir=run_dir))
    base = str(run_dir / "actor_int8.onnx")
    config = FineTuneConfig(version_every_updates=version_every, eval_episodes=judge_episodes, seed=seed,
                            lr=FineTuneConfig.lr if lr is None else lr, critic_warmup_updates=critic_warmup,
                            updates_per_transition=updates_per_step,
                            **{"rollback_margin": ROLLBACK_MARGIN.get(env_id, 300.0), **config})
    # In-process the truncated step's next observation is the true last state (on a robot it is the
    # next episode's first), so n-step runs keep truncations as cuts of the n-step sum. Versions are
    # deployed between episodes: in lockstep every episode runs one version, start to end.
    session = FineTuneSession(load_kit(run_dir / "kit"), config, out_dir, base_path=base, nstep=nstep,
                              train_on_truncated=nstep > 1, versions_between_episodes=True)
    tuner = session.tuner
    per_step = max(int(updates_per_step), math.ceil(tuner.utd))  # rlpd's own UTD may be above the bench's
    update_s = 0.0
    proc = psutil.Process()
    judge = EpisodeJudge()
    deployed = tuner.tracker.current
    policy = load_artifact(base, engine="numpy")
    env = make_gapped_env(env_id, gap, **ENV_KWARGS.get(env_id, {}))
    obs, _ = env.reset(seed=seed + 50_000)  # robot episodes apart from the evaluation seeds
    judge.begin(deployed, obs)
    ep_return, rss_max, returns = 0.0, 0.0, []
    started = time.perf_counter()
    explore = np.random.default_rng(seed + 77)
    half = (np.asarray(policy.contract.action_high) - np.asarray(policy.contract.action_low)) / 2.0
    for step in range(steps):
        action = policy.act(obs)
        if explore_std > 0.0:  # the executed (noisy) command is what the robot records
            action = np.clip(action + explore.normal(0.0, explore_std, action.shape) * half,
                             policy.contract.action_low, policy.contract.action_high)
        nxt, r, term, trunc, _ = env.step(action.astype(np.float32))
        ep_return += float(r)
        session.add(Transition(obs, action, float(r), nxt, bool(term), bool(trunc), deployed, 0.0))
        t0 = time.perf_counter()
        session.step(per_step)  # under the update-to-data cap, as on the robot
        update_s += time.perf_counter() - t0
        obs = nxt
        if term or trunc:
            returns.append((step + 1, deployed, ep_return))
            episode = judge.end(ep_return, deployed)
            events = session.episode_ended(episode.version, episode.ret, episode.start_obs) if episode else []
            for event in events:
                record = event.record if isinstance(event, VersionMade) else \
                    event.target if isinstance(event, Rollback) else None
                if record is not None:
                    deployed = record.version
                    policy = load_artifact(record.path, engine="numpy")  # validated load, as the policy node does
            obs, _ = env.reset()
            judge.begin(deployed, obs)
            ep_return = 0.0
            rss_max = max(rss_max, proc.memory_info().rss / 2**20)
    wall = time.perf_counter() - started
    tracker = tuner.tracker
    best = tracker.versions[tracker.best] if tracker.best is not None else tracker.versions[tracker.current]
    # What reaches the robot per version: the whole file, or only the head where the base is shared (residual).
    artifact_bytes = [_changed_bytes(v.path) for v in tracker.versions.values() if v.path != base]
    buf = io.BytesIO()
    torch.save({k: v.to(torch.float32).contiguous() for k, v in tuner.agent.actor.state_dict().items()}, buf)
    return {"best_version": best.version, "best_path": best.path, "versions": len(tracker.versions),
            "updates": tuner.updates, "wall_s": round(wall, 1), "algorithm": tuner.learner,
            "updates_per_s": round(tuner.updates / update_s, 1) if update_s > 0 else float("nan"),
            "learner_notes": list(tuner.notes), "rss_mb_max": round(rss_max, 1),
            "episode_returns": returns, "version_bytes": artifact_bytes,
            "fp32_state_dict_bytes": buf.getbuffer().nbytes,
            "statuses": {v.version: v.status for v in tracker.versions.values()},
            "version_paths": {v.version: v.path for v in tracker.versions.values()}, "out_dir": str(out_dir)}


def _changed_bytes(path: str) -> int:
    """The bytes a new version changes: a residual version's head (its base is the deployed one), else the file."""
    from lowrl_ros.core.runtime.artifact import artifact_head_bytes, parse_artifact, read_artifact_bytes

    parsed = parse_artifact(read_artifact_bytes(path), path)
    return artifact_head_bytes(parsed) or len(parsed.data)


def _recovered(sim: list[float], before: list[float], after: list[float]) -> float:
    """The share of the gap recovered, % (NaN where the gap is empty)."""
    s, b, a = float(np.mean(sim)), float(np.mean(before)), float(np.mean(after))
    return 100.0 * (a - b) / (s - b) if s - b > 1e-9 else float("nan")


def _noise(sim: list[float], before: list[float], before_b: list[float]) -> dict:
    """The base judged against itself: its mean on the second episode set minus the first, as % of the gap."""
    return {"before_returns_second_set": before_b, "base_vs_itself_pct": _recovered(sim, before, before_b)}


def _steps_to_half_gap(episodes: list, before: float, sim: float, window: int) -> int | None:
    """Robot steps until the mean return of the last ``window`` robot episodes first reaches half the gap.

    ``episodes`` is fine_tune's (step at the episode's end, version, return) list; None if never.
    """
    if sim - before <= 1e-9:
        return None
    goal = before + 0.5 * (sim - before)
    rets = [r for _, _, r in episodes]
    for k in range(window, len(rets) + 1):
        if float(np.mean(rets[k - window:k])) >= goal:
            return int(episodes[k - 1][0])
    return None


def headline(r: dict) -> str:
    """The bench_results headline: the share of the reality gap each method recovers, mean over seeds."""
    return "gap recovered (mean over seeds): " + ", ".join(
        f"{k[:-len('_recovered_pct_mean')]} {v:.0f} %" for k, v in r.items() if k.endswith("_recovered_pct_mean"))


def run(args: argparse.Namespace) -> int:
    from lowrl_ros.bench import record

    # Named before any default is filled in below: the setting is what the command line changed.
    where = {"setting": record.setting_of(args, add_arguments, skip=("envs", "out", "runs_dir")), "env": args.envs,
             "root": args.out}
    try:  # a result of another command there: refused before hours of fine-tuning, not after
        record.check_free(record.result_path("sim2real", **where), record.command_line())
    except record.ResultExists as exc:
        print(f"lowrl bench sim2real: {exc}")
        return 2
    if args.lr is None:
        from lowrl_ros.core.finetune.config import FineTuneConfig

        args.lr = FineTuneConfig.lr
    from lowrl_ros.core.sim.reality_gap import RealityGapConfig

    try:
        gaps = _gaps(args)
        for env_id in args.envs:  # a bad --train-set fails here, not after the first env's runs
            if env_id != LEGGED:
                TrainConfig.from_yaml(_preset(env_id), **_train_set(args))
            else:  # a field the legged robot does not take (e.g. --gap action_delay_steps=1) fails here
                from lowrl_ros.core.sim.legged import LeggedRobot

                LeggedRobot(gap=gaps[env_id])
        tune_set = finetune_set(args)
        if "sysid" in args.methods and args.envs != [LEGGED]:
            raise ValueError("--methods sysid identifies the legged robot's gap; run it with --envs LeggedAnt")
        if args.kit_gap_file is not None:
            if args.envs != [LEGGED]:
                raise ValueError("--kit-gap-file changes the legged kit's simulator; run it with --envs LeggedAnt")
            legged_gap_preset(args.kit_gap_file)  # a bad file is refused here, not after minutes of warm-up
        if args.start == "sb3-ppo" and args.envs != ["Pendulum-v1"]:
            raise ValueError("--start sb3-ppo runs on Pendulum-v1 only (RL Zoo's PPO settings); add --envs Pendulum-v1")
    except ValueError as exc:
        print(f"lowrl bench sim2real: {exc}")
        return 2
    identity = RealityGapConfig()
    results: dict = {"gaps": {env_id: g.to_dict() for env_id, g in gaps.items()},
                     "robot_steps": args.robot_steps, "eval_episodes": args.eval_episodes,
                     "lr": args.lr, "judge_episodes": args.judge_episodes, "version_every": args.version_every,
                     "nstep": args.nstep, "explore_std": args.explore_std, "critic_warmup": args.critic_warmup,
                     "bc_weight": args.bc_weight, "methods": list(args.methods), "finetune_set": tune_set,
                     "updates_per_step": args.updates_per_step,
                     "judge_baseline": not args.plain_judging, "train_set": list(args.train_set),
                     "oracle_steps": (args.oracle_steps or args.train_steps or None) if args.oracle else None,
                     "start": args.start, "ppo_steps": args.ppo_steps if args.start == "sb3-ppo" else None,
                     "ppo_kit": {"warmup_steps": args.kit_warmup_steps, "critic_updates": args.kit_critic_updates,
                                 "explore_noise": args.kit_explore_noise}
                     if args.start == "sb3-ppo" or LEGGED in args.envs else None,
                     "env_kwargs": {e: ENV_KWARGS[e] for e in args.envs if e in ENV_KWARGS},
                     "runs": []}
    rows = []
    for env_id in args.envs:
        for seed in args.seeds:
            print(f"sim2real {env_id} seed {seed}", flush=True)
            gap = gaps[env_id]
            kit = args.methods != ["sysid"]  # sysid alone needs no kit (its warm-up costs minutes)
            run_dir = (legged_policy(seed, args, kit=kit) if env_id == LEGGED else sim_policy(env_id, seed, args)
                       if args.start == "train" else imported_policy(env_id, seed, args))
            base = run_dir / "actor_int8.onnx"
            eval_seed = 10_000 + 100 * seed
            sim = gap_returns(base, env_id, identity, args.eval_episodes, eval_seed)
            before = gap_returns(base, env_id, gap, args.eval_episodes, eval_seed)
            # The evaluation noise: the same figures on a second, disjoint set of episodes. The base against
            # itself across the two sets is the noise a judge of unpaired episodes faces (the fine-tuner's);
            # the gap recovered on the second set shows how much of a figure is the episodes drawn.
            sim_b, before_b = (gap_returns(base, env_id, g, args.eval_episodes, eval_seed + NOISE_SEED_OFFSET)
                               for g in (identity, gap))
            noise = _noise(sim, before, before_b)
            print(f"  evaluation noise: the base against itself on a second episode set "
                  f"{noise['base_vs_itself_pct']:+.0f} % of the gap", flush=True)
            oracle = {}
            if args.oracle:  # once per seed, shared by the methods
                oracle_path = (legged_oracle(seed, gap, args) if env_id == LEGGED
                               else oracle_policy(env_id, seed, gap, args))
                o = gap_returns(oracle_path, env_id, gap, args.eval_episodes, eval_seed)
                om = float(np.mean(o))
                oracle = {"oracle": om, "oracle_returns": o}
                print(f"  oracle (trained on the gapped robot): {om:.1f}", flush=True)
            for method in args.methods:
                if method == "sysid":
                    from lowrl_ros.bench.sim2real_legged import sysid_method

                    ft = sysid_method(run_dir, gap, seed, args, _repo() / LEGGED_PPO, ENV_KWARGS[LEGGED],
                                      lambda path, g: gap_returns(path, env_id, g, args.eval_episodes, eval_seed))
                    after = gap_returns(ft["best_path"], env_id, gap, args.eval_episodes, eval_seed)
                    s_, b_ = float(np.mean(sim)), float(np.mean(before))
                    for name, value in ft["sysid"]["stage_returns"].items():
                        pct = 100.0 * (value - b_) / (s_ - b_)
                        print(f"  sysid stage {name}: {value:.1f} ({pct:.0f} % of the gap)", flush=True)
                else:
                    ft = fine_tune(run_dir, env_id, gap, args.robot_steps, args.version_every, seed, args.lr,
                               args.judge_episodes, args.nstep, args.explore_std, args.critic_warmup,
                               updates_per_step=args.updates_per_step, bc_weight=args.bc_weight,
                                   judge_baseline=not args.plain_judging, algorithm=method, **tune_set)
                    after = gap_returns(ft["best_path"], env_id, gap, args.eval_episodes, eval_seed)
                s, b, a = float(np.mean(sim)), float(np.mean(before)), float(np.mean(after))
                recovered = 100.0 * (a - b) / (s - b) if s - b > 1e-9 else float("nan")
                after_b = gap_returns(ft["best_path"], env_id, gap, args.eval_episodes, eval_seed + NOISE_SEED_OFFSET)
                noise_run = {**noise, "after_returns_second_set": after_b,
                             "recovered_pct_second_set": _recovered(sim_b, before_b, after_b)}
                made = {}
                if args.all_versions:  # every version on the same episodes (the base's figure is `before`)
                    means = {v: float(np.mean(gap_returns(path, env_id, gap, args.eval_episodes, eval_seed)))
                             for v, path in ft["version_paths"].items() if path != str(base)}
                    if means:
                        top = max(means, key=means.get)
                        made = {"version_means": means, "best_made": top, "best_made_return": means[top],
                                "best_made_recovered_pct": 100.0 * (means[top] - b) / (s - b) if s - b > 1e-9
                                else float("nan")}
                        print(f"  best version made: v{top} {means[top]:.1f} "
                              f"({made['best_made_recovered_pct']:.0f} %)", flush=True)
                if oracle:
                    om = oracle["oracle"]
                    oracle["recovered_vs_oracle_pct"] = 100.0 * (a - b) / (om - b) if om - b > 1e-9 else float("nan")
                per_update = float(np.mean(ft["version_bytes"])) if ft["version_bytes"] else float("nan")
                ratio = ft["fp32_state_dict_bytes"] / per_update if ft["version_bytes"] else float("nan")
                half = _steps_to_half_gap(ft["episode_returns"], b, s, args.judge_episodes)
                if method == "sysid":  # nothing is deployed before every recorded step is in: all of them count
                    half = ft["robot_steps_used"] if recovered >= 50.0 else None
                run = {"env_id": env_id, "method": method, "steps_to_half_gap": half, "seed": seed, "sim": s,
                       "before": b, "after": a, "recovered_pct": recovered,
                       "sim_returns": sim, "before_returns": before, "after_returns": after,
                       "bytes_per_update": per_update, "fp32_dense_bytes": ft["fp32_state_dict_bytes"],
                       "bytes_ratio": ratio, **{k: v for k, v in ft.items() if k != "episode_returns"},
                       "robot_episode_returns": ft["episode_returns"], **dict(oracle), **made, **noise_run}
                results["runs"].append(run)
                print(f"  [{method}] sim {s:.1f}, gapped before {b:.1f}, after {a:.1f} (best v{ft['best_version']} of "
                      f"{ft['versions']}): {recovered:.0f} % of the gap recovered; {per_update:.0f} B per update vs "
                      f"{ft['fp32_state_dict_bytes']} B fp32 dense ({ratio:.1f}x); rss max {ft['rss_mb_max']} MB; "
                      f"{ft['wall_s']} s; {ft['updates_per_s']} updates/s; 50 % of the gap after "
                      f"{half if half is not None else '-'} robot steps", flush=True)
                rows.append(f"| {env_id} | {method} | {seed} | {s:.1f} | {b:.1f} | {a:.1f} | {recovered:.0f} % "
                            f"| {noise_run['recovered_pct_second_set']:.0f} % / {noise['base_vs_itself_pct']:+.0f} % "
                            f"| {half if half is not None else '-'} | "
                            + ("- " if method == "sysid" else f"{ft['updates_per_s']:.0f} ")
                            + f"| v{ft['best_version']} of {ft['versions']} "
                            f"| {per_update:.0f} / {ft['fp32_state_dict_bytes']} ({ratio:.1f}x) | "
                            f"{ft['rss_mb_max']:.0f} | {ft['wall_s']:.0f} | "
                            + (f"{oracle['oracle']:.1f} ({oracle['recovered_vs_oracle_pct']:.0f} %) |"
                               if oracle else "- |")
                            + (f" v{made['best_made']} {made['best_made_return']:.1f} "
                               f"({made['best_made_recovered_pct']:.0f} %) |" if made else " - |"))
    for env_id in args.envs:
        for method in args.methods:  # "kit" keeps the key of the runs before --methods
            rec = [r["recovered_pct"] for r in results["runs"] if r["env_id"] == env_id and r["method"] == method]
            key = env_id if method == "kit" else f"{env_id} {method}"
            results[f"{key}_recovered_pct_mean"] = float(np.mean(rec))
    start = ("" if args.start == "train" else
             f"Sim policy: an SB3 PPO ({args.ppo_steps} steps, RL Zoo settings without gSDE) imported by "
             f"`lowrl import --int8` and made into a kit by `lowrl kit` (TD3 over the imported actor; critics "
             f"warmed up on {args.kit_warmup_steps} simulator steps with exploration noise {args.kit_explore_noise:g}, "
             f"{args.kit_critic_updates} updates). ")
    if LEGGED in args.envs:
        start += (f"{LEGGED} sim policy: the shipped {ENVS[LEGGED]} (an SB3 PPO imported by `lowrl import --int8`), "
                  f"its kit made by `lowrl kit --env lowrl/LeggedAnt-v0` per seed (TD3 over the imported actor; "
                  f"critics warmed up in the "
                  + (f"sim with the gap of {args.kit_gap_file} (an identified simulator)" if args.kit_gap_file
                     else "ungapped sim") + f" on {args.kit_warmup_steps} steps with exploration noise "
                  f"{args.kit_explore_noise:g}, {args.kit_critic_updates} updates; RLPD's prior data = that warm-up's "
                  f"transitions); episodes of {ENV_KWARGS[LEGGED]['max_episode_steps']} policy steps (10 s)"
                  + (f"; its oracle: PPO continued from {LEGGED_PPO} on the gapped robot for "
                     f"{args.oracle_steps or 200_000} steps" if args.oracle else "") + ". ")
    markdown = (start + "Reality gap: " + "; ".join(f"{env_id}: {g.describe()}" for env_id, g in gaps.items())
                + f". K = {args.robot_steps} robot steps of fine-tuning (lockstep, "
                f"in-process FineTuner, lr {args.lr:g}, a version every {args.version_every} updates judged on "
                f"{args.judge_episodes} episodes, {args.nstep}-step TD, exploration std {args.explore_std:g}, "
                f"{args.updates_per_step} update(s) per robot step (rlpd: its rlpd_updates_per_transition), "
                f"critic warm-up {args.critic_warmup} updates, BC weight {args.bc_weight:g}"
                + "".join(f", {k} {v}" for k, v in tune_set.items()) + "), "
                + ("versions judged on plain mean returns, " if args.plain_judging
                   else "versions judged on returns adjusted for the start state, ")
                + f"returns over {args.eval_episodes} seeded episodes"
                + (f"; sysid: the K robot steps recorded, the gap identified (first {args.sysid_window} steps of "
                   f"{args.sysid_episodes} episodes replayed, {args.sysid_iterations} CEM iterations), PPO "
                   f"{args.sysid_ppo_steps} steps off-board in the identified sim"
                   + (" WITHOUT the identified physics (ablation)" if args.sysid_ablate_physics else "")
                   + ", sensor biases folded in (no fine-tuner: its settings above do not apply)"
                   if "sysid" in args.methods else "")
                + (f"; oracle: the same trainer config run {args.oracle_steps or 'as many'} steps on the gapped "
                   "robot from scratch" if args.oracle and set(args.envs) - {LEGGED} else "") + ".\n\n"
                "| env | method | seed | sim return | gapped, before | gapped, after | gap recovered | "
                "noise: recovered on a 2nd episode set / the base against itself | "
                "robot steps to 50 % of the gap | updates/s | version kept | "
                "bytes per update / fp32 dense | RSS max (MB) | fine-tune wall (s) | "
                "oracle on the gap (recovered vs it) | best version made (recovered) |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    path = record.write_result("sim2real", results, markdown, **where)
    print(markdown)
    print(f"results: {path}")
    return 0
