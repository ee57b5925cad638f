#!/usr/bin/env python3
"""Train the quadruped's walking policy with rsl_rl's PPO, the way a user trains theirs (docs/quadruped.md).

The robot is config/robots/quadruped.yaml; its simulator, reward and episode ends are the robot file's
own (core/finetune/sim_env.py), stepped in parallel worker processes (core/finetune/env_pool.py) behind
rsl_rl's ``VecEnv`` interface (``RobotVecEnv`` below). The output directory is an rsl_rl log
directory: ``model_<iteration>.pt`` (``OnPolicyRunner.save``), ``params/agent.yaml`` (the runner's
config, naming the activation for `lowrl import`) and ``contract.yaml`` (the import sidecar: the
robot file's observation terms, its joints, the action clip and the period). Then:

    python3 scripts/train_quadruped.py --envs 64 --workers 16 --minutes 8 --out runs/quadruped
    lowrl import runs/quadruped/model_<N>.pt --sidecar runs/quadruped/contract.yaml -o quadruped.lowrl --int8
    python3 scripts/eval_quadruped.py quadruped.lowrl --episodes 10

Only lowrl_ros, numpy, yaml, gymnasium, mujoco, torch, rsl_rl and tensordict are imported (the script
also runs on a plain Python 3.12 / torch 2.11 training machine).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from rsl_rl.env import VecEnv
from rsl_rl.runners import OnPolicyRunner
from tensordict import TensorDict

# A clone without `pip install -e .` (the training machine): the repository root holds lowrl_ros, and spawned
# workers inherit this path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lowrl_ros.core.finetune.env_pool import RobotEnvPool  # noqa: E402
from lowrl_ros.core.runtime.observation import ObservationSpec  # noqa: E402
from lowrl_ros.core.runtime.robot_file import load_robot_file  # noqa: E402
from lowrl_ros.core.sim.robot_sim import parse_sim  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ROBOT = ROOT / "config" / "robots" / "quadruped.yaml"


class RobotVecEnv(VecEnv):
    """rsl_rl's ``VecEnv`` over a :class:`RobotEnvPool`: one observation group ``policy``, ``dones`` for falls
    and time limits, ``extras["time_outs"]`` for the time limits (rsl_rl bootstraps those), and the episodes
    that ended since the last :meth:`take_finished`."""

    def __init__(self, pool: RobotEnvPool, max_episode_steps: int) -> None:
        self.pool = pool
        self.num_envs = pool.num_envs
        self.num_actions = pool.action_dim
        self.max_episode_length = max_episode_steps
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long)
        self.device = "cpu"
        self.cfg = {"robot": "robot file"}
        self._obs = torch.from_numpy(pool.reset())
        self._finished: list[tuple[int, float, int, bool]] = []

    def get_observations(self) -> TensorDict:
        return TensorDict({"policy": self._obs.clone()}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        res = self.pool.step(actions.detach().cpu().numpy())
        self._obs = torch.from_numpy(res.obs)
        dones = torch.from_numpy(res.terminated | res.truncated)
        self.episode_length_buf += 1
        self.episode_length_buf[dones] = 0
        self._finished += res.finished
        time_outs = torch.from_numpy(res.truncated & ~res.terminated).float()
        return self.get_observations(), torch.from_numpy(res.reward), dones.float(), {"time_outs": time_outs}

    def take_finished(self) -> list[tuple[int, float, int, bool]]:
        """(env, return, length, fell) of the episodes that ended since the last call."""
        out, self._finished = self._finished, []
        return out

    def close(self) -> None:
        self.pool.close()


def train_cfg(steps_per_env: int = 24, hidden: tuple[int, ...] = (256, 128, 64), learning_rate: float = 1e-3) -> dict:
    """rsl-rl-lib 5.x OnPolicyRunner config: legged_gym's PPO (ELU [256,128,64]-ish actor and critic, adaptive
    learning rate at KL 0.01, 5 epochs of 4 mini-batches, entropy 0.01) with rsl_rl's empirical observation
    normaliser (the import folds it into the artifact)."""
    model = {"class_name": "MLPModel", "hidden_dims": list(hidden), "activation": "elu", "obs_normalization": True}
    return {
        "num_steps_per_env": steps_per_env,
        "save_interval": 50,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "actor": {**model, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": dict(model),
        "algorithm": {"class_name": "PPO", "learning_rate": learning_rate, "schedule": "adaptive", "desired_kl": 0.01,
                      "num_learning_epochs": 5, "num_mini_batches": 4, "clip_param": 0.2, "gamma": 0.99,
                      "lam": 0.95, "entropy_coef": 0.01, "value_loss_coef": 1.0, "max_grad_norm": 1.0},
        "logger": "tensorboard",
    }


def contract_sidecar(robot_path: str | Path) -> dict:
    """The `lowrl import` sidecar for a policy trained on this robot file (docs/import.md, "The sidecar"): one
    observation group per robot-file term (its entries named as the robot file's), the joints
    as actions with the robot file's action section doing scale and offset (identity here), the simulator's action
    clip as limits, its period, and rsl_rl's raw ``last_action``."""
    robot = load_robot_file(robot_path)
    cfg = parse_sim(robot)[0]
    shown = Path(robot_path).resolve()
    shown = shown.relative_to(ROOT) if shown.is_relative_to(ROOT) else shown
    spec = ObservationSpec.from_robot_file(robot, cfg.period_s)
    clip = float(cfg.action_clip)
    n = len(robot.joints)
    return {
        # entries named as the robot file names them (joint_position[yaw_front_left], ...): the policy node's name
        # check and lowrl sim2sim's parity match the artifact's entries to the robot's by these names
        "observations": [{"name": t.name, "names": list(t.labels)} if len(t.labels) == t.dim else
                         {"name": t.name, "size": int(t.dim)} for t in spec.terms],
        "actions": {"names": list(robot.joints), "scale": 1.0, "offset": 0.0, "low": [-clip] * n, "high": [clip] * n},
        "control_period_s": float(cfg.period_s),
        "provenance": {"trained_by": "scripts/train_quadruped.py (rsl-rl-lib PPO)", "robot_file": str(shown),
                       "last_action": "raw"},
    }


def write_run_files(out: Path, cfg: dict, robot: str | Path) -> None:
    """params/agent.yaml (the activation for the importer) and contract.yaml (the sidecar) in the log dir."""
    (out / "params").mkdir(parents=True, exist_ok=True)
    (out / "params" / "agent.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (out / "contract.yaml").write_text("# `lowrl import model_<N>.pt --sidecar contract.yaml`: this policy's contract\n"
                                       + yaml.safe_dump(contract_sidecar(robot), sort_keys=False))


def train(args: argparse.Namespace) -> Path:
    """Run PPO until --iterations or --minutes is spent; save every --save-every iterations and at the end.
    Returns the last checkpoint's path."""
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = train_cfg(args.steps_per_env)
    write_run_files(out, cfg, args.robot)
    robot = load_robot_file(args.robot)
    period = parse_sim(robot)[0].period_s
    time_limit = float((robot.raw.get("episode") or {}).get("time_limit_s", 20.0))
    pool = RobotEnvPool(args.robot, args.envs, args.workers, seed=args.seed, randomize=args.randomize)
    env = RobotVecEnv(pool, int(round(time_limit / period)))
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # rsl_rl prints both models
            runner = OnPolicyRunner(env, train_cfg(args.steps_per_env), log_dir=None, device="cpu")
        if args.resume:
            runner.load(str(args.resume))
            runner.current_learning_iteration += 1
            print(f"resumed {args.resume} at iteration {runner.current_learning_iteration}")
        path = run_iterations(runner, env, args, out)
    finally:
        env.close()
    return path


def run_iterations(runner: OnPolicyRunner, env: RobotVecEnv, args: argparse.Namespace, out: Path) -> Path:
    """OnPolicyRunner.learn's loop body (rollout, returns, PPO update), one iteration at a time, so the wall-clock
    budget, the progress line and the checkpoint names are this script's."""
    alg = runner.alg
    steps_per_env = runner.cfg["num_steps_per_env"]
    deadline = time.monotonic() + args.minutes * 60 if args.minutes else float("inf")
    first = runner.current_learning_iteration
    last = first + args.iterations if args.iterations else None
    t0, steps, returns, lengths, falls, reward_sum, reward_n = time.monotonic(), 0, [], [], 0, 0.0, 0
    collect_s = learn_s = 0.0  # since the last progress line: where the time goes (sizing --workers/--torch-threads)
    obs = env.get_observations()
    alg.train_mode()
    it = first
    path = out / f"model_{it}.pt"
    print(f"{'iter':>5} {'steps':>9} {'steps/s':>8} {'rew/step':>8} {'return':>8} {'ep len':>7} {'falls':>6} "
          f"{'std':>5} {'collect':>7} {'learn':>6} {'wall s':>7}",
          flush=True)
    while (last is None or it < last) and time.monotonic() < deadline:
        t_start = time.monotonic()
        with torch.inference_mode():
            for _ in range(steps_per_env):
                actions = alg.act(obs)
                obs, rewards, dones, extras = env.step(actions)
                reward_sum, reward_n = reward_sum + float(rewards.sum()), reward_n + rewards.numel()
                alg.process_env_step(obs, rewards, dones, extras)
            alg.compute_returns(obs)
        t_collected = time.monotonic()
        alg.update()
        collect_s, learn_s = collect_s + t_collected - t_start, learn_s + time.monotonic() - t_collected
        steps += steps_per_env * env.num_envs
        finished = env.take_finished()
        returns += [f[1] for f in finished]
        lengths += [f[2] for f in finished]
        falls += sum(f[3] for f in finished)
        runner.current_learning_iteration = it
        wall = time.monotonic() - t0
        if it % args.log_every == 0:
            ret = f"{np.mean(returns):8.1f}" if returns else f"{'-':>8}"
            ln = f"{np.mean(lengths):7.0f}" if lengths else f"{'-':>7}"
            fl = f"{falls}/{len(returns)}" if returns else "-"
            std = float(alg.get_policy().output_std.detach().mean())
            print(f"{it:5d} {steps:9d} {steps / wall:8.0f} {reward_sum / reward_n:8.3f} {ret} {ln} {fl:>6} "
                  f"{std:5.2f} {collect_s:7.2f} {learn_s:6.2f} {wall:7.0f}", flush=True)
            returns, lengths, falls, reward_sum, reward_n, collect_s, learn_s = [], [], 0, 0.0, 0, 0.0, 0.0
        if args.save_every and it % args.save_every == 0 and it > first:
            path = out / f"model_{it}.pt"
            runner.save(str(path))
        it += 1
    path = out / f"model_{runner.current_learning_iteration}.pt"
    runner.save(str(path))
    print(f"saved {path} after {it - first} iterations, {steps} steps in {time.monotonic() - t0:.0f} s "
          f"({steps / max(time.monotonic() - t0, 1e-9):.0f} steps/s with {len(env.pool.exitcodes)} workers)")
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--robot", default=str(ROBOT), help="robot file with sim:, reward: and episode: sections")
    p.add_argument("--envs", type=int, default=16, help="simulators in all")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="worker processes (default: CPU count)")
    p.add_argument("--iterations", type=int, default=0, help="PPO iterations (0: until --minutes is spent)")
    p.add_argument("--minutes", type=float, default=0.0, help="wall-clock budget; stop and save when spent (0: none)")
    p.add_argument("--steps-per-env", type=int, default=24, help="rollout length per environment and iteration")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/quadruped", help="rsl_rl log dir: model_<N>.pt, params/agent.yaml, "
                                                           "contract.yaml")
    p.add_argument("--resume", type=Path, default=None, metavar="CKPT", help="continue from a model_<N>.pt")
    p.add_argument("--randomize", type=float, default=0.0, metavar="SHARE",
                   help="draw each episode's gap from this share (0..1) of each sim.gap_priors range around the "
                        "nominal model (0: off)")
    p.add_argument("--save-every", type=int, default=50, help="iterations between checkpoints (0: only the last)")
    p.add_argument("--log-every", type=int, default=5, help="iterations between progress lines")
    p.add_argument("--torch-threads", type=int, default=max(1, (os.cpu_count() or 1) // 4),
                   help="torch threads of the PPO update (default: a quarter of the CPUs; the workers idle while it "
                        "runs, but the batches are small: watch the progress line's collect/learn seconds)")
    args = p.parse_args(argv)
    if not args.iterations and not args.minutes:
        p.error("give --iterations N and/or --minutes M")
    return args


def main(argv: list[str] | None = None) -> int:
    train(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
